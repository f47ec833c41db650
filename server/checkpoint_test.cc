// Checkpoint unit tests: the format's checksum, round trips of every
// optimizer's slots with exact continuation, resharding K -> K' bit for bit,
// atomicity under crashes injected between files, retention, corruption
// detected by checksum, and the shard's cut (Snapshot/SnapshotAt/Restore).
#include "checkpoint/checkpoint.h"

#include <stdlib.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint_testing.h"
#include "server/shard_checkpoint.h"

namespace pstrain {
namespace {

using pstrain::v1::OptimizerConfig;
using ::testing::HasSubstr;

std::string TempRoot(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string root = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::string cmd = absl::StrCat("rm -rf '", root, "'");
  EXPECT_EQ(system(cmd.c_str()), 0);
  return root;
}

void ExpectSameState(const FullState& a, const FullState& b) {
  EXPECT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [name, w] : a.weights) {
    EXPECT_TRUE(BitEqual(w, b.weights.at(name))) << "weights of " << name;
    EXPECT_TRUE(BitEqual(a.slots.at(name), b.slots.at(name)))
        << "slots of " << name;
  }
}

TestJob MustMake(OptimizerConfig::Kind kind, bool sync, uint32_t shards,
                 uint64_t chunk_elems, uint32_t workers = 2) {
  absl::StatusOr<TestJob> job =
      MakeTestJob(kind, sync, workers, shards, chunk_elems);
  EXPECT_TRUE(job.ok()) << job.status();
  return *std::move(job);
}

std::string Save(CheckpointEnv* env, const std::string& root, TestJob& job,
                 uint64_t step, uint32_t keep = 0) {
  absl::StatusOr<std::vector<ShardState>> states = SnapshotAll(job);
  EXPECT_TRUE(states.ok()) << states.status();
  absl::StatusOr<std::string> dir =
      SaveCheckpoint(env, root, TestManifest(job, step), *states, keep);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

TEST(Crc32cTest, KnownVector) {
  // RFC 3720, B.4: CRC-32C of "123456789".
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c("56789", Crc32c("1234")), 0xE3069283u);
}

class OptimizerRoundTrip
    : public ::testing::TestWithParam<OptimizerConfig::Kind> {};

// Save after 4 steps, restore into fresh shards of the same layout: identical
// weights and slots, and 3 more steps on both stay identical bit for bit.
TEST_P(OptimizerRoundTrip, RestoresSlotsAndContinuesExactly) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot(
      absl::StrCat("round_trip_", OptimizerConfig::Kind_Name(GetParam())));
  TestJob original = MustMake(GetParam(), /*sync=*/true, 2, 8);
  ASSERT_TRUE(RunSteps(original, 0, 4).ok());
  const std::string dir = Save(env, root, original, 4);

  TestJob restored = MustMake(GetParam(), /*sync=*/true, 2, 8);
  ASSERT_TRUE(RestoreAll(env, dir, restored).ok());
  absl::StatusOr<FullState> a = Gather(original);
  absl::StatusOr<FullState> b = Gather(restored);
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectSameState(*a, *b);
  EXPECT_EQ(b->versions, (std::vector<uint64_t>{4, 4}));
  EXPECT_EQ(b->clocks[0], (std::vector<uint64_t>{4, 4}));
  if (GetParam() != OptimizerConfig::SGD) {
    // The slots moved away from their initial values, so the check has teeth.
    TestJob fresh = MustMake(GetParam(), true, 2, 8);
    absl::StatusOr<FullState> f = Gather(fresh);
    ASSERT_TRUE(f.ok());
    EXPECT_FALSE(
        BitEqual(f->slots.at("layer0/weight"), b->slots.at("layer0/weight")));
  }

  ASSERT_TRUE(RunSteps(original, 4, 7).ok());
  ASSERT_TRUE(RunSteps(restored, 4, 7).ok());
  a = Gather(original);
  b = Gather(restored);
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectSameState(*a, *b);
}

INSTANTIATE_TEST_SUITE_P(
    EveryOptimizer, OptimizerRoundTrip,
    ::testing::Values(OptimizerConfig::SGD, OptimizerConfig::MOMENTUM,
                      OptimizerConfig::ADAM, OptimizerConfig::ADAMW,
                      OptimizerConfig::ADAGRAD),
    [](const ::testing::TestParamInfo<OptimizerConfig::Kind>& info) {
      return OptimizerConfig::Kind_Name(info.param);
    });

