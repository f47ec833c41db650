// Issue 24's integration: whole parameter-server jobs of a wide-and-deep
// model whose embedding table lives row-sparse on the shards (Trainer's row
// pulls and pushes, docs/sparse.md). Every run is a real in-process cluster:
// shards behind gRPC servers on loopback, each worker a thread with its own
// Trainer, Model, DataSource and PsClient.
//  * Sync is exact for rows as for dense tensors: N workers with local batch
//    b train the same weights and rows as one worker with batch N*b, and
//    gradient accumulation splits a slice without changing them.
//  * A job learns the Zipf task through the table (above what the numeric
//    columns allow), in sync and async.
//  * Bytes per worker per step follow the rows a step touches, not the
//    table's size.
//  * Async checkpoints are cuts of rows and dense chunks alike; with one
//    worker a resumed job (same layout or K' servers) is bit-identical.
//  * The same job on the real node classes (coordinator, ServerNodes,
//    WorkerNodes: what ps_worker runs) trains and evaluates.
//  * Mode allreduce with a replica of the table on every worker, the table's
//    gradient exchanged whole (allreduce.sparse: dense) or as an all-gather
//    of the rows touched (allgather): both equal the sync parameter server,
//    and their bytes follow the table and the rows respectively.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/job_config.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "tests/harness/checkpoint_jobs.h"
#include "tests/harness/in_process_job.h"
#include "tests/harness/test_cluster.h"
#include "tests/harness/test_files.h"
#include "tests/harness/training_harness.h"
#include "worker/allreduce/allreduce_trainer.h"
#include "worker/allreduce/in_memory_transport.h"
#include "worker/allreduce/ring_allreduce.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/ps/ps_client.h"
#include "worker/ps/trainer.h"

namespace pstrain {
namespace {

using pstrain::v1::OptimizerConfig;

constexpr int kDim = 8;
constexpr int kColumns = 4;

// The Zipf task of wide_deep_learning_test at a small scale: 8 numeric
// columns and 4 categorical ones of 1000 values (exponent 1.1), hashed into
// a `buckets` x 8 table, summed per column; bottom MLP [16], top MLP [32],
// 4 classes. Evaluation at the end only.
JobConfig MakeConfig(pstrain::v1::ConsistencyMode mode, int workers,
                     int64_t local_batch, int64_t grad_accum_steps,
                     int64_t buckets, int64_t steps,
                     OptimizerConfig::Kind optimizer, double lr) {
  JobConfig config = DefaultJobConfig();
  config.mutable_job()->set_name("sparse-job");
  config.mutable_job()->set_workers(workers);
  config.mutable_job()->set_servers(2);
  config.mutable_training()->set_mode(mode);
  config.mutable_training()->set_staleness(mode == pstrain::v1::MODE_SYNC ? 0
                                                                          : 2);
  config.mutable_training()->set_local_batch(local_batch);
  config.mutable_training()->set_grad_accum_steps(grad_accum_steps);
  config.mutable_training()->set_steps(steps);
  config.mutable_training()->mutable_optimizer()->set_kind(optimizer);
  config.mutable_training()->mutable_optimizer()->set_base_lr(lr);
  ModelConfig& m = *config.mutable_model();
  m.set_type(ModelConfig::WIDE_DEEP);
  m.set_input_dim(8);
  m.set_num_classes(4);
  m.set_sparse_columns(kColumns);
  m.set_buckets(buckets);
  m.set_embedding_dim(kDim);
  m.set_hashes(1);
  m.set_pooling(ModelConfig::SUM);
  SetList(m.mutable_bottom_hidden(), {16});
  SetList(m.mutable_hidden(), {32});
  m.set_activation(ModelConfig::RELU);
  m.set_seed(3);
  DataConfig& d = *config.mutable_data();
  d.set_source(DataConfig::SYNTHETIC);
  d.set_num_features(8);
  d.set_num_classes(4);
  d.set_noise(0.05);
  d.set_sparse_columns(kColumns);
  d.set_sparse_cardinality(1000);
  d.set_zipf_exponent(1.1);
  d.set_seed(11);
  d.set_test_examples(2000);
  config.mutable_evaluation()->set_every_steps(0);
  config.mutable_server()->set_chunk_bytes(256);  // several dense chunks
  config.mutable_network()->set_rpc_timeout_s(30);
  config.mutable_network()->set_barrier_timeout_s(60);
  FinalizeJobConfig(&config);
  return config;
}

struct JobResult {
  std::vector<TensorList> dense;  // per worker: final dense weights
  // Rows 0..rows_read-1 of the table read back after the job.
  std::vector<float> rows;
  double accuracy = 0;  // the final evaluation over every worker's slice
  // Per worker: bytes its client pushed and pulled over the job's steps
  // (the final pull included), divided by the steps.
  std::vector<double> pushed_per_step, pulled_per_step;
};

// Rows [0, n) of the table, read at `clock` by a client of rank 0.
absl::StatusOr<std::vector<float>> ReadRows(const TestCluster& cluster,
                                            const JobConfig& config,
                                            uint64_t clock, int64_t n) {
  PsClientOptions options;
  options.rpc_timeout = absl::Seconds(config.network().rpc_timeout_s());
  options.barrier_timeout = absl::Seconds(config.network().barrier_timeout_s());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> reader,
                      cluster.NewClient(options, 0));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      Model::Create(config.model()));
  std::vector<RowSet> request(1), out;
  request[0].tensor = model->params()[0].name();  // the embedding table
  request[0].ids.resize(n);
  std::iota(request[0].ids.begin(), request[0].ids.end(), 0);
  std::unique_ptr<PsOp> pull = reader->StartPullRows(0, clock, request, &out);
  PS_RETURN_IF_ERROR(pull->Wait());
  if (out.size() != 1 || out[0].ids != request[0].ids) {
    return absl::InternalError("rows came back in another order");
  }
  return std::move(out[0].values);
}

