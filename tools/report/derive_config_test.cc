#include "tools/report/derive_config.h"

#include "common/job_config.h"
#include "common/run_record.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string DefaultYaml() {
  absl::StatusOr<std::string> text = ReadFileText("configs/default.yaml");
  EXPECT_TRUE(text.ok()) << text.status();
  return text.value_or("");
}

std::vector<ConfigOverride> Sets(const std::vector<std::string>& args) {
  std::vector<ConfigOverride> out;
  for (const auto& a : args) {
    absl::StatusOr<ConfigOverride> o = ParseOverride(a);
    EXPECT_TRUE(o.ok()) << o.status();
    if (o.ok()) out.push_back(*o);
  }
  return out;
}

JobConfig MustParse(const absl::StatusOr<std::string>& text) {
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<JobConfig> c = ParseJobConfig(text.value_or(""), "derived");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.value_or(JobConfig());
}

TEST(ParseOverrideTest, KeyEqualsValue) {
  auto o = ParseOverride("worker.compute_ms=20");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->key, "worker.compute_ms");
  EXPECT_EQ(o->value, "20");
  o = ParseOverride("job.name=a=b");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->value, "a=b");
  o = ParseOverride("job.name=");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->value, "");
}

TEST(ParseOverrideTest, MalformedArgumentsAreNamed) {
  auto o = ParseOverride("worker.compute_ms");
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("--set worker.compute_ms: expected KEY=VALUE"));
  o = ParseOverride("worker..compute_ms=1");
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("worker..compute_ms"));
  EXPECT_FALSE(ParseOverride("=1").ok());
}

TEST(DeriveConfigTest, OverridesChangeOnlyTheirKeys) {
  const std::string base = DefaultYaml();
  const JobConfig before = MustParse(base);
  const JobConfig c = MustParse(
      DeriveConfig(base, "default.yaml",
                   Sets({"training.mode=async", "training.staleness=inf",
                         "job.workers=4", "worker.compute_ms=20",
                         "worker.straggler_rank=1", "worker.straggler_factor=3",
                         "evaluation.every_steps=5", "training.steps=40"})));
  EXPECT_EQ(c.training().mode(), pstrain::v1::MODE_ASYNC);
  EXPECT_EQ(c.training().staleness(), -1);
  EXPECT_EQ(c.job().workers(), 4);
  EXPECT_EQ(c.worker().compute_ms(), 20);  // section absent from the base
  EXPECT_EQ(c.worker().straggler_rank(), 1);
  EXPECT_EQ(c.worker().straggler_factor(), 3);
  EXPECT_EQ(c.evaluation().every_steps(), 5);
  EXPECT_EQ(c.training().steps(), 40);
  // Everything else as in the base: same data, seeds and model.
  EXPECT_EQ(c.job().name(), before.job().name());
  EXPECT_EQ(c.job().servers(), before.job().servers());
  EXPECT_EQ(c.training().local_batch(), before.training().local_batch());
  EXPECT_THAT(c.model().hidden(), ElementsAreArray(before.model().hidden()));
  EXPECT_EQ(c.model().seed(), before.model().seed());
  EXPECT_EQ(c.data().seed(), before.data().seed());
  EXPECT_EQ(c.data().source(), before.data().source());
  EXPECT_EQ(c.training().optimizer().base_lr(),
            before.training().optimizer().base_lr());
  EXPECT_EQ(c.training().optimizer().kind(),
            before.training().optimizer().kind());
}

TEST(DeriveConfigTest, ListsLaterOverridesAndAllReduce) {
  const JobConfig c = MustParse(
      DeriveConfig(DefaultYaml(), "default.yaml",
                   Sets({"model.hidden=[16, 8]", "training.mode=async",
                         "training.mode=allreduce"})));
  EXPECT_THAT(c.model().hidden(), ElementsAre(16, 8));
  EXPECT_EQ(c.training().mode(), pstrain::v1::MODE_ALLREDUCE);
}