struct Layout {
  uint32_t shards;
  uint64_t chunk_elems;
};

// A checkpoint of 2 shards with 8-element chunks restores onto other shard
// counts and chunk sizes with bit-identical weights and slots.
TEST(ReshardTest, AnyLayoutBitExact) {
  CheckpointEnv* env = CheckpointEnv::Default();
  for (bool sync : {true, false}) {
    const std::string root = TempRoot(absl::StrCat("reshard_", sync));
    TestJob original = MustMake(OptimizerConfig::ADAM, sync, 2, 8);
    ASSERT_TRUE(RunSteps(original, 0, 5).ok());
    const std::string dir = Save(env, root, original, 5);
    absl::StatusOr<FullState> want = Gather(original);
    ASSERT_TRUE(want.ok());
    for (Layout layout :
         {Layout{3, 5}, Layout{1, 64}, Layout{4, 3}, Layout{2, 8}}) {
      SCOPED_TRACE(absl::StrCat("sync ", sync, ", ", layout.shards,
                                " shards of ", layout.chunk_elems));
      TestJob resharded = MustMake(OptimizerConfig::ADAM, sync, layout.shards,
                                   layout.chunk_elems);
      ASSERT_TRUE(RestoreAll(env, dir, resharded).ok());
      absl::StatusOr<FullState> got = Gather(resharded);
      ASSERT_TRUE(got.ok());
      ExpectSameState(*want, *got);
      for (uint64_t v : got->versions) EXPECT_EQ(v, want->versions[0]);
      // Training goes on from the restored state.
      EXPECT_TRUE(RunSteps(resharded, 5, 6).ok());
    }
  }
}

// With the same chunks on another number of shards, training resumed from
// the checkpoint continues bit for bit like the undisturbed run (the sync
// sum's exponents travel with the chunks).
TEST(ReshardTest, SameChunksOtherShardCountContinuesExactly) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot("reshard_continue");
  TestJob original = MustMake(OptimizerConfig::ADAM, true, 2, 8);
  ASSERT_TRUE(RunSteps(original, 0, 4).ok());
  const std::string dir = Save(env, root, original, 4);
  ASSERT_TRUE(RunSteps(original, 4, 8).ok());
  absl::StatusOr<FullState> want = Gather(original);
  ASSERT_TRUE(want.ok());
  for (uint32_t shards : {1u, 3u}) {
    SCOPED_TRACE(absl::StrCat(shards, " shards"));
    TestJob resumed = MustMake(OptimizerConfig::ADAM, true, shards, 8);
    ASSERT_TRUE(RestoreAll(env, dir, resumed).ok());
    ASSERT_TRUE(RunSteps(resumed, 4, 8).ok());
    absl::StatusOr<FullState> got = Gather(resumed);
    ASSERT_TRUE(got.ok());
    ExpectSameState(*want, *got);
  }
}

// Fails every operation from the (n+1)-th rename on, as if the process died
// there: what is on disk is what a crash at that point leaves.
class CrashingEnv : public CheckpointEnvWrapper {
 public:
  CrashingEnv(CheckpointEnv* target, int renames_before_crash)
      : CheckpointEnvWrapper(target), renames_left_(renames_before_crash) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    if (crashed_) return Crashed();
    return CheckpointEnvWrapper::NewWritableFile(path);
  }
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (crashed_ || renames_left_-- == 0) return Crashed();
    return CheckpointEnvWrapper::RenameFile(from, to);
  }
  absl::Status SyncDir(const std::string& path) override {
    if (crashed_) return Crashed();
    return CheckpointEnvWrapper::SyncDir(path);
  }
  absl::Status DeleteFile(const std::string& path) override {
    if (crashed_) return Crashed();
    return CheckpointEnvWrapper::DeleteFile(path);
  }

 private:
  absl::Status Crashed() {
    crashed_ = true;
    return absl::AbortedError("injected crash");
  }
  int renames_left_;
  bool crashed_ = false;
};

