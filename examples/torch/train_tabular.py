#!/usr/bin/python3
"""A tabular model with categorical embeddings on the synthetic Zipf task,
trained by PyTorch workers on pstrain's servers (docs/python.md):

    ./psctl run --config configs/tabular_embeddings.yaml \\
        --worker-cmd "/usr/bin/python3 examples/torch/train_tabular.py"

The examples are the C++ generator's (pst.job_data: `ps_report
data-export`), so a rank trains on exactly what a C++ worker of the job
would read. Each categorical value (a 64-bit id) is hashed into one shared
embedding table (`hashed_rows`); the embeddings of the columns and a small
MLP of the numeric columns feed the top MLP. The table is a dense tensor of
the job (model.type external), pulled and pushed whole each step.
"""

import numpy as np
import torch
import torch.nn.functional as F

import pstrain.torch as pst

_MASK = (1 << 64) - 1


def hashed_rows(cat, buckets):
    """[n, C] int64 (the uint64 ids' bits) -> [n, C] rows in [0, buckets):
    splitmix64's finaliser of (id + column x golden ratio), so the columns
    hash apart."""
    with np.errstate(over="ignore"):
        z = cat.numpy().view(np.uint64).copy()
        cols = np.arange(z.shape[1], dtype=np.uint64)
        z += (cols + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return torch.from_numpy((z % np.uint64(buckets)).astype(np.int64))


class TabularNet(torch.nn.Module):
    """numeric -> bottom (relu) ; values -> embeddings ; [both] -> top1
    (relu) -> top2 -> logits."""

    def __init__(self, numeric, columns, buckets, dim, classes, bottom=32,
                 hidden=64):
        super().__init__()
        self.embedding = torch.nn.Embedding(buckets, dim)
        self.bottom = torch.nn.Linear(numeric, bottom)
        self.top1 = torch.nn.Linear(bottom + columns * dim, hidden)
        self.top2 = torch.nn.Linear(hidden, classes)

    def forward(self, x, rows):
        e = self.embedding(rows).flatten(1)
        h = torch.cat([F.relu(self.bottom(x)), e], dim=1)
        return self.top2(F.relu(self.top1(h)))


def main():
    with pst.init() as ctx:
        data = pst.job_data(ctx)          # this rank's examples (C++ generator)
        d = ctx.config.data
        buckets, dim = 8192, 8
        model = TabularNet(d.num_features, d.sparse_columns, buckets, dim,
                           d.num_classes)
        lo, hi = pst.test_slice(len(data.test_y), ctx)
        test_x = torch.from_numpy(data.test_x[lo:hi].copy())
        test_y = torch.from_numpy(data.test_y[lo:hi].copy())
        test_rows = hashed_rows(
            torch.from_numpy(data.test_cat[lo:hi].view(np.int64).copy()), buckets)

        def evaluate(m):
            if len(test_y) == 0:
                return 0, 0, 0.0
            with torch.no_grad():
                out = m(test_x, test_rows)
                loss = F.cross_entropy(out, test_y, reduction="sum").item()
                correct = int((out.argmax(1) == test_y).sum())
            return correct, len(test_y), loss

        opt = pst.ServerOptimizer(model, ctx, evaluate=evaluate)
        for x, y, cat in pst.shard(data, ctx):
            opt.zero_grad()
            loss = F.cross_entropy(model(x, hashed_rows(cat, buckets)), y)
            loss.backward()
            opt.step(samples=len(y), loss=loss.item())


if __name__ == "__main__":
    main()