// Runs `config` on a TestCluster; then reads rows [0, rows_read) of the
// table at clock `steps` with a fresh client.
absl::StatusOr<JobResult> RunJob(const JobConfig& config, int64_t rows_read) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TestCluster> cluster,
                      TestCluster::Start(config));
  PsClientOptions client_options;
  client_options.rpc_timeout = absl::Seconds(config.network().rpc_timeout_s());
  client_options.barrier_timeout =
      absl::Seconds(config.network().barrier_timeout_s());
  client_options.push_streams = PushStreams(config);
  const int workers = config.job().workers();
  const int64_t steps = config.training().steps();
  JobResult result;
  result.dense.resize(workers);
  result.pushed_per_step.resize(workers);
  result.pulled_per_step.resize(workers);
  absl::Mutex mu;
  int64_t correct = 0, total = 0;
  PS_RETURN_IF_ERROR(OnThreads(workers, [&](int r) -> absl::Status {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                        cluster->NewClient(client_options, r));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config.model()));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                        DataSource::Create(config.data()));
    TrainerOptions options;
    options.rank = r;
    options.config = config;
    Trainer trainer(options, client.get(), model.get(), data.get());
    auto on_step = [&](const pstrain::v1::StepMetrics& m) -> absl::Status {
      if (!std::isfinite(m.loss())) {
        return absl::InternalError("loss is not finite");
      }
      if (m.step() == steps) {
        absl::MutexLock lock(&mu);
        correct += m.eval_correct();
        total += m.eval_total();
      }
      return absl::OkStatus();
    };
    PS_RETURN_IF_ERROR(trainer.Run(on_step, nullptr));
    result.dense[r] = trainer.final_params();
    result.pushed_per_step[r] =
        static_cast<double>(client->bytes_pushed()) / steps;
    result.pulled_per_step[r] =
        static_cast<double>(client->bytes_pulled()) / steps;
    return absl::OkStatus();
  }));
  if (total == 0) return absl::InternalError("no test examples evaluated");
  result.accuracy = static_cast<double>(correct) / total;
  if (rows_read > 0) {
    PS_ASSIGN_OR_RETURN(result.rows,
                        ReadRows(*cluster, config, steps, rows_read));
  }
  return result;
}

double MaxRowDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// The initial rows [0, n) of the table (SparseTable's lazy init rule),
// read at clock 0 from a cluster no worker trained.
absl::StatusOr<std::vector<float>> InitialRows(const JobConfig& config,
                                               int64_t n) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TestCluster> cluster,
                      TestCluster::Start(config));
  return ReadRows(*cluster, config, 0, n);
}

constexpr int64_t kBuckets = 2000;
constexpr double kTolerance = 1e-5;

