#include "worker/data/data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/model_spec.h"
#include "common/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/file_data.h"
#include "worker/data/tabular_loaders.h"
#include "worker/model/model.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<DataSource> MustCreate(const DataConfig& config) {
  auto source = DataSource::Create(config);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(*source) : nullptr;
}

Batch MustBatch(absl::StatusOr<Batch> batch) {
  EXPECT_TRUE(batch.ok()) << batch.status();
  return batch.ok() ? std::move(*batch) : Batch();
}

void Append(const Batch& part, Batch* all) {
  all->n += part.n;
  all->dim = part.dim;
  all->x.insert(all->x.end(), part.x.begin(), part.x.end());
  all->y.insert(all->y.end(), part.y.begin(), part.y.end());
}

void ExpectSame(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
}

TEST(DataSourceTest, SameIdsGiveIdenticalRows) {
  DataConfig config = DefaultJobConfig().data();
  auto one = MustCreate(config), two = MustCreate(config);
  const Batch a = MustBatch(one->TrainBatch(100, 8));
  ExpectSame(a, MustBatch(two->TrainBatch(100, 8)));
  EXPECT_EQ(a.dim, 32);
  EXPECT_EQ(a.x.size(), 8u * 32);
  const Batch tail = MustBatch(one->TrainBatch(104, 4));
  EXPECT_EQ(std::vector<float>(a.x.begin() + 4 * 32, a.x.end()), tail.x);
  EXPECT_EQ(std::vector<float>(a.y.begin() + 4, a.y.end()), tail.y);
  EXPECT_NE(a.x, MustBatch(one->TrainBatch(200, 8)).x);

  config.set_seed(8);  // another task
  EXPECT_NE(a.x, MustBatch(MustCreate(config)->TrainBatch(100, 8)).x);
}

TEST(DataSourceTest, WorkerSlicesConcatenateToTheGlobalBatch) {
  auto source = MustCreate(DefaultJobConfig().data());
  const int64_t b = 5;
  for (uint64_t step : {0, 3, 17}) {
    Batch all;
    for (int rank = 0; rank < 4; ++rank) {
      Append(MustBatch(source->TrainBatch(FirstExampleId(step, rank, 4, b), b)),
             &all);
    }
    ExpectSame(all, MustBatch(source->TrainBatch(
                        FirstExampleId(step, 0, 1, 4 * b), 4 * b)));
  }
  EXPECT_EQ(FirstExampleId(3, 2, 4, 5), 3u * 20 + 10);
}

TEST(DataSourceTest, TestSlicesPartitionTheTestSet) {
  DataConfig config = DefaultJobConfig().data();
  config.set_test_examples(1003);
  auto source = MustCreate(config);
  const Batch whole = MustBatch(source->TestSlice(0, 1));
  EXPECT_EQ(whole.n, 1003);
  Batch all;
  for (int rank = 0; rank < 4; ++rank) {
    const Batch part = MustBatch(source->TestSlice(rank, 4));
    EXPECT_GE(part.n, 250);
    Append(part, &all);
  }
  ExpectSame(all, whole);
  // A separate stream from training.
  EXPECT_NE(std::vector<float>(whole.x.begin(), whole.x.begin() + 32),
            MustBatch(source->TrainBatch(0, 1)).x);
  EXPECT_FALSE(source->TestSlice(4, 4).ok());
  EXPECT_FALSE(source->TestSlice(0, 0).ok());
}

TEST(DataSourceTest, ClassesAreRoughlyBalanced) {
  for (uint64_t seed : {1, 7, 42, 1234}) {
    for (double noise : {0.0, 0.1}) {
      DataConfig config = DefaultJobConfig().data();
      config.set_seed(seed);
      config.set_noise(noise);
      const Batch batch = MustBatch(MustCreate(config)->TrainBatch(0, 4000));
      std::vector<int> count(4);
      for (float y : batch.y) ++count.at(static_cast<int>(y));
      for (int c : count) {
        EXPECT_GE(c, 200) << "seed " << seed << " noise " << noise;
      }
    }
  }
}

