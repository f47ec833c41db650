#!/usr/bin/python3
"""The job's own model (model.type mlp) and data (digits, breast_cancer or
csv) trained by a PyTorch worker: the Python twin of ps_worker, used by the
parity test (tests/python/parity_test.sh). Run it with
`./psctl run --config configs/digits.yaml --worker-cmd "/usr/bin/python3
examples/torch/train_mlp.py"`."""

import torch.nn.functional as F

import pstrain.torch as pst

with pst.init() as ctx:
    data = pst.job_data(ctx)
    model = pst.MLP(ctx.config.model)
    opt = pst.ServerOptimizer(model, ctx, evaluate=pst.classifier_eval(
        data.test_x, data.test_y, ctx))
    for x, y in pst.shard(data, ctx):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(samples=len(y), loss=loss.item())