TEST(SparseJobTest, SyncWorkersEqualOneWorkerWithTheirBatch) {
  for (OptimizerConfig::Kind kind :
       {OptimizerConfig::SGD, OptimizerConfig::ADAGRAD}) {
    SCOPED_TRACE(OptimizerConfig::Kind_Name(kind));
    const double lr = kind == OptimizerConfig::SGD ? 0.5 : 0.05;
    const JobConfig four =
        MakeConfig(pstrain::v1::MODE_SYNC, 4, 8, 1, kBuckets, 12, kind, lr);
    absl::StatusOr<JobResult> multi = RunJob(four, kBuckets);
    ASSERT_TRUE(multi.ok()) << multi.status();
    for (int r = 1; r < 4; ++r) {
      EXPECT_EQ(multi->dense[r], multi->dense[0]) << "worker " << r;
    }
    // The table trained: rows moved from their initial values.
    absl::StatusOr<std::vector<float>> init = InitialRows(four, kBuckets);
    ASSERT_TRUE(init.ok()) << init.status();
    EXPECT_GT(MaxRowDiff(multi->rows, *init), 1e-3);

    const JobConfig one =
        MakeConfig(pstrain::v1::MODE_SYNC, 1, 32, 1, kBuckets, 12, kind, lr);
    absl::StatusOr<JobResult> single = RunJob(one, kBuckets);
    ASSERT_TRUE(single.ok()) << single.status();
    EXPECT_LE(MaxAbsDiff(single->dense[0], multi->dense[0]), kTolerance);
    EXPECT_LE(MaxRowDiff(single->rows, multi->rows), kTolerance);

    // Gradient accumulation: 2 workers x 2 micro-batches of 8.
    const JobConfig accum =
        MakeConfig(pstrain::v1::MODE_SYNC, 2, 8, 2, kBuckets, 12, kind, lr);
    absl::StatusOr<JobResult> acc = RunJob(accum, kBuckets);
    ASSERT_TRUE(acc.ok()) << acc.status();
    EXPECT_LE(MaxAbsDiff(acc->dense[0], multi->dense[0]), kTolerance);
    EXPECT_LE(MaxRowDiff(acc->rows, multi->rows), kTolerance);
  }
}

// wide_deep_learning_test's bar for the numeric columns alone on this task:
// below 0.6 test accuracy (a numeric-only MLP measured 0.46). Through the
// table a job of 4 workers x 32 examples x 1000 steps (128k examples, a
// third of that test's local SGD) measured 0.775 in sync; the bar is 0.72.
constexpr double kNumericOnlyBar = 0.6;
constexpr double kLearnedBar = 0.72;
constexpr int64_t kLearnSteps = 1000;
constexpr double kLearnLr = 0.3;  // Adagrad