TEST(DataSourceTest, Regression) {
  DataConfig config = DefaultJobConfig().data();
  config.set_num_classes(1);
  config.set_num_features(8);
  auto source = MustCreate(config);
  EXPECT_EQ(source->num_classes(), 1);
  const Batch batch = MustBatch(source->TrainBatch(0, 1000));
  double sum = 0, sq = 0;
  for (float y : batch.y) {
    sum += y;
    sq += y * y;
  }
  const double var = sq / batch.n - (sum / batch.n) * (sum / batch.n);
  EXPECT_GT(var, 0.5);
  EXPECT_LT(var, 3);
}

TEST(DataSourceTest, TargetsMode) {
  DataConfig config = DefaultJobConfig().data();
  SetList(config.mutable_targets(), {1, 3, 5, 7});
  config.set_test_examples(6);
  auto source = MustCreate(config);
  EXPECT_EQ(source->num_features(), 0);
  EXPECT_EQ(source->num_classes(), 1);
  const Batch batch = MustBatch(source->TrainBatch(2, 5));
  EXPECT_EQ(batch.n, 5);
  EXPECT_EQ(batch.dim, 0);
  EXPECT_TRUE(batch.x.empty());
  EXPECT_EQ(batch.y, std::vector<float>({5, 7, 1, 3, 5}));
  EXPECT_EQ(MustBatch(source->TestSlice(1, 2)).y,
            std::vector<float>({7, 1, 3}));
}

TEST(DataSourceTest, InvalidConfigsNameTheField) {
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::DATA_SOURCE_UNSPECIFIED);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.source"));
  config = DefaultJobConfig().data();
  config.set_num_features(0);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.num_features"));
  config = DefaultJobConfig().data();
  config.set_num_classes(0);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.num_classes"));
  config = DefaultJobConfig().data();
  config.set_noise(-0.5);
  EXPECT_EQ(DataSource::Create(config).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MustCreate(DefaultJobConfig().data())->TrainBatch(0, -1).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// Expects `model_config` (a softmax regression) trained from zeros by plain
// SGD (lr 0.5) on 300 batches of 64 of `data`, in order, to reach a test
// accuracy above 0.6 (printed, with the mean loss).
void ExpectSgdLearns(const DataConfig& data, const ModelConfig& model_config) {
  auto source = MustCreate(data);
  auto model = Model::Create(model_config);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::vector<float>> params, grads;
  for (const auto& spec : (*model)->params()) {
    params.emplace_back(NumElements(spec), 0.0f);
  }
  const int64_t b = 64;
  for (uint64_t step = 0; step < 300; ++step) {
    const Batch batch =
        MustBatch(source->TrainBatch(FirstExampleId(step, 0, 1, b), b));
    ASSERT_TRUE((*model)->LossAndGradient(params, batch, &grads).ok());
    for (size_t t = 0; t < params.size(); ++t) {
      for (size_t k = 0; k < params[t].size(); ++k) {
        params[t][k] -= 0.5f * grads[t][k];
      }
    }
  }
  auto eval = (*model)->Evaluate(params, MustBatch(source->TestSlice(0, 1)));
  ASSERT_TRUE(eval.ok()) << eval.status();
  const double accuracy = static_cast<double>(eval->correct) / eval->total;
  EXPECT_GT(accuracy, 0.6);
  std::printf("softmax test accuracy %.3f, mean loss %.3f\n", accuracy,
              eval->loss_sum / eval->total);
}

// Plain SGD on a softmax regression reaches well above chance (25%).
TEST(DataSourceTest, Learnable) {
  ModelConfig model_config = DefaultJobConfig().model();
  model_config.set_type(ModelConfig::SOFTMAX);
  ExpectSgdLearns(DefaultJobConfig().data(), model_config);
}

// ---------------------------------------------------------------------------
// Synthetic tables: categorical and missing columns inside num_features.

TEST(SyntheticTableTest, CategoricalAndMissingEncoding) {
  DataConfig config = DefaultJobConfig().data();
  config.set_num_features(24);
  config.set_num_categorical(3);
  config.set_categories(4);
  config.set_missing_rate(0.25);
  // Layout: 3 x (4 one-hot + 1 indicator) = 15 slots, W = 9 left: 5 numeric
  // columns, the first 4 of which can be missing (4 indicators).
  auto source = MustCreate(config);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->num_features(), 24);
  EXPECT_EQ(source->train_size(), 0);
  EXPECT_THAT(source->Describe(),
              HasSubstr("5 numeric + 3 categorical x 4 levels one-hot + 7 "
                        "missing indicators"));
  const int64_t n = 4000, numeric = 5, missable = 4;
  const Batch batch = MustBatch(source->TrainBatch(0, n));
  ASSERT_EQ(batch.dim, 24);
  std::vector<int64_t> missing(missable + 3), level(3 * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float* x = &batch.x[i * 24];
    for (int64_t j = 0; j < missable; ++j) {
      const float indicator = x[numeric + 12 + j];
      ASSERT_TRUE(indicator == 0 || indicator == 1);
      if (indicator == 1) {
        EXPECT_EQ(x[j], 0.0f);
        ++missing[j];
      } else {
        EXPECT_NE(x[j], 0.0f);
      }
    }
    for (int64_t c = 0; c < 3; ++c) {
      const float indicator = x[numeric + 12 + missable + c];
      ASSERT_TRUE(indicator == 0 || indicator == 1);
      int64_t hot = 0;
      for (int64_t l = 0; l < 4; ++l) {
        const float v = x[numeric + c * 4 + l];
        ASSERT_TRUE(v == 0 || v == 1) << v;
        if (v == 1) {
          ++hot;
          ++level[c * 4 + l];
        }
      }
      // Exactly one level is hot, or none and the indicator says missing.
      EXPECT_EQ(hot + indicator, 1) << "example " << i << " column " << c;
      missing[missable + c] += indicator;
    }
  }
  for (int64_t m : missing) {
    EXPECT_NEAR(static_cast<double>(m) / n, 0.25, 0.03);
  }
  for (int64_t count : level) {  // uniform levels among the present 75%
    EXPECT_NEAR(static_cast<double>(count) / n, 0.75 / 4, 0.03);
  }
  // The fifth numeric column (W = 9 is odd) is never missing.
  for (int64_t i = 0; i < n; ++i) EXPECT_NE(batch.x[i * 24 + 4], 0.0f);
  // Test rows come from other streams but are encoded the same way.
  const Batch test = MustBatch(source->TestSlice(0, 1));
  EXPECT_EQ(test.dim, 24);
}

