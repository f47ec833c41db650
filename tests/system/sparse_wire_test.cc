// Row-sparse tensors over the wire (docs/sparse.md): PsClient's row pull
// and push against real shards (Shard + ParameterServerService) on
// loopback, with a dense tensor in the same job. Three shards trained by
// two workers hold exactly what one SparseShard fed the same gradients
// holds; bad row pushes are refused naming the tensor and change nothing.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "checkpoint/safetensors.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "common/sharding.h"
#include "common/sparse_rows.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.grpc.pb.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "server/shard_checkpoint.h"
#include "server/sparse_shard.h"
#include "server/worker_sessions.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace {

constexpr int64_t kRows = 1000;
constexpr int64_t kDim = 4;
constexpr uint32_t kWorkers = 2;

uint64_t SessionOf(uint32_t worker) { return 0x5e55000 + worker; }

pstrain::v1::JobSpec Job(uint32_t shards, pstrain::v1::DType wire,
                         bool with_rows = true, int64_t max_rows = 0) {
  pstrain::v1::JobSpec job;
  auto* c = job.mutable_config();
  c->mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  c->mutable_job()->set_workers(kWorkers);
  c->mutable_network()->set_wire_dtype(wire);
  c->mutable_server()->set_sparse_max_rows(max_rows);
  c->mutable_server()->set_sparse_on_full(pstrain::v1::ServerConfig::REJECT);
  auto* o = c->mutable_training()->mutable_optimizer();
  o->set_kind(pstrain::v1::OptimizerConfig::ADAM);
  o->set_base_lr(0.01);
  job.set_num_servers(shards);
  std::vector<pstrain::v1::TensorSpec> tensors(1);
  tensors[0].set_name("w");
  tensors[0].add_shape(300);
  tensors[0].set_dtype(pstrain::v1::DTYPE_F32);
  if (with_rows) {
    pstrain::v1::TensorSpec emb;
    emb.set_name("emb");
    emb.add_shape(kRows);
    emb.add_shape(kDim);
    emb.set_dtype(pstrain::v1::DTYPE_F32);
    emb.set_row_sparse(true);
    emb.mutable_init()->set_kind(pstrain::v1::InitRule::NORMAL);
    emb.mutable_init()->set_scale(0.1f);
    emb.mutable_init()->set_seed(11);
    tensors.push_back(emb);
  }
  *job.mutable_shard_map() = *BuildShardMap(tensors, shards, 64);
  return job;
}

struct Cluster {
  std::vector<std::shared_ptr<Shard>> shards;
  std::vector<std::unique_ptr<ParameterServerService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  ~Cluster() {
    for (auto& s : shards) s->Close();
    for (auto& s : servers) {
      s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }
};

std::unique_ptr<Cluster> Start(const pstrain::v1::JobSpec& job) {
  auto cluster = std::make_unique<Cluster>();
  for (uint32_t k = 0; k < job.num_servers(); ++k) {
    auto shard = Shard::Create(ShardOptionsFromJob(job, k));
    EXPECT_TRUE(shard.ok()) << shard.status();
    if (!shard.ok()) return nullptr;
    cluster->shards.push_back(std::move(*shard));
    auto service = std::make_unique<ParameterServerService>(PsServiceOptions{});
    service->SetShard(cluster->shards.back(),
                      WorkerSessions::Fixed({SessionOf(0), SessionOf(1)}));
    auto started = StartGrpcServer(
        "127.0.0.1", 0, grpc::InsecureServerCredentials(), {service.get()});
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return nullptr;
    cluster->servers.push_back(std::move(started->server));
    cluster->addresses.push_back(absl::StrCat("127.0.0.1:", started->port));
    cluster->services.push_back(std::move(service));
  }
  return cluster;
}

std::unique_ptr<PsClient> Client(const pstrain::v1::JobSpec& job,
                                 const Cluster& cluster, uint32_t worker) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& a : cluster.addresses) {
    channels.push_back(MakeChannel(a));
  }
  PsClientOptions options;
  options.session_id = SessionOf(worker);
  options.wire_dtype = job.config().network().wire_dtype();
  options.rpc_timeout = absl::Seconds(30);
  options.barrier_timeout = absl::Seconds(60);
  auto client = PsClient::Create(job.shard_map(), channels, options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// Worker w's batch in step t: ids with duplicates (a batch repeats ids),
// spread over the table; its gradient row for id r.
std::vector<int64_t> BatchIds(uint64_t t, uint32_t w) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 40; ++i) {
    ids.push_back((i * i * 37 + w * 101 + t * 7) % kRows);
  }
  ids.push_back(ids[3]);
  return ids;
}
float G(uint64_t t, uint32_t w, int64_t id, int64_t c) {
  return 0.0625f * static_cast<float>((t * 5 + w * 3 + id + c * 7) % 13) -
         0.375f;
}