TEST(SparseJobTest, SyncJobLearnsThroughTheTable) {
  const JobConfig config =
      MakeConfig(pstrain::v1::MODE_SYNC, 4, 32, 1, kBuckets, kLearnSteps,
                 OptimizerConfig::ADAGRAD, kLearnLr);
  absl::StatusOr<JobResult> r = RunJob(config, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("sync, 4 workers x 32, 1000 steps: test accuracy %.4f\n",
              r->accuracy);
  EXPECT_GE(r->accuracy, kLearnedBar);
  EXPECT_GE(r->accuracy - kNumericOnlyBar, 0.1);
}

TEST(SparseJobTest, AsyncJobLearnsThroughTheTable) {
  const JobConfig config =
      MakeConfig(pstrain::v1::MODE_ASYNC, 4, 32, 1, kBuckets, kLearnSteps,
                 OptimizerConfig::ADAGRAD, kLearnLr);
  absl::StatusOr<JobResult> r = RunJob(config, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("async s=2, 4 workers x 32, 1000 steps: test accuracy %.4f\n",
              r->accuracy);
  EXPECT_GE(r->accuracy, kLearnedBar);
  EXPECT_GE(r->accuracy - kNumericOnlyBar, 0.1);
}

TEST(SparseJobTest, BytesFollowTheRowsTouchedNotTheTable) {
  const int64_t kSmall = 10000, kLarge = 10000000;
  const JobConfig small = MakeConfig(pstrain::v1::MODE_SYNC, 2, 32, 1, kSmall,
                                     20, OptimizerConfig::ADAGRAD, 0.05);
  const JobConfig large = MakeConfig(pstrain::v1::MODE_SYNC, 2, 32, 1, kLarge,
                                     20, OptimizerConfig::ADAGRAD, 0.05);
  absl::StatusOr<JobResult> a = RunJob(small, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<JobResult> b = RunJob(large, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  // A dense gradient of the large table alone, per step.
  const double dense_table_bytes = 4.0 * kLarge * kDim;
  for (int r = 0; r < 2; ++r) {
    std::printf(
        "worker %d bytes/step pushed %.0f / %.0f, pulled %.0f / %.0f "
        "(10^4 / 10^7 rows; a dense table gradient: %.0f)\n",
        r, a->pushed_per_step[r], b->pushed_per_step[r], a->pulled_per_step[r],
        b->pulled_per_step[r], dense_table_bytes);
    EXPECT_GT(a->pushed_per_step[r], 0);
    EXPECT_NEAR(b->pushed_per_step[r] / a->pushed_per_step[r], 1.0, 0.05);
    EXPECT_NEAR(b->pulled_per_step[r] / a->pulled_per_step[r], 1.0, 0.05);
    EXPECT_LT(b->pushed_per_step[r] * 1000, dense_table_bytes);
    EXPECT_LT(b->pulled_per_step[r] * 1000, dense_table_bytes);
  }
}

// What ps_worker runs: a wide_deep job through CoordinatorNode, ServerNodes
// and WorkerNodes (in_process_job.h), sync and async.
TEST(SparseJobTest, WideDeepJobRunsOnTheNodes) {
  for (pstrain::v1::ConsistencyMode mode :
       {pstrain::v1::MODE_SYNC, pstrain::v1::MODE_ASYNC}) {
    SCOPED_TRACE(pstrain::v1::ConsistencyMode_Name(mode));
    const JobConfig c = MakeConfig(mode, 2, 16, 1, 100000, 30,
                                   OptimizerConfig::ADAGRAD, kLearnLr);
    ASSERT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
    absl::StatusOr<InProcessJob> job = RunInProcessJob(c);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_FALSE(job->summary.failed) << job->summary.message;
    EXPECT_EQ(job->summary.steps, 30);
    ASSERT_TRUE(job->summary.final_accuracy.has_value());
    EXPECT_GT(*job->summary.final_accuracy, 0.0);
    EXPECT_GT(job->summary.bytes_pushed, 0u);
    // The shards' stats name the table and the rows it holds (no bound: none
    // evicted).
    ASSERT_EQ(job->summary.rows_stored.size(), 1u);
    EXPECT_GT(job->summary.rows_stored.begin()->second, 0u);
    EXPECT_EQ(job->summary.rows_evicted.begin()->second, 0u);
    ASSERT_EQ(job->finals.size(), 2u);
    // The table never came whole to a worker: its final entry is empty.
    EXPECT_TRUE(job->finals[0][0].empty());
    EXPECT_FALSE(job->finals[0][1].empty());
  }
}

// Async checkpoints of row-sparse tables (docs/sparse.md): the shards hold
// row reads at each cut clock as they hold dense reads, so every checkpoint
// is one consistent cut of dense chunks and rows alike.
JobConfig AsyncCheckpointConfig(const std::string& dir, int workers,
                                int servers, int64_t steps) {
  JobConfig c = MakeConfig(pstrain::v1::MODE_ASYNC, workers, 16, 1, 100000,
                           steps, OptimizerConfig::ADAGRAD, kLearnLr);
  c.mutable_job()->set_servers(servers);
  c.mutable_training()->set_staleness(2);
  c.mutable_data()->set_test_examples(256);
  c.mutable_checkpoint()->set_dir(dir);
  c.mutable_checkpoint()->set_every_steps(4);
  // Steps of at least 5 ms: the coordinator's orderer keeps up with the
  // shards' standing cuts (at most 2 held) on a loaded machine.
  c.mutable_worker()->set_compute_ms(5);
  FinalizeJobConfig(&c);
  return c;
}

// Checkpoint `dir`'s rows (all of them, any layout) and dense tensors, after
// checking it is one async cut: every shard's dense and row clocks at the
// step (the reader checks that the shards agree).
struct CheckpointModel {
  std::vector<std::vector<float>> dense;
  std::vector<SparseRowState> rows;
};
CheckpointModel CheckedCut(const std::string& dir) {
  CheckpointModel out;
  auto reader = CheckpointReader::Open(CheckpointEnv::Default(), dir);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  const CheckpointManifest& m = (*reader)->manifest();
  EXPECT_EQ(m.mode, "async");
  const std::vector<uint64_t> at_cut(m.num_workers, m.step);
  for (const auto& h : (*reader)->shard_headers()) {
    EXPECT_EQ(h.clocks, at_cut) << dir;
    EXPECT_TRUE(h.has_rows) << dir;
    EXPECT_EQ(h.row_clocks, at_cut) << dir;
    EXPECT_EQ(h.row_version, m.step * m.num_workers) << dir;
  }
  for (const auto& t : m.shard_map.tensors()) {
    if (t.row_sparse()) {
      auto rows = (*reader)->RowsFor({t.name()}, 0, 1);
      EXPECT_TRUE(rows.ok()) << rows.status();
      if (rows.ok()) out.rows = std::move(rows->rows[0]);
      continue;
    }
    uint64_t n = 1;
    for (int64_t d : t.shape()) n *= static_cast<uint64_t>(d);
    std::vector<float> w(n), slots(n * m.num_slots);
    EXPECT_TRUE(
        (*reader)->ReadRange(t.name(), 0, n, w.data(), slots.data()).ok());
    out.dense.push_back(std::move(w));
    out.dense.push_back(std::move(slots));
  }
  return out;
}

void ExpectSameModel(const CheckpointModel& got, const CheckpointModel& want) {
  ASSERT_EQ(got.dense.size(), want.dense.size());
  for (size_t i = 0; i < got.dense.size(); ++i) {
    EXPECT_TRUE(test_files::BitEqual(got.dense[i], want.dense[i])) << i;
  }
  ASSERT_EQ(got.rows.size(), want.rows.size());
  ASSERT_GT(want.rows.size(), 0u);
  for (size_t i = 0; i < got.rows.size(); ++i) {
    EXPECT_EQ(got.rows[i].id, want.rows[i].id);
    EXPECT_EQ(got.rows[i].updates, want.rows[i].updates);
    EXPECT_TRUE(test_files::BitEqual(got.rows[i].data, want.rows[i].data))
        << "row " << got.rows[i].id;
  }
}

// One worker: async is deterministic (one push order), so a job resumed
// from an async checkpoint ends bit-identical to the undisturbed one, on
// the same layout (shard files byte for byte) and on K' = 3 servers.
TEST(SparseJobTest, AsyncCheckpointResumesBitIdenticalWithOneWorker) {
  const std::string full_dir = test_files::TempDir("sparse-async-full");
  auto full = RunInProcessJob(AsyncCheckpointConfig(full_dir, 1, 2, 12));
  ASSERT_TRUE(full.ok()) << full.status();
  auto listing = ListCheckpoints(CheckpointEnv::Default(), full_dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{4, 8, 12}));
  const CheckpointModel want = CheckedCut(CheckpointDir(full_dir, 12));

  const std::string dir = test_files::TempDir("sparse-async-resumed");
  checkpoint_jobs::CopyCheckpoint(full_dir, 8, dir);
  auto resumed =
      RunInProcessJob(AsyncCheckpointConfig(dir, 1, 2, 12), "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->summary.steps, 12);
  for (uint32_t k = 0; k < 2; ++k) {
    const std::string name = ShardFileName(k, 2);
    EXPECT_EQ(test_files::ReadBytes(CheckpointDir(dir, 12) + "/" + name),
              test_files::ReadBytes(CheckpointDir(full_dir, 12) + "/" + name))
        << name;
  }

  const std::string resharded = test_files::TempDir("sparse-async-resharded");
  checkpoint_jobs::CopyCheckpoint(full_dir, 4, resharded);
  auto moved =
      RunInProcessJob(AsyncCheckpointConfig(resharded, 1, 3, 12), resharded);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ExpectSameModel(CheckedCut(CheckpointDir(resharded, 12)), want);
}

// Three workers, staleness 2: push orders differ from run to run, so the
// checkpoints are held to being one cut (every clock, dense and row, at the
// step on every shard), and a job resumed from one completes.
TEST(SparseJobTest, AsyncCheckpointsAreCutsWithThreeWorkers) {
  const std::string full_dir = test_files::TempDir("sparse-async-three");
  auto full = RunInProcessJob(AsyncCheckpointConfig(full_dir, 3, 2, 16));
  ASSERT_TRUE(full.ok()) << full.status();
  auto listing = ListCheckpoints(CheckpointEnv::Default(), full_dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{4, 8, 12, 16}));
  for (uint64_t step : listing->complete) {
    CheckedCut(CheckpointDir(full_dir, step));
  }
  const std::string dir = test_files::TempDir("sparse-async-three-resumed");
  checkpoint_jobs::CopyCheckpoint(full_dir, 8, dir);
  auto resumed =
      RunInProcessJob(AsyncCheckpointConfig(dir, 3, 3, 16), "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->summary.steps, 16);
  EXPECT_FALSE(resumed->summary.failed) << resumed->summary.message;
  CheckedCut(CheckpointDir(dir, 16));
}

// ---- Mode allreduce on the sparse model (allreduce.sparse: dense, allgather;
// worker/allreduce/row_replicas.h). Every rank holds a replica of the table.

// `base` in mode allreduce, rows exchanged as `sparse` says.
JobConfig AllReduceOf(JobConfig base, AllReduceConfig::Sparse sparse) {
  base.mutable_training()->set_mode(pstrain::v1::MODE_ALLREDUCE);
  base.mutable_training()->set_staleness(0);
  base.mutable_allreduce()->set_sparse(sparse);
  FinalizeJobConfig(&base);
  return base;
}

struct RingResult {
  std::vector<TensorList> dense;         // per rank: final dense weights
  std::vector<std::vector<float>> rows;  // per rank: rows [0, rows_read)
  std::vector<double> sent_per_step;     // per rank: ring bytes sent / step
  double accuracy = 0;
};

// An all-reduce job over the in-memory ring, each rank a thread with its own
// AllReduceTrainer; then each rank's replica rows [0, rows_read).
absl::StatusOr<RingResult> RunRing(const JobConfig& config, int64_t rows_read) {
  const int n = config.job().workers();
  const int64_t steps = config.training().steps();
  PS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Transport>> transports,
                      CreateInMemoryRing(n));
  RingResult result;
  result.dense.resize(n);
  result.rows.resize(n);
  result.sent_per_step.resize(n);
  absl::Mutex mu;
  int64_t correct = 0, total = 0;
  PS_RETURN_IF_ERROR(OnThreads(n, [&](int r) -> absl::Status {
    RingOptions ring;
    ring.timeout = absl::Seconds(config.allreduce().timeout_s());
    RingAllReducer reducer(transports[r].get(), ring);
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config.model()));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                        DataSource::Create(config.data()));
    TrainerOptions options;
    options.rank = r;
    options.config = config;
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<AllReduceTrainer> trainer,
        AllReduceTrainer::Create(options, &reducer, model.get(), data.get()));
    auto on_step = [&](const pstrain::v1::StepMetrics& m) -> absl::Status {
      if (!std::isfinite(m.loss())) {
        return absl::InternalError("loss is not finite");
      }
      if (m.step() == steps) {
        absl::MutexLock lock(&mu);
        correct += m.eval_correct();
        total += m.eval_total();
      }
      return absl::OkStatus();
    };
    PS_RETURN_IF_ERROR(trainer->Run(on_step, nullptr));
    result.dense[r] = trainer->params();
    result.sent_per_step[r] = static_cast<double>(reducer.bytes_sent()) / steps;
    if (rows_read > 0) {
      std::vector<int64_t> ids(rows_read);
      std::iota(ids.begin(), ids.end(), 0);
      PS_ASSIGN_OR_RETURN(result.rows[r], trainer->rows()->ReadRows(0, ids));
    }
    return absl::OkStatus();
  }));
  if (total > 0) result.accuracy = static_cast<double>(correct) / total;
  return result;
}

