// The data of the sparse model: the Zipf sampler, the synthetic generator's
// high-cardinality categorical columns, and the Criteo TSV layout (parser
// and source, on small files the test writes).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"
#include "worker/data/tabular_loaders.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// The sampler's law against the exact Zipf probabilities, for exponents
// below, at and above 1 (the helpers' special cases).
TEST(ZipfSamplerTest, MatchesTheExactLaw) {
  for (const double s : {0.7, 1.0, 1.3}) {
    const int64_t n = 50;
    const ZipfSampler zipf(n, s);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> unit(0, 1);
    std::vector<double> count(n, 0);
    const int draws = 200000;
    for (int i = 0; i < draws; ++i) {
      const int64_t r = zipf.Sample([&](int) { return 1 - unit(rng); });
      ASSERT_GE(r, 0);
      ASSERT_LT(r, n);
      ++count[r];
    }
    double norm = 0;
    for (int64_t r = 0; r < n; ++r) norm += std::pow(r + 1.0, -s);
    for (int64_t r = 0; r < n; ++r) {
      const double p = std::pow(r + 1.0, -s) / norm;
      // 4.5 standard deviations of the binomial count.
      EXPECT_NEAR(count[r] / draws, p, 4.5 * std::sqrt(p / draws) + 1e-4)
          << "s=" << s << " rank " << r;
    }
  }
}

TEST(ZipfSamplerTest, HugeCardinalityNeedsNoTable) {
  const ZipfSampler zipf(int64_t{1} << 40, 1.05);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unit(0, 1);
  int64_t top = 0, beyond_million = 0;
  for (int i = 0; i < 20000; ++i) {
    const int64_t r = zipf.Sample([&](int) { return 1 - unit(rng); });
    ASSERT_GE(r, 0);
    ASSERT_LT(r, int64_t{1} << 40);
    top += r == 0;
    beyond_million += r >= 1000000;
  }
  EXPECT_GT(top, 100);              // a hot value
  EXPECT_GT(beyond_million, 1000);  // and a very long tail
}

DataConfig SparseConfig() {
  DataConfig config = DefaultJobConfig().data();
  config.set_num_features(6);
  config.set_num_classes(4);
  config.set_sparse_columns(3);
  config.set_sparse_cardinality(1000);
  config.set_zipf_exponent(1.1);
  config.set_test_examples(100);
  return config;
}

// Sparse columns come as raw ids beside the numeric features: the same id
// gives the same values on every call and worker; within a column the most
// frequent id is about 2^1.1 times as frequent as the second (Zipf); most
// of the 1000 values appear (a long tail); columns use distinct ids.
TEST(SyntheticSparseTest, ZipfColumnsOfRawIds) {
  auto source = DataSource::Create(SparseConfig());
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(), HasSubstr("3 sparse columns"));
  auto batch = (*source)->TrainBatch(0, 100000);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->num_cat, 3);
  EXPECT_EQ(batch->dim, 6);
  ASSERT_EQ(batch->cat.size(), 300000u);
  auto again = (*source)->TrainBatch(500, 10);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(std::equal(again->cat.begin(), again->cat.end(),
                         batch->cat.begin() + 500 * 3));
  EXPECT_TRUE(
      std::equal(again->y.begin(), again->y.end(), batch->y.begin() + 500));
  std::vector<std::map<uint64_t, int64_t>> counts(3);
  for (int64_t i = 0; i < batch->n; ++i) {
    for (int c = 0; c < 3; ++c) ++counts[c][batch->cat[i * 3 + c]];
  }
  for (int c = 0; c < 3; ++c) {
    std::vector<int64_t> f;
    for (const auto& [id, n] : counts[c]) f.push_back(n);
    std::sort(f.rbegin(), f.rend());
    EXPECT_GT(counts[c].size(), 900u) << c;
    EXPECT_NEAR(static_cast<double>(f[0]) / f[1], std::pow(2, 1.1), 0.15) << c;
    EXPECT_GT(f[0], 100000 / 8);  // the hot value: ~18% of the examples
    for (int other = 0; other < c; ++other) {
      for (const auto& [id, n] : counts[c]) {
        EXPECT_EQ(counts[other].count(id), 0u) << "column " << c;
      }
    }
  }
  auto test = (*source)->TestSlice(0, 1);
  ASSERT_TRUE(test.ok());
  EXPECT_EQ(test->num_cat, 3);
  EXPECT_EQ(test->cat.size(), 300u);
}

