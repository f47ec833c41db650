#!/usr/bin/python3
"""Unit tests of the Python worker's pieces that need no cluster
(docs/python.md): the wire codecs, the example sampler, the settings from
the environment, the job token file, and pstrain.torch's ServerOptimizer
and shard() against a fake shard client (what is pushed, where pulls land,
the tensor check, the loop's order); the shard client's pushes over a
loopback channel to a stand-in shard."""
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


class MessageCodecTest(unittest.TestCase):
    """pstrain.wire's hand-built PushRequests and hand-read PullResponses
    against protobuf's own serializer and parser."""

    CHUNKS = [("fc.weight", 0, 0, 6), ("fc.weight", 1, 6, 5),
              ("b" * 200, 300, 0, 1), ("emb", 70000, 3, 0)]

    def reference(self, g, dtype):
        chunks = []
        for name, index, offset, length in self.CHUNKS:
            chunks.append(pb.ChunkData(
                tensor=name, index=index, dtype=dtype, shape=[length],
                data=wire.encode(g[offset:offset + length], dtype)))
        return chunks

    def test_push_message_is_protobufs_serialization(self):
        g = np.random.default_rng(3).normal(size=11).astype(np.float32)
        header = pb.PushHeader(worker=3, clock=2**40 + 5, read_version=9,
                               read_min_clock=2**63, num_samples=128,
                               session_id=2**64 - 1, generation=7)
        for dtype in (pb.DTYPE_F32, pb.DTYPE_BF16, pb.DTYPE_F16):
            parts = [wire.push_header_frame(header)]
            for name, index, offset, length in self.CHUNKS:
                parts.append(wire.chunk_frame(name, index, dtype, length))
                parts.append(wire.payload(g[offset:offset + length], dtype))
            got = b"".join(parts)
            want = pb.PushRequest(header=header,
                                  chunks=self.reference(g, dtype))
            self.assertEqual(got, want.SerializeToString(), dtype)
            self.assertEqual(pb.PushRequest.FromString(got), want)

    def test_fp32_payload_is_a_view_of_the_gradient(self):
        g = np.arange(4, dtype=np.float32)
        view = wire.payload(g[1:3], pb.DTYPE_F32)
        g[1] = 42.0
        self.assertEqual(np.frombuffer(view, "<f4")[0], 42.0)
        self.assertEqual(view.nbytes, 8)

    def test_pull_response_read_as_protobuf_parses_it(self):
        g = np.random.default_rng(4).normal(size=11).astype(np.float32)
        for dtype in (pb.DTYPE_F32, pb.DTYPE_BF16):
            msg = pb.PullResponse(version=2**50 + 1, min_clock=17,
                                  chunks=self.reference(g, dtype))
            data = msg.SerializeToString()
            # Unknown fields of every wire type, before and after, and an
            # unpacked shape: skipped or read as protobuf does.
            unknown = bytes([11 << 3 | 0, 0x96, 0x01, 12 << 3 | 1]) + \
                bytes(8) + bytes([13 << 3 | 2, 2, 0xAA, 0xBB, 14 << 3 | 5]) + \
                bytes(4) + bytes([1 << 3 | 2, 1, 7])  # known, wrong type
            extra = pb.ChunkData(tensor="late", index=1, dtype=dtype,
                                 data=wire.encode(g[:2], dtype))
            extra_bytes = (extra.SerializeToString() + bytes([4 << 3, 2]) +
                           unknown)
            data = (unknown + data + bytes([3 << 3 | 2, len(extra_bytes)]) +
                    extra_bytes)
            want = pb.PullResponse.FromString(data)
            self.assertEqual(len(want.chunks), len(self.CHUNKS) + 1)
            version, min_clock, chunks = wire.parse_pull_response(data)
            self.assertEqual((version, min_clock),
                             (want.version, want.min_clock))
            self.assertEqual(len(chunks), len(want.chunks))
            for got, ref in zip(chunks, want.chunks):
                self.assertEqual((got.tensor, got.index, got.dtype,
                                  got.shape, bytes(got.data)),
                                 (ref.tensor, ref.index, ref.dtype,
                                  list(ref.shape), ref.data))

    def test_malformed_pull_responses_are_errors(self):
        good = pb.PullResponse(version=1, chunks=[pb.ChunkData(
            tensor="w", index=1, dtype=pb.DTYPE_F32, shape=[2],
            data=bytes(8))]).SerializeToString()
        # (message, error, whether protobuf's parser fails too: field
        # number 0 ends its parse early, with a warning only.)
        for bad, why, protobuf_fails in [
                (good[:-1], "bytes, .* left", True),
                (bytes([1 << 3, 0x80]), "truncated varint", True),
                (bytes([1 << 3]) + bytes([0xFF] * 10) + b"\x01",
                 "longer than 10", True),
                (bytes([3 << 3 | 3]), "wire type 3", True),
                (bytes([3 << 3 | 2, 3, 1 << 3 | 2, 1, 0xFF]), "not UTF-8",
                 True),
                (bytes([0]), "field number 0", False)]:
            with self.assertRaisesRegex(wire.MalformedMessage, why):
                wire.parse_pull_response(bad)
            if protobuf_fails:
                with self.assertRaises(Exception, msg=why):
                    pb.PullResponse.FromString(bad)