TEST(SyntheticTableTest, WithoutMissingEverySlotIsUsed) {
  DataConfig config = DefaultJobConfig().data();
  config.set_num_features(10);
  config.set_num_categorical(2);
  config.set_categories(3);
  auto source = MustCreate(config);
  ASSERT_NE(source, nullptr);
  // 4 numeric + 2 x 3 one-hot, no indicators.
  EXPECT_THAT(source->Describe(),
              HasSubstr("4 numeric + 2 categorical x 3 levels one-hot)"));
  const Batch batch = MustBatch(source->TrainBatch(0, 100));
  for (int64_t i = 0; i < 100; ++i) {
    const float* x = &batch.x[i * 10];
    EXPECT_EQ(x[4] + x[5] + x[6], 1.0f);
    EXPECT_EQ(x[7] + x[8] + x[9], 1.0f);
  }
  // The plain generator is unchanged: with no categorical columns the
  // numeric slots equal those of the default config.
  DataConfig plain = DefaultJobConfig().data();
  plain.set_num_features(10);
  const Batch a = MustBatch(MustCreate(plain)->TrainBatch(5, 3));
  EXPECT_EQ(std::vector<float>(a.x.begin(), a.x.begin() + 4),
            std::vector<float>(batch.x.begin() + 50, batch.x.begin() + 54));
}

