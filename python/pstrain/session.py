"""A Python worker's session with the coordinator, as worker/worker_node.cc
holds it: the settings the launcher passes (PSTRAIN_* environment, read once
here into a WorkerSettings), registration, the heartbeat (Liveness) and the
step reports.

Environment (set by `psctl run --worker-cmd`; docs/python.md):
  PSTRAIN_COORDINATOR    host:port of the coordinator (required)
  PSTRAIN_RANK           the rank to ask for; -1 or unset: any
  PSTRAIN_TOKEN_FILE     the job token file (required unless
                         PSTRAIN_INSECURE=1, security.insecure)
  PSTRAIN_TLS_CA, PSTRAIN_TLS_CERT, PSTRAIN_TLS_KEY   PEM files (TLS)
  PSTRAIN_RPC_TIMEOUT_S, PSTRAIN_STARTUP_TIMEOUT_S    (30, 60)
  PSTRAIN_THREADS        CPU threads for the model's math (torch)
"""

import os
import re
import threading
import time

import grpc
import grpc.experimental  # ChannelOptions (not imported by `grpc` itself)

from pstrain._proto import pb, pb_grpc
from pstrain.errors import PstrainError, from_rpc, invalid

MIN_TOKEN_BYTES, MAX_TOKEN_BYTES = 16, 1024


class WorkerSettings:
    """What a worker process is told by its launcher."""

    def __init__(self, coordinator, rank=-1, token=None, tls_ca="",
                 tls_cert="", tls_key="", rpc_timeout_s=30.0,
                 startup_timeout_s=60.0, threads=0):
        self.coordinator = coordinator
        self.rank = rank
        self.token = token
        self.tls_ca, self.tls_cert, self.tls_key = tls_ca, tls_cert, tls_key
        self.rpc_timeout_s = rpc_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.threads = threads

    @staticmethod
    def from_env(env=None):
        env = os.environ if env is None else env

        def number(name, default, kind=float):
            text = env.get(name, "")
            if text == "":
                return default
            try:
                return kind(text)
            except ValueError:
                raise invalid(f"{name}: '{text}' is not a number") from None

        coordinator = env.get("PSTRAIN_COORDINATOR", "")
        if not coordinator:
            raise invalid("PSTRAIN_COORDINATOR is not set: start Python workers "
                          "with `psctl run --worker-cmd CMD`, or set it to the "
                          "coordinator's host:port")
        token = None
        token_file = env.get("PSTRAIN_TOKEN_FILE", "")
        if token_file:
            token = read_job_token(token_file)
        elif env.get("PSTRAIN_INSECURE", "") != "1":
            raise invalid(
                "PSTRAIN_TOKEN_FILE is not set: every call needs the job "
                "token (psctl run writes DIR/token; make one with `openssl "
                "rand -hex 32 > job.token`), or set PSTRAIN_INSECURE=1 for a "
                "job with security.insecure: true")
        return WorkerSettings(
            coordinator=coordinator,
            rank=number("PSTRAIN_RANK", -1, int),
            token=token,
            tls_ca=env.get("PSTRAIN_TLS_CA", ""),
            tls_cert=env.get("PSTRAIN_TLS_CERT", ""),
            tls_key=env.get("PSTRAIN_TLS_KEY", ""),
            rpc_timeout_s=number("PSTRAIN_RPC_TIMEOUT_S", 30.0),
            startup_timeout_s=number("PSTRAIN_STARTUP_TIMEOUT_S", 60.0),
            threads=number("PSTRAIN_THREADS", 0, int))

    def metadata(self):
        """Metadata every call carries (common/job_token.h)."""
        if self.token is None:
            return []
        return [("x-pstrain-token", self.token), ("x-pstrain-role", "member")]

    def shard_channel(self, address):
        """A channel to a parameter server: channel()'s, with pulls
        (unary-stream calls) read on the calling thread, without gRPC's
        channel thread in between (docs/python.md, "Speed")."""
        return self.channel(address, [(
            grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)])

    def channel(self, address, extra_options=()):
        # For a pull's megabytes a 16 MiB stream window with the BDP probe
        # off (as the ring's links, worker/allreduce/grpc_transport.h;
        # docs/python.md, "Speed"). gRPC's own reconnect backoff: its
        # min_reconnect_backoff_ms is also the connect timeout; with the C++
        # channels' 100 ms a TLS connection timed out under load 27
        # ("timed out before receiving SETTINGS frame").
        options = [("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.max_send_message_length", 64 << 20),
                   ("grpc.http2.lookahead_bytes", 16 << 20),
                   ("grpc.http2.bdp_probe", 0)] + list(extra_options)
        if not self.tls_ca:
            return grpc.insecure_channel(address, options=options)

        def read(path):
            if not path:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise invalid(f"TLS file '{path}': {e.strerror}") from None

        creds = grpc.ssl_channel_credentials(
            root_certificates=read(self.tls_ca),
            private_key=read(self.tls_key),
            certificate_chain=read(self.tls_cert))
        return grpc.secure_channel(address, creds, options=options)


