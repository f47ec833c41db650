#include "worker/data.h"

#include <cstdio>
#include <string>
#include <vector>

#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model.h"

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
  DataConfig config;
  auto one = MustCreate(config), two = MustCreate(config);
  const Batch a = MustBatch(one->TrainBatch(100, 8));
  ExpectSame(a, MustBatch(two->TrainBatch(100, 8)));
  EXPECT_EQ(a.dim, 32);
  EXPECT_EQ(a.x.size(), 8u * 32);
  const Batch tail = MustBatch(one->TrainBatch(104, 4));
  EXPECT_EQ(std::vector<float>(a.x.begin() + 4 * 32, a.x.end()), tail.x);
  EXPECT_EQ(std::vector<float>(a.y.begin() + 4, a.y.end()), tail.y);
  EXPECT_NE(a.x, MustBatch(one->TrainBatch(200, 8)).x);

  config.seed = 8;  // another task
  EXPECT_NE(a.x, MustBatch(MustCreate(config)->TrainBatch(100, 8)).x);
}

TEST(DataSourceTest, WorkerSlicesConcatenateToTheGlobalBatch) {
  auto source = MustCreate(DataConfig());
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
  DataConfig config;
  config.test_examples = 1003;
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
      DataConfig config;
      config.seed = seed;
      config.noise = noise;
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
  DataConfig config;
  config.num_classes = 1;
  config.num_features = 8;
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
  DataConfig config;
  config.targets = {1, 3, 5, 7};
  config.test_examples = 6;
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
  DataConfig config;
  config.source = "mnist";
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.source"));
  config = DataConfig();
  config.num_features = 0;
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.num_features"));
  config = DataConfig();
  config.num_classes = 0;
  EXPECT_THAT(DataSource::Create(config).status().message(),
              HasSubstr("data.num_classes"));
  config = DataConfig();
  config.noise = -0.5;
  EXPECT_EQ(DataSource::Create(config).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MustCreate(DataConfig())->TrainBatch(0, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Plain SGD on a softmax regression reaches well above chance (25%).
TEST(DataSourceTest, Learnable) {
  DataConfig data;
  auto source = MustCreate(data);
  ModelConfig model_config;
  model_config.type = "softmax";
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

}  // namespace
}  // namespace pstrain