// N ring workers == the sync parameter server, rows included, for both
// exchanges: 4 workers x 8 examples, 12 steps, a 2,000 x 8 table, SGD,
// AdaGrad and Adam (lazy per-row state, as the shards). Replicas agree bit
// for bit. Tolerance 1e-5, the dense all-reduce's (allreduce_equivalence_
// test): the ring sums the dense tensors in fp32 while a shard sums in fixed
// point, and every later step reads those weights. The all-gather's row
// update itself is the shard's code on the same inputs (in double, in rank
// order); the dense exchange sums the rows in fp32 around the ring.
TEST(SparseJobTest, AllReduceVariantsEqualTheSyncParameterServer) {
  for (OptimizerConfig::Kind kind :
       {OptimizerConfig::SGD, OptimizerConfig::ADAGRAD,
        OptimizerConfig::ADAM}) {
    SCOPED_TRACE(OptimizerConfig::Kind_Name(kind));
    const double lr = kind == OptimizerConfig::SGD ? 0.5 : 0.05;
    const JobConfig sync =
        MakeConfig(pstrain::v1::MODE_SYNC, 4, 8, 1, kBuckets, 12, kind, lr);
    absl::StatusOr<JobResult> ps = RunJob(sync, kBuckets);
    ASSERT_TRUE(ps.ok()) << ps.status();
    absl::StatusOr<std::vector<float>> init = InitialRows(sync, kBuckets);
    ASSERT_TRUE(init.ok()) << init.status();
    ASSERT_GT(MaxRowDiff(ps->rows, *init), 1e-3);  // the table trained
    for (AllReduceConfig::Sparse sparse :
         {AllReduceConfig::DENSE, AllReduceConfig::ALLGATHER}) {
      SCOPED_TRACE(AllReduceConfig::Sparse_Name(sparse));
      const JobConfig ar = AllReduceOf(sync, sparse);
      ASSERT_TRUE(ValidateJobConfig(ar).ok()) << ValidateJobConfig(ar);
      absl::StatusOr<RingResult> ring = RunRing(ar, kBuckets);
      ASSERT_TRUE(ring.ok()) << ring.status();
      for (int r = 1; r < 4; ++r) {
        EXPECT_EQ(ring->dense[r], ring->dense[0]) << "rank " << r;
        EXPECT_EQ(ring->rows[r], ring->rows[0]) << "rank " << r;
      }
      const double dense_diff = MaxAbsDiff(ring->dense[0], ps->dense[0]);
      const double row_diff = MaxRowDiff(ring->rows[0], ps->rows);
      std::printf("%s %s: max |ring - sync PS| dense %.3g, rows %.3g\n",
                  OptimizerConfig::Kind_Name(kind).c_str(),
                  AllReduceConfig::Sparse_Name(sparse).c_str(), dense_diff,
                  row_diff);
      EXPECT_LE(dense_diff, kTolerance);
      EXPECT_LE(row_diff, kTolerance);
    }
  }
}

