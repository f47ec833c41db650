#!/usr/bin/python3
"""ps_checkpoint end to end, checked by an independent reader.

Reads the exported safetensors file with nothing but json and struct (the
format: 8-byte little-endian header length, JSON header, raw little-endian
data), compares every tensor bit for bit with the values the shards held,
recomputes every file's CRC-32C from the manifest in pure Python, and checks
that `inspect` reports a corrupted file by name with exit status 1.

usage: export_test.py PS_CHECKPOINT MAKE_TEST_CHECKPOINT TMPDIR
"""
import json
import os
import struct
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def f32_bits(x):
    return struct.pack("<f", x)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    return n, header, blob[8 + n:]


def main():
    tool, maker, tmp = sys.argv[1:4]
    root = os.path.join(tmp, "ckpt")
    expected_path = os.path.join(tmp, "expected.json")
    subprocess.run([maker, root, expected_path], check=True)
    with open(expected_path) as f:
        expected = json.load(f)
    ckpt = expected["dir"]

    # Checksums, recomputed independently from the manifest.
    with open(os.path.join(ckpt, "MANIFEST.json")) as f:
        manifest = json.load(f)
    check(manifest["step"] == 3 and manifest["num_shards"] == 3,
          "manifest step 3, 3 shards")
    for entry in manifest["files"]:
        with open(os.path.join(ckpt, entry["name"]), "rb") as f:
            data = f.read()
        check(len(data) == entry["bytes"], entry["name"] + " size")
        check("0x%08x" % crc32c(data) == entry["crc32c"],
              entry["name"] + " CRC-32C " + entry["crc32c"])

    # inspect on the root: lists the checkpoint and verifies it.
    r = subprocess.run([tool, "inspect", root], capture_output=True, text=True)
    print(r.stdout)
    check(r.returncode == 0, "inspect exits 0")
    check("step: 3" in r.stdout, "inspect prints the step")
    check("layer1/weight" in r.stdout and "[5, 3]" in r.stdout,
          "inspect lists tensors with shapes")
    check("all 3 files verified" in r.stdout, "inspect verifies checksums")

    # export, with and without slots.
    for with_slots in (False, True):
        out = os.path.join(tmp, "model%s.safetensors" % ("_slots" * with_slots))
        cmd = [tool, "export", root, "--safetensors", out]
        if with_slots:
            cmd.append("--with_slots")
        r = subprocess.run(cmd, capture_output=True, text=True)
        check(r.returncode == 0, " ".join(cmd[1:]) + ": " + r.stderr.strip())
        n, header, data = read_safetensors(out)
        check(n % 8 == 0, "header length %d is a multiple of 8" % n)
        meta = header.pop("__metadata__", {})
        check(meta.get("step") == "3", "metadata step")
        check(all(isinstance(v, str) for v in meta.values()),
              "metadata values are strings")
        spans = sorted(tuple(v["data_offsets"]) for v in header.values())
        contiguous = spans[0][0] == 0 and all(
            a[1] == b[0] for a, b in zip(spans, spans[1:]))
        check(contiguous and spans[-1][1] == len(data),
              "data_offsets tile the data exactly")
        names = set()
        for name, want in expected["tensors"].items():
            info = header.get(name)
            check(info is not None, "tensor " + name + " present")
            if info is None:
                continue
            names.add(name)
            check(info["dtype"] == "F32", name + " dtype F32")
            check(info["shape"] == want["shape"], name + " shape")
            begin, end = info["data_offsets"]
            got = data[begin:end]
            ref = b"".join(f32_bits(x) for x in want["weights"])
            check(got == ref, name + " weights bit-identical")
            if with_slots:
                count = len(want["weights"])
                for s in range(len(want["slots"]) // count):
                    slot = header[name + ":slot%d" % s]
                    b0, b1 = slot["data_offsets"]
                    ref = b"".join(f32_bits(x) for x in
                                   want["slots"][s * count:(s + 1) * count])
                    check(data[b0:b1] == ref,
                          "%s slot %d bit-identical" % (name, s))
                    names.add(name + ":slot%d" % s)
        check(names == set(header), "no unexpected tensors")

    # A corrupted shard file: inspect names it and fails.
    victim = os.path.join(ckpt, "shard-00002-of-00003.ckpt")
    with open(victim, "r+b") as f:
        f.seek(-5, 2)
        b = f.read(1)
        f.seek(-5, 2)
        f.write(bytes([b[0] ^ 0x01]))
    r = subprocess.run([tool, "inspect", ckpt], capture_output=True, text=True)
    check(r.returncode == 1, "inspect of a corrupted checkpoint exits 1")
    check("shard-00002-of-00003.ckpt" in r.stderr and "CRC-32C" in r.stderr,
          "the error names the file: " + r.stderr.strip())
    r = subprocess.run([tool, "export", ckpt], capture_output=True, text=True)
    check(r.returncode == 2 and "--safetensors" in r.stderr,
          "export without --safetensors is a usage error naming the flag")

    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