TEST(SyntheticTableTest, TooNarrowLayoutNamesTheField) {
  DataConfig config = DefaultJobConfig().data();
  config.set_num_features(10);
  config.set_num_categorical(3);
  config.set_categories(3);
  config.set_missing_rate(0.1);  // needs 3 x (3 + 1) = 12 slots
  absl::StatusOr<std::unique_ptr<DataSource>> source =
      DataSource::Create(config);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(source.status().message()),
              HasSubstr("data.num_features: 10 encoded features cannot hold 3 "
                        "categorical columns x 3 levels + their missing "
                        "indicators (needs >= 12)"));
  config.set_missing_rate(1.0);
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.missing_rate"));
}

TEST(SyntheticTableTest, CategoricalTaskIsLearnable) {
  DataConfig data = DefaultJobConfig().data();
  data.set_num_features(24);
  data.set_num_categorical(3);
  data.set_categories(4);
  data.set_missing_rate(0.1);
  ModelConfig model_config = DefaultJobConfig().model();
  model_config.set_type(ModelConfig::SOFTMAX);
  model_config.set_input_dim(24);
  ExpectSgdLearns(data, model_config);
}

// ---------------------------------------------------------------------------
// File data: split, labels, imputation, standardization, the epoch sampler.

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// `rows` rows whose label (regression) and feature 0 are the row id; feature
// 1 is constant, feature 2 a spread-out function of the id.
Table IdTable(int64_t rows) {
  Table t;
  t.rows = rows;
  t.cols = 3;
  for (int64_t r = 0; r < rows; ++r) {
    t.x.push_back(r);
    t.x.push_back(5.0f);
    t.x.push_back(std::sin(r * 1.7) * 10 + 3);
    t.y.push_back(r);
  }
  return t;
}

DataConfig IdConfig() {
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::CSV);
  config.set_num_classes(1);  // labels are the raw row ids
  config.set_standardize(false);
  config.set_test_fraction(0.2);
  return config;
}

std::unique_ptr<DataSource> MustCreateTable(Table table,
                                            const DataConfig& config) {
  auto source = CreateTableSource(std::move(table), config, "ids");
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(*source) : nullptr;
}

std::vector<int64_t> Ids(const Batch& batch) {
  return std::vector<int64_t>(batch.y.begin(), batch.y.end());
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(FileDataTest, SplitIsSeededAndTheSameOnEveryWorker) {
  const DataConfig config = IdConfig();
  auto a = MustCreateTable(IdTable(100), config);
  auto b = MustCreateTable(IdTable(100), config);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->train_size(), 80);
  EXPECT_EQ(a->num_features(), 3);
  EXPECT_EQ(a->num_classes(), 1);
  const std::vector<int64_t> test = Ids(MustBatch(a->TestSlice(0, 1)));
  EXPECT_EQ(test.size(), 20u);
  EXPECT_EQ(test, Ids(MustBatch(b->TestSlice(0, 1))));
  EXPECT_TRUE(std::is_sorted(test.begin(), test.end()));  // file order
  const std::vector<int64_t> train =
      Sorted(Ids(MustBatch(a->TrainBatch(0, 80))));
  EXPECT_EQ(train, Sorted(Ids(MustBatch(b->TrainBatch(0, 80)))));
  // Disjoint, and together every row.
  std::vector<int64_t> all = train;
  all.insert(all.end(), test.begin(), test.end());
  std::vector<int64_t> expected(100);
  for (int64_t i = 0; i < 100; ++i) expected[i] = i;
  EXPECT_EQ(Sorted(all), expected);
  // Test slices are contiguous pieces of the test set.
  std::vector<int64_t> pieces;
  for (int rank = 0; rank < 3; ++rank) {
    const std::vector<int64_t> part = Ids(MustBatch(a->TestSlice(rank, 3)));
    pieces.insert(pieces.end(), part.begin(), part.end());
  }
  EXPECT_EQ(pieces, test);
  EXPECT_FALSE(a->TestSlice(3, 3).ok());
  // Another seed, another split; test_fraction 0: everything trains.
  DataConfig other = config;
  other.set_seed(8);
  EXPECT_NE(
      Ids(MustBatch(MustCreateTable(IdTable(100), other)->TestSlice(0, 1))),
      test);
  other.set_test_fraction(0);
  auto full = MustCreateTable(IdTable(100), other);
  EXPECT_EQ(full->train_size(), 100);
  EXPECT_EQ(MustBatch(full->TestSlice(0, 1)).n, 0);
  EXPECT_THAT(a->Describe(), HasSubstr("80 train / 20 test rows"));
}

