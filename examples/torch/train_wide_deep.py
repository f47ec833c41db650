#!/usr/bin/python3
"""The wide-and-deep model of configs/sparse.yaml (model.type wide_deep)
under PyTorch DDP: the `ddp` row of `psctl study sparse` (docs/studies.md).

    ./psctl compare --config configs/sparse.yaml --set model.buckets=100000 \\
        --steps 20 --modes sync,allreduce:dense,ddp \\
        --ddp-cmd "/usr/bin/python3 examples/torch/train_wide_deep.py"

The model is the C++ worker's (pst.WideDeep: the same tensors, initial
values, hashing of the categorical values and layers), trained on the same
examples (pst.job_data: the C++ generator) with the job's optimizer in
torch.optim (AdaGrad for configs/sparse.yaml). What differs is what
travels: the table's gradient is dense ([rows, 16], as a plain
nn.Embedding's), so DDP's all-reduce moves the whole table every step.

worker.compute_ms is honoured as the C++ worker honours it: each step's
compute before the gradient exchange takes at least that long (the forward
pass, then a sleep for the rest, then the backward pass, during which DDP
all-reduces). Mode ddp only: on pstrain's servers the C++ worker trains
wide_deep (its table is row-sparse; the Python client pulls whole tensors).
"""

import time

import numpy as np
import torch
import torch.nn.functional as F

import pstrain.torch as pst
from pstrain.errors import invalid


def main():
    with pst.init() as ctx:
        if ctx.mode != "ddp":
            raise invalid("train_wide_deep.py runs under mode ddp (psctl "
                          "compare --modes ddp); in pstrain's modes the C++ "
                          "worker trains model.type wide_deep")
        data = pst.job_data(ctx)  # this rank's examples (C++ generator)
        model = pst.WideDeep(ctx.config.model)
        lo, hi = pst.test_slice(len(data.test_y), ctx)
        test_x = torch.from_numpy(data.test_x[lo:hi].copy())
        test_y = torch.from_numpy(data.test_y[lo:hi].copy())
        test_cat = torch.from_numpy(data.test_cat[lo:hi].view(np.int64).copy())

        def evaluate(m):
            if len(test_y) == 0:
                return 0, 0, 0.0
            out = m(test_x, test_cat)
            loss = F.cross_entropy(out, test_y, reduction="sum").item()
            return int((out.argmax(1) == test_y).sum()), len(test_y), loss

        opt = pst.ServerOptimizer(model, ctx, evaluate=evaluate)
        compute_s = ctx.config.worker.compute_ms / 1000.0
        for x, y, cat in pst.shard(data, ctx):
            start = time.monotonic()
            opt.zero_grad()
            loss = F.cross_entropy(model(x, cat), y)
            left = compute_s - (time.monotonic() - start)
            if left > 0:
                time.sleep(left)
            loss.backward()
            opt.step(samples=len(y), loss=loss.item())


if __name__ == "__main__":
    main()
