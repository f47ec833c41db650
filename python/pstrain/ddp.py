"""The `ddp` mode of `psctl compare` (docs/python.md): the same worker script
run under torch.distributed (gloo backend, DistributedDataParallel) with the
job's optimizer through torch.optim, beside pstrain's own modes.

The launcher (psctl) sets PSTRAIN_DDP=1, PSTRAIN_JOB_SPEC (the job as the
coordinator's dry run wrote it, a serialised pstrain.v1.JobSpec), PSTRAIN_OUT
(the run folder), PSTRAIN_RANK, MASTER_ADDR, MASTER_PORT and WORLD_SIZE.
`pstrain.torch.init()` then returns a DdpContext and `ServerOptimizer` a
DdpOptimizer, so the script does not change. Every rank starts from the
job's initial weights (the servers' counter-based rules, ported bit for bit
from common/model_spec.cc), takes the same examples (pstrain.data), and
applies the job's optimizer and learning-rate schedule
(common/optimizer.cc): sync mode and ddp compute the same updates. Rank 0
writes metrics.csv and summary.json as the coordinator does
(coordinator/step_log.cc), and final.safetensors (the final weights).

Bytes: DDP's all-reduce is gloo's; its counters are not exposed, so
summary.json's bytes are COMPUTED as a ring all-reduce moves them
(2 (N - 1) / N x the model's fp32 bytes sent and received per worker per
step) and marked `"bytes_computed": true`. Communication time is not
measured (DDP overlaps its all-reduce with backward): pull_s and push_s are 0.
"""

import datetime
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist

from pstrain._proto import pb
from pstrain.errors import PstrainError, invalid

_GOLDEN = 0x9E3779B97F4A7C15
_INIT_BLOCK = 1 << 20