class FakeChannel:
    """Pull and Push of one shard as ShardClient calls them: answers
    pulls with protobuf-serialized PullResponses of `weights`, parses
    every push message with protobuf."""

    class Call:
        def __init__(self, items=(), result=None):
            self.items, self._result, self.cancelled = items, result, False

        def __iter__(self):
            return iter(self.items)

        def result(self):
            return self._result

        def cancel(self):
            self.cancelled = True

    def __init__(self, answers):
        self.answers = answers  # PullResponses
        self.pushed = []  # [[PushRequest]] by call
        self.pull_requests = []

    def unary_stream(self, method, request_serializer, response_deserializer):
        assert method == "/pstrain.v1.ParameterServer/Pull"
        assert response_deserializer is None

        def call(request, timeout, metadata):
            self.pull_requests.append(request_serializer(request))
            return self.Call([m.SerializeToString() for m in self.answers])
        return call

    def stream_unary(self, method, request_serializer, response_deserializer):
        assert method == "/pstrain.v1.ParameterServer/Push"
        assert request_serializer is None
        channel = self

        class Push:
            @staticmethod
            def with_call(messages, timeout, metadata):
                msgs = list(messages)
                for m in msgs:
                    assert isinstance(m, bytes)
                channel.pushed.append(
                    [pb.PushRequest.FromString(m) for m in msgs])
                return response_deserializer(
                    pb.PushResponse(version=5, applied=True)
                    .SerializeToString()), None
        return Push()

    def close(self):
        pass


