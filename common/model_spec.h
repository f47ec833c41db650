// The parameter tensors of a model and their initial values. Servers and
// workers both derive the tensor list from the ModelConfig, so they agree on
// names, shapes and order without talking; initial values are counter-based,
// so any process can produce any slice of any tensor, bit-identically.
#ifndef PSTRAIN_COMMON_MODEL_SPEC_H_
#define PSTRAIN_COMMON_MODEL_SPEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Parameter tensors of `config`, in a fixed order, all fp32:
//   scalar:  "w" [1], CONSTANT init_value.
//   linear:  "linear/weight" [input_dim, num_classes], "linear/bias".
//   softmax: "softmax/weight" [input_dim, num_classes], "softmax/bias".
//   mlp:     "layer{i}/weight" [in, out], "layer{i}/bias" for each hidden
//            layer, then the output layer (i = hidden.size()).
//   wide_deep: "embedding" [buckets, embedding_dim], row_sparse, UNIFORM
//            0.1/sqrt(embedding_dim); "bottom{i}/weight", "bottom{i}/bias"
//            over input_dim -> bottom_hidden...; "top{i}/weight",
//            "top{i}/bias" over (last bottom width + sparse_columns *
//            embedding_dim) -> hidden... -> num_classes (>= 2).
// Weights are UNIFORM (1/sqrt(in) for linear/softmax; He sqrt(6/in) for relu
// hidden layers, Glorot sqrt(6/(in+out)) otherwise and for the output layer);
// biases are ZEROS. Every rule's seed is config.seed (the tensor name is
// hashed in as well). Invalid configs are INVALID_ARGUMENT naming the field.
absl::StatusOr<std::vector<pstrain::v1::TensorSpec>> ModelParamSpecs(
    const ModelConfig& config);

// True when the model's outputs are class scores (accuracy is meaningful):
// every type but "scalar" with num_classes >= 2 (Model::is_classifier()).
bool IsClassifier(const ModelConfig& config);

// Number of elements of a tensor (product of its shape; 1 for shape []).
int64_t NumElements(const pstrain::v1::TensorSpec& spec);

// Initial value of flat element `index` of `spec`: a pure function of
// (init rule, tensor name, index), via splitmix64-style hashing (uniform) and
// Box-Muller over two hashes (normal). KIND_UNSPECIFIED yields zeros.
float InitialValue(const pstrain::v1::TensorSpec& spec, uint64_t index);

// Elements [offset, offset + length) into out[0, length).
void InitialValues(const pstrain::v1::TensorSpec& spec, uint64_t offset,
                   uint64_t length, float* out);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_MODEL_SPEC_H_