def _mix(x):
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _hash_name(name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & ((1 << 64) - 1)
    return h


def _unit(h):
    return ((h >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53


def initial_values(spec):
    """The initial values of TensorSpec `spec` (flat float32), as
    common/model_spec.cc InitialValues computes them."""
    n = int(np.prod(list(spec.shape), dtype=np.int64)) if spec.shape else 1
    rule = spec.init
    if rule.kind == pb.InitRule.CONSTANT:
        return np.full(n, rule.value, np.float32)
    if rule.kind not in (pb.InitRule.UNIFORM, pb.InitRule.NORMAL):
        return np.zeros(n, np.float32)
    stream = _mix(np.array([rule.seed ^ int(_mix(np.array(
        [_hash_name(spec.name)], np.uint64))[0])], np.uint64))[0]
    scale = float(np.float32(rule.scale))
    out = np.empty(n, np.float32)
    # In blocks, so a large table (an embedding of 10^6 x 16) does not take
    # a few uint64 / float64 temporaries of its whole size at once.
    for lo in range(0, n, _INIT_BLOCK):
        hi = min(n, lo + _INIT_BLOCK)
        with np.errstate(over="ignore"):
            h1 = _mix(stream + np.arange(lo, hi, dtype=np.uint64) *
                      np.uint64(_GOLDEN))
        if rule.kind == pb.InitRule.UNIFORM:
            out[lo:hi] = scale * (2.0 * _unit(h1) - 1.0)
            continue
        u1 = _unit(h1)
        u2 = _unit(_mix(h1 ^ np.uint64(_GOLDEN)))
        out[lo:hi] = scale * (np.sqrt(-2.0 * np.log(u1)) *
                              np.cos(2 * math.pi * u2))
    return out


def learning_rate(o, step):
    """common/optimizer.cc LearningRate."""
    lr = o.base_lr
    if o.linear_scaling and o.reference_batch > 0:
        lr *= o.global_batch / o.reference_batch
    if step < o.warmup_steps:
        return lr * (step + 1) / o.warmup_steps
    s = step - o.warmup_steps
    if o.schedule == pb.OptimizerConfig.STEP:
        gamma = o.gamma if o.gamma > 0 else 0.1
        return lr * math.pow(gamma, s // max(o.step_size, 1))
    if o.schedule == pb.OptimizerConfig.COSINE:
        r = o.min_lr_ratio
        if o.total_steps <= o.warmup_steps:
            return r * lr
        span = o.total_steps - o.warmup_steps
        p = min(s, span) / span
        return lr * (r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * p)))
    return lr


def _torch_optimizer(o, params):
    k = o.kind
    if k == pb.OptimizerConfig.SGD:
        return torch.optim.SGD(params, lr=o.base_lr, weight_decay=o.weight_decay)
    if k == pb.OptimizerConfig.MOMENTUM:
        return torch.optim.SGD(params, lr=o.base_lr, momentum=o.momentum,
                               nesterov=o.nesterov, weight_decay=o.weight_decay)
    if k in (pb.OptimizerConfig.ADAM, pb.OptimizerConfig.ADAMW):
        cls = torch.optim.Adam if k == pb.OptimizerConfig.ADAM else torch.optim.AdamW
        return cls(params, lr=o.base_lr, betas=(o.beta1, o.beta2), eps=o.epsilon,
                   weight_decay=o.weight_decay)
    if k == pb.OptimizerConfig.ADAGRAD:
        # common/optimizer.cc Adagrad: acc += g^2; w -= lr g / (sqrt(acc) +
        # eps), acc starting at adagrad_init; torch's is the same rule.
        return torch.optim.Adagrad(
            params, lr=o.base_lr, weight_decay=o.weight_decay,
            initial_accumulator_value=o.adagrad_init,
            eps=o.epsilon if o.epsilon > 0 else 1e-10)
    raise invalid(f"training.optimizer {pb.OptimizerConfig.Kind.Name(k).lower()}"
                  ": not available in mode ddp (sgd, momentum, adam, adamw, "
                  "adagrad)")


class DdpContext:
    """A Context (pstrain.torch) for a rank of a DDP run."""

    mode = "ddp"

    def __init__(self, env):
        path = env.get("PSTRAIN_JOB_SPEC", "")
        try:
            with open(path, "rb") as f:
                self.job = pb.JobSpec.FromString(f.read())
        except OSError as e:
            raise invalid(f"PSTRAIN_JOB_SPEC '{path}': {e.strerror}") from None
        self.out = env.get("PSTRAIN_OUT", "")
        if not self.out or not os.path.isdir(self.out):
            raise invalid(f"PSTRAIN_OUT '{self.out}' is not a folder")
        self.config = self.job.config
        t = self.config.training
        if t.mode != pb.MODE_SYNC:
            raise invalid("mode ddp runs the job's sync configuration")
        self.rank = int(env.get("PSTRAIN_RANK", "0"))
        self.world = self.config.job.workers
        self.steps = t.steps
        self.slice = t.local_batch * max(t.grad_accum_steps, 1)
        self.step = 0
        threads = int(env.get("PSTRAIN_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        dist.init_process_group(
            "gloo", rank=self.rank, world_size=self.world,
            timeout=datetime.timedelta(
                seconds=self.config.network.startup_timeout_s or 60))
        dist.barrier()
        self.start = time.time()
        # Per step: loss*samples, samples, compute_s, pull_s, push_s,
        # eval_correct, eval_total, eval_loss_sum (summed over ranks) and
        # end_unix_s (max).
        self._sums = np.zeros((self.steps + 1, 8))
        self._ends = np.zeros(self.steps + 1)
        self._done = set()
        self._pending = None
        self._finished = False
        self.optimizer = None

    # The parts of Context that shard() and the scripts use.
    def _rollback_pending(self):
        return False

    _due = ()  # no stand-ins (elastic sync is the servers')

    def _current(self):
        return self.rank, self.step

    session_id = 0
    generation = 0

    def report(self, loss, samples=None):
        if self._pending is None:
            raise invalid("ctx.report() before any opt.step(), or twice")
        step, n = self._pending
        self._record(step, loss, samples if samples is not None else n)

    def _record(self, step, loss, samples):
        row = self._sums[step]
        row[0] += float(loss) * samples
        row[1] += samples
        self._ends[step] = time.time()
        self._done.add(step)
        self._pending = None

    def finish(self, error=""):
        if self._finished:
            return
        self._finished = True
        try:
            if not error:
                sums = torch.from_numpy(self._sums)
                ends = torch.from_numpy(self._ends)
                dist.all_reduce(sums, op=dist.ReduceOp.SUM)
                dist.all_reduce(ends, op=dist.ReduceOp.MAX)
                if self.rank == 0:
                    self._write(sums.numpy(), ends.numpy())
                # Every rank waits for rank 0's files: a rank tearing gloo
                # down while another still uses its connections aborts
                # ("terminate called without an active exception").
                dist.barrier()
                # This rank's part is complete. torch 1.13's gloo teardown
                # below still aborts now and then under load (same message);
                # psctl ddp-run then reads this mark instead of the status.
                with open(os.path.join(self.out, f"rank-{self.rank}.done"),
                          "w") as f:
                    f.write("done\n")
            elif self.rank == 0:
                self._write_failure(error)
        finally:
            dist.destroy_process_group()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.finish()
        else:
            try:
                self._finished = True
                self._write_failure(f"{kind.__name__}: {value}")
            except Exception:
                pass
        return False

    def _summary(self):
        t = self.config.training
        return {
            "job": self.config.job.name, "mode": "ddp", "staleness": 0,
            "workers": self.world, "servers": 0, "steps": self.steps,
            "local_batch": t.local_batch,
            "global_batch": t.local_batch * max(t.grad_accum_steps, 1) * self.world,
            "staleness_max": 0, "staleness_mean": 0.0,
            "staleness_histogram": [], "barrier_wait_s": 0.0,
            "diverged": False, "failed": False, "message": "",
            "failure": None, "bytes_computed": True,
            "bytes_note": "computed: a ring all-reduce's 2(N-1)/N x the model's "
                          "fp32 bytes per worker per step (gloo's counters "
                          "are not exposed)",
        }

    def _write_failure(self, error):
        if self.rank != 0 or not self.out:
            return
        s = self._summary()
        s.update({"failed": True, "message": f"worker {self.rank}: {error}",
                  "failure": {"process": "worker", "rank": self.rank,
                              "message": error},
                  "wall_s": time.time() - self.start, "samples": 0,
                  "samples_per_s": 0.0, "final_loss": None,
                  "final_eval_loss": None, "final_accuracy": None,
                  "bytes_pushed": 0, "bytes_pulled": 0, "bytes_sent": 0,
                  "bytes_received": 0})
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(s, f, indent=2)

    def _write(self, sums, ends):
        rows = []
        total = 0
        final_loss = final_acc = final_eval_loss = None
        wall_end = 0.0
        for step in range(self.steps + 1):
            r = sums[step]
            wall = max(0.0, ends[step] - self.start)
            n = self.world
            samples = int(r[1])
            loss = r[0] / samples if samples else 0.0
            final_eval = step == self.steps
            if not final_eval:
                total += samples
                final_loss, wall_end = loss, wall
            acc = eval_loss = ""
            if r[6] > 0:
                eval_loss = "%.6g" % (r[7] / r[6])
                acc = "%.6f" % (r[5] / r[6])
                if final_eval:
                    final_acc, final_eval_loss = r[5] / r[6], r[7] / r[6]
            rows.append("%d,%.6f,%s,%d,%.2f,%.6f,%.6f,%.6f,%s,%s,%.6f\n" % (
                step, wall, "" if final_eval else "%.8g" % loss, samples,
                total / wall if wall > 0 else 0.0, r[2] / n, r[3] / n,
                r[4] / n, acc, eval_loss, (r[3] + r[4]) / n))
        with open(os.path.join(self.out, "metrics.csv"), "w") as f:
            f.write("step,wall_s,loss,samples,samples_per_s,compute_s,pull_s,"
                    "push_s,eval_accuracy,eval_loss,comm_s\n")
            f.writelines(rows)
        model_bytes = 4 * sum(int(np.prod(list(t.shape))) for t in
                              self.job.shard_map.tensors)
        moved = int(round(2 * (self.world - 1) / self.world * model_bytes *
                          self.steps * self.world))
        s = self._summary()
        s.update({"wall_s": wall_end, "samples": total,
                  "samples_per_s": total / wall_end if wall_end > 0 else 0.0,
                  "final_loss": final_loss, "final_eval_loss": final_eval_loss,
                  "final_accuracy": final_acc, "bytes_pushed": moved,
                  "bytes_pulled": moved, "bytes_sent": moved,
                  "bytes_received": moved})
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(s, f, indent=2)
        if self.optimizer is not None:
            self.optimizer.write_safetensors(
                os.path.join(self.out, "final.safetensors"))


class DdpOptimizer:
    """ServerOptimizer's twin under DDP: the job's optimizer in torch.optim,
    on the gradients DistributedDataParallel all-reduced (the mean over the
    ranks' equal slices, as sync's sample-weighted average)."""

    def __init__(self, model, ctx, params, specs, evaluate=None):
        self.ctx = ctx
        self.model = model
        self._evaluate = evaluate
        self._specs = specs
        self._params = params
        with torch.no_grad():
            for p, spec in zip(params, specs):
                p.copy_(torch.from_numpy(initial_values(spec)).view(p.shape))
        self.ddp = torch.nn.parallel.DistributedDataParallel(model)
        _route_calls_through(model, self.ddp)
        self._opt = _torch_optimizer(ctx.config.training.optimizer, params)
        ctx.optimizer = self
        self._last = time.monotonic()
        self._after_update(0)

    def zero_grad(self, set_to_none=True):
        self._opt.zero_grad(set_to_none=set_to_none)

    def step(self, samples, loss=None):
        ctx = self.ctx
        if samples < 1:
            raise invalid(f"opt.step(samples={samples}): needs >= 1 examples")
        if ctx._pending is not None:
            raise invalid(f"step {ctx._pending[0]} has no loss: call "
                          "ctx.report(loss=...) or opt.step(loss=...)")
        step = ctx.step
        ctx._sums[step][2] += time.monotonic() - self._last
        for g in self._opt.param_groups:
            g["lr"] = learning_rate(ctx.config.training.optimizer, step)
        self._opt.step()
        ctx.step = step + 1
        ctx._pending = (step, int(samples))
        if loss is not None:
            ctx._record(step, loss, int(samples))
        self._after_update(ctx.step)
        self._last = time.monotonic()

    def _after_update(self, step):
        ctx = self.ctx
        every = ctx.config.evaluation.every_steps
        final = step == ctx.steps
        if (final or (every > 0 and step > 0 and step % every == 0)) and \
                self._evaluate is not None:
            with torch.no_grad():
                correct, total, loss_sum = self._evaluate(self.model)
            ctx._sums[step][5:8] += (correct, total, loss_sum)
        if final:
            ctx._ends[step] = time.time()

    def write_safetensors(self, path):
        header, blobs, offset = {}, [], 0
        for p, spec in zip(self._params, self._specs):
            data = p.detach().numpy().astype("<f4").tobytes()
            header[spec.name] = {"dtype": "F32", "shape": list(spec.shape),
                                 "data_offsets": [offset, offset + len(data)]}
            blobs.append(data)
            offset += len(data)
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _route_calls_through(model, ddp):
    """Makes `model(x)` run DistributedDataParallel's forward (which
    prepares the gradient all-reduce), so the script keeps calling its own
    module. Inside DDP's forward the module's own __call__ runs."""
    base = type(model)

    def call(self, *args, **kwargs):
        if getattr(self, "_pst_in_ddp", False):
            return base.__call__(self, *args, **kwargs)
        self._pst_in_ddp = True
        try:
            return ddp(*args, **kwargs)
        finally:
            self._pst_in_ddp = False

    model.__class__ = type(base.__name__, (base,), {"__call__": call})
