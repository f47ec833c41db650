// A tensor cut into many chunks and spread over several shards comes back
// bit-exactly: initial values, values after an update, and very large tensors
// whose transfers need several streamed messages.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "common/sharding.h"
#include "gtest/gtest.h"
#include "proto/pstrain.grpc.pb.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/test_cluster.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

using pstrain::v1::InitRule;
using pstrain::v1::JobSpec;
using pstrain::v1::OptimizerConfig;
using pstrain::v1::TensorSpec;

TensorSpec NormalSpec(const std::string& name, std::vector<int64_t> shape,
                      float scale, uint64_t seed) {
  TensorSpec spec;
  spec.set_name(name);
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(pstrain::v1::DTYPE_F32);
  spec.mutable_init()->set_kind(InitRule::NORMAL);
  spec.mutable_init()->set_scale(scale);
  spec.mutable_init()->set_seed(seed);
  return spec;
}

// One async worker (no read bound), plain SGD with lr 1: w <- w - g exactly.
absl::StatusOr<JobSpec> MakeJob(const std::vector<TensorSpec>& tensors,
                                int servers, uint64_t chunk_elems) {
  absl::StatusOr<pstrain::v1::ShardMap> map =
      BuildShardMap(tensors, servers, chunk_elems);
  if (!map.ok()) return map.status();
  JobSpec job;
  job.mutable_config()->mutable_job()->set_name("sharding-roundtrip");
  job.mutable_config()->mutable_training()->set_mode(pstrain::v1::MODE_ASYNC);
  job.mutable_config()->mutable_training()->set_staleness(-1);
  job.mutable_config()->mutable_job()->set_workers(1);
  job.set_num_servers(servers);
  job.mutable_config()->mutable_training()->set_steps(1);
  OptimizerConfig* opt =
      job.mutable_config()->mutable_training()->mutable_optimizer();
  opt->set_kind(OptimizerConfig::SGD);
  opt->set_base_lr(1.0);
  opt->set_schedule(OptimizerConfig::CONSTANT);
  *job.mutable_shard_map() = *std::move(map);
  return job;
}

PsClientOptions ClientOptions() {
  PsClientOptions options;
  options.rpc_timeout = absl::Seconds(20);
  options.barrier_timeout = absl::Seconds(5);
  return options;
}

TensorList InitialTensors(const std::vector<TensorSpec>& tensors) {
  TensorList out;
  for (const TensorSpec& t : tensors) {
    std::vector<float> v(NumElements(t));
    InitialValues(t, 0, v.size(), v.data());
    out.push_back(std::move(v));
  }
  return out;
}

// Random gradients with fractional values (no integer shortcuts).
TensorList RandomGradients(const std::vector<TensorSpec>& tensors,
                           uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  TensorList out;
  for (const TensorSpec& t : tensors) {
    std::vector<float> v(NumElements(t));
    for (float& x : v) x = normal(rng) + 1.0f / 3.0f;
    out.push_back(std::move(v));
  }
  return out;
}

// Element-wise a - b in float, as SGD with lr 1 computes it.
TensorList Minus(const TensorList& a, const TensorList& b) {
  TensorList out = a;
  for (size_t t = 0; t < out.size(); ++t) {
    for (size_t i = 0; i < out[t].size(); ++i) out[t][i] = a[t][i] - b[t][i];
  }
  return out;
}

// Bit-exact comparison; names the first differing element.
void ExpectBitIdentical(const TensorList& got, const TensorList& want,
                        const std::vector<TensorSpec>& tensors) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_EQ(got[t].size(), want[t].size()) << tensors[t].name();
    if (std::memcmp(got[t].data(), want[t].data(),
                    got[t].size() * sizeof(float)) == 0) {
      continue;
    }
    for (size_t i = 0; i < got[t].size(); ++i) {
      if (std::memcmp(&got[t][i], &want[t][i], sizeof(float)) != 0) {
        ADD_FAILURE() << tensors[t].name() << "[" << i << "]: got " << got[t][i]
                      << ", want " << want[t][i];
        break;
      }
    }
  }
}

// Pull at `clock`, checking every shard's read.
absl::StatusOr<TensorList> PullAll(PsClient* client, uint64_t clock,
                                   std::vector<ShardRead>* reads) {
  TensorList params;
  std::unique_ptr<PsOp> op = client->StartPull(0, clock, &params);
  absl::Status s = op->Wait();
  if (!s.ok()) return s;
  if (reads != nullptr) *reads = op->reads();
  return params;
}

