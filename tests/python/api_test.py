#!/usr/bin/python3
"""Unit tests of the Python worker's pieces that need no cluster
(docs/python.md): the wire codecs, the example sampler, the settings from
the environment, the job token file, and pstrain.torch's ServerOptimizer
and shard() against a fake shard client (what is pushed, where pulls land,
the tensor check, the loop's order)."""
import os
import sys
import tempfile
import types
import unittest

import numpy as np
import torch

import pstrain.torch as pst
import grpc

import pstrain.session as session_mod
from pstrain import data, wire
from pstrain._proto import pb
from pstrain.errors import PstrainError
from pstrain.session import Session, WorkerSettings, read_job_token


class WireTest(unittest.TestCase):
    def roundtrip(self, x, dtype):
        out = np.empty(len(x), np.float32)
        wire.decode_into(wire.encode(np.array(x, np.float32), dtype), dtype, out)
        return out

    def test_fp32_is_exact(self):
        x = np.random.default_rng(1).normal(size=1000).astype(np.float32)
        np.testing.assert_array_equal(self.roundtrip(x, pb.DTYPE_F32), x)

    def test_bf16_rounds_to_nearest_even(self):
        one = 1.0
        got = self.roundtrip([one + 2**-8, one + 3 * 2**-8, -(one + 2**-8),
                              one + 2**-8 + 2**-20, 3.0], pb.DTYPE_BF16)
        np.testing.assert_array_equal(
            got, np.array([1.0, 1.0 + 2**-6, -1.0, 1.0 + 2**-7, 3.0], np.float32))
        self.assertEqual(len(wire.encode(np.zeros(5, np.float32), pb.DTYPE_BF16)), 10)

    def test_nan_and_inf_survive(self):
        for dtype in (pb.DTYPE_BF16, pb.DTYPE_F16):
            got = self.roundtrip([np.nan, np.inf, -np.inf], dtype)
            self.assertTrue(np.isnan(got[0]))
            self.assertEqual(list(got[1:]), [np.inf, -np.inf])

    def test_fp16_saturates_finite_values(self):
        got = self.roundtrip([65504, 65519, 65520, -1e9, 1e-8, 0.1], pb.DTYPE_F16)
        np.testing.assert_array_equal(
            got[:4], np.array([65504, 65504, 65504, -65504], np.float32))
        self.assertEqual(got[4], 0.0)
        self.assertEqual(got[5], np.float32(np.float16(0.1)))


class SamplerTest(unittest.TestCase):
    def test_permutation_is_seeded(self):
        p = data.seeded_permutation(50, 42)
        self.assertEqual(sorted(p), list(range(50)))
        np.testing.assert_array_equal(p, data.seeded_permutation(50, 42))
        self.assertFalse(np.array_equal(p, data.seeded_permutation(50, 43)))

    def test_each_example_once_per_epoch_reshuffled(self):
        s = data.EpochSampler(37, 7)
        epoch0 = s.rows(0, 37)
        epoch1 = s.rows(37, 37)
        self.assertEqual(sorted(epoch0), list(range(37)))
        self.assertEqual(sorted(epoch1), list(range(37)))
        self.assertFalse(np.array_equal(epoch0, epoch1))
        np.testing.assert_array_equal(s.rows(30, 14), np.concatenate(
            [epoch0[30:], epoch1[:7]]))

    def test_ids_and_test_slices(self):
        self.assertEqual(data.first_example_id(3, 1, 4, 8), 3 * 32 + 8)
        self.assertEqual(data.test_slice_range(10, 0, 3), (0, 3))
        self.assertEqual(data.test_slice_range(10, 2, 3), (6, 10))
        with self.assertRaises(PstrainError):
            data.test_slice_range(10, 3, 3)


class SettingsTest(unittest.TestCase):
    def test_errors_name_the_variable(self):
        with self.assertRaisesRegex(PstrainError, "PSTRAIN_COORDINATOR"):
            WorkerSettings.from_env({})
        with self.assertRaisesRegex(PstrainError, "PSTRAIN_TOKEN_FILE"):
            WorkerSettings.from_env({"PSTRAIN_COORDINATOR": "h:1"})
        with self.assertRaisesRegex(PstrainError, "PSTRAIN_RANK: 'x'"):
            WorkerSettings.from_env({"PSTRAIN_COORDINATOR": "h:1",
                                     "PSTRAIN_INSECURE": "1",
                                     "PSTRAIN_RANK": "x"})

    def test_token_file(self):
        with tempfile.TemporaryDirectory() as d:
            good, short = os.path.join(d, "good"), os.path.join(d, "short")
            with open(good, "w") as f:
                f.write("a" * 64 + "\n")
            with open(short, "w") as f:
                f.write("abc")
            self.assertEqual(read_job_token(good), "a" * 64)
            s = WorkerSettings.from_env({"PSTRAIN_COORDINATOR": "h:1",
                                         "PSTRAIN_TOKEN_FILE": good})
            self.assertIn(("x-pstrain-token", "a" * 64), s.metadata())
            self.assertIn(("x-pstrain-role", "member"), s.metadata())
            with self.assertRaisesRegex(PstrainError, "short': 3 bytes"):
                read_job_token(short)
            with self.assertRaisesRegex(PstrainError, "missing"):
                read_job_token(os.path.join(d, "missing"))


