#include "common/model_spec.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using pstrain::v1::InitRule;
using pstrain::v1::TensorSpec;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name());
  return names;
}

std::vector<int64_t> Shape(const TensorSpec& spec) {
  return {spec.shape().begin(), spec.shape().end()};
}

TEST(ModelParamSpecsTest, Scalar) {
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(ModelConfig::SCALAR);
  config.set_init_value(2.5f);
  auto specs = ModelParamSpecs(config);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 1u);
  EXPECT_EQ((*specs)[0].name(), "w");
  EXPECT_THAT(Shape((*specs)[0]), ElementsAre(1));
  EXPECT_EQ((*specs)[0].dtype(), pstrain::v1::DTYPE_F32);
  EXPECT_EQ(InitialValue((*specs)[0], 0), 2.5f);
}

TEST(ModelParamSpecsTest, LinearAndSoftmax) {
  for (std::string type : {"linear", "softmax"}) {
    ModelConfig config = DefaultJobConfig().model();
    config.set_type(type == "linear" ? ModelConfig::LINEAR
                                     : ModelConfig::SOFTMAX);
    config.set_input_dim(16);
    config.set_num_classes(type == "linear" ? 1 : 3);
    auto specs = ModelParamSpecs(config);
    ASSERT_TRUE(specs.ok()) << specs.status();
    EXPECT_THAT(Names(*specs), ElementsAre(type + "/weight", type + "/bias"));
    EXPECT_THAT(Shape((*specs)[0]), ElementsAre(16, config.num_classes()));
    EXPECT_EQ((*specs)[0].init().kind(), InitRule::UNIFORM);
    EXPECT_FLOAT_EQ((*specs)[0].init().scale(), 0.25f);
    EXPECT_EQ((*specs)[1].init().kind(), InitRule::ZEROS);
  }
}

TEST(ModelParamSpecsTest, Mlp) {
  ModelConfig config = DefaultJobConfig().model();
  config.set_type(ModelConfig::MLP);
  config.set_input_dim(10);
  SetList(config.mutable_hidden(), {20, 30});
  config.set_num_classes(4);
  config.set_activation(ModelConfig::RELU);
  auto specs = ModelParamSpecs(config);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_THAT(Names(*specs),
              ElementsAre("layer0/weight", "layer0/bias", "layer1/weight",
                          "layer1/bias", "layer2/weight", "layer2/bias"));
  EXPECT_THAT(Shape((*specs)[0]), ElementsAre(10, 20));
  EXPECT_THAT(Shape((*specs)[3]), ElementsAre(30));
  EXPECT_THAT(Shape((*specs)[4]), ElementsAre(30, 4));
  EXPECT_EQ(NumElements((*specs)[4]), 120);
  EXPECT_FLOAT_EQ((*specs)[0].init().scale(), std::sqrt(6.0f / 10));
  EXPECT_FLOAT_EQ((*specs)[2].init().scale(), std::sqrt(6.0f / 20));
  EXPECT_FLOAT_EQ((*specs)[4].init().scale(), std::sqrt(6.0f / 34));  // Glorot
  config.set_activation(ModelConfig::TANH);
  specs = ModelParamSpecs(config);
  ASSERT_TRUE(specs.ok());
  EXPECT_FLOAT_EQ((*specs)[0].init().scale(), std::sqrt(6.0f / 30));
  for (const auto& s : *specs) EXPECT_EQ(s.init().seed(), config.seed());
}

TEST(ModelParamSpecsTest, InvalidConfigsNameTheField) {
  struct Case {
    std::function<void(ModelConfig*)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig* c) { c->set_type(ModelConfig::MODEL_TYPE_UNSPECIFIED); },
       "model.type"},
      {[](ModelConfig* c) { c->set_input_dim(0); }, "model.input_dim"},
      {[](ModelConfig* c) { c->set_num_classes(-1); }, "model.num_classes"},
      {[](ModelConfig* c) { c->set_num_classes(1); }, "model.num_classes"},
      {[](ModelConfig* c) {
         SetList(c->mutable_hidden(), {8, 0});
       },
       "model.hidden[1]"},
      {[](ModelConfig* c) {
         c->set_activation(ModelConfig::ACTIVATION_UNSPECIFIED);
       },
       "model.activation"},
  };
  for (const Case& c : cases) {
    ModelConfig config = DefaultJobConfig().model();  // mlp classifier
    c.edit(&config);
    auto specs = ModelParamSpecs(config);
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(specs.status().message(), HasSubstr(c.field));
  }
  ModelConfig regressor = DefaultJobConfig().model();
  regressor.set_classifier(false);
  regressor.set_num_classes(1);
  EXPECT_TRUE(ModelParamSpecs(regressor).ok());
}

TensorSpec Spec(InitRule::Kind kind, float scale, uint64_t seed,
                std::string name = "t") {
  TensorSpec spec;
  spec.set_name(name);
  spec.add_shape(1 << 16);
  spec.mutable_init()->set_kind(kind);
  spec.mutable_init()->set_scale(scale);
  spec.mutable_init()->set_seed(seed);
  return spec;
}

