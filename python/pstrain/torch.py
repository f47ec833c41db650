"""PyTorch workers on pstrain's parameter servers (docs/python.md).

    import pstrain.torch as pst
    with pst.init() as ctx:                  # PSTRAIN_* env from the launcher
        model = Net()
        opt = pst.ServerOptimizer(model, ctx, evaluate=pst.classifier_eval(
            test_x, test_y, ctx))
        for x, y in pst.shard((train_x, train_y), ctx):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step(samples=len(y), loss=loss.item())

The job's optimizer runs on the servers: `step` pushes the gradients of the
current step and pulls the weights of the next one, under the job's
consistency rule (sync, SSP, async, backup workers, staleness-aware rate:
the servers apply them; the worker only names its clock). Parameters are
matched to the job's tensors by name: `a.b.weight` is the tensor
`a/b/weight`; every tensor must exist with the same shape, checked before
anything is pulled or pushed.

A Context is not thread-safe: one training loop per process.

training.on_failure: elastic in mode sync: when a worker dies, a live one
stands in for its rank (docs/failures-and-recovery.md). The loop above does
not change: `shard` then yields, per step, this rank's batch and then each
stood-in rank's batch of the same step (ctx.batch_rank says whose), and
`step` pushes the first under this rank's session without pulling and the
last under the stood-in rank's session, then pulls: every gradient of the
step comes from the same weights. `evaluate` is then also called as
evaluate(model, rank=R) for each stood-in rank R (classifier_eval's does).
"""

import inspect
import os
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as _FutureTimeout

import grpc
import numpy as np
import torch

from pstrain import data as _data
from pstrain._proto import pb
from pstrain.client import ShardClient
from pstrain.errors import PstrainError, invalid
from pstrain.session import Session, WorkerSettings

__all__ = ["init", "Context", "ServerOptimizer", "shard", "classifier_eval",
           "MLP", "WideDeep", "hashed_rows", "job_data", "test_slice",
           "PstrainError"]


def init(settings=None):
    """Registers this process as a worker of the job (settings: a
    WorkerSettings, default from the PSTRAIN_* environment) and returns its
    Context. Blocks until the coordinator and every server are up (bounded
    by PSTRAIN_STARTUP_TIMEOUT_S)."""
    if settings is None and os.environ.get("PSTRAIN_DDP") == "1":
        # psctl compare's mode ddp: the same script under torch.distributed.
        from pstrain.ddp import DdpContext
        return DdpContext(os.environ)
    settings = settings or WorkerSettings.from_env()
    if settings.threads > 0:
        torch.set_num_threads(settings.threads)
    session = Session(settings)
    try:
        session.register()
    except BaseException:
        session.close()
        raise
    ctx = Context(session)
    # " worker/R " marks the registration in the log as the C++ worker's
    # log role does: psctl's launcher (tools/launch) looks for it to tell a
    # process restarted under on_failure: elastic that rejoined its rank.
    print(f"pstrain: worker/{ctx.rank} registered: worker {ctx.rank} of "
          f"{ctx.world}: {ctx.mode.lower()} job "
          f"'{ctx.config.job.name}', {ctx.steps} steps from step {ctx.step}, "
          f"{len(ctx.job.shard_map.server_addresses)} shards", flush=True)
    return ctx