class FakeClient:
    """Serves weights 100 * step + element index; records pushes."""

    def __init__(self):
        self.pushes, self.pulls = [], []
        self.bytes_pushed = self.bytes_pulled = 0

    def pull(self, worker, clock, params):
        self.pulls.append(clock)
        for v in params:
            v[:] = 100 * clock + np.arange(len(v))
        return ["read"]

    def push(self, worker, clock, samples, grads, reads):
        self.pushes.append((clock, samples, [g.copy() for g in grads], reads))

    def close(self):
        pass


def fake_ctx(tensors, steps=3, every=0):
    cfg = pb.JobConfig()
    cfg.training.steps = steps
    cfg.training.local_batch = 2
    cfg.evaluation.every_steps = every
    cfg.data.seed = 7
    job = pb.JobSpec(config=cfg)
    for name, shape in tensors:
        job.shard_map.tensors.add(name=name, shape=shape)
    session = types.SimpleNamespace(
        liveness=types.SimpleNamespace(ended=False, step=0,
                                       rollback_pending=lambda: False),
        queued=[])
    session.add = lambda m, client: session.queued.append(m)
    ctx = pst.Context.__new__(pst.Context)
    ctx._session = session
    ctx.rank, ctx.world, ctx.job, ctx.config = 0, 2, job, cfg
    ctx.steps, ctx.slice, ctx.step = steps, 2, 0
    ctx._client = FakeClient()
    ctx._records, ctx._stepped, ctx._finished = {}, None, False
    return ctx