// Over one epoch 4 workers x b see every training row exactly once; every
// worker (its own DataSource) computes the same permutation; the next epoch
// is another order of the same rows.
TEST(FileDataTest, SamplerCoversEachEpochOnceAcrossWorkers) {
  const DataConfig config = IdConfig();
  const int world = 4;
  for (int64_t b : {5, 3}) {  // 80 = 4 steps of 20; 80 = 6 steps of 12 + 8
    SCOPED_TRACE(b);
    std::vector<std::unique_ptr<DataSource>> workers;
    for (int rank = 0; rank < world; ++rank) {
      workers.push_back(MustCreateTable(IdTable(100), config));
    }
    const int64_t n = workers[0]->train_size();
    const std::vector<int64_t> train =
        Sorted(Ids(MustBatch(workers[0]->TrainBatch(0, n))));
    // epoch_ids[e][id - e*n]: the row each global id maps to.
    std::vector<std::vector<int64_t>> epoch_ids(2, std::vector<int64_t>(n, -1));
    std::vector<std::vector<int>> owner(2, std::vector<int>(n, -1));
    for (uint64_t step = 0; FirstExampleId(step, 0, world, b) < 2 * n; ++step) {
      for (int rank = 0; rank < world; ++rank) {
        const uint64_t first = FirstExampleId(step, rank, world, b);
        const Batch batch = MustBatch(workers[rank]->TrainBatch(first, b));
        for (int64_t i = 0; i < b; ++i) {
          const uint64_t id = first + i;
          if (id >= 2 * static_cast<uint64_t>(n)) break;
          epoch_ids[id / n][id % n] = batch.y[i];
          owner[id / n][id % n] = rank;
        }
      }
    }
    for (int e = 0; e < 2; ++e) {
      EXPECT_EQ(Sorted(epoch_ids[e]), train) << "epoch " << e;
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_GT(std::count(owner[e].begin(), owner[e].end(), rank), 0);
      }
    }
    EXPECT_NE(epoch_ids[0], epoch_ids[1]);  // reshuffled
    // Every worker's instance agrees with every other on any id.
    for (int rank = 1; rank < world; ++rank) {
      EXPECT_EQ(Ids(MustBatch(workers[rank]->TrainBatch(0, 2 * n))),
                Ids(MustBatch(workers[0]->TrainBatch(0, 2 * n))));
    }
    EXPECT_EQ(Ids(MustBatch(workers[0]->TrainBatch(0, n))), epoch_ids[0]);
  }
}

TEST(FileDataTest, EpochSamplerCachesThePermutation) {
  EpochSampler sampler(50, 42);
  std::vector<int64_t> seen;
  for (uint64_t id = 0; id < 150; ++id) {
    const int64_t row = sampler.Row(id);
    EXPECT_EQ(row, sampler.Permutation(id / 50)[id % 50]);
    seen.push_back(row);
  }
  EXPECT_EQ(sampler.permutations_built(), 3);  // once per epoch, not per id
  const std::vector<int64_t> first(seen.begin(), seen.begin() + 50);
  std::vector<int64_t> identity(50);
  for (int64_t i = 0; i < 50; ++i) identity[i] = i;
  EXPECT_EQ(Sorted(first), identity);
  EXPECT_NE(first, identity);
  EXPECT_EQ(first, EpochSampler(50, 42).Permutation(0));  // deterministic
  EXPECT_NE(SeededPermutation(50, 1), SeededPermutation(50, 2));
  EXPECT_EQ(SeededPermutation(50, 1), SeededPermutation(50, 1));
}