class SparseWireTest : public ::testing::TestWithParam<pstrain::v1::DType> {};

TEST_P(SparseWireTest, ClientAgainstThreeShardsEqualsOneSparseShard) {
  const pstrain::v1::DType wire = GetParam();
  const pstrain::v1::JobSpec job = Job(3, wire);
  auto cluster = Start(job);
  ASSERT_NE(cluster, nullptr);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    clients.push_back(Client(job, *cluster, w));
    ASSERT_NE(clients.back(), nullptr);
  }
  // The reference: one shard holding every row, fed the same gradients.
  SparseShardOptions ro;
  ro.tensors.assign(job.shard_map().tensors().begin(),
                    job.shard_map().tensors().end());
  ro.optimizer = job.config().training().optimizer();
  ro.rule.kind = ConsistencyOptions::Kind::kBsp;
  ro.rule.num_workers = kWorkers;
  ro.wire_dtype = pstrain::v1::DTYPE_F32;
  auto reference = *SparseShard::Create(ro);

  const int steps = 3;
  std::vector<int64_t> all(kRows);
  for (int64_t r = 0; r < kRows; ++r) all[r] = r;
  for (int t = 0; t < steps; ++t) {
    std::vector<std::vector<RowSet>> pulled(kWorkers);
    std::vector<std::unique_ptr<PsOp>> ops;
    for (uint32_t w = 0; w < kWorkers; ++w) {
      ops.push_back(clients[w]->StartPullRows(
          w, t, {RowSet{"emb", BatchIds(t, w), {}}}, &pulled[w]));
    }
    std::vector<std::vector<ShardRead>> reads(kWorkers);
    for (uint32_t w = 0; w < kWorkers; ++w) {
      ASSERT_TRUE(ops[w]->Wait().ok()) << ops[w]->Wait();
      reads[w] = ops[w]->reads();
      // Distinct ids in order of first appearance, each with its row.
      ASSERT_EQ(pulled[w].size(), 1u);
      const std::vector<int64_t> batch = BatchIds(t, w);
      EXPECT_EQ(pulled[w][0].ids.size(),
                std::set<int64_t>(batch.begin(), batch.end()).size());
      EXPECT_EQ(pulled[w][0].ids[0], batch[0]);
      EXPECT_EQ(pulled[w][0].values.size(), pulled[w][0].ids.size() * kDim);
    }
    // Rows read through the wire are the reference's (rounded to the wire
    // dtype).
    {
      pstrain::v1::PullRowsRequest req;
      auto* piece = req.add_rows();
      piece->set_tensor("emb");
      AppendRowIds(pulled[0][0].ids, piece->mutable_ids());
      auto want = reference->Pull(0, t, *reference->DecodePull(req),
                                  absl::Now() + absl::Seconds(1));
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<float> rounded = want->blocks[0].values;
      RoundToWire(wire, rounded.data(), rounded.size());
      EXPECT_EQ(pulled[0][0].values, rounded) << "step " << t;
    }
    ops.clear();
    for (uint32_t w = 0; w < kWorkers; ++w) {
      RowSet g{"emb", pulled[w][0].ids, {}};
      for (int64_t id : g.ids) {
        for (int64_t c = 0; c < kDim; ++c) g.values.push_back(G(t, w, id, c));
      }
      ops.push_back(clients[w]->StartPushRows(w, t, 16 + w, {g}, reads[w]));
      // The same gradient (as the shards decode it) to the reference.
      std::vector<float> v = g.values;
      RoundToWire(wire, v.data(), v.size());
      pstrain::v1::PushRowsRequest m;
      m.mutable_header()->set_worker(w);
      m.mutable_header()->set_clock(t);
      m.mutable_header()->set_num_samples(16 + w);
      auto* piece = m.add_rows();
      piece->set_tensor("emb");
      piece->set_dim(kDim);
      piece->set_dtype(pstrain::v1::DTYPE_F32);
      AppendRowIds(g.ids, piece->mutable_ids());
      AppendRowValues(v.data(), v.size(), pstrain::v1::DTYPE_F32, "emb",
                      piece->mutable_values());
      auto push = reference->DecodePush({m});
      ASSERT_TRUE(push.ok()) << push.status();
      ASSERT_TRUE(reference->Push(std::move(*push)).ok());
    }
    // The dense tensor trains in the same job, beside the rows.
    for (uint32_t w = 0; w < kWorkers; ++w) {
      ASSERT_TRUE(ops[w]->Wait().ok()) << ops[w]->Wait();
      TensorList params;
      auto pull = clients[w]->StartPull(w, t, &params);
      ASSERT_TRUE(pull->Wait().ok()) << pull->Wait();
      EXPECT_TRUE(params[1].empty());  // "emb" travels by row only
      TensorList grads = {std::vector<float>(300, 0.5f), {}};
      auto push = clients[w]->StartPush(w, t, 16 + w, grads, pull->reads());
      ASSERT_TRUE(push->Wait().ok()) << push->Wait();
    }
  }
  for (auto& s : cluster->shards) {
    EXPECT_EQ(s->sparse()->version(), static_cast<uint64_t>(steps));
    EXPECT_EQ(s->Stats().version(), static_cast<uint64_t>(steps));
    // ShardStats names the table, its rows stored and evicted (no bound).
    const pstrain::v1::ShardStats stats = s->Stats();
    ASSERT_EQ(stats.sparse_tables_size(), 1);
    EXPECT_EQ(stats.sparse_tables(0).tensor(), "emb");
    EXPECT_EQ(stats.sparse_tables(0).rows_stored(),
              s->sparse()->stored_rows(0));
    EXPECT_GT(stats.sparse_tables(0).rows_stored(), 0u);
    EXPECT_EQ(stats.sparse_tables(0).rows_evicted(), 0u);
  }
  // Every row, through the wire, equals the reference's.
  std::vector<RowSet> got;
  auto op = clients[0]->StartPullRows(0, steps, {RowSet{"emb", all, {}}}, &got);
  ASSERT_TRUE(op->Wait().ok()) << op->Wait();
  pstrain::v1::PullRowsRequest req;
  auto* piece = req.add_rows();
  piece->set_tensor("emb");
  AppendRowIds(all, piece->mutable_ids());
  auto want = reference->Pull(0, steps, *reference->DecodePull(req),
                              absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(want.ok());
  std::vector<float> rounded = want->blocks[0].values;
  RoundToWire(wire, rounded.data(), rounded.size());
  EXPECT_EQ(got[0].values, rounded);
  // Rows live where RowShard says, and only rows some batch touched.
  size_t stored = 0;
  for (auto& s : cluster->shards) stored += s->sparse()->stored_rows(0);
  EXPECT_EQ(stored, reference->stored_rows(0));
  EXPECT_LT(stored, static_cast<size_t>(kRows));
}