// Bytes per worker per step: the dense exchange moves the whole table's
// gradient (with N = 2 each rank sends exactly the all-reduced vector once:
// half in the reduce-scatter, half in the all-gather), so it grows with the
// table; the all-gather moves the rows touched, the same for 10^4 and 10^6
// rows.
TEST(SparseJobTest, AllReduceBytesFollowTheExchange) {
  const int64_t kSmall = 10000, kLarge = 1000000;
  std::vector<std::vector<double>> sent(2);  // [dense, allgather][table]
  int64_t dense_params = 0;
  for (int64_t buckets : {kSmall, kLarge}) {
    const JobConfig base = MakeConfig(pstrain::v1::MODE_SYNC, 2, 32, 1, buckets,
                                      6, OptimizerConfig::ADAGRAD, 0.05);
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(base.model());
    ASSERT_TRUE(model.ok()) << model.status();
    dense_params = (*model)->num_dense_params();
    for (int v = 0; v < 2; ++v) {
      absl::StatusOr<RingResult> ring =
          RunRing(AllReduceOf(base, v == 0 ? AllReduceConfig::DENSE
                                           : AllReduceConfig::ALLGATHER),
                  0);
      ASSERT_TRUE(ring.ok()) << ring.status();
      // The dense exchange: the same bytes from both ranks; the all-gather:
      // each rank its own rows.
      if (v == 0) EXPECT_EQ(ring->sent_per_step[0], ring->sent_per_step[1]);
      sent[v].push_back(ring->sent_per_step[0]);
    }
  }
  std::printf(
      "ring bytes sent per worker per step, 10^4 / 10^6 rows: dense %.0f / "
      "%.0f, allgather %.0f / %.0f\n",
      sent[0][0], sent[0][1], sent[1][0], sent[1][1]);
  // Dense: 4 bytes x (dense params + rows x dim + the sample count).
  EXPECT_EQ(sent[0][0], 4.0 * (dense_params + kSmall * kDim + 1));
  EXPECT_EQ(sent[0][1], 4.0 * (dense_params + kLarge * kDim + 1));
  // All-gather: the dense tensors plus the counts, and the rows touched.
  const double counts = 4.0 * (dense_params + 1 + 2 * 2);
  EXPECT_GT(sent[1][0], counts);
  EXPECT_NEAR((sent[1][1] - counts) / (sent[1][0] - counts), 1.0, 0.05);
  EXPECT_LT(sent[1][1] * 100, sent[0][1]);
}