class Context:
    """One registered worker: its rank, the job, and where it is."""

    def __init__(self, session):
        self._session = session
        self.rank = session.rank
        self.job = session.job
        self.config = session.job.config
        t = self.config.training
        self.world = self.config.job.workers
        self.steps = t.steps
        # Examples per step: the local batch times the accumulation steps.
        self.slice = t.local_batch * max(t.grad_accum_steps, 1)
        self.step = session.start_step  # the next step to compute
        self._client = None
        self._records = {}  # (rank, step) -> StepMetrics not yet sent
        self._stepped = None  # (rank, step) of the last opt.step()
        self._finished = False
        # Elastic sync (JobSpec.worker_recovery.stands_in): the dead ranks
        # this worker stands in for, and the (rank, step) batches still due
        # before the next pull.
        self.stands_in = bool(self.job.worker_recovery.stands_in)
        self._stand_ins = {}  # rank -> _StandIn
        self._due = []
        self._new_client()

    # -- public ------------------------------------------------------------

    @property
    def mode(self):
        return pb.ConsistencyMode.Name(self.config.training.mode)

    @property
    def session_id(self):
        return self._session.session_id

    @property
    def generation(self):
        return self._session.generation

    @property
    def batch_rank(self):
        """The rank whose batch shard() yielded last: this worker's, or
        (elastic sync) a rank it stands in for."""
        return self._current()[0]

    @property
    def stand_in_ranks(self):
        """The dead ranks this worker computes now besides its own."""
        return sorted(self._stand_ins)

    @property
    def bytes_pushed(self):
        return self._client.bytes_pushed

    @property
    def bytes_pulled(self):
        return self._client.bytes_pulled

    def report(self, loss, samples=None):
        """Completes the record of the last step with its mean loss (and
        sample count) and queues it for metrics.csv."""
        rec = self._records.get(self._stepped)
        if rec is None:
            raise invalid("ctx.report() before any opt.step(), or twice for "
                          "one step")
        rec.loss = float(loss)
        if samples is not None:
            rec.samples = int(samples)
        self._queue(self._stepped)

    def finish(self, error=""):
        """Sends the last records and the final report (done); the job ends
        when every worker has. Idempotent."""
        if self._finished:
            return
        self._finished = True
        live = self._session.liveness
        try:
            if not error:
                missing = sorted(k[1] for k in self._records)
                if self.step < self.steps:
                    error = (f"the training loop ended at step {self.step} of "
                             f"{self.steps}")
                elif missing:
                    error = (f"steps {missing} have no loss: call "
                             "ctx.report(loss=...) or opt.step(loss=...)")
            if live and live.lost:
                return
            for s in self._stand_ins.values():
                if not error:
                    s.session.flush(s.client, done=True)
            self._session.flush(self._client, done=True,
                                error=f"worker {self.rank}: {error}" if error
                                else "", timeout_s=None if not error else 2.0)
        finally:
            for s in self._stand_ins.values():
                s.close()
            self._client.close()
            self._session.close()
            print(f"pstrain: worker {self.rank}: "
                  f"{'failed: ' + error if error else 'done'}", flush=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.finish()
        else:
            try:
                self.finish(error=f"{kind.__name__}: {value}")
            except Exception:  # the original error says more
                pass
        return False

    # -- internal ----------------------------------------------------------

    def _new_client(self):
        if self._client is not None:
            self._client.close()
        cfg = self.config
        s = self._session.settings
        self._client = ShardClient(
            self.job.shard_map, s.shard_channel, s.metadata(),
            self._session.session_id, self._session.generation,
            cfg.network.wire_dtype, cfg.network.rpc_timeout_s,
            cfg.network.barrier_timeout_s, cfg.network.startup_timeout_s)
        self._session.liveness.set_client(self._client)

    def _rollback_pending(self):
        return self._session.liveness.rollback_pending()

    def _check_live(self):
        live = self._session.liveness
        if live.ended:
            raise PstrainError(grpc.StatusCode.ABORTED, live.reason)

    def _record(self, step, rank=None):
        rank = self.rank if rank is None else rank
        m = self._records.get((rank, step))
        if m is None:
            m = pb.StepMetrics(worker=rank, step=step)
            self._records[(rank, step)] = m
        return m

    def _queue(self, key):
        rank, step = key
        m = self._records.pop(key)
        m.end_unix_s = time.time()
        if rank == self.rank:
            self._session.liveness.step = step + 1
            self._session.add(m, self._client)
            return
        s = self._stand_ins[rank]
        if s.session.liveness is not None:
            s.session.liveness.step = step + 1
        s.session.add(m, s.client)

    def _current(self):
        """(rank, step) of the batch to compute now."""
        return self._due[0] if self._due else (self.rank, self.step)

    def _client_for(self, rank):
        return (self._client if rank == self.rank else
                self._stand_ins[rank].client)

    def _adopt(self, held):
        """Elastic sync: registers the ranks the heartbeat named (see
        Session.adopt) with the weights of step `held`; a rank whose first
        step is `held` is due at once. Returns those ranks."""
        due = []
        for d in self._session.liveness.take_adoptions():
            adopted = self._session.adopt(d, held)
            if adopted is None:
                continue
            s = self._new_stand_in(adopted)
            self._stand_ins[d] = s
            print(f"pstrain: worker {self.rank}: standing in for worker rank "
                  f"{d} from step {s.first_step} (training.on_failure: "
                  "elastic, mode sync: this worker computes and pushes the "
                  "rank's batches too, so the global batch is kept)",
                  flush=True)
            if s.first_step <= held:
                self._due.append((d, held))
                due.append(d)
        return due

    def _new_stand_in(self, adopted):
        return _StandIn(self, adopted)

    def _maybe_release(self, held):
        """Handover: hands back each stood-in rank the coordinator wants
        back, once every push of step `held` is done and its records sent."""
        for d, s in list(self._stand_ins.items()):
            live = s.session.liveness
            if live is None or not live.release_requested:
                continue
            if any(k[0] == d for k in self._records):
                continue  # a record awaits its loss: at the next boundary
            if self._session.release(s.session, max(held + 1, s.first_step)):
                del self._stand_ins[d]
                self._session.liveness.forget(d)
                s.close()

    def _recover(self, error):
        """After a failed pull or push under training.on_failure: restart:
        waits (bounded: 2 x lease + 1 s) for the coordinator to start a new
        generation, then for its rollback; resumes at its start step.
        Re-raises `error` when none comes."""
        cfg = self.config
        # JobSpec.worker_recovery: the job's failure policy rolls back.
        if (not self.job.worker_recovery.rolls_back or
                self._session.liveness.ended):
            raise error
        live = self._session.liveness
        until = time.monotonic() + 2 * cfg.network.lease_s + 1
        while not live.rollback_pending():
            if live.ended or time.monotonic() > until:
                raise PstrainError(error.code, f"{error}; no rollback: the job "
                                   f"stayed in generation {self.generation}")
            time.sleep(0.05)
        job = self._session.await_generation(self.generation + 1)
        self.job = job
        self.step = job.start_step
        self._records.clear()
        self._session.drop_pending()
        self._session.resumed_at(job.start_step)
        self._new_client()
        print(f"pstrain: worker {self.rank}: resuming at step {self.step} in "
              f"generation {job.generation} (was: {error})", flush=True)


def _match_parameters(model, specs, config):
    """`model`'s parameters in the order of the job's tensors `specs`
    (a.b.weight is a/b/weight); INVALID_ARGUMENT naming the tensor when a
    tensor has no parameter of its shape, or a parameter no tensor."""
    params = dict(model.named_parameters())
    by_name = {n.replace(".", "/"): p for n, p in params.items()}
    for spec in specs:
        p = by_name.get(spec.name)
        shape = list(spec.shape)
        if p is None:
            raise invalid(
                f"the job's tensor '{spec.name}' {shape} has no parameter "
                f"in the model (a parameter named "
                f"'{spec.name.replace('/', '.')}'); the model has "
                f"{sorted(params)}; nothing was pushed")
        if list(p.shape) != shape:
            raise invalid(
                f"tensor '{spec.name}': the model's shape "
                f"{list(p.shape)} is not the job's {shape}; nothing was "
                "pushed")
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise invalid(f"tensor '{spec.name}': must be a float32 CPU "
                          f"parameter, is {p.dtype} on {p.device}")
    known = {s.name for s in specs}
    extra = sorted(n for n in by_name if n not in known)
    if extra:
        raise invalid(
            f"the model's parameters {extra} are not tensors of the job "
            f"(model.type {pb.ModelConfig.ModelType.Name(config.model.type).lower()}: "
            f"{sorted(known)}); nothing was pushed")
    return [by_name[s.name] for s in specs]


class _StandIn:
    """A dead rank this worker stands in for: its session (reports and
    heartbeat) and a shard client carrying its session id."""

    def __init__(self, ctx, adopted):
        cfg = ctx.config
        st = ctx._session.settings
        self.rank = adopted.rank
        self.session = adopted
        self.first_step = adopted.start_step
        self.client = ShardClient(
            ctx.job.shard_map, st.shard_channel, st.metadata(),
            adopted.session_id, ctx.generation, cfg.network.wire_dtype,
            cfg.network.rpc_timeout_s, cfg.network.barrier_timeout_s,
            cfg.network.startup_timeout_s)
        adopted.client = self.client
        adopted.liveness.set_client(self.client)
        # Shards learn a session id from a pull; not a pull of weights,
        # which may wait for the very push this stand-in is to make.
        self.client.announce_session(self.rank)

    def close(self):
        self.session.close()
        self.client.close()


class ServerOptimizer:
    """The job's optimizer, run by the servers, for `model`'s parameters.

    evaluate: optional callable(model) -> (correct, total, loss_sum) on this
    rank's slice of the test set (classifier_eval makes one); called with
    the pulled weights every evaluation.every_steps steps and after the
    last step, as the C++ worker evaluates.
    """

    def __new__(cls, model, ctx, evaluate=None):
        if getattr(ctx, "mode", "") == "ddp":
            # psctl compare's mode ddp: torch.optim under DDP (pstrain.ddp).
            from pstrain.ddp import DdpOptimizer
            specs = list(ctx.job.shard_map.tensors)
            return DdpOptimizer(model, ctx, _match_parameters(
                model, specs, ctx.config), specs, evaluate)
        return super().__new__(cls)

    def __init__(self, model, ctx, evaluate=None):
        self.ctx = ctx
        self.model = model
        self._evaluate = evaluate
        specs = list(ctx.job.shard_map.tensors)
        self._params = _match_parameters(model, specs, ctx.config)
        # numpy views sharing the parameters' memory: pulls land in place.
        self._views = [p.data.view(-1).numpy() for p in self._params]
        self._reads = None
        # Elastic sync: pulls land in these first, on a thread, while the
        # model keeps the weights a stood-in rank's gradient needs.
        self._pending = None
        if ctx.stands_in:
            self._scratch = [np.empty_like(v) for v in self._views]
            self._pool = ThreadPoolExecutor(max_workers=1)
        self._pull()

    def zero_grad(self, set_to_none=True):
        for p in self._params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self, samples, loss=None):
        """Pushes the gradients of ctx.step over `samples` examples and
        pulls the weights of the next step into the model. `loss` (the
        step's mean loss) completes its record; else call ctx.report().
        Elastic sync: the gradients are those of the batch shard() yielded
        last (ctx.batch_rank); the pull waits for the step's last one."""
        ctx = self.ctx
        if samples < 1:
            raise invalid(f"opt.step(samples={samples}): needs >= 1 examples")
        rank, step = ctx._current()
        if step >= ctx.steps:
            raise invalid(f"opt.step() after the job's {ctx.steps} steps")
        unreported = [k for k in ctx._records
                      if k[1] < step or k == ctx._stepped]
        if unreported:
            r, t = unreported[0]
            whose = "" if r == ctx.rank else f" of rank {r}"
            raise invalid(f"step {t}{whose} has no loss: call "
                          "ctx.report(loss=...) or opt.step(loss=...)")
        ctx._check_live()
        m = ctx._record(step, rank)
        m.compute_s = time.monotonic() - self._pulled_at
        grads = []
        for p, v in zip(self._params, self._views):
            if p.grad is None:
                grads.append(np.zeros_like(v))
            else:
                grads.append(p.grad.detach().reshape(-1).numpy())
        t0 = time.monotonic()
        try:
            ctx._client_for(rank).push(rank, step, int(samples), grads,
                                       self._reads)
        except PstrainError as e:
            if rank != ctx.rank:
                raise PstrainError(e.code, f"standing in for rank {rank}: "
                                   f"{e}") from None
            ctx._recover(e)
            self._pull()
            return
        m.push_s = time.monotonic() - t0
        m.samples = int(samples)
        self._pulled_at = time.monotonic()
        if rank == ctx.rank:
            ctx.step = step + 1
            ctx._due = [(d, step) for d, s in sorted(ctx._stand_ins.items())
                        if s.first_step <= step]
        else:
            ctx._due.pop(0)
        ctx._stepped = (rank, step)
        if loss is not None:
            m.loss = float(loss)
            ctx._queue((rank, step))
        if not ctx._due:
            self._pull()

    def _pull(self):
        ctx = self.ctx
        while True:
            ctx._check_live()
            step = ctx.step
            t0 = time.monotonic()
            try:
                if ctx.stands_in:
                    if not self._await_pull(step):
                        return  # a stood-in rank's batch is due first
                else:
                    self._reads = ctx._client.pull(ctx.rank, step, self._views)
                break
            except PstrainError as e:
                ctx._recover(e)
        self._pulled_at = time.monotonic()
        every = ctx.config.evaluation.every_steps
        final = step == ctx.steps
        ranks = [ctx.rank] + [d for d, s in sorted(ctx._stand_ins.items())
                              if s.first_step <= step]
        for rank in ranks:
            m = ctx._record(step, rank)
            if rank == ctx.rank:
                m.pull_s = self._pulled_at - t0
            if final or (every > 0 and step > 0 and step % every == 0):
                self._evaluate_rank(m, rank)
            if final:
                ctx._queue((rank, step))
        if final:
            ctx._stepped = None

    def _evaluate_rank(self, m, rank):
        if self._evaluate is None:
            return
        ctx = self.ctx
        with torch.no_grad():
            if rank == ctx.rank:
                result = self._evaluate(self.model)
            elif "rank" in inspect.signature(self._evaluate).parameters:
                result = self._evaluate(self.model, rank=rank)
            else:
                return  # an evaluate of this rank only: nothing for `rank`
        correct, total, loss_sum = result
        m.eval_correct, m.eval_total = int(correct), int(total)
        m.eval_loss_sum = float(loss_sum)

    def _await_pull(self, step):
        """Elastic sync: the pull of `step` into the scratch buffers, on a
        thread, while this one polls the heartbeat every 50 ms for ranks to
        stand in for and ranks to hand back, with the weights of step
        `held` (as worker/ps/trainer.cc AwaitPull): the pull may wait on a
        barrier only a stand-in's push of `held` completes. False when a
        new rank's batch of `held` is due (the pull stays in flight: the
        next call waits for it); True with the weights in the model."""
        ctx = self.ctx
        held = step - 1 if step > ctx._session.start_step else -1
        if self._pending is None:
            self._pending = self._pool.submit(ctx._client.pull, ctx.rank, step,
                                              self._scratch)
        while True:
            try:
                self._pending.result(timeout=0.05)
                done = True
            except _FutureTimeout:
                done = False
            except PstrainError:
                self._pending, failed = None, self._pending
                failed.result()  # raises
            if held >= 0:
                every = ctx.config.evaluation.every_steps
                for d in ctx._adopt(held):
                    if every > 0 and held > 0 and held % every == 0:
                        self._evaluate_rank(ctx._record(held, d), d)
                if ctx._due:
                    return False
                ctx._maybe_release(held)
            if done:
                break
        self._reads = self._pending.result()
        self._pending = None
        for v, w in zip(self._views, self._scratch):
            np.copyto(v, w)
        return True