INSTANTIATE_TEST_SUITE_P(WireDtypes, SparseWireTest,
                         ::testing::Values(pstrain::v1::DTYPE_F32,
                                           pstrain::v1::DTYPE_BF16));

// A bad row push through the client and the service: the status names the
// tensor, and the shard is as before (the same step then takes a good push).
TEST(SparseWireBadInputTest, RefusedNamingTheTensorAndNothingApplied) {
  const pstrain::v1::JobSpec job =
      Job(1, pstrain::v1::DTYPE_F32, true, /*max_rows=*/8);
  auto cluster = Start(job);
  ASSERT_NE(cluster, nullptr);
  auto client = Client(job, *cluster, 0);
  ASSERT_NE(client, nullptr);
  SparseShard* sparse = cluster->shards[0]->sparse();
  ASSERT_NE(sparse, nullptr);
  const std::vector<ShardRead> reads(1);
  auto push = [&](RowSet g) {
    return client->StartPushRows(0, 0, 4, {std::move(g)}, reads)->Wait();
  };
  auto expect = [&](absl::Status st, absl::StatusCode code,
                    const std::string& needle) {
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st;
    EXPECT_EQ(sparse->version(), 0u);
    EXPECT_EQ(sparse->clocks(), (std::vector<uint64_t>{0, 0}));
    EXPECT_EQ(sparse->stored_rows(0), 0u);
  };
  expect(push(RowSet{"emb", {1, kRows}, std::vector<float>(2 * kDim, 1)}),
         absl::StatusCode::kInvalidArgument,
         "tensor 'emb': row id 1000 is outside the table");
  expect(push(RowSet{"emb", {5, 5}, std::vector<float>(2 * kDim, 1)}),
         absl::StatusCode::kInvalidArgument,
         "tensor 'emb': row id 5 appears more than once");
  expect(push(RowSet{"emb", {5}, std::vector<float>(kDim + 1, 1)}),
         absl::StatusCode::kInvalidArgument, "tensor 'emb'");
  std::vector<int64_t> nine = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  expect(push(RowSet{"emb", nine, std::vector<float>(9 * kDim, 1)}),
         absl::StatusCode::kResourceExhausted, "tensor 'emb'");
  expect(push(RowSet{"w", {0}, std::vector<float>(kDim, 1)}),
         absl::StatusCode::kInvalidArgument, "'w'");

  // A wrong row width straight on the wire (the client checks it first).
  auto stub =
      pstrain::v1::ParameterServer::NewStub(MakeChannel(cluster->addresses[0]));
  pstrain::v1::PushRowsRequest m;
  m.mutable_header()->set_worker(0);
  m.mutable_header()->set_session_id(SessionOf(0));
  m.mutable_header()->set_num_samples(1);
  auto* piece = m.add_rows();
  piece->set_tensor("emb");
  piece->set_dtype(pstrain::v1::DTYPE_F32);
  piece->set_dim(kDim - 1);
  AppendRowIds({3}, piece->mutable_ids());
  std::vector<float> v(kDim - 1, 1.0f);
  AppendRowValues(v.data(), v.size(), pstrain::v1::DTYPE_F32, "emb",
                  piece->mutable_values());
  auto send = [&](bool with_session) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(20));
    if (with_session) AddPushSession(&ctx, 0, SessionOf(0), 0);
    pstrain::v1::PushRowsResponse response;
    auto writer = stub->PushRows(&ctx, &response);
    writer->Write(m);
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  };
  expect(send(true), absl::StatusCode::kInvalidArgument,
         "tensor 'emb': rows of width 3, the table's rows have 4");
  expect(send(false), absl::StatusCode::kUnauthenticated, "session");

  // The step is still open and takes a good push from each worker.
  ASSERT_TRUE(
      push(RowSet{"emb", {1, 2}, std::vector<float>(2 * kDim, 1)}).ok());
  auto other = Client(job, *cluster, 1);
  ASSERT_TRUE(other->StartPushRows(1, 0, 4, {}, reads)->Wait().ok());
  EXPECT_EQ(sparse->version(), 1u);
  EXPECT_EQ(sparse->stored_rows(0), 2u);
}