TEST(FileDataTest, StandardizesWithTrainStatistics) {
  DataConfig config = IdConfig();
  config.set_standardize(true);
  auto source = MustCreateTable(IdTable(100), config);
  const int64_t n = source->train_size();
  const Batch train = MustBatch(source->TrainBatch(0, n));
  // Raw training statistics of each column, from the row ids.
  const Table raw = IdTable(100);
  std::vector<double> mean(3), sd(3);
  for (int64_t k = 0; k < 3; ++k) {
    double sum = 0, sq = 0;
    for (float id : train.y) sum += raw.x[static_cast<int64_t>(id) * 3 + k];
    mean[k] = sum / n;
    for (float id : train.y) {
      const double d = raw.x[static_cast<int64_t>(id) * 3 + k] - mean[k];
      sq += d * d;
    }
    sd[k] = std::sqrt(sq / n);
  }
  for (int64_t k : {0, 2}) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) sum += train.x[i * 3 + k];
    for (int64_t i = 0; i < n; ++i)
      sq += train.x[i * 3 + k] * train.x[i * 3 + k];
    EXPECT_NEAR(sum / n, 0, 1e-5);
    EXPECT_NEAR(sq / n, 1, 1e-4);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(train.x[i * 3 + 1], 0.0f);
  // Test rows use the training mean and deviation.
  const Batch test = MustBatch(source->TestSlice(0, 1));
  for (int64_t i = 0; i < test.n; ++i) {
    const int64_t id = test.y[i];
    for (int64_t k : {0, 2}) {
      EXPECT_NEAR(test.x[i * 3 + k], (raw.x[id * 3 + k] - mean[k]) / sd[k],
                  1e-5);
    }
    EXPECT_EQ(test.x[i * 3 + 1], 0.0f);  // constant column: only centred
  }
  EXPECT_THAT(source->Describe(), HasSubstr("standardized with train mean"));
}

TEST(FileDataTest, CsvMissingValuesGetTheTrainMean) {
  std::string text = "id,a,b\n";
  for (int r = 0; r < 40; ++r) {
    // a is missing on every 4th row, b never.
    text += std::to_string(r) + "," +
            (r % 4 == 1 ? std::string(r % 8 == 1 ? "NA" : "")
                        : std::to_string(r * 2)) +
            "," + std::to_string(r % 3) + "\n";
  }
  DataConfig config = IdConfig();
  config.set_path(WriteFile("missing.csv", text));
  config.set_label_column("id");
  auto source = DataSource::Create(config);
  ASSERT_TRUE(source.ok()) << source.status();
  const int64_t n = (*source)->train_size();
  EXPECT_EQ(n, 32);
  const Batch train = MustBatch((*source)->TrainBatch(0, n));
  double sum = 0;
  int present = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<int>(train.y[i]) % 4 != 1) {
      sum += train.x[i * 2];
      ++present;
    }
  }
  const float fill = static_cast<float>(sum / present);
  const Batch test = MustBatch((*source)->TestSlice(0, 1));
  for (const Batch* batch : {&train, &test}) {
    for (int64_t i = 0; i < batch->n; ++i) {
      const int id = batch->y[i];
      EXPECT_EQ(batch->x[i * 2], id % 4 == 1 ? fill : 2.0f * id) << id;
      EXPECT_EQ(batch->x[i * 2 + 1], id % 3);
    }
  }
  EXPECT_THAT((*source)->Describe(), HasSubstr("10 missing values ("));
  EXPECT_THAT((*source)->Describe(),
              HasSubstr("imputed with train column means"));
}

