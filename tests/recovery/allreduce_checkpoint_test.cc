// Checkpoints and resume in mode allreduce (docs/checkpoints.md,
// "Checkpoints in mode allreduce"): rank 0 writes its replica in the PS modes'
// format (one shard); a job resumed from one of its checkpoints, all later
// state gone as after a crash, ends with weights, optimizer slots and final
// checkpoint file bit-identical to the undisturbed job; a crash injected
// mid-write leaves the previous checkpoint loadable; a checkpoint of another
// model or mode is refused with a clear error and changes nothing. Whole jobs
// run in-process on loopback (tests/harness/in_process_job.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "common/job_config.h"
#include "common/model_spec.h"
#include "coordinator/job_spec.h"
#include "tests/harness/checkpoint_jobs.h"
#include "tests/harness/in_process_job.h"
#include "tests/harness/test_files.h"
#include "worker/allreduce/checkpointing.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 12;

JobConfig MakeConfig(const std::string& dir) {
  JobConfig c = checkpoint_jobs::SmallAdamJob(
      "allreduce-checkpoint", pstrain::v1::MODE_ALLREDUCE, kSteps, dir, 4);
  c.mutable_network()->set_rpc_timeout_s(10);
  c.mutable_network()->set_startup_timeout_s(20);
  c.mutable_allreduce()->set_timeout_s(20);
  FinalizeJobConfig(&c);
  return c;
}

std::string TempDir(const std::string& name) {
  return test_files::TempDir("allreduce-" + name);
}

using checkpoint_jobs::CopyCheckpoint;
using checkpoint_jobs::ExpectSameFinals;
using test_files::BitEqual;
using test_files::ReadBytes;