// A crash before each rename of checkpoint 6 (shard files, then the
// manifest) leaves checkpoint 3 the latest, loadable and intact; the torn
// directory is ignored, reported, and removed by the next complete save.
TEST(AtomicityTest, CrashBetweenFilesKeepsPreviousCheckpoint) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const uint32_t kShards = 3;
  for (int crash_at = 0; crash_at <= static_cast<int>(kShards); ++crash_at) {
    SCOPED_TRACE(absl::StrCat("crash before rename ", crash_at));
    const std::string root = TempRoot(absl::StrCat("atomic_", crash_at));
    TestJob job = MustMake(OptimizerConfig::MOMENTUM, true, kShards, 4);
    ASSERT_TRUE(RunSteps(job, 0, 3).ok());
    const std::string good = Save(env, root, job, 3);
    absl::StatusOr<FullState> at3 = Gather(job);
    ASSERT_TRUE(at3.ok());

    ASSERT_TRUE(RunSteps(job, 3, 6).ok());
    CrashingEnv crashing(env, crash_at);
    absl::StatusOr<std::vector<ShardState>> states = SnapshotAll(job);
    ASSERT_TRUE(states.ok());
    absl::StatusOr<std::string> torn = SaveCheckpoint(
        &crashing, root, TestManifest(job, 6), *states, /*keep=*/1);
    EXPECT_EQ(torn.status().code(), absl::StatusCode::kAborted);

    absl::StatusOr<std::string> latest = LatestCheckpoint(env, root);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, good);
    absl::StatusOr<CheckpointListing> listing = ListCheckpoints(env, root);
    ASSERT_TRUE(listing.ok());
    EXPECT_EQ(listing->complete, std::vector<uint64_t>{3});
    EXPECT_EQ(listing->torn, std::vector<uint64_t>{6});
    absl::StatusOr<std::unique_ptr<CheckpointReader>> torn_reader =
        CheckpointReader::Open(env, CheckpointDir(root, 6));
    EXPECT_EQ(torn_reader.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(torn_reader.status().message(), HasSubstr("torn"));

    TestJob restored = MustMake(OptimizerConfig::MOMENTUM, true, kShards, 4);
    ASSERT_TRUE(RestoreAll(env, *latest, restored).ok());
    absl::StatusOr<FullState> got = Gather(restored);
    ASSERT_TRUE(got.ok());
    ExpectSameState(*at3, *got);

    // The next complete checkpoint, keep 1: the old one and the torn one go.
    ASSERT_TRUE(RunSteps(job, 6, 7).ok());
    Save(env, root, job, 7, /*keep=*/1);
    listing = ListCheckpoints(env, root);
    ASSERT_TRUE(listing.ok());
    EXPECT_EQ(listing->complete, std::vector<uint64_t>{7});
    EXPECT_TRUE(listing->torn.empty());
    EXPECT_FALSE(env->FileExists(CheckpointDir(root, 6)));
  }
}

// Each shard saves its own file when it reaches the cut, while the workers
// keep training past it; the manifest, written last, makes the checkpoint,
// and it restores the state after step 2 exactly.
TEST(DistributedSaveTest, ShardsSaveAtTheCutWhileTrainingGoesOn) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot("distributed");
  TestJob job = MustMake(OptimizerConfig::ADAGRAD, true, 3, 4);
  TestJob reference = MustMake(OptimizerConfig::ADAGRAD, true, 3, 4);
  ASSERT_TRUE(RunSteps(reference, 0, 3).ok());
  absl::StatusOr<FullState> want = Gather(reference);
  ASSERT_TRUE(want.ok());

  std::vector<absl::StatusOr<CheckpointFile>> files(3);
  std::vector<std::thread> savers;
  for (uint32_t k = 0; k < 3; ++k) {
    savers.emplace_back([&, k] {
      files[k] = SaveShardAt(*job.shards[k], 3, env, root, 3,
                             absl::Now() + absl::Seconds(20));
    });
  }
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  for (auto& shard : job.shards) {
    while (shard->waiting_snapshots() == 0 && absl::Now() < limit) {
      std::this_thread::yield();
    }
  }
  ASSERT_TRUE(RunSteps(job, 0, 6).ok());
  for (std::thread& t : savers) t.join();
  EXPECT_FALSE(LatestCheckpoint(env, root).ok());  // no manifest yet
  CheckpointManifest manifest = TestManifest(job, 3);
  for (auto& f : files) {
    ASSERT_TRUE(f.ok()) << f.status();
    manifest.files.push_back(*f);
  }
  const std::string dir = CheckpointDir(root, 3);
  ASSERT_TRUE(WriteManifest(env, dir, manifest).ok());

  TestJob restored = MustMake(OptimizerConfig::ADAGRAD, true, 2, 8);
  ASSERT_TRUE(RestoreAll(env, dir, restored).ok());
  absl::StatusOr<FullState> got = Gather(restored);
  ASSERT_TRUE(got.ok());
  ExpectSameState(*want, *got);
}