// The labels depend on the sparse values: among the examples whose first
// column holds the hot value, the label distribution differs from that of
// the whole set (the teacher's effect of that value).
TEST(SyntheticSparseTest, LabelsDependOnTheValues) {
  DataConfig config = SparseConfig();
  config.set_noise(0);
  auto source = DataSource::Create(config);
  ASSERT_TRUE(source.ok());
  Batch batch = *(*source)->TrainBatch(0, 50000);
  std::map<uint64_t, int64_t> freq;
  for (int64_t i = 0; i < batch.n; ++i) ++freq[batch.cat[i * 3]];
  uint64_t hot = 0;
  int64_t best = 0;
  for (const auto& [id, n] : freq) {
    if (n > best) best = n, hot = id;
  }
  std::vector<double> all(4, 0), with_hot(4, 0);
  for (int64_t i = 0; i < batch.n; ++i) {
    all[static_cast<int>(batch.y[i])] += 1.0 / batch.n;
    if (batch.cat[i * 3] == hot) {
      with_hot[static_cast<int>(batch.y[i])] += 1.0 / best;
    }
  }
  double distance = 0;
  for (int j = 0; j < 4; ++j) distance += std::abs(all[j] - with_hot[j]);
  EXPECT_GT(distance, 0.1) << absl::StrJoin(all, ",") << " vs "
                           << absl::StrJoin(with_hot, ",");
}

TEST(SyntheticSparseTest, BadSparseKeysNameTheKey) {
  DataConfig config = SparseConfig();
  config.set_sparse_cardinality(1);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.sparse_cardinality"));
  config = SparseConfig();
  config.set_zipf_exponent(0);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.zipf_exponent"));
  config = SparseConfig();
  config.set_sparse_columns(-1);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.sparse_columns"));
}

// A Criteo line: label, I1..I13, C1..C26, with `ints` and `cats` (empty
// strings for missing fields).
std::string CriteoLine(int label, const std::vector<std::string>& ints,
                       const std::vector<std::string>& cats) {
  std::vector<std::string> fields = {std::to_string(label)};
  fields.insert(fields.end(), ints.begin(), ints.end());
  fields.insert(fields.end(), cats.begin(), cats.end());
  return absl::StrJoin(fields, "\t");
}

std::vector<std::string> Ints(int base) {
  std::vector<std::string> v;
  for (int k = 0; k < 13; ++k) v.push_back(std::to_string(base + k));
  return v;
}

std::vector<std::string> Cats(int base) {
  std::vector<std::string> v;
  for (int c = 0; c < 26; ++c) {
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", 0x68fd1e00 + base * 64 + c);
    v.push_back(hex);
  }
  return v;
}

TEST(CriteoTest, ParsesValuesAndMissingFields) {
  std::vector<std::string> ints = Ints(0), cats = Cats(1);
  ints[1] = "-1";  // I2 is negative in the real data
  ints[4] = "";    // missing integer
  cats[25] = "";   // missing category
  cats[3] = "FFFFFFFF";
  const std::string text = CriteoLine(1, ints, cats) + "\r\n\n" +
                           CriteoLine(0, Ints(7), Cats(2)) + "\n";
  auto table = ParseCriteoTsv(text, "day.tsv");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows, 2);
  EXPECT_EQ(table->cols, 13);
  EXPECT_EQ(table->cat_cols, 26);
  EXPECT_EQ(table->y, (std::vector<double>{1, 0}));
  EXPECT_EQ(table->missing, 1);
  EXPECT_FLOAT_EQ(table->x[0], 0.0f);              // log(1 + 0)
  EXPECT_FLOAT_EQ(table->x[1], -1.0f);             // negative: as is
  EXPECT_FLOAT_EQ(table->x[2], std::log1p(2.0f));  // log(1 + 2)
  EXPECT_TRUE(std::isnan(table->x[4]));
  EXPECT_FLOAT_EQ(table->x[13 + 12], std::log1p(19.0f));  // row 2, I13
  EXPECT_EQ(table->cat[0], 0x68fd1e00u + 64);
  EXPECT_EQ(table->cat[3], 0xffffffffu);
  EXPECT_EQ(table->cat[25], kMissingField);
  EXPECT_EQ(table->cat[26 + 25], 0x68fd1e00u + 128 + 25);
}