// Every file of every checkpoint under `root`, by relative path.
std::vector<std::pair<std::string, std::string>> Tree(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) {
      out.emplace_back(fs::relative(e.path(), root).string(),
                       ReadBytes(e.path().string()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::string kShardFile = "shard-00000-of-00001.ckpt";

class AllReduceCheckpointTest
    : public checkpoint_jobs::UndisturbedJobTest<AllReduceCheckpointTest> {
 public:
  static JobConfig UndisturbedConfig(const std::string& dir) {
    return MakeConfig(dir);
  }
};

TEST_F(AllReduceCheckpointTest, RankZeroWritesOneShardEveryKStepsAndAtTheEnd) {
  ASSERT_NE(full_, nullptr);
  auto listing = ListCheckpoints(CheckpointEnv::Default(), *full_dir_);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{4, 8, 12}));
  EXPECT_TRUE(listing->torn.empty());
  auto reader = CheckpointReader::Open(CheckpointEnv::Default(),
                                       CheckpointDir(*full_dir_, kSteps));
  ASSERT_TRUE(reader.ok()) << reader.status();
  const CheckpointManifest& m = (*reader)->manifest();
  EXPECT_EQ(m.mode, "allreduce");
  EXPECT_EQ(m.step, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(m.num_shards, 1u);
  EXPECT_EQ(m.num_workers, 2u);
  EXPECT_EQ(m.optimizer, "ADAM");
  EXPECT_EQ(m.num_slots, 2);
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].name, kShardFile);
  const auto& h = (*reader)->shard_headers().at(0);
  EXPECT_EQ(h.version, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(h.schedule_step, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(h.clocks, (std::vector<uint64_t>{12, 12}));
  // The final checkpoint holds the weights every rank ended with.
  ASSERT_EQ(full_->finals.size(), 2u);
  ASSERT_EQ(m.shard_map.tensors_size(),
            static_cast<int>(full_->finals[0].size()));
  for (int t = 0; t < m.shard_map.tensors_size(); ++t) {
    const auto& spec = m.shard_map.tensors(t);
    std::vector<float> w(NumElements(spec));
    ASSERT_TRUE(
        (*reader)->ReadRange(spec.name(), 0, w.size(), w.data(), nullptr).ok());
    EXPECT_TRUE(BitEqual(w, full_->finals[0][t])) << spec.name();
    EXPECT_TRUE(BitEqual(w, full_->finals[1][t])) << spec.name();
  }
}

TEST_F(AllReduceCheckpointTest, ResumedJobEndsBitIdentical) {
  ASSERT_NE(full_, nullptr);
  const std::string dir = TempDir("resumed");
  // Only the checkpoint of step 8 survives "the crash".
  CopyCheckpoint(*full_dir_, 8, dir);
  auto resumed = RunInProcessJob(MakeConfig(dir), "latest");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->summary.steps, kSteps);
  ExpectSameFinals(*resumed, *full_);
  // The final checkpoint, byte for byte: weights, both Adam moments,
  // version, clocks and schedule step; the manifest too.
  for (const char* name : {kShardFile.c_str(), kCheckpointManifest}) {
    const std::string got = ReadBytes(CheckpointDir(dir, kSteps) + "/" + name);
    EXPECT_FALSE(got.empty()) << name;
    EXPECT_EQ(got, ReadBytes(CheckpointDir(*full_dir_, kSteps) + "/" + name))
        << name;
  }
  EXPECT_EQ(resumed->summary.final_accuracy, full_->summary.final_accuracy);
}

// checkpoint.every_seconds: rank 0 picks the cut by time (nobody else needs
// to know: every rank holds the same state); checkpoint.keep is honoured.
TEST(AllReduceCheckpointTimeTest, TimedCheckpointsAndKeep) {
  const std::string dir = TempDir("timed");
  JobConfig c = MakeConfig(dir);
  c.mutable_checkpoint()->set_every_steps(0);
  c.mutable_checkpoint()->set_every_seconds(0.05);
  c.mutable_checkpoint()->set_keep(2);
  c.mutable_training()->set_steps(20);
  c.mutable_worker()->set_compute_ms(10);
  FinalizeJobConfig(&c);
  auto full = RunInProcessJob(c);
  ASSERT_TRUE(full.ok()) << full.status();
  auto listing = ListCheckpoints(CheckpointEnv::Default(), dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->complete.size(), 2u) << "checkpoint.keep: 2";
  EXPECT_EQ(listing->complete.back(), 20u);
  EXPECT_TRUE(listing->torn.empty());
  const uint64_t first = listing->complete.front();
  ASSERT_LT(first, 20u);

  const std::string again = TempDir("timed-resumed");
  CopyCheckpoint(dir, first, again);
  c.mutable_checkpoint()->set_dir(again);
  auto resumed = RunInProcessJob(c, CheckpointDir(again, first));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (size_t t = 0; t < full->finals[0].size(); ++t) {
    EXPECT_TRUE(BitEqual(resumed->finals[0][t], full->finals[0][t]))
        << "resumed at step " << first << ", tensor " << t;
  }
  EXPECT_EQ(ReadBytes(CheckpointDir(again, 20) + "/" + kShardFile),
            ReadBytes(CheckpointDir(dir, 20) + "/" + kShardFile));
}

TEST_F(AllReduceCheckpointTest, ResumeRefusesACheckpointThatDoesNotFit) {
  ASSERT_NE(full_, nullptr);
  const std::string dir = TempDir("misfit");
  CopyCheckpoint(*full_dir_, 4, dir);
  const auto before = Tree(dir);
  JobConfig other = MakeConfig(dir);
  SetList(other.mutable_model()->mutable_hidden(), {16});  // other shapes
  auto job = RunInProcessJob(other, "latest");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition)
      << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), "--resume latest"))
      << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), "does not fit"))
      << job.status();
  EXPECT_EQ(Tree(dir), before) << "the refused resume changed the checkpoint";

  // An all-reduce checkpoint does not resume a sync job (nor the reverse,
  // below): the modes sum differently, so the runs would not be exact.
  JobConfig sync = MakeConfig(dir);
  sync.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  sync.mutable_job()->set_servers(1);
  FinalizeJobConfig(&sync);
  auto as_sync = RunInProcessJob(sync, "latest");
  ASSERT_FALSE(as_sync.ok());
  EXPECT_EQ(as_sync.status().code(), absl::StatusCode::kFailedPrecondition)
      << as_sync.status();
  EXPECT_TRUE(absl::StrContains(as_sync.status().message(),
                                "in mode allreduce, not sync"))
      << as_sync.status();
  EXPECT_EQ(Tree(dir), before);
}