TEST(CompatibilityTest, AnotherJobIsRefusedByName) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot("compatibility");
  TestJob job = MustMake(OptimizerConfig::ADAM, true, 2, 8);
  const std::string dir = Save(env, root, job, 0);
  TestJob adamw = MustMake(OptimizerConfig::ADAMW, true, 2, 8);
  absl::Status s = RestoreAll(env, dir, adamw);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("optimizer is ADAM, the job's is ADAMW"));
  TestJob three = MustMake(OptimizerConfig::ADAM, true, 2, 8, /*workers=*/3);
  s = RestoreAll(env, dir, three);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("2 workers, the job has 3"));
  TestJob other = MustMake(OptimizerConfig::ADAM, true, 2, 8);
  other.options[0].shard_map.mutable_tensors(1)->set_name("layer0/b");
  s = RestoreAll(env, dir, other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("'layer0/bias' [5], the job's is"));
}

TEST(AtomicityTest, CompleteCheckpointIsNeverRewritten) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot("no_rewrite");
  TestJob job = MustMake(OptimizerConfig::MOMENTUM, true, 2, 8);
  ASSERT_TRUE(RunSteps(job, 0, 2).ok());
  const std::string dir = Save(env, root, job, 2);
  absl::StatusOr<FullState> at2 = Gather(job);
  ASSERT_TRUE(RunSteps(job, 2, 3).ok());
  absl::StatusOr<std::vector<ShardState>> states = SnapshotAll(job);
  ASSERT_TRUE(at2.ok() && states.ok());
  absl::StatusOr<std::string> again =
      SaveCheckpoint(env, root, TestManifest(job, 2), *states, 0);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  TestJob restored = MustMake(OptimizerConfig::MOMENTUM, true, 2, 8);
  ASSERT_TRUE(RestoreAll(env, dir, restored).ok());
  absl::StatusOr<FullState> got = Gather(restored);
  ASSERT_TRUE(got.ok());
  ExpectSameState(*at2, *got);
}

// Shards that saw different late (dropped) pushes resume from the smallest
// clock of each worker; shards at different versions are not one cut.
TEST(ReaderTest, ClocksTakeTheMinimumVersionsMustAgree) {
  CheckpointEnv* env = CheckpointEnv::Default();
  TestJob job = MustMake(OptimizerConfig::SGD, true, 2, 8);
  ASSERT_TRUE(RunSteps(job, 0, 2).ok());
  absl::StatusOr<std::vector<ShardState>> states = SnapshotAll(job);
  ASSERT_TRUE(states.ok());
  (*states)[0].clocks = {2, 1};
  (*states)[1].clocks = {1, 2};
  const std::string root = TempRoot("reader_clocks");
  absl::StatusOr<std::string> dir =
      SaveCheckpoint(env, root, TestManifest(job, 2), *states, 0);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(env, *dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<ShardState> state =
      (*reader)->StateFor(ShardRanges(*job.shards[0]));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->clocks, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(state->version, 2u);

  (*states)[1].version = 3;
  dir = SaveCheckpoint(env, root, TestManifest(job, 3), *states, 0);
  ASSERT_TRUE(dir.ok()) << dir.status();
  reader = CheckpointReader::Open(env, *dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  state = (*reader)->StateFor(ShardRanges(*job.shards[0]));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(), HasSubstr("shard 1 has version 3"));
}

TEST(RetentionTest, KeepsTheLastK) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot("retention");
  TestJob job = MustMake(OptimizerConfig::SGD, true, 2, 8);
  for (uint64_t step = 1; step <= 5; ++step) {
    ASSERT_TRUE(RunSteps(job, step - 1, step).ok());
    Save(env, root, job, step, /*keep=*/2);
  }
  absl::StatusOr<CheckpointListing> listing = ListCheckpoints(env, root);
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->complete, (std::vector<uint64_t>{4, 5}));
  absl::StatusOr<std::vector<std::string>> names = env->ListDir(root);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 2u);
}

void Overwrite(const std::string& path, size_t at, char byte) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(byte);
}

