"""The worker's client of the job's parameter-server shards: pull and push
of all shards in parallel, one thread per shard, as worker/ps/ps_client.cc.

Tensors are flat fp32 numpy arrays (one per TensorSpec of the shard map,
in its order); chunk payloads go straight between those arrays and the
protobuf bytes (one copy each way, no per-element Python). Every call
carries the job token (x-pstrain-token, role member); every push stream its
session (x-pstrain-push-session) and a header with the rank's session id
and generation. A push that fails UNAVAILABLE, DEADLINE_EXCEEDED or
CANCELLED is retried with the same header (the shard answers a retry of an
applied push with its first answer: exactly-once); a pull only on
UNAVAILABLE. Thread-safe for one pull or push at a time; cancel() may be
called from any thread.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from pstrain import wire
from pstrain._proto import pb, pb_grpc
from pstrain.errors import PstrainError

MAX_MESSAGE_PAYLOAD = 4 << 20  # common/sharding.h kMaxMessagePayloadBytes
MAX_ATTEMPTS = 5  # backoff 50, 100, 200, 400 ms between them


class ShardRead:
    """What a pull of one shard read: its version and slowest clock."""

    __slots__ = ("version", "min_clock")

    def __init__(self, version=0, min_clock=0):
        self.version = version
        self.min_clock = min_clock


class ShardClient:
    def __init__(self, shard_map, channel_factory, metadata, session_id,
                 generation, wire_dtype, rpc_timeout_s, barrier_timeout_s,
                 startup_timeout_s=0):
        self.map = shard_map
        self._metadata = list(metadata)
        self.session_id = session_id
        self.generation = generation
        self.wire_dtype = wire_dtype or pb.DTYPE_F32
        self._rpc_timeout = rpc_timeout_s
        self._barrier_timeout = barrier_timeout_s
        # Until a pull shows every worker past the min_clock of the first
        # one, a barrier also waits for the others' start-up (as in C++).
        self._startup_timeout = startup_timeout_s
        self._start_min_clock = None
        self._started = False
        self.tensor_index = {t.name: i for i, t in enumerate(shard_map.tensors)}
        n = len(shard_map.server_addresses)
        self._shard_chunks = [[] for _ in range(n)]
        self._chunk_info = {}
        for c in shard_map.chunks:
            self._shard_chunks[c.shard].append(c)
            self._chunk_info[(c.tensor, c.index)] = c
        self._channels = [channel_factory(a) for a in shard_map.server_addresses]
        self._stubs = [pb_grpc.ParameterServerStub(ch) for ch in self._channels]
        self._pool = ThreadPoolExecutor(max_workers=max(n, 1))
        self._lock = threading.Lock()
        self._active = set()
        self._cancelled = False
        self.bytes_pushed = 0
        self.bytes_pulled = 0

    @property
    def num_shards(self):
        return len(self._stubs)

    def close(self):
        self.cancel()
        self._pool.shutdown(wait=True)
        for ch in self._channels:
            ch.close()

    def cancel(self):
        """Cancels every call in flight and every later one."""
        with self._lock:
            self._cancelled = True
            calls = list(self._active)
        for c in calls:
            c.cancel()

    # -- calls ------------------------------------------------------------

    def _track(self, call):
        with self._lock:
            if self._cancelled:
                call.cancel()
            self._active.add(call)

    def _untrack(self, call):
        with self._lock:
            self._active.discard(call)

    def _with_retries(self, shard, push, attempt):
        backoff = 0.05
        err = None
        for i in range(MAX_ATTEMPTS):
            if i > 0:
                time.sleep(backoff)
                backoff *= 2
            with self._lock:
                if self._cancelled:
                    raise PstrainError(grpc.StatusCode.CANCELLED,
                                       "the worker is stopping")
            try:
                return attempt()
            except grpc.RpcError as e:
                err = e
                code = e.code()
                with self._lock:
                    if self._cancelled:
                        raise PstrainError(grpc.StatusCode.CANCELLED,
                                           "the worker is stopping")
                retryable = code == grpc.StatusCode.UNAVAILABLE or (
                    push and code in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                      grpc.StatusCode.CANCELLED))
                if not retryable:
                    break
        raise PstrainError(err.code(), f"shard {shard}: {err.code().name}: "
                           f"{err.details()}")

    def _run_all(self, fn):
        futures = [self._pool.submit(fn, s) for s in range(self.num_shards)]
        errors = []
        results = []
        for f in futures:
            try:
                results.append(f.result())
            except PstrainError as e:
                errors.append(e)
        if errors:
            # The first non-cancelled error says most.
            errors.sort(key=lambda e: e.code == grpc.StatusCode.CANCELLED)
            raise errors[0]
        return results

    def pull(self, worker, clock, params):
        """Pulls the weights of step `clock` into `params` (flat fp32 arrays
        by tensor). Returns the ShardReads, by shard."""
        return self._run_all(lambda s: self._with_retries(
            s, False, lambda: self._pull_once(s, worker, clock, params)))

    def push(self, worker, clock, num_samples, grads, reads):
        """Pushes gradient `grads` (flat fp32 arrays by tensor) of step
        `clock` over `num_samples` examples, computed from `reads`. Returns
        the PushResponses, by shard."""
        return self._run_all(lambda s: self._with_retries(
            s, True, lambda: self._push_once(s, worker, clock, num_samples,
                                             grads, reads[s])))

    def _note_min_clock(self, min_clock):
        with self._lock:
            if self._start_min_clock is None:
                self._start_min_clock = min_clock
            elif min_clock > self._start_min_clock:
                self._started = True

    def _pull_once(self, shard, worker, clock, params):
        req = pb.PullRequest(worker=worker, clock=clock,
                             session_id=self.session_id,
                             generation=self.generation)
        timeout = self._barrier_timeout
        if not self._started:
            timeout += self._startup_timeout
        call = self._stubs[shard].Pull(req, timeout=timeout,
                                       metadata=self._metadata)
        self._track(call)
        read = ShardRead()
        received = 0
        head = True
        nbytes = 0
        dtype = self.wire_dtype
        try:
            for msg in call:
                nbytes += msg.ByteSize()
                if head:
                    read.version, read.min_clock = msg.version, msg.min_clock
                    self._note_min_clock(msg.min_clock)
                    head = False
                for c in msg.chunks:
                    self._decode_chunk(shard, c, params, dtype)
                    received += 1
        finally:
            self._untrack(call)
            self.bytes_pulled += nbytes
        if received != len(self._shard_chunks[shard]):
            raise PstrainError(
                grpc.StatusCode.INTERNAL,
                f"shard {shard}: pull returned {received} of "
                f"{len(self._shard_chunks[shard])} chunks")
        return read

    def _decode_chunk(self, shard, c, params, dtype):
        idx = self.tensor_index.get(c.tensor)
        info = self._chunk_info.get((c.tensor, c.index))
        where = f"chunk {c.index} of '{c.tensor}'"
        if idx is None or info is None or info.shard != shard:
            raise PstrainError(grpc.StatusCode.INTERNAL, f"unexpected {where}")
        if c.dtype != dtype:
            raise PstrainError(grpc.StatusCode.INTERNAL,
                               f"{where}: dtype {c.dtype} is not the job's "
                               f"wire dtype {dtype}")
        if len(c.data) != info.length * wire.ELEMENT_BYTES[dtype]:
            raise PstrainError(grpc.StatusCode.INTERNAL,
                               f"{where}: {len(c.data)} bytes for "
                               f"{info.length} elements")
        wire.decode_into(c.data, dtype,
                         params[idx][info.offset:info.offset + info.length])

    def _push_once(self, shard, worker, clock, num_samples, grads, read):
        header = pb.PushHeader(
            worker=worker, clock=clock, read_version=read.version,
            read_min_clock=read.min_clock, num_samples=num_samples,
            session_id=self.session_id, generation=self.generation)
        dtype = self.wire_dtype
        esize = wire.ELEMENT_BYTES[dtype]
        messages = []
        msg = pb.PushRequest(header=header)
        payload = 0
        for c in self._shard_chunks[shard]:
            if payload > 0 and payload + c.length * esize > MAX_MESSAGE_PAYLOAD:
                messages.append(msg)
                msg = pb.PushRequest()
                payload = 0
            g = grads[self.tensor_index[c.tensor]]
            msg.chunks.append(pb.ChunkData(
                tensor=c.tensor, index=c.index, dtype=dtype,
                shape=[c.length],
                data=wire.encode(g[c.offset:c.offset + c.length], dtype)))
            payload += c.length * esize
        messages.append(msg)
        self.bytes_pushed += sum(m.ByteSize() for m in messages)
        md = self._metadata + [
            ("x-pstrain-push-session",
             f"{worker}.{self.session_id}.{self.generation}")]
        call = self._stubs[shard].Push.future(
            iter(messages), timeout=self._rpc_timeout, metadata=md)
        self._track(call)
        try:
            return call.result()
        finally:
            self._untrack(call)