// A checkpoint rank 0 cannot write fails the job, naming the checkpoint.
TEST(AllReduceCheckpointFailureTest, AnUnwritableCheckpointFailsTheJob) {
  const std::string blocker = TempDir("blocker") + "/a-file";
  std::ofstream(blocker) << "not a directory\n";
  auto job = RunInProcessJob(MakeConfig(blocker + "/ckpt"));
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "checkpoint of step 4"))
      << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), blocker))
      << job.status();
}

// The unit under the trainer: what rank 0 writes and every rank reads.
class ReplicaCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto job = MakeJobSpec(MakeConfig("unused"));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    job_.set_checkpoint_dir(root_);
    for (const auto& t : job_.shard_map().tensors()) {
      const size_t n = NumElements(t);
      slots_.emplace_back(2 * n);
      for (size_t i = 0; i < n; ++i)
        weights_.push_back(0.25f * weights_.size());
      for (size_t i = 0; i < 2 * n; ++i) slots_.back()[i] = -1.0f * i;
    }
  }
  ReplicaView View() const {
    return ReplicaView{absl::MakeConstSpan(weights_), &slots_};
  }

  const std::string root_ = TempDir("unit");
  pstrain::v1::JobSpec job_;
  std::vector<float> weights_;
  std::vector<std::vector<float>> slots_;
};

TEST_F(ReplicaCheckpointTest, RoundTripsWeightsAndSlots) {
  CheckpointEnv* env = CheckpointEnv::Default();
  auto dir = SaveReplicaCheckpoint(env, root_, job_, 4, View(), 0);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, CheckpointDir(root_, 4));
  std::vector<std::vector<float>> w, s;
  ASSERT_TRUE(LoadReplicaCheckpoint(env, *dir, job_, 4, &w, &s).ok());
  std::vector<float> flat;
  for (const auto& t : w) flat.insert(flat.end(), t.begin(), t.end());
  EXPECT_TRUE(BitEqual(flat, weights_));
  ASSERT_EQ(s.size(), slots_.size());
  for (size_t t = 0; t < s.size(); ++t) EXPECT_TRUE(BitEqual(s[t], slots_[t]));
  // A complete checkpoint is never rewritten.
  EXPECT_EQ(
      SaveReplicaCheckpoint(env, root_, job_, 4, View(), 0).status().code(),
      absl::StatusCode::kAlreadyExists);
  // The wrong step, and a replica of another size, are refused.
  EXPECT_EQ(LoadReplicaCheckpoint(env, *dir, job_, 8, &w, &s).code(),
            absl::StatusCode::kFailedPrecondition);
  ReplicaView short_view = View();
  short_view.weights.remove_suffix(1);
  EXPECT_EQ(
      SaveReplicaCheckpoint(env, root_, job_, 8, short_view, 0).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// Fails the rename of one file name: a crash between writing it and making
// it visible.
class FailRename : public CheckpointEnvWrapper {
 public:
  FailRename(CheckpointEnv* target, std::string name)
      : CheckpointEnvWrapper(target), name_(std::move(name)) {}
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (absl::EndsWith(to, "/" + name_)) {
      return absl::InternalError("injected crash before rename of " + to);
    }
    return CheckpointEnvWrapper::RenameFile(from, to);
  }

 private:
  const std::string name_;
};

