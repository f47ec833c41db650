#include "server/consistency_rule.h"

#include <cmath>

#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"

namespace pstrain {
namespace {

using Action = PushDecision::Action;
using Kind = ConsistencyOptions::Kind;

std::unique_ptr<ConsistencyRule> Make(ConsistencyOptions o) {
  auto rule = MakeConsistencyRule(o);
  EXPECT_TRUE(rule.ok()) << rule.status();
  return rule.ok() ? *std::move(rule) : nullptr;
}

ConsistencyOptions Bsp(uint32_t workers, uint32_t backups = 0) {
  ConsistencyOptions o;
  o.kind = Kind::kBsp;
  o.num_workers = workers;
  o.backup_workers = backups;
  return o;
}

ConsistencyOptions Ssp(uint32_t workers, int64_t staleness) {
  ConsistencyOptions o;
  o.kind = Kind::kSsp;
  o.num_workers = workers;
  o.staleness = staleness;
  return o;
}

TEST(ConsistencyRuleTest, BspRecordsTheCurrentStepDropsLateAndRefusesAhead) {
  auto rule = Make(Bsp(3));
  ASSERT_NE(rule, nullptr);
  EXPECT_TRUE(rule->records_pushes());
  ShardProgress p{/*version=*/2, /*min_clock=*/1};
  EXPECT_TRUE(rule->Readable(2, p));
  EXPECT_FALSE(rule->Readable(3, p));
  EXPECT_EQ(rule->ReadMinClock(5, p), 2u);
  EXPECT_EQ(rule->ReadMinClock(1, p), 1u);
  EXPECT_EQ(rule->OnPush(2, 0, p)->action, Action::kRecord);
  EXPECT_EQ(rule->OnPush(1, 0, p)->action, Action::kDrop);
  EXPECT_EQ(rule->OnPush(3, 0, p).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(rule->StepComplete(2));
  EXPECT_TRUE(rule->StepComplete(3));
}

TEST(ConsistencyRuleTest, BspWithBackupsCompletesWithNMinusB) {
  auto rule = Make(Bsp(4, 1));
  ASSERT_NE(rule, nullptr);
  EXPECT_FALSE(rule->StepComplete(2));
  EXPECT_TRUE(rule->StepComplete(3));
}

TEST(ConsistencyRuleTest, SspGatesOnTheSlowestWorkerAndScalesTheRate) {
  auto rule = Make(Ssp(2, 1));
  ASSERT_NE(rule, nullptr);
  EXPECT_FALSE(rule->records_pushes());
  ShardProgress p{/*version=*/7, /*min_clock=*/3};
  EXPECT_TRUE(rule->Readable(4, p));
  EXPECT_FALSE(rule->Readable(5, p));
  EXPECT_EQ(rule->RequiredClock(5, p), 4u);
  EXPECT_EQ(rule->ReadMinClock(5, p), 3u);
  absl::StatusOr<PushDecision> d = rule->OnPush(4, 3, p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->action, Action::kApply);
  EXPECT_EQ(d->schedule_step, 4u);
  EXPECT_EQ(d->lr_scale, 1.0);  // staleness_aware_lr is off

  ConsistencyOptions aware = Ssp(2, -1);
  aware.staleness_aware_lr = true;
  auto scaled = Make(aware);
  ASSERT_NE(scaled, nullptr);
  EXPECT_TRUE(scaled->Readable(1000, p));  // unbounded
  EXPECT_EQ(scaled->OnPush(4, 4, p)->lr_scale, 0.25);
  EXPECT_EQ(scaled->OnPush(4, 1, p)->lr_scale, 1.0);
  EXPECT_EQ(scaled->OnPush(4, 0, p)->lr_scale, 1.0);
}

// An async checkpoint cut c not yet captured: reads at clocks >= c wait for
// every worker to reach c, whatever the staleness (inf included); reads
// below c keep the SSP bound. Bsp ignores the cut (it cuts at steps).
TEST(ConsistencyRuleTest, SspHoldsReadsAtACheckpointCut) {
  for (int64_t staleness : {0, 2, -1}) {
    auto rule = Make(Ssp(3, staleness));
    ASSERT_NE(rule, nullptr);
    ShardProgress p{/*version=*/10, /*min_clock=*/4, /*next_cut=*/6};
    EXPECT_TRUE(rule->Readable(4, p)) << staleness;
    EXPECT_EQ(rule->Readable(5, p), staleness != 0) << staleness;
    EXPECT_FALSE(rule->Readable(6, p)) << staleness;
    EXPECT_FALSE(rule->Readable(7, p)) << staleness;
    EXPECT_EQ(rule->RequiredClock(6, p), 6u) << staleness;
    EXPECT_EQ(rule->RequiredClock(5, p),
              staleness < 0 ? 0u : 5u - static_cast<uint64_t>(staleness))
        << staleness;
    p.min_clock = 6;  // every worker reached the cut
    p.next_cut = 0;   // and the shard captured it
    EXPECT_TRUE(rule->Readable(6, p)) << staleness;
    EXPECT_EQ(rule->Readable(8, p), staleness != 0) << staleness;
  }
  auto bsp = Make(Bsp(3));
  ASSERT_NE(bsp, nullptr);
  ShardProgress p{/*version=*/6, /*min_clock=*/5, /*next_cut=*/6};
  EXPECT_TRUE(bsp->Readable(6, p));
  EXPECT_EQ(bsp->RequiredClock(6, p), 6u);
}

// training.async_lr_per_push: scaled: every push at lr / N, times the
// staleness-aware factor when that is on too.
TEST(ConsistencyRuleTest, SspLrPerWorkerDividesByTheWorkers) {
  ShardProgress p{/*version=*/7, /*min_clock=*/3};
  ConsistencyOptions o = Ssp(4, 2);
  o.lr_per_worker = true;
  auto rule = Make(o);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->OnPush(4, 0, p)->lr_scale, 0.25);
  EXPECT_EQ(rule->OnPush(4, 2, p)->lr_scale, 0.25);
  o.staleness_aware_lr = true;
  auto both = Make(o);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(both->OnPush(4, 2, p)->lr_scale, 0.125);
  EXPECT_EQ(both->OnPush(4, 1, p)->lr_scale, 0.25);
}

// training.clock model: the schedule follows the model step (pushes / N,
// not the pusher's clock), and once N x steps pushes are in every read is
// released, whatever the staleness bound says.
TEST(ConsistencyRuleTest,
     SspModelClockSchedulesByModelStepAndReleasesAtTheEnd) {
  ConsistencyOptions o = Ssp(4, 1);
  o.model_clock_steps = 10;
  auto rule = Make(o);
  ASSERT_NE(rule, nullptr);
  ShardProgress p{/*version=*/17, /*min_clock=*/2};
  EXPECT_EQ(rule->OnPush(9, 0, p)->schedule_step, 4u);  // 17 / 4
  p.version = 39;
  EXPECT_EQ(rule->OnPush(30, 0, p)->schedule_step, 9u);
  EXPECT_FALSE(rule->Readable(9, p));  // min_clock 2, s = 1: held
  p.version = 40;                      // 4 x 10 pushes: the model is done
  EXPECT_TRUE(rule->Readable(9, p));
  EXPECT_TRUE(rule->Readable(1000, p));

  auto worker_clock = Make(Ssp(4, 1));
  ASSERT_NE(worker_clock, nullptr);
  EXPECT_EQ(worker_clock->OnPush(9, 0, p)->schedule_step, 9u);
  EXPECT_FALSE(worker_clock->Readable(9, p));
}

TEST(ConsistencyRuleTest, RejectsOptionsOutsideTheirRule) {
  ConsistencyOptions none;
  none.num_workers = 2;
  ConsistencyOptions no_workers = Bsp(0);
  ConsistencyOptions backups_async = Ssp(3, 0);
  backups_async.backup_workers = 1;
  ConsistencyOptions too_many_backups = Bsp(3, 3);
  ConsistencyOptions dc_sync = Bsp(3);
  dc_sync.dc_lambda = 0.5;
  ConsistencyOptions lr_sync = Bsp(3);
  lr_sync.staleness_aware_lr = true;
  ConsistencyOptions per_worker_sync = Bsp(3);
  per_worker_sync.lr_per_worker = true;
  ConsistencyOptions dc_nan = Ssp(3, 0);
  dc_nan.dc_lambda = std::nan("");
  ConsistencyOptions dc_negative = Ssp(3, 0);
  dc_negative.dc_lambda = -1;
  ConsistencyOptions model_clock_sync = Bsp(3);
  model_clock_sync.model_clock_steps = 5;
  for (const ConsistencyOptions& o :
       {none, no_workers, backups_async, too_many_backups, dc_sync, lr_sync,
        per_worker_sync, dc_nan, dc_negative, model_clock_sync}) {
    EXPECT_EQ(MakeConsistencyRule(o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

CutProgress Cut(uint64_t version, bool step_open, uint64_t min_clock,
                uint64_t lowest, uint64_t highest) {
  CutProgress p;
  p.version = version;
  p.step_open = step_open;
  p.min_clock = min_clock;
  p.lowest_clock = lowest;
  p.highest_clock = highest;
  return p;
}

TEST(ConsistencyRuleTest, BspCutsAtStepBoundaries) {
  for (uint32_t backups : {0u, 1u}) {
    auto rule = Make(Bsp(3, backups));
    ASSERT_NE(rule, nullptr);
    EXPECT_FALSE(rule->AcknowledgesRejoinedPushes());
    EXPECT_FALSE(rule->HoldsReadsAtCuts());
    // Version 4, nothing of step 4 yet; the clocks do not matter (with
    // backup workers a late worker's clock lags the version).
    const CutProgress closed = Cut(4, false, /*min_clock=*/3, 3, 4);
    EXPECT_EQ(rule->ReachedCut(closed), 4u);
    EXPECT_TRUE(rule->AtCut(4, closed));
    EXPECT_FALSE(rule->AtCut(3, closed));
    EXPECT_FALSE(rule->AtCut(5, closed));
    EXPECT_TRUE(rule->PastCut(3, closed));
    EXPECT_FALSE(rule->PastCut(4, closed));
    EXPECT_FALSE(rule->PastCut(5, closed));
    // A push of step 4 recorded (or a chunk of it applied): cut 4 is gone.
    const CutProgress open = Cut(4, true, 4, 4, 5);
    EXPECT_EQ(rule->ReachedCut(open), 4u);
    EXPECT_FALSE(rule->AtCut(4, open));
    EXPECT_TRUE(rule->PastCut(4, open));
    EXPECT_FALSE(rule->PastCut(5, open));
  }
}

// Elastic stand-ins (server/sparse_shard.h): a pull at clock c when step c
// has completed since (version c + 1) asks for the state before step c.
TEST(ConsistencyRuleTest, OnlyBspPullsReadBeforeACompletedStep) {
  auto bsp = Make(Bsp(3));
  ASSERT_NE(bsp, nullptr);
  EXPECT_TRUE(bsp->ReadsBeforeCompletedStep(4, ShardProgress{5, 4}));
  EXPECT_FALSE(bsp->ReadsBeforeCompletedStep(4, ShardProgress{4, 3}));
  EXPECT_FALSE(bsp->ReadsBeforeCompletedStep(3, ShardProgress{5, 4}));
  // With backup workers version c + 1 is also what a late worker reads.
  auto backups = Make(Bsp(3, 1));
  ASSERT_NE(backups, nullptr);
  EXPECT_FALSE(backups->ReadsBeforeCompletedStep(4, ShardProgress{5, 4}));
  // Ssp counts pushes applied on arrival: the version says nothing of
  // steps.
  for (int64_t staleness : {int64_t{0}, int64_t{-1}}) {
    auto ssp = Make(Ssp(3, staleness));
    ASSERT_NE(ssp, nullptr);
    EXPECT_FALSE(ssp->ReadsBeforeCompletedStep(4, ShardProgress{5, 4}));
  }
}

TEST(ConsistencyRuleTest, SspCutsAtClockCutsAndHoldsReadsThere) {
  for (int64_t staleness : {int64_t{0}, int64_t{2}, int64_t{-1}}) {
    auto rule = Make(Ssp(3, staleness));
    ASSERT_NE(rule, nullptr);
    EXPECT_TRUE(rule->AcknowledgesRejoinedPushes());
    EXPECT_TRUE(rule->HoldsReadsAtCuts());
    // Every worker at clock 6; the version and an open step do not matter.
    const CutProgress even = Cut(17, true, 6, 6, 6);
    EXPECT_EQ(rule->ReachedCut(even), 6u);
    EXPECT_TRUE(rule->AtCut(6, even));
    EXPECT_FALSE(rule->AtCut(5, even));
    EXPECT_FALSE(rule->PastCut(6, even));
    EXPECT_TRUE(rule->PastCut(5, even));
    // Clocks 5..7: neither 5, 6 nor 7 is the state now; 5 and 6 are passed.
    const CutProgress spread = Cut(17, false, 5, 5, 7);
    EXPECT_EQ(rule->ReachedCut(spread), 5u);
    for (uint64_t c : {5u, 6u, 7u}) EXPECT_FALSE(rule->AtCut(c, spread)) << c;
    EXPECT_TRUE(rule->PastCut(6, spread));
    EXPECT_FALSE(rule->PastCut(7, spread));
    // A departed worker's clock counts for the cut but not for min_clock.
    const CutProgress departed = Cut(0, false, /*min_clock=*/6, 2, 6);
    EXPECT_EQ(rule->ReachedCut(departed), 6u);
    EXPECT_FALSE(rule->AtCut(6, departed));
  }
}

TEST(ConsistencyRuleTest, OptionsFromTrainingMapTheModeAndEveryOption) {
  pstrain::v1::TrainingConfig t;
  t.set_mode(pstrain::v1::MODE_SYNC);
  t.set_backup_workers(1);
  ConsistencyOptions sync = ConsistencyOptionsFromTraining(t, 4);
  EXPECT_EQ(sync.kind, Kind::kBsp);
  EXPECT_EQ(sync.num_workers, 4u);
  EXPECT_EQ(sync.backup_workers, 1u);
  EXPECT_TRUE(MakeConsistencyRule(sync).ok());

  t.Clear();
  t.set_mode(pstrain::v1::MODE_ASYNC);
  t.set_staleness(3);
  t.set_staleness_aware_lr(true);
  t.set_dc_lambda(0.25);
  t.set_async_lr_per_push(pstrain::v1::TrainingConfig::SCALED);
  ConsistencyOptions async = ConsistencyOptionsFromTraining(t, 2);
  EXPECT_EQ(async.kind, Kind::kSsp);
  EXPECT_EQ(async.num_workers, 2u);
  EXPECT_EQ(async.staleness, 3);
  EXPECT_TRUE(async.staleness_aware_lr);
  EXPECT_EQ(async.dc_lambda, 0.25);
  EXPECT_TRUE(async.lr_per_worker);
  EXPECT_EQ(async.model_clock_steps, 0u);
  EXPECT_TRUE(MakeConsistencyRule(async).ok());
  t.set_steps(30);
  t.set_clock(pstrain::v1::TrainingConfig::CLOCK_MODEL);
  EXPECT_EQ(ConsistencyOptionsFromTraining(t, 2).model_clock_steps, 30u);
  t.set_mode(pstrain::v1::MODE_SYNC);  // sync follows the model already
  t.set_staleness_aware_lr(false);
  EXPECT_EQ(ConsistencyOptionsFromTraining(t, 2).model_clock_steps, 0u);

  t.Clear();
  t.set_mode(pstrain::v1::MODE_ALLREDUCE);
  ConsistencyOptions ring = ConsistencyOptionsFromTraining(t, 2);
  EXPECT_EQ(ring.kind, Kind::kUnspecified);
  EXPECT_EQ(MakeConsistencyRule(ring).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
