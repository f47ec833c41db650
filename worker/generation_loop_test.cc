// RunGenerations with a fake factory and trainer: generations in order,
// stops honoured, every error path; no processes, no clocks.
#include "worker/generation_loop.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kSteps = 6;

pstrain::v1::JobSpec Spec(uint64_t generation, uint64_t start_step,
                          const std::string& resume_from = "") {
  pstrain::v1::JobSpec job;
  job.set_generation(generation);
  job.set_start_step(start_step);
  job.set_resume_from(resume_from);
  return job;
}

// What one generation's trainer does: reports steps from its start, and
// fails with `error` before step `fail_at` (never when error is OK).
struct Plan {
  absl::Status error;
  int64_t fail_at = kSteps;
};

class FakeTrainer : public GenerationTrainer {
 public:
  FakeTrainer(uint64_t generation, int64_t start_step, Plan plan,
              std::vector<std::string>* events)
      : generation_(generation),
        start_step_(start_step),
        plan_(std::move(plan)),
        events_(events) {}

  absl::Status Run(const StepCallback& on_step,
                   const std::function<bool()>& should_stop) override {
    events_->push_back(absl::StrCat("run g", generation_));
    for (int64_t step = start_step_; step <= kSteps; ++step) {
      if (should_stop && should_stop()) {
        return absl::CancelledError("stopped");
      }
      if (!plan_.error.ok() && step == plan_.fail_at) return plan_.error;
      pstrain::v1::StepMetrics m;
      m.set_step(step);
      if (absl::Status st = on_step(m); !st.ok()) return st;
    }
    params_ = {{static_cast<float>(generation_)}};
    return absl::OkStatus();
  }

  const TensorList& final_params() const override { return params_; }

 private:
  const uint64_t generation_;
  const int64_t start_step_;
  const Plan plan_;
  std::vector<std::string>* const events_;
  TensorList params_;
};

class FakeFactory : public TrainerFactory {
 public:
  explicit FakeFactory(std::vector<std::string>* events) : events_(events) {}

  absl::Status Begin(const pstrain::v1::JobSpec& job) override {
    events_->push_back(absl::StrCat("begin g", job.generation()));
    return begin_error;
  }

  absl::StatusOr<std::unique_ptr<GenerationTrainer>> NewTrainer(
      const pstrain::v1::JobSpec& job, int64_t start_step) override {
    events_->push_back(
        absl::StrCat("new g", job.generation(), " @", start_step));
    if (!new_error.ok()) return new_error;
    return std::make_unique<FakeTrainer>(job.generation(), start_step,
                                         plans[job.generation()], events_);
  }

  absl::Status Finish(const GenerationTrainer& trainer) override {
    events_->push_back(
        absl::StrCat("finish ", trainer.final_params().at(0).at(0)));
    return finish_error;
  }

  std::string ResumeLine(const pstrain::v1::JobSpec& next,
                         const absl::Status& failed) const override {
    events_->push_back(absl::StrCat("resume g", next.generation(), " @",
                                    next.start_step(), " was ",
                                    failed.message()));
    return "resuming";
  }

  std::map<uint64_t, Plan> plans;  // by generation; default: succeeds
  absl::Status begin_error, new_error, finish_error;

 private:
  std::vector<std::string>* const events_;
};

// The loop's options over scripted answers, recording each call.
struct Coordinator {
  explicit Coordinator(std::vector<std::string>* events) : events(events) {}

  GenerationLoopOptions Options(bool rolls_back) {
    GenerationLoopOptions o;
    o.rolls_back = rolls_back;
    o.await_rollback =
        [this](uint64_t generation) -> absl::StatusOr<pstrain::v1::JobSpec> {
      events->push_back(absl::StrCat("await rollback g", generation));
      return rollback;
    };
    o.await_next =
        [this](uint64_t current) -> absl::StatusOr<pstrain::v1::JobSpec> {
      events->push_back(absl::StrCat("await next after g", current));
      if (next.empty()) {
        return absl::FailedPreconditionError("no generation after it");
      }
      pstrain::v1::JobSpec spec = next.front();
      next.erase(next.begin());
      return spec;
    };
    o.ended = [this] { return ended; };
    if (record_resume) {
      o.on_resume = [this](const pstrain::v1::JobSpec& next) {
        events->push_back(absl::StrCat("on_resume g", next.generation(), " @",
                                       next.start_step()));
      };
    }
    return o;
  }