// What ps_worker runs: both exchanges through CoordinatorNode and
// WorkerNodes over the gRPC ring; the table never comes whole to a worker
// as a tensor, and the ring's bytes are the job's.
TEST(SparseJobTest, AllReduceWideDeepJobRunsOnTheNodes) {
  for (AllReduceConfig::Sparse sparse :
       {AllReduceConfig::DENSE, AllReduceConfig::ALLGATHER}) {
    SCOPED_TRACE(AllReduceConfig::Sparse_Name(sparse));
    const JobConfig c =
        AllReduceOf(MakeConfig(pstrain::v1::MODE_SYNC, 2, 16, 1, 100000, 30,
                               OptimizerConfig::ADAGRAD, kLearnLr),
                    sparse);
    ASSERT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
    absl::StatusOr<InProcessJob> job = RunInProcessJob(c);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_FALSE(job->summary.failed) << job->summary.message;
    EXPECT_EQ(job->summary.steps, 30);
    ASSERT_TRUE(job->summary.final_accuracy.has_value());
    EXPECT_GT(*job->summary.final_accuracy, 0.0);
    EXPECT_GT(job->summary.bytes_pushed, 0u);
    ASSERT_EQ(job->finals.size(), 2u);
    EXPECT_TRUE(job->finals[0][0].empty());
    EXPECT_EQ(job->finals[0], job->finals[1]);
  }
}