def _as_tensor(a):
    return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))


def shard(dataset, ctx):
    """This rank's batches, one per step from ctx.step to the job's end:
    global example ids [t*N*b + r*b, ... + b) (b = local_batch x
    grad_accum_steps) through the epoch sampler seeded by data.seed, as the
    C++ worker takes them. `dataset`: a tuple of equal-length arrays or
    tensors ((x, y)), a JobData (its training set), a torch Dataset, or a
    DataLoader (its dataset). Yields tuples of tensors. After a rollback
    (on_failure: restart) it continues at the step the job resumes from."""
    if isinstance(dataset, _data.StepData):
        yield from _step_shard(dataset, ctx)
        return
    if isinstance(dataset, _data.JobData):
        dataset = (dataset.train_x, dataset.train_y)
    if isinstance(dataset, torch.utils.data.DataLoader):
        dataset = dataset.dataset
    if isinstance(dataset, tuple):
        arrays = tuple(_as_tensor(a) for a in dataset)
        n = len(arrays[0])
        if any(len(a) != n for a in arrays):
            raise invalid("shard(): the arrays differ in length "
                          f"{[len(a) for a in arrays]}")

        def take(rows):
            idx = torch.from_numpy(rows)
            return tuple(a[idx] for a in arrays)
    else:
        n = len(dataset)

        def take(rows):
            items = [dataset[int(r)] for r in rows]
            return tuple(torch.stack([_as_tensor(it[k]) for it in items])
                         for k in range(len(items[0])))
    sampler = _data.EpochSampler(n, ctx.config.data.seed)
    for rank, step in _batches(ctx):
        first = _data.first_example_id(step, rank, ctx.world, ctx.slice)
        yield take(sampler.rows(first, ctx.slice))