def read_job_token(path):
    """The token in `path` without trailing whitespace: 16..1024 printable
    ASCII characters (common/job_token.h ReadJobToken); errors name the
    file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 64)
    except OSError as e:
        raise invalid(f"job token file '{path}': {e.strerror}") from None
    token = raw.rstrip(b" \t\r\n")
    if not (MIN_TOKEN_BYTES <= len(token) <= MAX_TOKEN_BYTES):
        raise invalid(f"job token file '{path}': {len(token)} bytes; a token "
                      f"has {MIN_TOKEN_BYTES}..{MAX_TOKEN_BYTES}")
    if not re.fullmatch(rb"[\x21-\x7e]+", token):
        raise invalid(f"job token file '{path}': not printable ASCII")
    return token.decode("ascii")


def _retry_until(deadline, what, attempt):
    """Runs `attempt` until it succeeds, fails with other than UNAVAILABLE
    or DEADLINE_EXCEEDED, or `deadline` (time.monotonic()) passes."""
    delay = 0.05
    while True:
        try:
            return attempt()
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                grpc.StatusCode.DEADLINE_EXCEEDED):
                raise from_rpc(e, what) from None
            if time.monotonic() + delay > deadline:
                raise PstrainError(
                    e.code(), f"{what}: still {e.code().name} at the "
                    f"start-up deadline: {e.details()}") from None
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class Session:
    """Registration, heartbeat and reports of one worker rank."""

    def __init__(self, settings):
        self.settings = settings
        self._md = settings.metadata()
        self._channel = settings.channel(settings.coordinator)
        self.coord = pb_grpc.CoordinatorStub(self._channel)
        self.rank = None
        self.session_id = 0
        self.job = None
        self.start_step = 0
        self._pending = []
        self._resumed_at = None
        self._last_flush = time.monotonic()
        self._liveness = None
        self._owns_channel = True

    # -- registration ------------------------------------------------------

    def register(self):
        s = self.settings
        deadline = time.monotonic() + s.startup_timeout_s
        where = f"coordinator at {s.coordinator}"
        job = _retry_until(deadline, where, lambda: self.coord.GetJob(
            pb.GetJobRequest(), timeout=s.rpc_timeout_s, metadata=self._md))
        if job.config.training.mode == pb.MODE_ALLREDUCE:
            raise PstrainError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "training.mode allreduce: pstrain's ring all-reduce has no "
                "Python worker; use mode sync or async (or the ddp mode of "
                "psctl compare)")
        t = job.config.training
        if (t.mode == pb.MODE_ASYNC and
                t.clock == pb.TrainingConfig.CLOCK_MODEL):
            raise PstrainError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "training.clock model: the Python worker trains on its own "
                "clock; use training.clock worker (or the C++ worker)")
        try:
            reg = _retry_until(
                deadline, f"coordinator and servers at {s.coordinator}",
                lambda: self.coord.RegisterWorker(
                    pb.RegisterWorkerRequest(requested_rank=s.rank),
                    timeout=s.rpc_timeout_s, metadata=self._md))
        except PstrainError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:
                st = self.coord.JobStatus(pb.JobStatusRequest(),
                                          timeout=s.rpc_timeout_s,
                                          metadata=self._md)
                if st.finished:
                    raise PstrainError(e.code, f"the job is already over: "
                                       f"registration refused: {e}") from None
            raise
        self.rank = reg.rank
        self.session_id = reg.session_id
        self.job = reg.job
        self.start_step = reg.start_step
        lease = self.job.config.network.lease_s or 5.0
        self._liveness = Liveness(self, lease)
        if self.job.worker_recovery.rolls_back and self.job.generation > 0:
            # A replacement (training.on_failure: restart): it starts where
            # the rollback puts every worker.
            self.await_generation(self.job.generation)
            self.start_step = self.job.start_step
        return reg

    def adopt(self, rank, held):
        """training.on_failure: elastic, mode sync: registers this process
        as the stand-in of the dead `rank` the coordinator named in a
        heartbeat (RegisterWorkerRequest.adopt), holding the weights of
        step `held`. Returns the rank's AdoptedSession (its own session id,
        reports and heartbeat), or None when the rank went elsewhere
        meanwhile (ALREADY_EXISTS, FAILED_PRECONDITION: printed)."""
        cfg = self.job.config
        req = pb.RegisterWorkerRequest(requested_rank=rank, adopt=True,
                                       adopt_from_step=held, adopter=self.rank)
        try:
            reg = self.coord.RegisterWorker(
                req, timeout=cfg.network.rpc_timeout_s, metadata=self._md)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.ALREADY_EXISTS,
                            grpc.StatusCode.FAILED_PRECONDITION):
                print(f"pstrain: worker {self.rank}: not standing in for "
                      f"rank {rank}: {e.details()}", flush=True)
                return None
            raise from_rpc(e, f"standing in for rank {rank}") from None
        return AdoptedSession(self, reg)

    def release(self, adopted, next_step):
        """Handover (coordinator/elastic.h): reports the rank's records,
        stops its heartbeat and tells the coordinator (ReleaseRank) that
        every step of the rank before `next_step` was pushed. True when the
        coordinator took the rank back; False (printed) when it refused:
        the rank's heartbeat starts again and the stand-in goes on."""
        cfg = self.job.config
        adopted.flush(None)
        adopted.stop_heartbeat()
        try:
            self.coord.ReleaseRank(
                pb.ReleaseRankRequest(rank=adopted.rank,
                                      session_id=adopted.session_id,
                                      next_step=next_step),
                timeout=cfg.network.rpc_timeout_s, metadata=self._md)
        except grpc.RpcError as e:
            print(f"pstrain: worker {self.rank}: still standing in for rank "
                  f"{adopted.rank}: release refused: {e.code().name}: "
                  f"{e.details()}", flush=True)
            adopted.start_heartbeat(next_step)
            return False
        print(f"pstrain: worker {self.rank}: released worker rank "
              f"{adopted.rank} to a new worker from step {next_step} "
              "(handover; training.on_failure: elastic)", flush=True)
        return True

    def await_generation(self, generation):
        """training.on_failure: restart: the JobSpec of `generation` (or
        newer) once its rollback is done (GetJob waits for it)."""
        cfg = self.job.config
        deadline = (time.monotonic() + cfg.training.restart_timeout_s +
                    cfg.network.rpc_timeout_s)
        job = _retry_until(
            deadline, f"the rollback of generation {generation}",
            lambda: self.coord.GetJob(
                pb.GetJobRequest(wait_for_generation=generation),
                timeout=cfg.network.rpc_timeout_s, metadata=self._md))
        self.job = job
        return job

    @property
    def liveness(self):
        return self._liveness

    # -- reports -----------------------------------------------------------

    def add(self, metrics, client, interval_s=0.5):
        """Queues a StepMetrics; sends the queue every `interval_s`."""
        self._pending.append(metrics)
        if time.monotonic() - self._last_flush >= interval_s:
            self.flush(client)

    def flush(self, client, done=False, error="", timeout_s=None):
        cfg = self.job.config
        req = pb.ReportRequest(
            steps=self._pending, done=done, error=error, worker=self.rank,
            session_id=self.session_id,
            generation=self.generation,
            bytes_pushed=client.bytes_pushed if client else 0,
            bytes_pulled=client.bytes_pulled if client else 0)
        if self._resumed_at is not None:
            req.resumed_at_step = self._resumed_at
        try:
            resp = self.coord.Report(
                req, timeout=timeout_s or cfg.network.rpc_timeout_s,
                metadata=self._md)
        except grpc.RpcError as e:
            raise from_rpc(e, "report to the coordinator") from None
        self._pending = []
        self._resumed_at = None
        self._last_flush = time.monotonic()
        if resp.stop and self._liveness:
            self._liveness.end("the coordinator ended the job", lost=False)
        return resp

    def drop_pending(self):
        self._pending = []

    def resumed_at(self, step):
        """After an in-process rollback: the next report says this worker
        resumed at `step` (ReportRequest.resumed_at_step; the coordinator
        notes "resumed worker R in generation G at step S")."""
        self._resumed_at = step

    @property
    def generation(self):
        return self.job.generation if self.job is not None else 0

    def close(self):
        if self._liveness:
            self._liveness.stop()
        if self._owns_channel:
            self._channel.close()