class ShardClientTest(unittest.TestCase):
    """ShardClient's pulls and pushes through pstrain.wire, one shard of
    two tensors in chunks (the second 5 MiB: pushes split at 4 MiB)."""

    def setUp(self):
        from pstrain.client import ShardClient
        self.sizes = {"a": 10, "big": (5 << 20) // 4}
        smap = pb.ShardMap(server_addresses=["fake:1"])
        for name, n in self.sizes.items():
            smap.tensors.add(name=name, shape=[n])
        third = self.sizes["big"] // 3
        spans = [("a", 0, 0, 10), ("big", 0, 0, third),
                 ("big", 1, third, third),
                 ("big", 2, 2 * third, self.sizes["big"] - 2 * third)]
        for name, index, offset, length in spans:
            smap.chunks.add(tensor=name, index=index, offset=offset,
                            length=length, shard=0)
        rng = np.random.default_rng(5)
        self.weights = {n: rng.normal(size=k).astype(np.float32)
                        for n, k in self.sizes.items()}
        answers = [pb.PullResponse(version=4, min_clock=2)]
        for name, index, offset, length in spans:
            if len(answers[-1].chunks) == 2:
                answers.append(pb.PullResponse())
            answers[-1].chunks.add(
                tensor=name, index=index, dtype=pb.DTYPE_F32, shape=[length],
                data=self.weights[name][offset:offset + length].tobytes())
        self.channel = FakeChannel(answers)
        self.client = ShardClient(smap, lambda address: self.channel, [],
                                  session_id=11, generation=1, wire_dtype=0,
                                  rpc_timeout_s=5, barrier_timeout_s=5)
        self.spans = spans

    def tearDown(self):
        self.client.close()

    def test_pull_lands_every_chunk_in_place(self):
        params = [np.zeros(k, np.float32) for k in self.sizes.values()]
        reads = self.client.pull(worker=1, clock=3, params=params)
        self.assertEqual((reads[0].version, reads[0].min_clock), (4, 2))
        for p, name in zip(params, self.sizes):
            np.testing.assert_array_equal(p, self.weights[name])
        self.assertEqual(self.client.bytes_pulled, sum(
            m.ByteSize() for m in self.channel.answers))
        req = pb.PullRequest.FromString(self.channel.pull_requests[0])
        self.assertEqual((req.worker, req.clock, req.session_id), (1, 3, 11))

    def test_push_sends_every_chunk_at_most_4_mib_a_message(self):
        grads = [np.arange(k, dtype=np.float32) for k in self.sizes.values()]
        reads = self.client.pull(1, 3, [np.zeros(k, np.float32)
                                        for k in self.sizes.values()])
        answers = self.client.push(1, 3, 64, grads, reads)
        self.assertTrue(answers[0].applied)
        (messages,) = self.channel.pushed
        self.assertEqual(len(messages), 2)  # 4 MiB + the rest
        header = messages[0].header
        self.assertEqual((header.worker, header.clock, header.num_samples,
                          header.read_version, header.read_min_clock,
                          header.session_id, header.generation),
                         (1, 3, 64, 4, 2, 11, 1))
        self.assertFalse(messages[1].HasField("header"))
        chunks = [c for m in messages for c in m.chunks]
        for m in messages:
            self.assertLessEqual(sum(len(c.data) for c in m.chunks), 4 << 20)
        self.assertEqual(len(chunks), len(self.spans))
        by_name = dict(zip(self.sizes, grads))
        for c, (name, index, offset, length) in zip(chunks, self.spans):
            self.assertEqual((c.tensor, c.index, c.dtype, list(c.shape)),
                             (name, index, pb.DTYPE_F32, [length]))
            np.testing.assert_array_equal(
                np.frombuffer(c.data, "<f4"),
                by_name[name][offset:offset + length])
        self.assertEqual(self.client.bytes_pushed,
                         sum(m.ByteSize() for m in messages))

    def test_a_malformed_pull_is_an_internal_error_naming_the_shard(self):
        self.channel.answers = []
        bad = FakeChannel.Call([bytes([3 << 3 | 2, 9])])
        self.channel.unary_stream = None  # not called again
        self.client._pulls[0] = lambda request, timeout, metadata: bad
        with self.assertRaisesRegex(PstrainError,
                                    "shard 0: malformed pull message"):
            self.client.pull(1, 0, [np.zeros(k, np.float32)
                                    for k in self.sizes.values()])
        self.assertTrue(bad.cancelled)


class RealChannelTest(unittest.TestCase):
    """ShardClient's pushes over a real loopback channel to a stand-in
    shard (a gRPC Python server), through each push call ShardClient can
    make: gRPC's blocking call (`with_call`) and the one-thread call
    (client._one_thread_stream_unary, gRPC Python's internals). The
    answer, the messages as protobuf parses them, an error status, and
    cancel() of a push in flight (a blocking call has no call object:
    closing the channel stops it). The client's RPC timeout is 300 s, far
    beyond the test's own timeout: only a cancel can end a stuck push."""

    CALLS = ("one_thread", "with_call")

    def setUp(self):
        import threading
        from concurrent import futures
        from pstrain import client as client_mod
        self.client_mod = client_mod
        self.received = threading.Event()
        self.release = threading.Event()
        self.pushed = []  # [[PushRequest]] by call
        self.answer = "ok"  # or "fail" or "hold"

        def push(requests, context):
            self.pushed.append([pb.PushRequest.FromString(r)
                                for r in requests])
            if self.answer == "fail":
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stale")
            if self.answer == "hold":
                self.received.set()
                self.release.wait()
            return pb.PushResponse(version=7, applied=True)

        handler = grpc.method_handlers_generic_handler(
            "pstrain.v1.ParameterServer", {
                "Push": grpc.stream_unary_rpc_method_handler(
                    push, request_deserializer=None,
                    response_serializer=pb.PushResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        smap = pb.ShardMap(server_addresses=[f"127.0.0.1:{port}"])
        self.n = (5 << 20) // 4  # two messages: 4 MiB + the rest
        smap.tensors.add(name="w", shape=[self.n])
        half = self.n // 2
        smap.chunks.add(tensor="w", index=0, offset=0, length=half, shard=0)
        smap.chunks.add(tensor="w", index=1, offset=half,
                        length=self.n - half, shard=0)
        self.smap = smap
        self.clients = []
        self.old_env = os.environ.get("PSTRAIN_PUSH_CALL")

    def tearDown(self):
        self.release.set()
        for c in self.clients:
            c.close()
        self.server.stop(None)
        if self.old_env is None:
            os.environ.pop("PSTRAIN_PUSH_CALL", None)
        else:
            os.environ["PSTRAIN_PUSH_CALL"] = self.old_env

    def new_client(self, call):
        os.environ["PSTRAIN_PUSH_CALL"] = call
        c = self.client_mod.ShardClient(
            self.smap,
            lambda a: WorkerSettings(coordinator="").shard_channel(a),
            [], session_id=11, generation=1, wire_dtype=0,
            rpc_timeout_s=300, barrier_timeout_s=300)
        self.clients.append(c)
        return c

    def push(self, client):
        grads = [np.arange(self.n, dtype=np.float32)]
        return client.push(1, 3, 8, grads, [self.client_mod.ShardRead(2, 1)])

    def test_the_one_thread_call_is_there(self):
        # gRPC Python 1.51 (Debian 12) has the internals it uses.
        self.assertIsNotNone(self.client_mod._grpc_internals())

    def test_a_push_is_answered_and_parsed(self):
        for call in self.CALLS:
            with self.subTest(call=call):
                self.pushed.clear()
                (answer,) = self.push(self.new_client(call))
                self.assertEqual((answer.version, answer.applied), (7, True))
                (messages,) = self.pushed
                self.assertEqual(len(messages), 2)
                h = messages[0].header
                self.assertEqual((h.worker, h.clock, h.num_samples,
                                  h.read_version, h.session_id), (1, 3, 8, 2, 11))
                data = b"".join(c.data for m in messages for c in m.chunks)
                np.testing.assert_array_equal(
                    np.frombuffer(data, "<f4"),
                    np.arange(self.n, dtype=np.float32))

    def test_an_error_status_is_not_retried(self):
        self.answer = "fail"
        for call in self.CALLS:
            with self.subTest(call=call):
                self.pushed.clear()
                with self.assertRaisesRegex(PstrainError, "shard 0: "
                                            "FAILED_PRECONDITION: stale"):
                    self.push(self.new_client(call))
                self.assertEqual(len(self.pushed), 1)

    def test_cancel_stops_a_push_in_flight_and_every_later_call(self):
        import threading
        self.answer = "hold"
        for call in self.CALLS:
            with self.subTest(call=call):
                self.received.clear()
                client = self.new_client(call)
                outcome = []

                def run():
                    try:
                        self.push(client)
                        outcome.append("answered")
                    except PstrainError as e:
                        outcome.append(e.code)

                t = threading.Thread(target=run)
                t.start()
                self.received.wait()  # the push is in flight, unanswered
                client.cancel()
                t.join()
                self.assertEqual(outcome, [grpc.StatusCode.CANCELLED])
                with self.assertRaises(PstrainError) as later:
                    self.push(client)
                self.assertEqual(later.exception.code,
                                 grpc.StatusCode.CANCELLED)
                client.close()  # idempotent after cancel()


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

    def test_model_clock_job_is_refused_before_registering(self):
        # training.clock model (async) needs the C++ worker's loop: the
        # package refuses such a job after GetJob, before RegisterWorker.
        s = WorkerSettings.from_env({"PSTRAIN_COORDINATOR": "127.0.0.1:1",
                                     "PSTRAIN_INSECURE": "1"})
        sess = Session(s)
        job = pb.JobSpec()
        job.config.training.mode = pb.MODE_ASYNC
        job.config.training.clock = pb.TrainingConfig.CLOCK_MODEL
        calls = []

        class FakeCoordinator:
            def GetJob(self, request, timeout=None, metadata=None):
                calls.append("GetJob")
                return job

            def RegisterWorker(self, request, timeout=None, metadata=None):
                calls.append("RegisterWorker")
                raise AssertionError("registered a model-clock job")

        sess.coord = FakeCoordinator()
        with self.assertRaisesRegex(PstrainError, "training.clock model"):
            sess.register()
        self.assertEqual(calls, ["GetJob"])
        job.config.training.clock = pb.TrainingConfig.CLOCK_WORKER
        with self.assertRaises(AssertionError):  # gets as far as registering
            sess.register()
        self.assertEqual(calls, ["GetJob", "GetJob", "RegisterWorker"])

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
    ctx.stands_in, ctx._stand_ins, ctx._due = False, {}, []
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


    def test_a_stand_in_computes_the_dead_ranks_batches_from_the_same_weights(self):
        # Elastic sync: rank 1 is named in the heartbeat while rank 0 pulls
        # step 1 (holding step 0); from then on shard() yields rank 1's
        # batch after rank 0's of each step, with the weights of that step
        # (the pull lands in a scratch copy meanwhile), pushed through rank
        # 1's client; rank 1 is handed back before step 2.
        ctx = fake_ctx(self.TENSORS, steps=3)
        ctx.stands_in = True
        named = [[1]]
        live = ctx._session.liveness
        live.take_adoptions = lambda: named.pop() if named else []
        live.forget = lambda d: None
        ctx._session.start_step = 0
        theirs = types.SimpleNamespace(
            rank=1, start_step=None, queued=[],
            liveness=types.SimpleNamespace(release_requested=False, step=0))
        theirs.add = lambda m, client: theirs.queued.append(m)

        def adopt(d, held):
            theirs.start_step = held
            return theirs
        ctx._session.adopt = adopt
        released = []

        def release(adopted, next_step):
            released.append((adopted.rank, next_step))
            return True
        ctx._session.release = release
        their_client = FakeClient()
        ctx._new_stand_in = lambda a: types.SimpleNamespace(
            rank=a.rank, session=a, first_step=a.start_step,
            client=their_client, close=lambda: None)
        model = Linear(3, 2)
        opt = pst.ServerOptimizer(model, ctx)
        table = torch.arange(40.).view(20, 2)
        seen = []
        for (x,) in pst.shard((table,), ctx):
            seen.append((ctx.batch_rank, float(model.fc.bias[0]), x.tolist()))
            if len(seen) == 4:  # rank 1 is wanted back
                theirs.liveness.release_requested = True
            opt.zero_grad()
            model.fc.weight.sum().backward()
            opt.step(samples=len(x), loss=0.5)
        self.assertEqual([(r, b) for r, b, _ in seen],
                         [(0, 0.0), (1, 0.0), (0, 100.0), (1, 100.0),
                          (0, 200.0)])
        # Each rank's rows of the step (example ids t*N*b + r*b ...).
        sampler = data.EpochSampler(20, 7)
        for (rank, _, rows), step in zip(seen, [0, 0, 1, 1, 2]):
            first = data.first_example_id(step, rank, 2, 2)
            self.assertEqual(rows, table[torch.from_numpy(
                sampler.rows(first, 2))].tolist())
        self.assertEqual([p[0] for p in ctx._client.pushes], [0, 1, 2])
        self.assertEqual([p[0] for p in their_client.pushes], [0, 1])
        self.assertEqual(their_client.pulls, [])  # never a pull of its own
        self.assertEqual(ctx._client.pulls, [0, 1, 2, 3])
        self.assertEqual(released, [(1, 2)])
        self.assertEqual([(m.worker, m.step) for m in theirs.queued],
                         [(1, 0), (1, 1)])
        self.assertEqual(ctx.stand_in_ranks, [])

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

    def test_stand_ins_register_like_any_worker(self):
        # Stand-ins in worker_recovery (elastic sync), fail in the config:
        # registration goes on (the stand-in work is the training loop's).
        coord = FakeCoordinator(self.job(pb.TrainingConfig.FAIL, pb.MODE_SYNC,
                                         stands_in=True))
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
