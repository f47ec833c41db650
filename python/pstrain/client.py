"""The worker's client of the job's parameter-server shards: pull and push
of all shards in parallel, shard 0 on the calling thread and one thread per
other shard, as worker/ps/ps_client.cc.

Tensors are flat fp32 numpy arrays (one per TensorSpec of the shard map,
in its order); chunk payloads go straight between those arrays and gRPC's
message bytes, read and built by pstrain.wire (one copy each way, no
protobuf copies, no per-element Python). Every call
carries the job token (x-pstrain-token, role member); every push stream its
session (x-pstrain-push-session) and a header with the rank's session id
and generation. A push that fails UNAVAILABLE, DEADLINE_EXCEEDED or
CANCELLED is retried with the same header (the shard answers a retry of an
applied push with its first answer: exactly-once); a pull only on
UNAVAILABLE. Thread-safe for one pull or push at a time; cancel() may be
called from any thread.
"""

import ctypes
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from pstrain import wire
from pstrain._proto import pb
from pstrain.errors import PstrainError

MAX_MESSAGE_PAYLOAD = 4 << 20  # common/sharding.h kMaxMessagePayloadBytes
PULL_METHOD = "/pstrain.v1.ParameterServer/Pull"
PUSH_METHOD = "/pstrain.v1.ParameterServer/Push"
MAX_ATTEMPTS = 5  # backoff 50, 100, 200, 400 ms between them


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's maximum on 64-bit
_malloc_tuned = False


def keep_freed_memory():
    """Makes glibc's malloc keep freed memory for reuse: blocks up to
    32 MiB from the heap instead of fresh mmaps, and no trimming of the
    heap. Each step allocates and frees buffers of megabytes (gRPC's
    message bytes, torch's gradients); by default glibc returns them to the
    kernel, and every fresh page is a fault, which on the shared machine
    cost up to ~70 ms per 4 MiB (docs/python.md, "Speed"). The process then
    holds its peak heap. Once per process; off with PSTRAIN_MALLOC_TUNE=0;
    a no-op off glibc. Returns whether both settings took."""
    global _malloc_tuned
    if _malloc_tuned or os.environ.get("PSTRAIN_MALLOC_TUNE", "1") == "0":
        return _malloc_tuned
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    ok = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1 and ok
    _malloc_tuned = ok
    return ok


def _one_thread_stream_unary(channel, method, messages, timeout, metadata,
                             response_deserializer):
    """The response of the client-streaming call `method` sending
    `messages` (bytes), everything on the calling thread: each message's
    send, the half-close and the answer, through gRPC Python's own
    blocking-call machinery (a segregated call: its completion queue is
    polled here). gRPC's public blocking call (`with_call`) starts a thread
    to send the messages, and every send is a hand-over between it and the
    polling thread; on a loaded 2-core machine each is a wake-up
    (docs/python.md, "Speed"). Raises grpc.RpcError as `with_call` does.
    Only where _grpc_internals() is not None and `channel` is gRPC's own
    channel (else the caller uses `with_call`). Like `with_call`, it has no
    call object: closing the channel cancels it."""
    gc, cygrpc = _grpc_internals()
    cyg = channel._channel
    state = gc._RPCState(gc._STREAM_UNARY_INITIAL_DUE, None, None, None, None)
    deadline = None if timeout is None else time.time() + timeout
    metadata = tuple(metadata) if metadata else None
    call = cyg.segregated_call(
        cygrpc.PropagationConstants.GRPC_PROPAGATE_DEFAULTS, method.encode(),
        None, deadline, metadata, None,
        gc._stream_unary_invocation_operationses_and_tags(
            metadata, gc._InitialMetadataFlags()),
        cygrpc.build_census_context())

    def until_done(op):  # runs the call's events until `op` completes
        while op in state.due and state.code is None:
            gc._handle_event(call.next_event(), state, response_deserializer)

    ops = [(cygrpc.OperationType.send_message,
            (cygrpc.SendMessageOperation(m, 0),)) for m in messages]
    ops.append((cygrpc.OperationType.send_close_from_client,
                (cygrpc.SendCloseFromClientOperation(0),)))
    for kind, operations in ops:
        if state.code is not None:  # answered or failed early
            break
        state.due.add(kind)
        if not call.operate(operations, None):
            state.due.discard(kind)
            break
        until_done(kind)
    while state.due:
        gc._handle_event(call.next_event(), state, response_deserializer)
    if state.code is grpc.StatusCode.OK:
        return state.response
    raise gc._InactiveRpcError(state)