class Linear(torch.nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = torch.nn.Linear(i, o)


class ServerOptimizerTest(unittest.TestCase):
    TENSORS = [("fc/weight", [2, 3]), ("fc/bias", [2])]

    def test_mismatches_name_the_tensor_before_any_call(self):
        ctx = fake_ctx(self.TENSORS)
        with self.assertRaisesRegex(PstrainError,
                                    r"tensor 'fc/weight': the model's shape "
                                    r"\[2, 4\] is not the job's \[2, 3\]"):
            pst.ServerOptimizer(Linear(4, 2), ctx)
        ctx2 = fake_ctx(self.TENSORS + [("emb", [5])])
        with self.assertRaisesRegex(PstrainError, "the job's tensor 'emb' "):
            pst.ServerOptimizer(Linear(3, 2), ctx2)
        ctx3 = fake_ctx(self.TENSORS[:1])
        with self.assertRaisesRegex(PstrainError, r"\['fc/bias'\] are not"):
            pst.ServerOptimizer(Linear(3, 2), ctx3)
        for c in (ctx, ctx2, ctx3):
            self.assertEqual(c._client.pulls + c._client.pushes, [])

    def test_steps_push_gradients_and_pull_into_the_model(self):
        ctx = fake_ctx(self.TENSORS, steps=2)
        model = Linear(3, 2)
        evals = []
        opt = pst.ServerOptimizer(model, ctx, evaluate=lambda m: evals.append(
            m.fc.bias.detach().clone()) or (1, 2, 0.5))
        # Pulled weights land in the parameters themselves.
        np.testing.assert_array_equal(model.fc.weight.detach().numpy().ravel(),
                                      np.arange(6))
        batches = 0
        for x, y in pst.shard((torch.arange(20.).view(10, 2), torch.arange(10)), ctx):
            self.assertEqual(len(y), 2)
            opt.zero_grad()
            model.fc.weight.sum().backward()
            opt.step(samples=len(y), loss=0.25)
            batches += 1
        self.assertEqual(batches, 2)
        self.assertEqual(ctx._client.pulls, [0, 1, 2])
        self.assertEqual([p[0] for p in ctx._client.pushes], [0, 1])
        clock, samples, grads, reads = ctx._client.pushes[0]
        self.assertEqual(samples, 2)
        np.testing.assert_array_equal(grads[0], np.ones(6))
        np.testing.assert_array_equal(grads[1], np.zeros(2))  # no grad: zeros
        self.assertEqual(reads, ["read"])
        np.testing.assert_array_equal(model.fc.bias.detach().numpy(), [200, 201])
        # Records: steps 0, 1 with loss and samples, then the final one with
        # the evaluation of the final weights.
        q = ctx._session.queued
        self.assertEqual([m.step for m in q], [0, 1, 2])
        self.assertEqual([m.samples for m in q], [2, 2, 0])
        self.assertEqual(q[0].loss, 0.25)
        self.assertEqual((q[2].eval_correct, q[2].eval_total), (1, 2))
        self.assertEqual(len(evals), 1)

    def test_loop_without_step_and_unreported_loss_are_errors(self):
        ctx = fake_ctx(self.TENSORS)
        opt = pst.ServerOptimizer(Linear(3, 2), ctx)
        batches = pst.shard((np.zeros((8, 3), np.float32),), ctx)
        next(batches)
        with self.assertRaisesRegex(PstrainError, "without opt.step"):
            next(batches)
        opt.step(samples=2)  # no loss: ctx.report must follow
        with self.assertRaisesRegex(PstrainError, "step 0 has no loss"):
            opt.step(samples=2)
        ctx.report(loss=1.5)
        self.assertEqual(ctx._session.queued[0].loss, 1.5)
        with self.assertRaisesRegex(PstrainError, "needs >= 1"):
            opt.step(samples=0)


class FakeCoordinator:
    """GetJob and RegisterWorker of a coordinator publishing `job`; a
    replacement's GetJob(wait_for_generation) returns `rolled_back`."""

    def __init__(self, job, rolled_back=None):
        self.job = job
        self.rolled_back = rolled_back
        self.calls = []

    def GetJob(self, req, timeout=None, metadata=None):
        self.calls.append(("GetJob", req.wait_for_generation))
        if req.wait_for_generation:
            return self.rolled_back
        return self.job

    def RegisterWorker(self, req, timeout=None, metadata=None):
        self.calls.append(("RegisterWorker", req.requested_rank))
        return pb.RegisterWorkerResponse(rank=1, session_id=5, job=self.job,
                                         start_step=0)


class RegistrationTest(unittest.TestCase):
    """Session.register follows JobSpec.worker_recovery (the coordinator's
    FailurePolicy), never training.on_failure: each job below says one
    thing in its config and the opposite in worker_recovery."""

    def session(self, coord):
        s = Session.__new__(Session)
        s.settings = types.SimpleNamespace(
            startup_timeout_s=5, rpc_timeout_s=5, coordinator="fake:1", rank=1)
        s._md = []
        s.coord = coord
        s.rank = None
        s.session_id = 0
        s.job = None
        s.start_step = 0
        s._liveness = None
        return s

    def job(self, on_failure, mode, generation=0, **recovery):
        j = pb.JobSpec(generation=generation, start_step=10 * generation)
        j.config.training.on_failure = on_failure
        j.config.training.mode = mode
        j.worker_recovery.CopyFrom(pb.WorkerRecovery(**recovery))
        return j

    def setUp(self):
        # No heartbeat thread: registration alone is under test.
        self._liveness = session_mod.Liveness
        session_mod.Liveness = lambda session, lease: None

    def tearDown(self):
        session_mod.Liveness = self._liveness

    def test_stand_ins_are_refused_before_registering(self):
        coord = FakeCoordinator(self.job(pb.TrainingConfig.FAIL, pb.MODE_ASYNC,
                                         stands_in=True))
        with self.assertRaises(PstrainError) as e:
            self.session(coord).register()
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("not supported for Python workers", str(e.exception))
        self.assertEqual(coord.calls, [("GetJob", 0)])
        # Elastic sync in the config, no stand-ins in worker_recovery.
        coord = FakeCoordinator(self.job(pb.TrainingConfig.ELASTIC,
                                         pb.MODE_SYNC))
        self.session(coord).register()
        self.assertEqual(coord.calls, [("GetJob", 0), ("RegisterWorker", 1)])

    def test_a_replacement_waits_for_the_rollback_when_the_policy_rolls_back(self):
        rolled = self.job(pb.TrainingConfig.FAIL, pb.MODE_SYNC, generation=2,
                          rolls_back=True)
        coord = FakeCoordinator(
            self.job(pb.TrainingConfig.FAIL, pb.MODE_SYNC, generation=2,
                     rolls_back=True), rolled_back=rolled)
        s = self.session(coord)
        s.register()
        self.assertEqual(coord.calls[-1], ("GetJob", 2))
        self.assertEqual(s.start_step, 20)
        # Restart in the config, no rollback in worker_recovery.
        coord = FakeCoordinator(
            self.job(pb.TrainingConfig.RESTART, pb.MODE_SYNC, generation=2),
            rolled_back=rolled)
        s = self.session(coord)
        s.register()
        self.assertEqual(coord.calls, [("GetJob", 0), ("RegisterWorker", 1)])
        self.assertEqual(s.start_step, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