TEST(FileDataTest, ClassLabelsMapToSortedIds) {
  Table t;
  t.rows = 6;
  t.cols = 1;
  t.x = {0, 1, 2, 3, 4, 5};
  t.y = {5, -1, 10, 5, -1, 10};
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::CSV);
  config.set_test_fraction(0);
  config.set_standardize(false);
  config.set_num_classes(4);  // file data decides: 3 distinct labels
  auto source = MustCreateTable(t, config);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->num_classes(), 3);
  const Batch all = MustBatch(source->TrainBatch(0, 6));
  for (int64_t i = 0; i < 6; ++i) {
    const int row = all.x[i];
    EXPECT_EQ(all.y[i], (std::vector<float>{1, 0, 2, 1, 0, 2})[row]);
  }
  EXPECT_THAT(source->Describe(),
              HasSubstr("3 classes (labels -1, 5, 10 -> 0..2)"));

  config.set_num_classes(1);  // regression keeps the raw label
  source = MustCreateTable(t, config);
  EXPECT_EQ(source->num_classes(), 1);
  const Batch raw = MustBatch(source->TrainBatch(0, 6));
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(raw.y[i], t.y[static_cast<int>(raw.x[i])]);
  }

  config.set_num_classes(2);
  t.y.assign(6, 1.0);  // one label only
  auto bad = CreateTableSource(t, config, "one.csv");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("data.num_classes: one.csv has 1 distinct labels"));
  t.text_labels = true;
  t.label_names = {"cat"};
  config.set_num_classes(1);
  EXPECT_THAT(CreateTableSource(t, config, "pets.csv").status().message(),
              HasSubstr("regression"));
  config.set_test_fraction(0.5);  // 1 row: no training row left
  EXPECT_THAT(CreateTableSource(IdTable(1), config, "x").status().message(),
              HasSubstr("data.test_fraction: 0.5 leaves no training rows"));
}

TEST(FileDataTest, FileErrorsPassThroughCreate) {
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::LIBSVM);
  config.set_path("/nonexistent/a.libsvm");
  EXPECT_EQ(DataSource::Create(config).status().code(),
            absl::StatusCode::kNotFound);
  config.set_path(WriteFile("bad.libsvm", "1 1:1\n1 2:2\n0 0:1\n"));
  absl::StatusOr<std::unique_ptr<DataSource>> source =
      DataSource::Create(config);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(source.status().message()),
              HasSubstr("bad.libsvm:3: index 0 is not >= 1"));
}

TEST(FileDataTest, LibsvmSource) {
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::LIBSVM);
  config.set_path(WriteFile("ok.libsvm", "1 1:1 4:2\n-1 2:2\n1 3:1\n-1 1:3\n"));
  config.set_test_fraction(0.25);
  auto source = MustCreate(config);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->num_features(), 4);
  EXPECT_EQ(source->num_classes(), 2);
  EXPECT_EQ(source->train_size(), 3);
  EXPECT_EQ(MustBatch(source->TestSlice(0, 1)).n, 1);
}

TEST(FileDataTest, DigitsFixture) {
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::DIGITS);
  config.set_path("worker/data/testdata/digits_5.csv");
  auto source = MustCreate(config);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->num_features(), 64);
  EXPECT_EQ(source->num_classes(), 5);  // labels 0..4 in the fixture
  EXPECT_EQ(source->train_size(), 4);   // 5 - round(5 * 0.2)
  EXPECT_THAT(
      source->Describe(),
      HasSubstr("digits from worker/data/testdata/digits_5.csv: 5 rows x "
                "64 features, 5 classes"));
  std::printf("%s\n", source->Describe().c_str());
}

// ---------------------------------------------------------------------------
// The real data sets, when `psctl setup` has extracted them.

// The checkout's root, found through a runfile that links into it; empty if
// that fails.
std::string WorkspaceRoot() {
  std::error_code error;
  const std::filesystem::path fixture =
      std::filesystem::canonical("worker/data/testdata/digits_5.csv", error);
  if (error) return "";
  return fixture.parent_path().parent_path().parent_path().string();
}

// data.dir() of the extracted sets, or empty (with the reason in *why).
std::string DatasetDir(const std::string& file, std::string* why) {
  const std::string root = WorkspaceRoot();
  const std::string dir = root + "/.cache/pstrain/datasets";
  if (root.empty() || !std::filesystem::exists(dir + "/" + file)) {
    *why = "no " + dir + "/" + file + " (run ./psctl setup to extract it)";
    return "";
  }
  return dir;
}