TEST(CorruptionTest, ChecksumNamesTheFile) {
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string root = TempRoot("corruption");
  TestJob job = MustMake(OptimizerConfig::ADAM, true, 2, 8);
  ASSERT_TRUE(RunSteps(job, 0, 2).ok());
  const std::string dir = Save(env, root, job, 2);
  const std::string victim = dir + "/" + ShardFileName(1, 2);
  absl::StatusOr<std::string> before = env->ReadFile(victim);
  ASSERT_TRUE(before.ok());

  // One flipped bit in the data.
  Overwrite(victim, before->size() - 3, (*before)[before->size() - 3] ^ 0x10);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> r =
      CheckpointReader::Open(env, dir);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(ShardFileName(1, 2)));
  EXPECT_THAT(r.status().message(), HasSubstr("CRC-32C"));

  // Truncated.
  ASSERT_EQ(truncate(victim.c_str(), before->size() / 2), 0);
  r = CheckpointReader::Open(env, dir);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("bytes, the manifest says"));

  // Missing.
  ASSERT_TRUE(env->DeleteFile(victim).ok());
  r = CheckpointReader::Open(env, dir);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(ShardFileName(1, 2)));

  // A garbled manifest.
  Overwrite(dir + "/" + kCheckpointManifest, 0, '#');
  r = CheckpointReader::Open(env, dir);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(kCheckpointManifest));
}

TEST(ShardCutTest, RestoreRejectsAnotherLayoutAndChangesNothing) {
  TestJob a = MustMake(OptimizerConfig::ADAM, true, 2, 8);
  TestJob b = MustMake(OptimizerConfig::ADAM, true, 3, 5);
  TestJob sgd = MustMake(OptimizerConfig::SGD, true, 2, 8);
  ASSERT_TRUE(RunSteps(a, 0, 2).ok());
  absl::StatusOr<FullState> before = Gather(b);
  absl::StatusOr<ShardState> state = a.shards[0]->Snapshot();
  ASSERT_TRUE(state.ok() && before.ok());
  absl::Status s = b.shards[0]->Restore(*state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("chunk"));
  s = sgd.shards[0]->Restore(*state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("optimizer slots"));
  absl::StatusOr<FullState> after = Gather(b);
  ASSERT_TRUE(after.ok());
  ExpectSameState(*before, *after);
  EXPECT_EQ(after->versions, before->versions);
}