  std::vector<std::string>* events;
  absl::StatusOr<pstrain::v1::JobSpec> rollback =
      absl::InternalError("unexpected");
  std::vector<pstrain::v1::JobSpec> next;
  bool ended = false;
  bool record_resume = false;  // sets GenerationLoopOptions.on_resume
};

class GenerationLoopTest : public ::testing::Test {
 protected:
  absl::Status Run(const pstrain::v1::JobSpec& job, int64_t start_step,
                   bool rolls_back) {
    return RunGenerations(
        job, start_step, &factory_, coordinator_.Options(rolls_back),
        [this](const pstrain::v1::StepMetrics& m) {
          steps_.push_back(m.step());
          return step_error_;
        },
        [this] {
          return stop_after_ >= 0 &&
                 steps_.size() >= static_cast<size_t>(stop_after_);
        },
        &final_params_);
  }

  std::vector<std::string> events_;
  FakeFactory factory_{&events_};
  Coordinator coordinator_{&events_};
  std::vector<int64_t> steps_;
  absl::Status step_error_;
  int stop_after_ = -1;  // should_stop turns true after that many records
  TensorList final_params_;
};

TEST_F(GenerationLoopTest, OneGenerationRunsFromTheRegisteredStep) {
  ASSERT_TRUE(Run(Spec(0, 0), 2, /*rolls_back=*/true).ok());
  EXPECT_THAT(events_,
              ElementsAre("begin g0", "new g0 @2", "run g0", "finish 0"));
  EXPECT_THAT(steps_, ElementsAre(2, 3, 4, 5, 6));
  EXPECT_EQ(final_params_, TensorList({{0.0f}}));
}

TEST_F(GenerationLoopTest, FailedGenerationIsFollowedByTheNextInOrder) {
  factory_.plans[0] = {absl::UnavailableError("neighbour gone"), 3};
  factory_.plans[1] = {absl::DeadlineExceededError("barrier"), 4};
  coordinator_.next = {Spec(1, 2, "ckpt-2"), Spec(2, 4, "ckpt-4")};
  ASSERT_TRUE(Run(Spec(0, 0), 0, /*rolls_back=*/true).ok());
  EXPECT_THAT(
      events_,
      ElementsAre("begin g0", "new g0 @0", "run g0", "await next after g0",
                  "resume g1 @2 was neighbour gone", "new g1 @2", "run g1",
                  "await next after g1", "resume g2 @4 was barrier",
                  "new g2 @4", "run g2", "finish 2"));
  // Each generation redoes the steps after its rollback's checkpoint.
  EXPECT_THAT(steps_, ElementsAre(0, 1, 2, 2, 3, 4, 5, 6));
  EXPECT_EQ(final_params_, TensorList({{2.0f}}));
}

TEST_F(GenerationLoopTest, OnResumeGetsEachNextSpecBeforeItsTrainer) {
  factory_.plans[0] = {absl::UnavailableError("neighbour gone"), 3};
  coordinator_.next = {Spec(1, 2, "ckpt-2")};
  coordinator_.record_resume = true;
  ASSERT_TRUE(Run(Spec(0, 0), 0, /*rolls_back=*/true).ok());
  EXPECT_THAT(
      events_,
      ElementsAre("begin g0", "new g0 @0", "run g0", "await next after g0",
                  "resume g1 @2 was neighbour gone", "on_resume g1 @2",
                  "new g1 @2", "run g1", "finish 1"));
}

TEST_F(GenerationLoopTest, ReplacementWaitsForTheRollbackFirst) {
  coordinator_.rollback = Spec(4, 3, "ckpt-3");
  ASSERT_TRUE(Run(Spec(3, 0), 0, /*rolls_back=*/true).ok());
  EXPECT_THAT(events_, ElementsAre("await rollback g3", "begin g4", "new g4 @3",
                                   "run g4", "finish 4"));
  EXPECT_THAT(steps_, ElementsAre(3, 4, 5, 6));
}

TEST_F(GenerationLoopTest, NoRollbackWaitWhenThePolicyDoesNotRollBack) {
  // Elastic sync: a rank joined again in a later generation starts at the
  // step its registration names.
  ASSERT_TRUE(Run(Spec(2, 0), 5, /*rolls_back=*/false).ok());
  EXPECT_THAT(events_,
              ElementsAre("begin g2", "new g2 @5", "run g2", "finish 2"));
}