TEST(CriteoTest, MalformedLinesNameLineAndField) {
  auto error = [](const std::string& text) {
    return std::string(ParseCriteoTsv(text, "d.tsv").status().message());
  };
  const std::string good = CriteoLine(0, Ints(0), Cats(0));
  EXPECT_EQ(error(good + "\n1\t2\t3\n"),
            "d.tsv:2: expected 40 tab-separated fields (label, I1..I13, "
            "C1..C26), got 3");
  EXPECT_EQ(error(CriteoLine(2, Ints(0), Cats(0))),
            "d.tsv:1: field 1 (label): '2' is not 0 or 1");
  std::vector<std::string> ints = Ints(0);
  ints[2] = "1.5";
  EXPECT_EQ(error(CriteoLine(0, ints, Cats(0))),
            "d.tsv:1: field 4 (I3): '1.5' is not an integer");
  std::vector<std::string> cats = Cats(0);
  cats[0] = "xyz";
  EXPECT_EQ(error(good + "\n" + CriteoLine(1, Ints(0), cats)),
            "d.tsv:2: field 15 (C1): 'xyz' is not hexadecimal");
  cats[0] = "0x12";
  EXPECT_THAT(error(CriteoLine(1, Ints(0), cats)),
              HasSubstr("is not hexadecimal"));
}

// data.source criteo: the file's rows through the split and the sampler,
// categorical values travelling with their rows.
TEST(CriteoTest, SourceCarriesTheCategoricalColumns) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/criteo_small.tsv";
  std::string text;
  for (int r = 0; r < 40; ++r) {
    std::vector<std::string> ints = Ints(r);
    if (r % 5 == 0) ints[0] = "";
    text += CriteoLine(r % 2, ints, Cats(r)) + "\n";
  }
  std::ofstream(path, std::ios::binary) << text;
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::CRITEO);
  config.set_path(path);
  config.set_num_classes(2);
  config.set_test_fraction(0.25);
  auto source = DataSource::Create(config);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->num_features(), 13);
  EXPECT_EQ((*source)->num_classes(), 2);
  EXPECT_EQ((*source)->train_size(), 30);
  EXPECT_THAT((*source)->Describe(), HasSubstr("26 categorical columns"));
  auto batch = (*source)->TrainBatch(0, 30);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->num_cat, 26);
  ASSERT_EQ(batch->cat.size(), 30u * 26);
  auto test = (*source)->TestSlice(0, 1);
  ASSERT_TRUE(test.ok());
  ASSERT_EQ(test->cat.size(), 10u * 26);
  // Every row's categorical values are those of one file row r (Cats(r)),
  // whose label is r % 2; each file row appears once in train + test.
  std::vector<int> seen(40, 0);
  for (const Batch* b : {&*batch, &*test}) {
    for (int64_t i = 0; i < b->n; ++i) {
      const int64_t r = (b->cat[i * 26] - 0x68fd1e00u) / 64;
      ASSERT_GE(r, 0);
      ASSERT_LT(r, 40);
      ++seen[r];
      EXPECT_EQ(b->y[i], r % 2);
      for (int c = 0; c < 26; ++c) {
        EXPECT_EQ(b->cat[i * 26 + c], 0x68fd1e00u + r * 64 + c);
      }
    }
  }
  EXPECT_EQ(seen, std::vector<int>(40, 1));
  config.set_path(dir + "/no_such.tsv");
  EXPECT_EQ(DataSource::Create(config).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pstrain
