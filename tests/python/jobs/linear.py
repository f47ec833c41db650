#!/usr/bin/python3
"""A linear classifier as a model.type external job on the job's CSV data
(tests/python): fc.weight [classes, features], fc.bias [classes].
PSTRAIN_TEST_DIE_AT=STEP: rank 1 of a first process kills itself with
SIGKILL at that step (the restart test); its replacement trains on.
PSTRAIN_TEST_STEP_SLEEP=S: sleep S seconds before each step (a job long
enough for a replacement to rejoin it).
PSTRAIN_TEST_REJOINED=FILE (with PSTRAIN_TEST_DIE_AT and _MARKER): the
replacement of rank 1 creates FILE once its first step is pushed, and no
worker sleeps PSTRAIN_TEST_STEP_SLEEP before a step once FILE exists: the
job is slow only until the rejoin, however long that takes.
PSTRAIN_TEST_HOLD_STAND_IN=1 (elastic sync): a worker standing in for a
rank waits before each of its own batches until a new worker asks for the
rank back, so the handover happens however slowly the replacement starts."""
import os
import signal
import time

import torch
import torch.nn.functional as F

import pstrain.torch as pst

with pst.init() as ctx:
    data = pst.job_data(ctx)
    features = data.train_x.shape[1]
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(features, data.num_classes))
    opt = pst.ServerOptimizer(model, ctx, evaluate=pst.classifier_eval(
        data.test_x, data.test_y, ctx))
    die_at = int(os.environ.get("PSTRAIN_TEST_DIE_AT", "-1"))
    marker = os.environ.get("PSTRAIN_TEST_MARKER", "")
    pause = float(os.environ.get("PSTRAIN_TEST_STEP_SLEEP", "0"))
    hold = os.environ.get("PSTRAIN_TEST_HOLD_STAND_IN", "") == "1"
    rejoined = os.environ.get("PSTRAIN_TEST_REJOINED", "")
    # The first rank-1 process creates the marker just before it dies.
    replacement = ctx.rank == 1 and bool(marker) and os.path.exists(marker)

    def wanted_back():  # a test hook: reads the stand-ins' heartbeats
        return any(s.session.liveness is not None and
                   s.session.liveness.release_requested
                   for s in ctx._stand_ins.values())

    for x, y in pst.shard(data, ctx):
        if not (rejoined and os.path.exists(rejoined)):
            time.sleep(pause)
        # At its own batch: no pull in flight that a long wait could time out.
        while (hold and ctx.batch_rank == ctx.rank and ctx.stand_in_ranks and
               not wanted_back()):
            time.sleep(0.05)
        if (ctx.rank == 1 and ctx.step == die_at and marker and
                not os.path.exists(marker)):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(samples=len(y), loss=loss.item())
        if replacement and rejoined and not os.path.exists(rejoined):
            open(rejoined, "w").close()