TEST_F(GenerationLoopTest, RollbackWaitErrorEndsBeforeAnyTrainer) {
  coordinator_.rollback = absl::FailedPreconditionError("job over");
  const absl::Status st = Run(Spec(1, 0), 0, /*rolls_back=*/true);
  EXPECT_EQ(st, absl::FailedPreconditionError("job over"));
  EXPECT_THAT(events_, ElementsAre("await rollback g1"));
}

TEST_F(GenerationLoopTest, ErrorWithoutRollbackIsTheOutcome) {
  factory_.plans[0] = {absl::UnavailableError("shard 1 gone"), 2};
  coordinator_.next = {Spec(1, 0)};  // never asked
  const absl::Status st = Run(Spec(0, 0), 0, /*rolls_back=*/false);
  EXPECT_EQ(st, absl::UnavailableError("shard 1 gone"));
  EXPECT_THAT(events_, ElementsAre("begin g0", "new g0 @0", "run g0"));
  EXPECT_TRUE(final_params_.empty());
}

TEST_F(GenerationLoopTest, StopHonouredWithoutANewGeneration) {
  stop_after_ = 2;
  coordinator_.ended = true;         // the node's stop is part of `ended`
  coordinator_.next = {Spec(1, 0)};  // never asked
  const absl::Status st = Run(Spec(0, 0), 0, /*rolls_back=*/true);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(steps_, ElementsAre(0, 1));
  EXPECT_THAT(events_, ElementsAre("begin g0", "new g0 @0", "run g0"));
  EXPECT_TRUE(final_params_.empty());
}

TEST_F(GenerationLoopTest, EndedJobEndsTheLoopOnAFailure) {
  factory_.plans[0] = {absl::UnavailableError("coordinator gone"), 1};
  coordinator_.ended = true;
  const absl::Status st = Run(Spec(0, 0), 0, /*rolls_back=*/true);
  EXPECT_EQ(st, absl::UnavailableError("coordinator gone"));
  EXPECT_THAT(events_, ElementsAre("begin g0", "new g0 @0", "run g0"));
}

TEST_F(GenerationLoopTest, NoNextGenerationKeepsTheCodeAndSaysWhy) {
  factory_.plans[0] = {absl::DeadlineExceededError("ring wait"), 1};
  const absl::Status st = Run(Spec(0, 0), 0, /*rolls_back=*/true);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(st.message(), "ring wait; no rollback: no generation after it");
  EXPECT_THAT(events_, ElementsAre("begin g0", "new g0 @0", "run g0",
                                   "await next after g0"));
}

TEST_F(GenerationLoopTest, ReportErrorEndsTheRun) {
  step_error_ = absl::NotFoundError("rank not registered");
  const absl::Status st = Run(Spec(0, 0), 0, /*rolls_back=*/false);
  EXPECT_EQ(st, absl::NotFoundError("rank not registered"));
  EXPECT_THAT(steps_, ElementsAre(0));
}

TEST_F(GenerationLoopTest, FactoryErrorsEndTheLoop) {
  factory_.begin_error = absl::InvalidArgumentError("begin");
  EXPECT_EQ(Run(Spec(0, 0), 0, true), absl::InvalidArgumentError("begin"));
  EXPECT_THAT(events_, ElementsAre("begin g0"));

  events_.clear();
  factory_.begin_error = absl::OkStatus();
  factory_.new_error = absl::UnavailableError("no shards");
  coordinator_.next = {Spec(1, 0)};  // never asked: not a trainer's error
  EXPECT_EQ(Run(Spec(0, 0), 0, true), absl::UnavailableError("no shards"));
  EXPECT_THAT(events_, ElementsAre("begin g0", "new g0 @0"));
}

TEST_F(GenerationLoopTest, FinishErrorIsTheOutcomeWithTheWeightsKept) {
  factory_.finish_error = absl::AbortedError("hand-back failed");
  EXPECT_EQ(Run(Spec(0, 0), 0, true), absl::AbortedError("hand-back failed"));
  EXPECT_EQ(final_params_, TensorList({{0.0f}}));
}

}  // namespace
}  // namespace pstrain