class AdoptedSession(Session):
    """A dead rank this process stands in for (training.on_failure:
    elastic, mode sync): the rank's session id, reports and heartbeat, on
    the host Session's channel (which must outlive it)."""

    def __init__(self, host, reg):
        self.settings = host.settings
        self._md = host._md
        self._channel = host._channel
        self._owns_channel = False
        self.coord = host.coord
        self.rank = reg.rank
        self.session_id = reg.session_id
        self.job = host.job
        self.start_step = reg.start_step
        self._pending = []
        self._resumed_at = None
        self._last_flush = time.monotonic()
        self._liveness = None
        self.client = None  # the rank's ShardClient, cancelled if it ends
        self.start_heartbeat(reg.start_step)

    def start_heartbeat(self, step):
        self._liveness = Liveness(self, self.job.config.network.lease_s or 5.0)
        self._liveness.step = step
        self._liveness.set_client(self.client)

    def stop_heartbeat(self):
        if self._liveness:
            self._liveness.stop()
            self._liveness = None


class Liveness:
    """The heartbeat: JobStatus naming the rank, its step and session about
    every min(1 s, lease / 4), on a thread. Ends (ended, reason) when the
    job failed, the coordinator refuses the session or stays silent for the
    lease; sees new generations (training.on_failure: restart). On either,
    cancels the shard client's calls (`client`)."""

    def __init__(self, session, lease_s):
        self._session = session
        self._lease = lease_s
        self._beat = min(1.0, lease_s / 4)
        self._lock = threading.Lock()
        self.step = session.start_step
        self.client = None
        self.ended = False
        self.lost = False
        self.reason = ""
        self.seen_generation = session.generation
        # Elastic sync: dead ranks the coordinator asks this worker to
        # stand in for (JobStatusResponse.adopt_ranks), not taken yet; and,
        # for a stand-in's heartbeat, whether the rank is wanted back.
        self._adopt = []
        self._adopt_seen = set()
        self.release_requested = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="pstrain-heartbeat")
        self._thread.start()

    def set_client(self, client):
        with self._lock:
            self.client = client
            cancel = self.ended or self.seen_generation > self._session.generation
        if cancel and client is not None:
            client.cancel()

    def take_adoptions(self):
        """The ranks named since the last call (each once until forget)."""
        with self._lock:
            out, self._adopt = self._adopt, []
        return out

    def forget(self, rank):
        """`rank` may be named again (it was handed back)."""
        with self._lock:
            self._adopt_seen.discard(rank)

    def rollback_pending(self):
        with self._lock:
            return self.seen_generation > self._session.generation

    def end(self, reason, lost):
        with self._lock:
            if self.ended:
                return
            self.ended, self.lost, self.reason = True, lost, reason
            client = self.client
        if client is not None:
            client.cancel()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self):
        s = self._session
        last_contact = time.monotonic()
        while not self._stop.wait(self._beat):
            req = pb.JobStatusRequest(process="worker", id=s.rank,
                                      step=self.step, session_id=s.session_id)
            try:
                st = s.coord.JobStatus(
                    req, timeout=min(self._beat, s.settings.rpc_timeout_s),
                    metadata=s._md)
            except grpc.RpcError as e:
                code = e.code()
                if code == grpc.StatusCode.PERMISSION_DENIED:
                    self.end("the coordinator ended this worker's session "
                             f"(its rank was given to another process): "
                             f"{e.details()}", lost=True)
                    return
                if code == grpc.StatusCode.NOT_FOUND:
                    self.end(f"the coordinator does not know this worker: "
                             f"{e.details()}", lost=True)
                    return
                if time.monotonic() - last_contact > self._lease:
                    self.end(f"the coordinator has been silent for more than "
                             f"network.lease_s = {self._lease:g} s: it is "
                             f"gone ({e.details()})", lost=True)
                    return
                continue
            last_contact = time.monotonic()
            if st.failed:
                self.end(f"the job failed: {st.message}", lost=False)
                return
            self.release_requested = st.release_rank
            with self._lock:
                for d in st.adopt_ranks:
                    if d not in self._adopt_seen:
                        self._adopt_seen.add(d)
                        self._adopt.append(d)
                newer = st.generation > self.seen_generation
                if newer:
                    self.seen_generation = st.generation
                client = self.client
            if newer and st.generation > s.generation and client is not None:
                client.cancel()
