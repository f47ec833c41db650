// A wide_deep job (a row-sparse embedding table) run as a whole job in one
// process. Until the workers' trainers pull and push rows (issue 24's
// server half), the job must fail at worker start with an error naming the
// row-sparse tensor, promptly and with every node ending: not with a size
// error deep in a step, and not by a dense [buckets, dim] transfer.
#include <string>

#include "common/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/in_process_job.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(SparseJobTest, WideDeepJobIsRefusedNamingTheRowSparseTable) {
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_workers(1);
  c.mutable_job()->set_servers(1);
  c.mutable_training()->set_steps(2);
  c.mutable_training()->set_local_batch(8);
  ModelConfig& m = *c.mutable_model();
  m.set_type(ModelConfig::WIDE_DEEP);
  m.set_input_dim(4);
  m.set_num_classes(2);
  m.set_sparse_columns(2);
  m.set_buckets(1000);
  m.set_embedding_dim(4);
  SetList(m.mutable_hidden(), {8});
  DataConfig& d = *c.mutable_data();
  d.set_num_features(4);
  d.set_num_classes(2);
  d.set_sparse_columns(2);
  d.set_sparse_cardinality(100);
  d.set_test_examples(16);
  FinalizeJobConfig(&c);
  ASSERT_TRUE(ValidateJobConfig(c).ok()) << ValidateJobConfig(c);
  auto job = RunInProcessJob(c);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("parameter 'embedding' is row-sparse"));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("worker"));
}

}  // namespace
}  // namespace pstrain