def _batches(ctx):
    """(rank, step) of each batch to compute, until the job's end: this
    rank's step, then (elastic sync) each stood-in rank's of that step."""
    last = None
    while ctx._due or ctx.step < ctx.steps:
        now = ctx._current()
        if now == last and not ctx._rollback_pending():
            raise invalid(f"step {last[1]}: the loop asked for the next batch "
                          "without opt.step(): call it once per batch")
        last = now
        yield now


def _step_shard(data, ctx):
    """shard() of a StepData: this rank's exported rows of each step,
    (x, y, cat) with cat the categorical ids as int64 (the uint64 ids'
    bits)."""
    if data.rank != ctx.rank or data.world != ctx.world or \
            data.slice != ctx.slice:
        raise invalid(
            f"shard(): the data is rank {data.rank} of {data.world} with "
            f"{data.slice} examples per step; this worker is rank {ctx.rank} "
            f"of {ctx.world} with {ctx.slice}")
    exports = {data.rank: data}
    for rank, step in _batches(ctx):
        if rank not in exports:  # a rank this worker stands in for
            exports[rank] = _data.export_step_data(ctx.config, rank)
        data = exports[rank]
        lo, hi = data.step_rows(step)
        yield (torch.from_numpy(data.train_x[lo:hi].copy()),
               torch.from_numpy(data.train_y[lo:hi].copy()),
               torch.from_numpy(data.train_cat[lo:hi].view(np.int64).copy()))