TEST_F(ReplicaCheckpointTest, CrashMidWriteLeavesThePreviousLoadable) {
  CheckpointEnv* env = CheckpointEnv::Default();
  ASSERT_TRUE(SaveReplicaCheckpoint(env, root_, job_, 4, View(), 1).ok());
  const std::vector<float> saved = weights_;
  for (float& v : weights_) v += 1;
  for (const std::string& name :
       {kShardFile, std::string(kCheckpointManifest)}) {
    FailRename crash(env, name);
    auto st = SaveReplicaCheckpoint(&crash, root_, job_, 8, View(), 1);
    EXPECT_FALSE(st.ok()) << name;
    auto listing = ListCheckpoints(env, root_);
    ASSERT_TRUE(listing.ok()) << listing.status();
    EXPECT_EQ(listing->complete, std::vector<uint64_t>{4}) << name;
    EXPECT_EQ(listing->torn, std::vector<uint64_t>{8}) << name;
    auto latest = LatestCheckpoint(env, root_);
    ASSERT_TRUE(latest.ok()) << latest.status();
    std::vector<std::vector<float>> w, s;
    ASSERT_TRUE(LoadReplicaCheckpoint(env, *latest, job_, 4, &w, &s).ok());
    std::vector<float> flat;
    for (const auto& t : w) flat.insert(flat.end(), t.begin(), t.end());
    EXPECT_TRUE(BitEqual(flat, saved)) << name;
  }
  // The next complete checkpoint replaces the torn one; keep: 1 removes 4.
  ASSERT_TRUE(SaveReplicaCheckpoint(env, root_, job_, 8, View(), 1).ok());
  auto listing = ListCheckpoints(env, root_);
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->complete, std::vector<uint64_t>{8});
  EXPECT_TRUE(listing->torn.empty());
}

TEST_F(ReplicaCheckpointTest, RefusesAnotherModelOrModeAndChangesNothing) {
  CheckpointEnv* env = CheckpointEnv::Default();
  auto dir = SaveReplicaCheckpoint(env, root_, job_, 4, View(), 0);
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::vector<std::vector<float>> w = {{7.0f}}, s = {{8.0f}};
  // Another model.
  JobConfig other = MakeConfig("unused");
  SetList(other.mutable_model()->mutable_hidden(), {16});
  auto other_job = MakeJobSpec(other);
  ASSERT_TRUE(other_job.ok());
  absl::Status st = LoadReplicaCheckpoint(env, *dir, *other_job, 4, &w, &s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), *dir)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "tensor")) << st;
  EXPECT_EQ(w, (std::vector<std::vector<float>>{{7.0f}}));
  EXPECT_EQ(s, (std::vector<std::vector<float>>{{8.0f}}));
  // A sync PS job's checkpoint (same tensors, one shard).
  JobConfig sync = MakeConfig("unused");
  sync.mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  sync.mutable_job()->set_servers(1);
  FinalizeJobConfig(&sync);
  auto sync_job = MakeJobSpec(sync);
  ASSERT_TRUE(sync_job.ok()) << sync_job.status();
  auto manifest = ManifestForJob(*sync_job, 4);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->mode, "sync");
  auto reader = CheckpointReader::Open(env, *dir);
  ASSERT_TRUE(reader.ok());
  // The same shard file under a sync manifest.
  const std::string sync_root = TempDir("unit-sync");
  fs::create_directories(CheckpointDir(sync_root, 4));
  fs::copy(*dir + "/" + kShardFile,
           CheckpointDir(sync_root, 4) + "/" + kShardFile);
  manifest->files = (*reader)->manifest().files;
  ASSERT_TRUE(WriteManifest(env, CheckpointDir(sync_root, 4), *manifest).ok());
  st = LoadReplicaCheckpoint(env, CheckpointDir(sync_root, 4), job_, 4, &w, &s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "mode sync, not allreduce"))
      << st;
  EXPECT_EQ(w, (std::vector<std::vector<float>>{{7.0f}}));
  // A corrupted file: DATA_LOSS naming it.
  const std::string file = *dir + "/" + kShardFile;
  std::string bytes = ReadBytes(file);
  bytes[bytes.size() - 1] ^= 1;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  st = LoadReplicaCheckpoint(env, *dir, job_, 4, &w, &s);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), kShardFile)) << st;
  EXPECT_EQ(w, (std::vector<std::vector<float>>{{7.0f}}));
}

}  // namespace
}  // namespace pstrain
