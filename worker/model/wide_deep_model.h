// model.type wide_deep: a wide-and-deep / DLRM-style model of tabular data
// with high-cardinality categorical columns.
//
//   numeric x [n, input_dim] --bottom MLP (bottom_hidden, each activated)--> b
//   categorical value v of column c --hash t < hashes--> row
//       HashedRow(v, c, t, buckets) of the "embedding" table [buckets, dim];
//       the `hashes` rows of one value are pooled (sum | mean) into e_c
//   [b, e_0, ..., e_{C-1}] (concatenation) --top MLP (hidden)--> logits
//   -> softmax cross-entropy.
//
// The embedding table is row-sparse (Model::RowIds / SetRows /
// row_gradient): a batch uploads only the rows it reads, as a compact
// [u, dim] matrix plus each bag's index into it, and the backward produces
// the gradient of those u rows (ids deduplicated, uses summed), never a
// [buckets, dim] buffer. The concatenation is never materialised: the first
// top layer's weight [B + C*dim, h] is applied as two products, b W[0:B] +
// e W[B:], whose backward gives d b and d e directly.
#ifndef PSTRAIN_WORKER_MODEL_WIDE_DEEP_MODEL_H_
#define PSTRAIN_WORKER_MODEL_WIDE_DEEP_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "proto/pstrain.pb.h"
#include "worker/compute/compute_backend.h"
#include "worker/model/model.h"

namespace pstrain {

// The hashing trick: the table row of raw value `value` of categorical
// column `column` under hash function `hash` (0 <= hash < model.hashes), a
// splitmix64 mix of the three, modulo `buckets` (>= 1). A pure function,
// the same on every worker, run and platform.
int64_t HashedRow(uint64_t value, int64_t column, int64_t hash,
                  int64_t buckets);

// The model for `config` (type WIDE_DEEP) with parameters `specs`
// (ModelParamSpecs(config)), computing on `backend` (not owned unless
// `owned` is it). Used by Model::Create.
std::unique_ptr<Model> CreateWideDeepModel(
    const ModelConfig& config, std::vector<pstrain::v1::TensorSpec> specs,
    ComputeBackend* backend, std::unique_ptr<ComputeBackend> owned);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_WIDE_DEEP_MODEL_H_