def job_data(ctx):
    """The job's own data. File data (data.source digits, breast_cancer,
    csv): a JobData, split and standardised as the C++ worker does
    (pstrain.data). data.source synthetic: a StepData, this rank's examples
    of every step and the test set, generated by the C++ generator
    (`ps_report data-export`, $PSTRAIN_REPORT); shard() of it yields
    (x, y, cat) per step."""
    if ctx.config.data.source == pb.DataConfig.SYNTHETIC:
        return _data.export_step_data(ctx.config, ctx.rank)
    return _data.load_job_data(ctx.config)


def test_slice(size, ctx):
    """[lo, hi): the rows of a test set of `size` rows this rank evaluates
    (worker/data TestSliceRange), for an `evaluate` of your own."""
    return _data.test_slice_range(size, ctx.rank, ctx.world)


def classifier_eval(test_x, test_y, ctx):
    """An `evaluate` for ServerOptimizer: accuracy counts and the summed
    cross-entropy on this rank's slice of the test set (the coordinator
    adds every rank's counts and divides once); evaluate(model, rank=R) on
    rank R's slice (a rank this worker stands in for)."""
    all_x, all_y = _as_tensor(test_x), _as_tensor(test_y)

    def evaluate(model, rank=None):
        lo, hi = _data.test_slice_range(
            len(all_y), ctx.rank if rank is None else rank, ctx.world)
        x, y = all_x[lo:hi], all_y[lo:hi].long()
        if len(y) == 0:
            return 0, 0, 0.0
        was = model.training
        model.eval()
        out = model(x)
        model.train(was)
        loss_sum = torch.nn.functional.cross_entropy(out, y, reduction="sum")
        return int((out.argmax(1) == y).sum()), len(y), float(loss_sum)
    return evaluate