TEST(ModelParamSpecsTest, ExternalListsItsTensors) {
  ModelConfig c;
  c.set_type(ModelConfig::EXTERNAL);
  c.set_seed(9);
  c.add_tensors("conv1.weight:8x1x3x3");
  c.add_tensors("conv1/bias:8");
  c.add_tensors("fc/weight:10x32:normal(0.5)");
  c.add_tensors("fc/bias:10:constant(0.25)");
  c.add_tensors("emb:4x3:zeros");
  auto specs = ModelParamSpecs(c);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 5u);
  const TensorSpec& conv = (*specs)[0];
  EXPECT_EQ(conv.name(), "conv1/weight");  // torch's '.' becomes '/'
  EXPECT_THAT(conv.shape(), ElementsAre(8, 1, 3, 3));
  EXPECT_EQ(conv.init().kind(), InitRule::UNIFORM);
  // Glorot over [out, in, k, k]: fan_in 1*9, fan_out 8*9.
  EXPECT_FLOAT_EQ(conv.init().scale(), std::sqrt(6.0 / (9 + 72)));
  EXPECT_EQ(conv.init().seed(), 9u);
  EXPECT_EQ((*specs)[1].init().kind(), InitRule::ZEROS);
  EXPECT_EQ((*specs)[2].init().kind(), InitRule::NORMAL);
  EXPECT_FLOAT_EQ((*specs)[2].init().scale(), 0.5f);
  EXPECT_EQ((*specs)[3].init().kind(), InitRule::CONSTANT);
  EXPECT_FLOAT_EQ(InitialValue((*specs)[3], 7), 0.25f);
  EXPECT_EQ((*specs)[4].init().kind(), InitRule::ZEROS);
}

TEST(ModelParamSpecsTest, ExternalErrorsNameTheEntry) {
  auto error = [](std::vector<std::string> tensors) {
    ModelConfig c;
    c.set_type(ModelConfig::EXTERNAL);
    for (const std::string& t : tensors) c.add_tensors(t);
    return std::string(ModelParamSpecs(c).status().message());
  };
  EXPECT_THAT(error({}), HasSubstr("model.tensors: must list"));
  EXPECT_THAT(error({"a:3", "b"}), HasSubstr("model.tensors[1]: 'b' is not"));
  EXPECT_THAT(error({"a:3x0"}),
              HasSubstr("model.tensors[0]: tensor 'a': shape '3x0'"));
  EXPECT_THAT(error({"a:3xq"}), HasSubstr("shape '3xq'"));
  EXPECT_THAT(error({"a b:3"}), HasSubstr("tensor name 'a b'"));
  EXPECT_THAT(error({"a:3:xavier"}), HasSubstr("init 'xavier' is not zeros"));
  EXPECT_THAT(error({"a.w:3", "a/w:4"}),
              HasSubstr("model.tensors[1]: tensor 'a/w' is listed twice"));
}

TEST(InitialValueTest, SlicesMatchElementsAndAreDeterministic) {
  const TensorSpec spec = Spec(InitRule::NORMAL, 1, 5);
  std::vector<float> slice(100);
  InitialValues(spec, 1000, slice.size(), slice.data());
  for (size_t i = 0; i < slice.size(); ++i) {
    EXPECT_EQ(slice[i], InitialValue(spec, 1000 + i));
  }
  // Pinned values: changing the generator changes every job's initial model.
  EXPECT_FLOAT_EQ(InitialValue(spec, 0), -1.19423068f);
  EXPECT_FLOAT_EQ(InitialValue(Spec(InitRule::UNIFORM, 1, 5), 7),
                  0.0125444271f);
  EXPECT_NE(InitialValue(spec, 0),
            InitialValue(Spec(InitRule::NORMAL, 1, 6), 0));
  EXPECT_NE(InitialValue(spec, 0),
            InitialValue(Spec(InitRule::NORMAL, 1, 5, "u"), 0));
}

TEST(InitialValueTest, Distributions) {
  const int n = 1 << 16;
  std::vector<float> v(n);
  InitialValues(Spec(InitRule::UNIFORM, 0.5f, 1), 0, n, v.data());
  double sum = 0, sq = 0;
  for (float x : v) {
    EXPECT_LE(std::abs(x), 0.5f);
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0, 0.01);
  EXPECT_NEAR(sq / n, 0.25 / 3, 0.005);

  InitialValues(Spec(InitRule::NORMAL, 2, 1), 0, n, v.data());
  sum = sq = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0, 0.05);
  EXPECT_NEAR(sq / n, 4, 0.1);

  InitialValues(Spec(InitRule::ZEROS, 2, 1), 0, 10, v.data());
  EXPECT_EQ(v[3], 0.0f);
  TensorSpec constant = Spec(InitRule::CONSTANT, 0, 1);
  constant.mutable_init()->set_value(-1.5f);
  EXPECT_EQ(InitialValue(constant, 12345), -1.5f);
}

}  // namespace
}  // namespace pstrain