_internals = []


def _grpc_internals():
    """(grpc._channel, cygrpc) when they have what
    _one_thread_stream_unary uses (gRPC Python 1.51, Debian 12), else
    None."""
    if not _internals:
        try:
            from grpc import _channel as gc
            from grpc._cython import cygrpc
            needed = (gc._RPCState, gc._STREAM_UNARY_INITIAL_DUE,
                      gc._stream_unary_invocation_operationses_and_tags,
                      gc._InitialMetadataFlags, gc._handle_event,
                      gc._InactiveRpcError, cygrpc.SendMessageOperation,
                      cygrpc.SendCloseFromClientOperation,
                      cygrpc.build_census_context)
            _internals.append((gc, cygrpc) if all(needed) else None)
        except (ImportError, AttributeError):
            _internals.append(None)
    return _internals[0]


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
        keep_freed_memory()
        self._channels = [channel_factory(a) for a in shard_map.server_addresses]
        # Pull answers and push requests as bytes, read and built by
        # pstrain.wire (one copy of each payload, no protobuf copies).
        self._pulls = [ch.unary_stream(
            PULL_METHOD, request_serializer=pb.PullRequest.SerializeToString,
            response_deserializer=None) for ch in self._channels]
        self._pushes = [ch.stream_unary(
            PUSH_METHOD, request_serializer=None,
            response_deserializer=pb.PushResponse.FromString)
            for ch in self._channels]
        dtype = self.wire_dtype
        self._frames = [[wire.chunk_frame(c.tensor, c.index, dtype, c.length)
                         for c in chunks] for chunks in self._shard_chunks]
        self._pool = ThreadPoolExecutor(max_workers=max(n - 1, 1))
        self._lock = threading.Lock()
        self._active = set()
        self._cancelled = False
        self.bytes_pushed = 0
        self.bytes_pulled = 0

    @property
    def num_shards(self):
        return len(self._channels)

    def close(self):
        self.cancel()  # closes the channels
        self._pool.shutdown(wait=True)

    def cancel(self):
        """Cancels every call in flight and every later one."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            calls = list(self._active)
        for c in calls:
            c.cancel()
        # A push is a blocking call without a call object to cancel:
        # closing the channel cancels it (and every call after).
        for ch in self._channels:
            ch.close()

    # -- calls ------------------------------------------------------------

    def _track(self, call):
        with self._lock:
            if self._cancelled:
                call.cancel()
            self._active.add(call)

    def _untrack(self, call):
        with self._lock:
            self._active.discard(call)

    def _raise_if_cancelled(self):
        with self._lock:
            if self._cancelled:
                raise PstrainError(grpc.StatusCode.CANCELLED,
                                   "the worker is stopping")

    def _with_retries(self, shard, push, attempt):
        backoff = 0.05
        err = None
        for i in range(MAX_ATTEMPTS):
            if i > 0:
                time.sleep(backoff)
                backoff *= 2
            self._raise_if_cancelled()
            try:
                return attempt()
            except ValueError:  # a call on a channel cancel() closed
                self._raise_if_cancelled()
                raise
            except grpc.RpcError as e:
                err = e
                code = e.code()
                self._raise_if_cancelled()
                retryable = code == grpc.StatusCode.UNAVAILABLE or (
                    push and code in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                      grpc.StatusCode.CANCELLED))
                if not retryable:
                    break
        raise PstrainError(err.code(), f"shard {shard}: {err.code().name}: "
                           f"{err.details()}")

    def _run_all(self, fn):
        # Shard 0 on the calling thread, as the C++ client: a job of one
        # shard hands nothing over between threads.
        futures = [self._pool.submit(fn, s) for s in range(1, self.num_shards)]
        errors = []
        results = []
        try:
            results.append(fn(0))
        except PstrainError as e:
            errors.append(e)
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

    def announce_session(self, worker):
        """Makes this client's session of `worker` known to every shard
        without reading weights or waiting for a step (PullRequest
        session_only): a stand-in's first contact (elastic sync)."""
        def once(s):
            req = pb.PullRequest(worker=worker, session_id=self.session_id,
                                 generation=self.generation,
                                 session_only=True)
            call = self._pulls[s](req, timeout=self._rpc_timeout,
                                  metadata=self._metadata)
            self._track(call)
            try:
                messages = sum(1 for _ in call)
            finally:
                self._untrack(call)
            if messages:
                raise PstrainError(grpc.StatusCode.INTERNAL,
                                   f"shard {s}: a session-only pull was "
                                   f"answered with {messages} messages")
        self._run_all(lambda s: self._with_retries(s, False, lambda: once(s)))

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
        call = self._pulls[shard](req, timeout=timeout,
                                  metadata=self._metadata)
        self._track(call)
        read = ShardRead()
        received = 0
        head = True
        nbytes = 0
        dtype = self.wire_dtype
        try:
            for raw in call:  # the serialized PullResponse (bytes)
                nbytes += len(raw)
                try:
                    version, min_clock, chunks = wire.parse_pull_response(raw)
                except wire.MalformedMessage as e:
                    raise PstrainError(grpc.StatusCode.INTERNAL,
                                       f"shard {shard}: malformed pull "
                                       f"message: {e}") from None
                if head:
                    read.version, read.min_clock = version, min_clock
                    self._note_min_clock(min_clock)
                    head = False
                for c in chunks:
                    self._decode_chunk(shard, c, params, dtype)
                    received += 1
                # Free this message before the next one arrives: two live
                # at once would need fresh memory every pull (and each
                # fresh page is a fault, costly here).
                raw = chunks = c = None
        except PstrainError:
            call.cancel()
            raise
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

    def _push_messages(self, shard, header, grads):
        """The shard's PushRequests, serialized: the header in the first,
        chunks in shard-map order, at most MAX_MESSAGE_PAYLOAD bytes of
        payload a message (as the C++ client), each one bytes.join of the
        precomputed chunk framing and the gradients' payloads."""
        dtype = self.wire_dtype
        esize = wire.ELEMENT_BYTES[dtype]
        frames = self._frames[shard]
        messages = []
        parts = [wire.push_header_frame(header)]
        payload = 0
        for c, frame in zip(self._shard_chunks[shard], frames):
            if payload > 0 and payload + c.length * esize > MAX_MESSAGE_PAYLOAD:
                messages.append(b"".join(parts))
                parts = []
                payload = 0
            g = grads[self.tensor_index[c.tensor]]
            parts.append(frame)
            parts.append(wire.payload(g[c.offset:c.offset + c.length], dtype))
            payload += c.length * esize
        messages.append(b"".join(parts))
        return messages

    def _push_once(self, shard, worker, clock, num_samples, grads, read):
        header = pb.PushHeader(
            worker=worker, clock=clock, read_version=read.version,
            read_min_clock=read.min_clock, num_samples=num_samples,
            session_id=self.session_id, generation=self.generation)
        messages = self._push_messages(shard, header, grads)
        self.bytes_pushed += sum(len(m) for m in messages)
        md = self._metadata + [
            ("x-pstrain-push-session",
             f"{worker}.{self.session_id}.{self.generation}")]
        # A blocking call, its answer read on this thread (not gRPC's
        # channel thread, as a future's is): one thread hand-over fewer per
        # message on a loaded machine (docs/python.md, "Speed"). It has no
        # call object: cancel() closes the channels to stop it.
        channel = self._channels[shard]
        if (os.environ.get("PSTRAIN_PUSH_CALL", "one_thread") == "one_thread"
                and _grpc_internals() is not None
                and hasattr(getattr(channel, "_channel", None),
                            "segregated_call")):
            return _one_thread_stream_unary(
                channel, PUSH_METHOD, messages, self._rpc_timeout, md,
                pb.PushResponse.FromString)
        response, _ = self._pushes[shard].with_call(
            iter(messages), timeout=self._rpc_timeout, metadata=md)
        return response