TEST(SparseWireBadInputTest, AJobWithoutRowsRefusesRowCalls) {
  const pstrain::v1::JobSpec job = Job(1, pstrain::v1::DTYPE_F32, false);
  auto cluster = Start(job);
  ASSERT_NE(cluster, nullptr);
  auto stub =
      pstrain::v1::ParameterServer::NewStub(MakeChannel(cluster->addresses[0]));
  grpc::ClientContext ctx;
  SetTimeout(&ctx, absl::Seconds(20));
  pstrain::v1::PullRowsRequest req;
  req.set_session_id(SessionOf(0));
  auto reader = stub->PullRows(&ctx, req);
  pstrain::v1::PullRowsResponse msg;
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // The client refuses a tensor that is not row-sparse before any call.
  auto client = Client(job, *cluster, 0);
  std::vector<RowSet> out;
  absl::Status st =
      client->StartPullRows(0, 0, {RowSet{"w", {0}, {}}}, &out)->Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'w'"), std::string::npos);
}

// Steps [from, to) of the two workers on `cluster`: rows pulled, row and
// dense gradients pushed (each shard then reaches every cut).
void Train(const pstrain::v1::JobSpec& job, const Cluster& cluster, int from,
           int to) {
  std::vector<std::unique_ptr<PsClient>> clients;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    clients.push_back(Client(job, cluster, w));
  }
  for (int t = from; t < to; ++t) {
    for (uint32_t w = 0; w < kWorkers; ++w) {
      std::vector<RowSet> pulled;
      auto op = clients[w]->StartPullRows(
          w, t, {RowSet{"emb", BatchIds(t, w), {}}}, &pulled);
      ASSERT_TRUE(op->Wait().ok()) << op->Wait();
      RowSet g{"emb", pulled[0].ids, {}};
      for (int64_t id : g.ids) {
        for (int64_t c = 0; c < kDim; ++c) g.values.push_back(G(t, w, id, c));
      }
      auto push = clients[w]->StartPushRows(w, t, 16 + w, {g}, op->reads());
      ASSERT_TRUE(push->Wait().ok()) << push->Wait();
      TensorList params;
      auto pull = clients[w]->StartPull(w, t, &params);
      ASSERT_TRUE(pull->Wait().ok()) << pull->Wait();
      TensorList grads = {std::vector<float>(300, 0.25f * (w + 1)), {}};
      auto dense = clients[w]->StartPush(w, t, 16 + w, grads, pull->reads());
      ASSERT_TRUE(dense->Wait().ok()) << dense->Wait();
    }
  }
}

