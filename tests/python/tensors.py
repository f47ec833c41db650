#!/usr/bin/python3
"""Compares the weights of two safetensors files (ps_checkpoint export):
prints each tensor's largest relative difference, max|a - b| / max|b|, and
exits 1 when one is above TOL or the tensors differ in names or shapes.

usage: tensors.py A.safetensors B.safetensors TOL
"""
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        lo, hi = meta["data_offsets"]
        out[name] = np.frombuffer(raw[base + lo:base + hi],
                                  dtype="<f4").reshape(meta["shape"])
    return out


def main():
    a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b):
        print(f"tensors differ: {sorted(a)} vs {sorted(b)}")
        return 1
    worst = 0.0
    for name in sorted(a):
        if a[name].shape != b[name].shape:
            print(f"{name}: shapes {a[name].shape} vs {b[name].shape}")
            return 1
        scale = float(np.abs(b[name]).max()) or 1.0
        diff = float(np.abs(a[name].astype(np.float64) - b[name]).max()) / scale
        worst = max(worst, diff)
        print(f"{name}: max relative difference {diff:.3g}")
    print(f"largest relative difference {worst:.3g} (tolerance {tol:g})")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