TEST(DeriveConfigTest, EmptyBaseGetsSections) {
  const JobConfig c =
      MustParse(DeriveConfig("", "empty.yaml", Sets({"job.workers=3"})));
  EXPECT_EQ(c.job().workers(), 3);
}

std::string DeriveError(const std::vector<std::string>& sets,
                        const std::string& base = DefaultYaml()) {
  absl::StatusOr<std::string> r =
      DeriveConfig(base, "default.yaml", Sets(sets));
  EXPECT_FALSE(r.ok()) << "derived:\n" << r.value_or("");
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(DeriveConfigTest, ErrorsNameTheBadKey) {
  std::string e = DeriveError({"job.workers=4", "job.wokers=3"});
  EXPECT_THAT(e, StartsWith("--set job.wokers=3: "));
  EXPECT_THAT(e, HasSubstr("unknown key 'wokers' in section 'job'"));
  EXPECT_THAT(e, Not(HasSubstr("derived:")));  // its lines mean nothing

  e = DeriveError({"trainig.mode=async"});
  EXPECT_THAT(e, StartsWith("--set trainig.mode=async: "));
  EXPECT_THAT(e, HasSubstr("'trainig'"));

  e = DeriveError({"training.base_lr=fast"});
  EXPECT_THAT(e, StartsWith("--set training.base_lr=fast: "));
  EXPECT_THAT(e, HasSubstr("training.base_lr"));
  EXPECT_THAT(e, HasSubstr("fast"));

  e = DeriveError({"training.mode=sideways"});
  EXPECT_THAT(e, HasSubstr("training.mode"));

  e = DeriveError({"training.steps.x=1"});
  EXPECT_THAT(e, HasSubstr("'steps' is not a section"));

  e = DeriveError({"model.hidden=[1, 2"});
  EXPECT_THAT(e, StartsWith("--set model.hidden=[1, 2: bad YAML value"));
}

TEST(DeriveConfigTest, CrossFieldErrorsNameTheKey) {
  // The default job has 2 workers: rank 5 does not exist.
  std::string e = DeriveError({"worker.straggler_rank=5"});
  EXPECT_THAT(e, HasSubstr("worker.straggler_rank"));
  EXPECT_THAT(e, StartsWith("derived config: "));
  e = DeriveError({"worker.straggler_rank=1", "worker.straggler_factor=0.5"});
  EXPECT_THAT(e, HasSubstr("worker.straggler_factor"));
}

TEST(DeriveConfigTest, BaseErrorsNameItsFileAndLine) {
  const std::string e =
      DeriveError({"job.workers=2"}, "job:\n  name: x\n  wokers: 3\n");
  EXPECT_THAT(e, HasSubstr("default.yaml:3"));
  EXPECT_THAT(e, HasSubstr("wokers"));
}

TEST(PlanRunsTest, ModesAndRepeats) {
  absl::StatusOr<std::vector<PlannedRun>> plan =
      PlanRuns("sync,async:2,async:inf,async,allreduce", 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 5u);
  EXPECT_EQ((*plan)[1].name, "async-2");
  EXPECT_EQ((*plan)[1].label, "async:2");
  ASSERT_EQ((*plan)[1].mode_sets.size(), 2u);
  EXPECT_EQ((*plan)[1].mode_sets[1].key, "training.staleness");
  EXPECT_EQ((*plan)[1].mode_sets[1].value, "2");
  EXPECT_EQ((*plan)[2].name, "async-inf");
  EXPECT_EQ((*plan)[3].mode_sets.size(), 1u);  // the base's staleness
  const JobConfig c = MustParse(
      DeriveConfig(DefaultYaml(), "default.yaml", (*plan)[2].mode_sets));
  EXPECT_EQ(c.training().mode(), pstrain::v1::MODE_ASYNC);
  EXPECT_EQ(c.training().staleness(), -1);

  plan = PlanRuns("sync,allreduce", 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 6u);
  EXPECT_EQ((*plan)[0].name, "sync-r1");
  EXPECT_EQ((*plan)[5].name, "allreduce-r3");
  EXPECT_EQ((*plan)[5].label, "allreduce");
}

TEST(PlanRunsTest, ScaledAsyncAndBackupWorkers) {
  absl::StatusOr<std::vector<PlannedRun>> plan =
      PlanRuns("async:1:scaled,backup:1", 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].name, "async-1-scaled");
  EXPECT_EQ((*plan)[0].label, "async:1:scaled");
  EXPECT_EQ((*plan)[1].name, "backup-1");
  JobConfig c = MustParse(
      DeriveConfig(DefaultYaml(), "default.yaml", (*plan)[0].mode_sets));
  EXPECT_EQ(c.training().mode(), pstrain::v1::MODE_ASYNC);
  EXPECT_EQ(c.training().staleness(), 1);
  EXPECT_EQ(c.training().async_lr_per_push(),
            pstrain::v1::TrainingConfig::SCALED);
  c = MustParse(
      DeriveConfig(DefaultYaml(), "default.yaml", (*plan)[1].mode_sets));
  EXPECT_EQ(c.training().mode(), pstrain::v1::MODE_SYNC);
  EXPECT_EQ(c.training().backup_workers(), 1);
}

