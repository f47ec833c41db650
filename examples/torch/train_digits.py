#!/usr/bin/python3
"""A small CNN on the 8x8 digits, trained by PyTorch workers on pstrain's
servers (docs/python.md):

    ./psctl run --config configs/digits_cnn.yaml \\
        --worker-cmd "/usr/bin/python3 examples/torch/train_digits.py"

The job (configs/digits_cnn.yaml) lists the CNN's tensors (model.type
external); the servers hold them and run the job's optimizer. The data is
the job's digits, split and shuffled as the C++ worker does.
"""

import torch
import torch.nn.functional as F

import pstrain.torch as pst


class DigitsCnn(torch.nn.Module):
    """1x8x8 -> conv 16 -> pool -> conv 32 -> pool -> 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = x.view(-1, 1, 8, 8)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def main():
    with pst.init() as ctx:
        data = pst.job_data(ctx)
        model = DigitsCnn()
        opt = pst.ServerOptimizer(model, ctx, evaluate=pst.classifier_eval(
            data.test_x, data.test_y, ctx))
        for x, y in pst.shard(data, ctx):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step(samples=len(y), loss=loss.item())


if __name__ == "__main__":
    main()