class _Affine(torch.nn.Module):
    def __init__(self, fan_in, fan_out):
        super().__init__()
        # [in, out], as the job's tensors layer{i}/weight are laid out.
        self.weight = torch.nn.Parameter(torch.zeros(fan_in, fan_out))
        self.bias = torch.nn.Parameter(torch.zeros(fan_out))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


class MLP(torch.nn.Module):
    """The job's `model.type: mlp` as a torch module: parameters
    layer{i}.weight [in, out] and layer{i}.bias, the tensors the C++ worker
    trains (common/model_spec.h), so both workers can train one job."""

    def __init__(self, model_config):
        super().__init__()
        m = model_config
        if m.type != pb.ModelConfig.MLP:
            raise invalid("MLP(): model.type is not mlp")
        widths = [m.input_dim] + list(m.hidden) + [m.num_classes]
        self.act = {pb.ModelConfig.RELU: torch.relu,
                    pb.ModelConfig.TANH: torch.tanh,
                    pb.ModelConfig.GELU: torch.nn.functional.gelu}[m.activation]
        for i in range(len(widths) - 1):
            self.add_module(f"layer{i}", _Affine(widths[i], widths[i + 1]))
        self.layers = len(widths) - 1

    def forward(self, x):
        for i in range(self.layers):
            x = getattr(self, f"layer{i}")(x)
            if i + 1 < self.layers:
                x = self.act(x)
        return x