TEST(PlanRunsTest, AllReduceVariantsSetHowRowsTravel) {
  absl::StatusOr<std::vector<PlannedRun>> plan =
      PlanRuns("allreduce,allreduce:dense,allreduce:allgather", 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_EQ((*plan)[0].mode_sets.size(), 1u);  // the base's allreduce.sparse
  EXPECT_EQ((*plan)[1].name, "allreduce-dense");
  EXPECT_EQ((*plan)[2].name, "allreduce-allgather");
  EXPECT_EQ((*plan)[2].label, "allreduce:allgather");
  const JobConfig c = MustParse(
      DeriveConfig(DefaultYaml(), "default.yaml", (*plan)[1].mode_sets));
  EXPECT_EQ(c.training().mode(), pstrain::v1::MODE_ALLREDUCE);
  EXPECT_EQ(c.allreduce().sparse(), pstrain::v1::AllReduceConfig::DENSE);
  // The default job's MLP has no row-sparse table to gather: refused by
  // the derived config's validation, naming the key.
  absl::StatusOr<std::string> gather =
      DeriveConfig(DefaultYaml(), "default.yaml", (*plan)[2].mode_sets);
  ASSERT_FALSE(gather.ok());
  EXPECT_THAT(std::string(gather.status().message()),
              HasSubstr("allreduce.sparse: allgather applies to models with "
                        "a row-sparse table"));
}

TEST(PlanRunsTest, BadModesAreNamed) {
  for (const auto& [modes, want] :
       std::vector<std::pair<std::string, std::string>>{
           {"sync,bogus", "--modes: unknown mode 'bogus'"},
           {"async:-1", "unknown mode 'async:-1'"},
           {"async:", "unknown mode 'async:'"},
           {"sync:1", "unknown mode 'sync:1'"},
           {"async:2:fast", "unknown mode 'async:2:fast'"},
           {"backup:0", "unknown mode 'backup:0'"},
           {"backup:x", "unknown mode 'backup:x'"},
           {"allreduce:sparse", "unknown mode 'allreduce:sparse'"},
           {"sync,sync", "'sync' given twice"},
           {"", "--modes: empty"},
           {"sync,", "unknown mode ''"},
       }) {
    absl::StatusOr<std::vector<PlannedRun>> plan = PlanRuns(modes, 1);
    ASSERT_FALSE(plan.ok()) << modes;
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(want));
  }
  EXPECT_FALSE(PlanRuns("sync", 0).ok());
}

}  // namespace
}  // namespace pstrain
