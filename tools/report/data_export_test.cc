#include "tools/report/data_export.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/data.h"

namespace pstrain {
namespace {

JobConfig SparseJob() {
  JobConfig c = DefaultJobConfig();
  c.mutable_job()->set_workers(3);
  c.mutable_training()->set_local_batch(5);
  c.mutable_training()->set_grad_accum_steps(2);
  c.mutable_training()->set_steps(6);
  DataConfig* d = c.mutable_data();
  d->set_source(DataConfig::SYNTHETIC);
  d->set_seed(11);
  d->set_num_features(6);
  d->set_num_classes(4);
  d->set_sparse_columns(3);
  d->set_sparse_cardinality(50);
  d->set_zipf_exponent(1.1);
  d->set_test_examples(17);
  return c;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Reads `n` values of T at *at and advances it.
template <typename T>
std::vector<T> Take(const std::string& bytes, size_t* at, int64_t n) {
  std::vector<T> v(n);
  EXPECT_LE(*at + n * sizeof(T), bytes.size());
  if (n > 0) std::memcpy(v.data(), bytes.data() + *at, n * sizeof(T));
  *at += n * sizeof(T);
  return v;
}

TEST(DataExportTest, WritesTheRanksStepsAndTheTestSetBitForBit) {
  const JobConfig c = SparseJob();
  const std::string path = ::testing::TempDir() + "/rank1.psdata";
  ASSERT_TRUE(
      ExportRankData(c, /*rank=*/1, /*from_step=*/2, /*to_step=*/5, path).ok());
  const std::string bytes = Slurp(path);
  ASSERT_EQ(bytes.substr(0, 8), std::string(kDataExportMagic, 8));
  size_t at = 8;
  const std::vector<int64_t> h = Take<int64_t>(bytes, &at, 9);
  // rank, world, from, to, slice, train_n, dim, num_cat, test_n
  EXPECT_EQ(h, (std::vector<int64_t>{1, 3, 2, 5, 10, 30, 6, 3, 17}));

  auto data = DataSource::Create(c.data());
  ASSERT_TRUE(data.ok());
  std::vector<float> want_x, want_y;
  std::vector<uint64_t> want_cat;
  for (int64_t t = 2; t < 5; ++t) {
    // The C++ worker reads a step as grad_accum_steps micro-batches.
    for (int a = 0; a < 2; ++a) {
      auto b = (*data)->TrainBatch(FirstExampleId(t, 1, 3, 10) + a * 5, 5);
      ASSERT_TRUE(b.ok());
      want_x.insert(want_x.end(), b->x.begin(), b->x.end());
      want_y.insert(want_y.end(), b->y.begin(), b->y.end());
      want_cat.insert(want_cat.end(), b->cat.begin(), b->cat.end());
    }
  }
  EXPECT_EQ(Take<float>(bytes, &at, 30 * 6), want_x);
  EXPECT_EQ(Take<float>(bytes, &at, 30), want_y);
  EXPECT_EQ(Take<uint64_t>(bytes, &at, 30 * 3), want_cat);
  auto test = (*data)->TestSlice(0, 1);
  ASSERT_TRUE(test.ok());
  EXPECT_EQ(Take<float>(bytes, &at, 17 * 6), test->x);
  EXPECT_EQ(Take<float>(bytes, &at, 17), test->y);
  EXPECT_EQ(Take<uint64_t>(bytes, &at, 17 * 3), test->cat);
  EXPECT_EQ(at, bytes.size());
  // Not all the same: the export holds real examples.
  EXPECT_NE(want_cat.front(), want_cat.back());
}

TEST(DataExportTest, BadArgumentsNameThemAndWriteNothing) {
  const JobConfig c = SparseJob();
  const std::string path = ::testing::TempDir() + "/bad.psdata";
  std::remove(path.c_str());
  absl::Status s = ExportRankData(c, 3, 0, 6, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--rank 3"), std::string::npos) << s;
  s = ExportRankData(c, 0, 4, 7, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("training.steps = 6"), std::string::npos) << s;
  JobConfig bad = c;
  bad.mutable_data()->set_sparse_cardinality(1);
  s = ExportRankData(bad, 0, 0, 6, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data.sparse_cardinality"), std::string::npos)
      << s;
  EXPECT_FALSE(std::ifstream(path).good());
}

}  // namespace
}  // namespace pstrain