_MASK64 = (1 << 64) - 1


def _mix64(z):
    """splitmix64's finaliser on a uint64 array (worker/model Mix)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def hashed_rows(cat, buckets, hashes=1):
    """[n, C] categorical ids (int64 holding the uint64 ids' bits, as
    shard() of job_data yields them) -> [n, C, hashes] int64 table rows,
    HashedRow of worker/model/wide_deep_model.h bit for bit:
    Mix(Mix(c * 0x100000001b3 + t + 1) ^ value) % buckets."""
    ids = cat.numpy() if isinstance(cat, torch.Tensor) else np.asarray(cat)
    ids = ids.view(np.uint64)
    cols = np.arange(ids.shape[1], dtype=np.uint64)[:, None]
    ts = np.arange(hashes, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        keys = _mix64(cols * np.uint64(0x100000001B3) + ts + np.uint64(1))
        rows = _mix64(keys[None, :, :] ^ ids[:, :, None]) % np.uint64(buckets)
    return torch.from_numpy(rows.astype(np.int64))


class WideDeep(torch.nn.Module):
    """The job's `model.type: wide_deep` as a torch module, with the tensors
    the C++ worker trains (common/model_spec.cc): `embedding` [buckets,
    embedding_dim], bottom{i}.weight [in, out] / .bias, top{i}.weight /
    .bias. forward(x, cat): the bottom MLP of the numeric columns x, each
    categorical value's `hashes` rows (hashed_rows) pooled (sum | mean) per
    column, the top MLP over [bottom output | pooled embeddings] -> logits,
    as worker/model/wide_deep_model.h computes them.

    The table's gradient here is DENSE ([buckets, dim], F.embedding with
    sparse=False), as a plain nn.Embedding's is: what mode ddp all-reduces
    whole every step. On pstrain's servers the C++ worker keeps the table
    row-sparse; this module is for mode ddp (the Python client pulls whole
    tensors)."""

    def __init__(self, model_config):
        super().__init__()
        m = model_config
        if m.type != pb.ModelConfig.WIDE_DEEP:
            raise invalid("WideDeep(): model.type is not wide_deep")
        self.act = {pb.ModelConfig.RELU: torch.relu,
                    pb.ModelConfig.TANH: torch.tanh,
                    pb.ModelConfig.GELU: torch.nn.functional.gelu}[m.activation]
        self.buckets, self.hashes = m.buckets, max(m.hashes, 1)
        self.mean = m.pooling == pb.ModelConfig.MEAN
        self.embedding = torch.nn.Parameter(
            torch.zeros(m.buckets, m.embedding_dim))
        bottom = [m.input_dim] + list(m.bottom_hidden)
        top = [bottom[-1] + m.sparse_columns * m.embedding_dim] + \
            list(m.hidden) + [m.num_classes]
        for i in range(len(bottom) - 1):
            self.add_module(f"bottom{i}", _Affine(bottom[i], bottom[i + 1]))
        for i in range(len(top) - 1):
            self.add_module(f"top{i}", _Affine(top[i], top[i + 1]))
        self.bottom_layers, self.top_layers = len(bottom) - 1, len(top) - 1

    def forward(self, x, cat):
        for i in range(self.bottom_layers):
            x = self.act(getattr(self, f"bottom{i}")(x))
        rows = hashed_rows(cat, self.buckets, self.hashes)
        e = torch.nn.functional.embedding(rows, self.embedding)
        e = e.mean(2) if self.mean else e.sum(2)  # pool the hashes
        h = torch.cat([x, e.flatten(1)], dim=1)
        for i in range(self.top_layers):
            h = getattr(self, f"top{i}")(h)
            if i + 1 < self.top_layers:
                h = self.act(h)
        return h