TEST(ShardingRoundtripTest, MultiChunkTensorOverThreeShards) {
  constexpr int kServers = 3;
  constexpr uint64_t kChunkElems = 1000;
  // 10 full chunks and a partial one, plus a small tensor sharing the map.
  const std::vector<TensorSpec> tensors = {
      NormalSpec("big", {10 * kChunkElems + 337}, 0.5f, 42),
      NormalSpec("small", {7}, 2.0f, 43),
  };
  absl::StatusOr<JobSpec> job = MakeJob(tensors, kServers, kChunkElems);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<TestCluster>> started =
      TestCluster::Start(*job);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& cluster = **started;

  // (c) Every shard holds something; bytes differ by at most one chunk, and
  // the shards together hold exactly the model.
  uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
  const std::vector<uint64_t> planned =
      BytesPerShard(cluster.job().shard_map(), kServers);
  for (int s = 0; s < kServers; ++s) {
    const uint64_t bytes = cluster.shard(s)->num_elements() * sizeof(float);
    EXPECT_GT(bytes, 0u) << "shard " << s << " holds nothing";
    EXPECT_EQ(bytes, planned[s]) << "shard " << s;
    lo = std::min(lo, bytes);
    hi = std::max(hi, bytes);
    sum += bytes;
  }
  EXPECT_LE(hi - lo, kChunkElems * sizeof(float));
  EXPECT_EQ(sum, (10 * kChunkElems + 337 + 7) * sizeof(float));
  // The big tensor really is spread: each shard holds some of its chunks.
  for (int s = 0; s < kServers; ++s) {
    int big_chunks = 0;
    for (const LocalChunk& c : cluster.shard(s)->chunks()) {
      big_chunks += c.tensor == "big";
    }
    EXPECT_GE(big_chunks, 3) << "shard " << s;
  }

  absl::StatusOr<std::unique_ptr<PsClient>> client =
      cluster.NewClient(ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();

  // (a) Pulled values are the spec's initial values, bit for bit.
  const TensorList init = InitialTensors(tensors);
  std::vector<ShardRead> reads;
  absl::StatusOr<TensorList> pulled = PullAll(client->get(), 0, &reads);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ExpectBitIdentical(*pulled, init, tensors);

  // (b) One push of fractional gradients; the result is float(init - g).
  const TensorList grads = RandomGradients(tensors, 5);
  std::unique_ptr<PsOp> push = (*client)->StartPush(0, 0, 1, grads, reads);
  ASSERT_TRUE(push->Wait().ok());
  absl::StatusOr<TensorList> updated = PullAll(client->get(), 1, nullptr);
  ASSERT_TRUE(updated.ok()) << updated.status();
  ExpectBitIdentical(*updated, Minus(init, grads), tensors);
  // And the update did change the weights.
  EXPECT_NE((*updated)[0], init[0]);
}

struct LargeCase {
  int servers;
  uint64_t elems;
};

class LargeTensorTest : public ::testing::TestWithParam<LargeCase> {};

// (d) A tensor of millions of floats with 1 MiB chunks. The pull stream is
// read raw to see that no message carries more than the pull budget (the
// head rides with the first chunks, no message is empty), and
// the client round-trips the values (both directions stream several
// messages; on one server, 10 MB exceeds gRPC's message size limit, so a
// single message could not work at all).
TEST_P(LargeTensorTest, RoundTripsThroughSeveralMessages) {
  const LargeCase& param = GetParam();
  const uint64_t chunk_elems = (1u << 20) / sizeof(float);
  const std::vector<TensorSpec> tensors = {
      NormalSpec("huge", {static_cast<int64_t>(param.elems)}, 1.0f, 9)};
  absl::StatusOr<JobSpec> job = MakeJob(tensors, param.servers, chunk_elems);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<TestCluster>> started =
      TestCluster::Start(*job);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& cluster = **started;

  // Raw pull streams: chunk messages within the budget.
  uint64_t total_elems = 0;
  for (int s = 0; s < param.servers; ++s) {
    const uint64_t shard_bytes =
        cluster.shard(s)->num_elements() * sizeof(float);
    auto stub = cluster.Stub(s);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    pstrain::v1::PullRequest request;
    request.set_worker(0);
    request.set_session_id(cluster.session_id(0));
    request.set_clock(0);
    auto reader = stub->Pull(&context, request);
    pstrain::v1::PullResponse msg;
    int messages = 0;
    uint64_t payload_total = 0;
    while (reader->Read(&msg)) {
      ++messages;
      EXPECT_GT(msg.chunks_size(), 0)
          << "shard " << s << " message " << messages;
      uint64_t payload = 0;
      for (const auto& c : msg.chunks()) payload += c.data().size();
      EXPECT_LE(payload, kPullMessagePayloadBytes) << "shard " << s;
      payload_total += payload;
    }
    grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(payload_total, shard_bytes) << "shard " << s;
    const uint64_t min_messages =
        (shard_bytes + kPullMessagePayloadBytes - 1) / kPullMessagePayloadBytes;
    EXPECT_GE(messages, static_cast<int>(min_messages)) << "shard " << s;
    if (param.servers == 1) {
      EXPECT_GE(messages, 3);
    }
    total_elems += cluster.shard(s)->num_elements();
  }
  EXPECT_EQ(total_elems, param.elems);

  absl::StatusOr<std::unique_ptr<PsClient>> client =
      cluster.NewClient(ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  const TensorList init = InitialTensors(tensors);
  std::vector<ShardRead> reads;
  absl::StatusOr<TensorList> pulled = PullAll(client->get(), 0, &reads);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ExpectBitIdentical(*pulled, init, tensors);

  const TensorList grads = RandomGradients(tensors, 17);
  std::unique_ptr<PsOp> push = (*client)->StartPush(0, 0, 1, grads, reads);
  absl::Status pushed = push->Wait();
  ASSERT_TRUE(pushed.ok()) << pushed;
  absl::StatusOr<TensorList> updated = PullAll(client->get(), 1, nullptr);
  ASSERT_TRUE(updated.ok()) << updated.status();
  ExpectBitIdentical(*updated, Minus(init, grads), tensors);

  // The shards received the whole gradient (payload plus small framing).
  uint64_t bytes_in = 0;
  for (int s = 0; s < param.servers; ++s) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    pstrain::v1::ShardStats stats;
    grpc::Status status = cluster.Stub(s)->GetStats(
        &context, pstrain::v1::ShardStatsRequest(), &stats);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(stats.pushes(), 1u);
    bytes_in += stats.bytes_in();
  }
  EXPECT_GE(bytes_in, param.elems * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, LargeTensorTest,
    ::testing::Values(LargeCase{1, 2'500'000 + 17},  // 10 MB on one shard
                      LargeCase{3, 1'500'000 + 5}),  // 6 MB over three
    [](const ::testing::TestParamInfo<LargeCase>& info) {
      return absl::StrCat(info.param.servers, "servers_", info.param.elems);
    });

}  // namespace
}  // namespace pstrain