TEST(RealDataTest, DigitsAndBreastCancerShapes) {
  std::string why;
  const std::string dir = DatasetDir("digits.csv", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::DIGITS);
  config.set_dir(dir);
  auto digits = MustCreate(config);
  ASSERT_NE(digits, nullptr);
  EXPECT_EQ(digits->num_features(), 64);
  EXPECT_EQ(digits->num_classes(), 10);
  EXPECT_EQ(digits->train_size(), 1438);
  EXPECT_EQ(MustBatch(digits->TestSlice(0, 1)).n, 359);
  std::printf("%s\n", digits->Describe().c_str());

  config.set_source(DataConfig::BREAST_CANCER);
  auto cancer = MustCreate(config);
  ASSERT_NE(cancer, nullptr);
  EXPECT_EQ(cancer->num_features(), 30);
  EXPECT_EQ(cancer->num_classes(), 2);
  EXPECT_EQ(cancer->train_size(), 455);
  EXPECT_EQ(MustBatch(cancer->TestSlice(0, 1)).n, 114);
  EXPECT_THAT(cancer->Describe(),
              HasSubstr("2 classes (labels malignant, benign -> 0..1)"));
  std::printf("%s\n", cancer->Describe().c_str());
}

// What a sync job of `config` computes, in one process: the gradient of the
// mean loss over each global batch (= the servers' sample-weighted average of
// the workers' slices), then the configured optimizer. Returns the test
// accuracy of the final weights.
double TrainInProcess(const JobConfig& config, DataSource* data) {
  auto model = Model::Create(config.model());
  EXPECT_TRUE(model.ok()) << model.status();
  auto optimizer = Optimizer::Create(config.training().optimizer());
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  if (!model.ok() || !optimizer.ok()) return 0;
  std::vector<std::vector<float>> params, slots, grads;
  for (const auto& spec : (*model)->params()) {
    params.emplace_back(NumElements(spec));
    InitialValues(spec, 0, params.back().size(), params.back().data());
    slots.push_back((*optimizer)->InitSlots(params.back().size()));
  }
  const int64_t global = config.training().local_batch() *
                         config.job().workers() *
                         config.training().grad_accum_steps();
  for (int64_t step = 0; step < config.training().steps(); ++step) {
    const Batch batch =
        MustBatch(data->TrainBatch(FirstExampleId(step, 0, 1, global), global));
    auto loss = (*model)->LossAndGradient(params, batch, &grads);
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return 0;
    for (size_t t = 0; t < params.size(); ++t) {
      (*optimizer)
          ->Apply(step, step, params[t].data(), grads[t].data(),
                  slots[t].data(), params[t].size());
    }
  }
  auto eval = (*model)->Evaluate(params, MustBatch(data->TestSlice(0, 1)));
  EXPECT_TRUE(eval.ok()) << eval.status();
  return eval.ok() ? static_cast<double>(eval->correct) / eval->total : 0;
}

// configs/<name>.yaml, trained in process on the real data, reaches
// `target` test accuracy.
void ExpectConfigReaches(const std::string& name, double target) {
  std::string why;
  const std::string dir = DatasetDir(name + ".csv", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<JobConfig> config = LoadJobConfig("configs/" + name + ".yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(ValidateJobConfig(*config).ok()) << ValidateJobConfig(*config);
  config->mutable_data()->set_dir(dir);
  auto data = MustCreate(config->data());
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->num_features(), config->model().input_dim());
  EXPECT_EQ(data->num_classes(), config->model().num_classes());
  const double accuracy = TrainInProcess(*config, data.get());
  std::printf(
      "configs/%s.yaml in process: %lld steps, global batch %llu, "
      "test accuracy %.4f\n",
      name.c_str(), static_cast<long long>(config->training().steps()),
      static_cast<unsigned long long>(
          config->training().optimizer().global_batch()),
      accuracy);
  EXPECT_GE(accuracy, target);
}

TEST(RealDataTest, DigitsConfigReaches95Percent) {
  ExpectConfigReaches("digits", 0.95);
}

TEST(RealDataTest, BreastCancerConfigReaches95Percent) {
  ExpectConfigReaches("breast_cancer", 0.95);
}

}  // namespace
}  // namespace pstrain