// What mode allreduce cannot do with a row-sparse table, and an all-gather
// with no table, are refused by the job's validation (before anything
// starts) naming the key.
TEST(SparseJobTest, AllReduceRefusalsNameTheKey) {
  const JobConfig ok =
      AllReduceOf(MakeConfig(pstrain::v1::MODE_SYNC, 2, 16, 1, 1000, 2,
                             OptimizerConfig::SGD, 0.1),
                  AllReduceConfig::ALLGATHER);
  ASSERT_TRUE(ValidateJobConfig(ok).ok()) << ValidateJobConfig(ok);
  std::vector<std::pair<std::function<void(JobConfig*)>, std::string>> cases = {
      {[](JobConfig* c) {
         c->mutable_allreduce()->set_backend(AllReduceConfig::NCCL);
       },
       "allreduce.backend: nccl does not carry row-sparse tables"},
      {[](JobConfig* c) { c->mutable_checkpoint()->set_every_steps(5); },
       "checkpoint.every_steps: mode allreduce does not checkpoint row-sparse "
       "tables"},
      {[](JobConfig* c) {
         c->mutable_training()->set_on_failure(
             pstrain::v1::TrainingConfig::RESTART);
       },
       "training.on_failure: restart in mode allreduce needs checkpoints"},
      {[](JobConfig* c) {
         c->mutable_network()->set_wire_dtype(pstrain::v1::DTYPE_BF16);
       },
       "network.wire_dtype: allreduce.sparse: allgather sends ids and rows in "
       "fp32 only"},
      {[](JobConfig* c) {
         c->mutable_allreduce()->set_sparse(
             AllReduceConfig::SPARSE_UNSPECIFIED);
       },
       "allreduce.sparse: must be one of"},
  };
  for (const auto& [change, want] : cases) {
    JobConfig c = ok;
    change(&c);
    const absl::Status valid = ValidateJobConfig(c);
    EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(std::string(valid.message()), ::testing::HasSubstr(want));
  }
  // A model without a row-sparse table has nothing to gather.
  JobConfig mlp = DefaultJobConfig();
  mlp.mutable_training()->set_mode(pstrain::v1::MODE_ALLREDUCE);
  mlp.mutable_allreduce()->set_sparse(AllReduceConfig::ALLGATHER);
  FinalizeJobConfig(&mlp);
  const absl::Status valid = ValidateJobConfig(mlp);
  EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(valid.message()),
              ::testing::HasSubstr("allreduce.sparse: allgather applies to "
                                   "models with a row-sparse table"));
  // ... and the same job in mode allreduce with the dense exchange runs.
  mlp.mutable_allreduce()->set_sparse(AllReduceConfig::DENSE);
  EXPECT_TRUE(ValidateJobConfig(mlp).ok()) << ValidateJobConfig(mlp);
  // A job with the refused key changes nothing: no process is started.
  JobConfig bad = ok;
  bad.mutable_allreduce()->set_backend(AllReduceConfig::NCCL);
  absl::StatusOr<InProcessJob> job = RunInProcessJob(bad);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(), ValidateJobConfig(bad).message());
}

}  // namespace
}  // namespace pstrain