// Every row of the table and the dense tensor, read through the wire.
std::pair<std::vector<float>, std::vector<float>> ReadModel(
    const pstrain::v1::JobSpec& job, const Cluster& cluster, uint64_t clock) {
  auto client = Client(job, cluster, 0);
  std::vector<int64_t> all(kRows);
  for (int64_t r = 0; r < kRows; ++r) all[r] = r;
  std::vector<RowSet> rows;
  auto op = client->StartPullRows(0, clock, {RowSet{"emb", all, {}}}, &rows);
  EXPECT_TRUE(op->Wait().ok()) << op->Wait();
  TensorList params;
  auto pull = client->StartPull(0, clock, &params);
  EXPECT_TRUE(pull->Wait().ok()) << pull->Wait();
  if (rows.empty() || params.empty()) return {};
  return {rows[0].values, params[0]};
}

// A checkpoint at cut 2 taken on K = 2 shards restores onto K' = 3 shards
// (and onto 2 again) and training goes on exactly: rows, their Adam slots
// and per-row step counters, the dense tensor.
TEST(SparseCheckpointTest, ResumeAndReshardKToKPrimeAreExact) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = absl::StrCat(tmp ? tmp : "/tmp", "/sparse_ckpt");
  std::system(absl::StrCat("rm -rf '", root, "'").c_str());
  CheckpointEnv* env = CheckpointEnv::Default();
  const pstrain::v1::JobSpec two = Job(2, pstrain::v1::DTYPE_F32);
  auto original = Start(two);
  ASSERT_NE(original, nullptr);
  for (auto& s : original->shards) s->SetStandingCuts(2, 4);
  Train(two, *original, 0, 3);  // cut 2 is captured as the shards pass it
  auto manifest = ManifestForJob(two, 2);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  for (uint32_t k = 0; k < 2; ++k) {
    auto file = SaveShardAt(*original->shards[k], 2, env, root, 2,
                            absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(file.ok()) << file.status();
    manifest->files.push_back(*file);
  }
  const std::string dir = CheckpointDir(root, 2);
  ASSERT_TRUE(WriteManifest(env, dir, *manifest).ok());
  Train(two, *original, 3, 5);
  const auto want = ReadModel(two, *original, 5);

  for (uint32_t shards : {3u, 2u}) {
    const pstrain::v1::JobSpec job = Job(shards, pstrain::v1::DTYPE_F32);
    auto resumed = Start(job);
    ASSERT_NE(resumed, nullptr);
    auto reader = CheckpointReader::Open(env, dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (uint32_t k = 0; k < shards; ++k) {
      absl::Status st = RestoreShard(**reader, ShardOptionsFromJob(job, k),
                                     *resumed->shards[k]);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(resumed->shards[k]->sparse()->version(), 2u);
    }
    Train(job, *resumed, 2, 5);
    const auto got = ReadModel(job, *resumed, 5);
    EXPECT_EQ(got.first, want.first) << shards << " shards";
    EXPECT_EQ(got.second, want.second) << shards << " shards";
  }
  // A checkpoint without rows does not restore a job that has them, and
  // changes nothing.
  const pstrain::v1::JobSpec dense_only = Job(1, pstrain::v1::DTYPE_F32, false);
  auto plain = Start(dense_only);
  ASSERT_NE(plain, nullptr);
  auto m = ManifestForJob(dense_only, 0);
  auto file = SaveShardAt(*plain->shards[0], 1, env, root + "/plain", 0,
                          absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(file.ok()) << file.status();
  m->files.push_back(*file);
  ASSERT_TRUE(WriteManifest(env, CheckpointDir(root + "/plain", 0), *m).ok());
  auto reader = CheckpointReader::Open(env, CheckpointDir(root + "/plain", 0));
  ASSERT_TRUE(reader.ok()) << reader.status();
  const pstrain::v1::JobSpec with_rows = Job(1, pstrain::v1::DTYPE_F32);
  auto target = Start(with_rows);
  absl::Status st =
      (*reader)
          ->RowsFor({target->shards[0]->sparse()->table_name(0)}, 0, 1)
          .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
}

// ps_checkpoint and the safetensors export read row tables
// (checkpoint/safetensors.h): the rows stored at the cut, by id, with their
// weights, Adam slots and per-row update counts, bit for bit what the shards
// held; the dense tensor whole.
TEST(SparseCheckpointTest, ExportAndInspectReadTheRowTables) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = absl::StrCat(tmp ? tmp : "/tmp", "/sparse_export");
  std::system(absl::StrCat("rm -rf '", root, "'").c_str());
  CheckpointEnv* env = CheckpointEnv::Default();
  const pstrain::v1::JobSpec job = Job(2, pstrain::v1::DTYPE_F32);
  auto cluster = Start(job);
  ASSERT_NE(cluster, nullptr);
  Train(job, *cluster, 0, 3);
  // What the shards hold now (the cut is 3: no push pending).
  std::map<int64_t, SparseRowState> want;
  for (const auto& shard : cluster->shards) {
    auto state = shard->sparse()->Snapshot();
    ASSERT_TRUE(state.ok()) << state.status();
    for (const SparseRowState& r : state->rows[0]) want[r.id] = r;
  }
  ASSERT_GT(want.size(), 10u);
  const std::vector<float> dense = ReadModel(job, *cluster, 3).second;
  ASSERT_EQ(dense.size(), 300u);
  auto manifest = ManifestForJob(job, 3);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  for (uint32_t k = 0; k < 2; ++k) {
    auto file = SaveShardAt(*cluster->shards[k], 2, env, root, 3,
                            absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(file.ok()) << file.status();
    manifest->files.push_back(*file);
  }
  const std::string dir = CheckpointDir(root, 3);
  ASSERT_TRUE(WriteManifest(env, dir, *manifest).ok());
  auto reader = CheckpointReader::Open(env, dir);
  ASSERT_TRUE(reader.ok()) << reader.status();

  const std::string out = root + "/model.safetensors";
  ASSERT_TRUE(ExportSafetensors(**reader, env, out, /*with_slots=*/true).ok());
  std::ifstream in(out, std::ios::binary);
  const std::string blob((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  ASSERT_GT(blob.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, blob.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(blob.substr(8, n));
  const char* data = blob.data() + 8 + n;
  auto bytes_of = [&](const std::string& name, const std::string& dtype,
                      const std::vector<int64_t>& shape) {
    EXPECT_TRUE(header.contains(name)) << name;
    if (!header.contains(name)) return std::string();
    EXPECT_EQ(header[name]["dtype"], dtype) << name;
    EXPECT_EQ(header[name]["shape"].get<std::vector<int64_t>>(), shape) << name;
    const uint64_t b = header[name]["data_offsets"][0];
    const uint64_t e = header[name]["data_offsets"][1];
    return std::string(data + b, e - b);
  };
  const int64_t rows = static_cast<int64_t>(want.size());
  std::string ids, updates, weights, m1, m2;
  for (const auto& [id, r] : want) {
    ids.append(reinterpret_cast<const char*>(&id), 8);
    const int64_t u = static_cast<int64_t>(r.updates);
    updates.append(reinterpret_cast<const char*>(&u), 8);
    ASSERT_EQ(r.data.size(), 3u * kDim);  // weights, Adam's two moments
    weights.append(reinterpret_cast<const char*>(r.data.data()), 4 * kDim);
    m1.append(reinterpret_cast<const char*>(r.data.data() + kDim), 4 * kDim);
    m2.append(reinterpret_cast<const char*>(r.data.data() + 2 * kDim),
              4 * kDim);
  }
  EXPECT_EQ(bytes_of("emb.ids", "I64", {rows}), ids);
  EXPECT_EQ(bytes_of("emb.updates", "I64", {rows}), updates);
  EXPECT_EQ(bytes_of("emb", "F32", {rows, kDim}), weights);
  EXPECT_EQ(bytes_of("emb:slot0", "F32", {rows, kDim}), m1);
  EXPECT_EQ(bytes_of("emb:slot1", "F32", {rows, kDim}), m2);
  EXPECT_EQ(bytes_of("w", "F32", {300}),
            std::string(reinterpret_cast<const char*>(dense.data()),
                        dense.size() * 4));
  EXPECT_EQ(header["__metadata__"]["row_sparse:emb"],
            absl::StrCat("[", kRows, ", ", kDim, "]"));
  EXPECT_EQ(header.size(), 9u);  // __metadata__, w and 2 slots, emb x 5

  // ps_checkpoint inspect names the rows stored.
  const char* srcdir = std::getenv("TEST_SRCDIR");
  ASSERT_NE(srcdir, nullptr);
  const std::string cmd =
      absl::StrCat(srcdir, "/pstrain/tools/checkpoint/ps_checkpoint inspect '",
                   dir, "' 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) text += buf;
  EXPECT_EQ(pclose(pipe), 0) << text;
  EXPECT_NE(text.find(absl::StrCat("row-sparse: ", rows, " rows stored")),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("row step 3"), std::string::npos) << text;
}

}  // namespace
}  // namespace pstrain