// Sync: SnapshotAt(t) captures the state right after step t - 1 even though
// a worker pushes step t at once; a cut already passed is refused.
TEST(ShardCutTest, SyncSnapshotAtCapturesTheStepBoundary) {
  TestJob job = MustMake(OptimizerConfig::ADAM, true, 1, 8);
  TestJob reference = MustMake(OptimizerConfig::ADAM, true, 1, 8);
  ASSERT_TRUE(RunSteps(reference, 0, 2).ok());
  absl::StatusOr<FullState> want = Gather(reference);
  ASSERT_TRUE(want.ok());

  // Step 0 done, step 1 waits for worker 1: cut 2 is ahead.
  ASSERT_TRUE(RunSteps(job, 0, 1).ok());
  ASSERT_TRUE(PushToAll(job, 0, 1).ok());
  absl::StatusOr<ShardState> got;
  std::thread waiter([&] {
    got = job.shards[0]->SnapshotAt(2, absl::Now() + absl::Seconds(20));
  });
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (job.shards[0]->waiting_snapshots() == 0 && absl::Now() < limit) {
    std::this_thread::yield();
  }
  ASSERT_EQ(job.shards[0]->waiting_snapshots(), 1u);
  // Completes step 1; then worker 0 records its step-2 push at once.
  ASSERT_TRUE(PushToAll(job, 1, 1).ok());
  ASSERT_TRUE(PushToAll(job, 0, 2).ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 2u);
  EXPECT_EQ(got->cut, 2u);
  TestJob restored = MustMake(OptimizerConfig::ADAM, true, 1, 8);
  ASSERT_TRUE(restored.shards[0]->Restore(*got).ok());
  absl::StatusOr<FullState> have = Gather(restored);
  ASSERT_TRUE(have.ok());
  ExpectSameState(*want, *have);

  absl::StatusOr<ShardState> late =
      job.shards[0]->SnapshotAt(2, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<ShardState> now = job.shards[0]->Snapshot();
  EXPECT_EQ(now.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(now.status().message(), HasSubstr("step boundary"));
}

// Standing cuts: the shard captures cuts 2, 4 and the last (5) by itself
// while nobody asks, keeps the newest two, and SnapshotAt hands them out
// long after the shard passed them.
TEST(ShardCutTest, SyncStandingCutsAreCapturedWithoutAnOrder) {
  TestJob job = MustMake(OptimizerConfig::ADAM, true, 1, 8);
  job.shards[0]->SetStandingCuts(2, 5);
  ASSERT_TRUE(RunSteps(job, 0, 5).ok());
  ASSERT_TRUE(PushToAll(job, 0, 5).ok());  // already past cut 5 too
  for (uint64_t cut : {4, 5}) {
    TestJob reference = MustMake(OptimizerConfig::ADAM, true, 1, 8);
    ASSERT_TRUE(RunSteps(reference, 0, cut).ok());
    absl::StatusOr<FullState> want = Gather(reference);
    ASSERT_TRUE(want.ok());
    absl::StatusOr<ShardState> got =
        job.shards[0]->SnapshotAt(cut, absl::Now() + absl::Seconds(1));
    ASSERT_TRUE(got.ok()) << cut << ": " << got.status();
    EXPECT_EQ(got->cut, cut);
    TestJob restored = MustMake(OptimizerConfig::ADAM, true, 1, 8);
    ASSERT_TRUE(restored.shards[0]->Restore(*got).ok());
    absl::StatusOr<FullState> have = Gather(restored);
    ASSERT_TRUE(have.ok());
    ExpectSameState(*want, *have);
  }
  // Cut 2 was dropped (two held at most), and a capture is handed out once.
  for (uint64_t cut : {2, 4}) {
    EXPECT_EQ(job.shards[0]
                  ->SnapshotAt(cut, absl::Now() + absl::Seconds(1))
                  .status()
                  .code(),
              absl::StatusCode::kFailedPrecondition)
        << cut;
  }
}

// Async: a waiting SnapshotAt(2) is served by the push that brings every
// clock to 2; Close() ends a wait with UNAVAILABLE.
TEST(ShardCutTest, AsyncSnapshotAtServedWhenEveryClockArrives) {
  TestJob job = MustMake(OptimizerConfig::MOMENTUM, false, 1, 8);
  TestJob reference = MustMake(OptimizerConfig::MOMENTUM, false, 1, 8);
  ASSERT_TRUE(RunSteps(reference, 0, 2).ok());
  absl::StatusOr<FullState> want = Gather(reference);
  ASSERT_TRUE(want.ok());
  absl::StatusOr<ShardState> got;
  std::thread waiter([&] {
    got = job.shards[0]->SnapshotAt(2, absl::Now() + absl::Seconds(20));
  });
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (job.shards[0]->waiting_snapshots() == 0 && absl::Now() < limit) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(RunSteps(job, 0, 2).ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->clocks, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(got->schedule_step, 2u);
  TestJob restored = MustMake(OptimizerConfig::MOMENTUM, false, 1, 8);
  ASSERT_TRUE(restored.shards[0]->Restore(*got).ok());
  absl::StatusOr<FullState> have = Gather(restored);
  ASSERT_TRUE(have.ok());
  ExpectSameState(*want, *have);

  std::thread closer([&] {
    while (job.shards[0]->waiting_snapshots() == 0 && absl::Now() < limit) {
      std::this_thread::yield();
    }
    job.shards[0]->Close();
  });
  absl::StatusOr<ShardState> closed =
      job.shards[0]->SnapshotAt(5, absl::Now() + absl::Seconds(20));
  closer.join();
  EXPECT_EQ(closed.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ShardCutTest, AsyncCutNeedsEveryClockEqual) {
  TestJob job = MustMake(OptimizerConfig::SGD, false, 1, 8, /*workers=*/3);
  ASSERT_TRUE(RunSteps(job, 0, 1).ok());
  ASSERT_TRUE(job.shards[0]->Snapshot().ok());
  ASSERT_TRUE(PushToAll(job, 0, 1).ok());
  absl::StatusOr<ShardState> s = job.shards[0]->Snapshot();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("2,1,1"));
  // Workers 1 and 2 are below cut 2: the deadline error names them.
  s = job.shards[0]->SnapshotAt(2, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.status().message(), HasSubstr("1@1, 2@1"));
  // Cut 1 is past (worker 0 pushed clock 1).
  s = job.shards[0]->SnapshotAt(1, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pstrain
