// The all-reduce trainer's row-sparse tables (an embedding [rows, dim],
// docs/sparse.md): every rank holds a replica of each table and keeps it
// equal to the others' by exchanging each step's row gradients in one of two
// ways (allreduce.sparse):
//
//  * kDense: what plain data parallelism does. The table's whole [rows, dim]
//    gradient (zero except at the rows the batch touched) rides with the
//    dense tensors' gradient in one ring all-reduce: 4 * rows * dim bytes
//    times 2 (N - 1) / N each way per rank per step, whatever the batch.
//  * kAllGather: each rank sends its unique row ids and their gradient rows
//    (Model::row_gradient) to every other rank (RingAllGather after a ring
//    all-reduce of the dense tensors that also carries every rank's sample
//    count and row count); bytes follow the rows touched, not the table.
//
// The rows' update is the sync shards' (server/sparse_shard.cc, reused:
// SparseTable holds the replica, with its lazy rows, per-row optimizer state
// and update counts): for every row r some rank touched,
//   g_r = (sum_w n_w g_{w,r}) / sum_w n_w,
// then the optimizer runs once on each touched row at schedule step `step`.
// kAllGather takes the sum exactly as a shard does (in double, in rank
// order, from the same fp32 row gradients and sample counts), so its rows
// are bit-identical to a sync parameter server's. kDense sums n_w g_{w,r} in
// fp32 around the ring (the dense tensors' rule) and counts as touched the
// rows whose summed gradient is not all zero: the same up to fp32 rounding
// of the sum, and the same rows except one whose gradients cancel exactly
// (which SGD and AdaGrad leave alone either way).
//
// Replicas are lazy (a row takes memory once updated; until then it reads as
// the init rule's value, common/model_spec.h), so kAllGather's memory
// follows the rows seen; kDense also holds its gradient buffer of
// 4 * (rows * dim + dense params) bytes.
//
// Thread-compatible (the rank's trainer thread).
#ifndef PSTRAIN_WORKER_ALLREDUCE_ROW_REPLICAS_H_
#define PSTRAIN_WORKER_ALLREDUCE_ROW_REPLICAS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/optimizer.h"
#include "server/sparse_table.h"
#include "worker/allreduce/allreducer.h"
#include "worker/model/local_step.h"
#include "worker/model/model.h"

namespace pstrain {

class RowReplicas {
 public:
  enum class Mode { kDense, kAllGather };

  // Replicas of `model`'s row-sparse tensors (none: empty()). Borrows
  // `model` and `optimizer`, which must outlive it; `ranks` is the ring's
  // size, `rank` this rank. kDense needs a gradient buffer of
  // rows * dim + num_dense_params + 1 floats, allocated here
  // (RESOURCE_EXHAUSTED naming its size if that fails).
  static absl::StatusOr<std::unique_ptr<RowReplicas>> Create(
      Model* model, const Optimizer* optimizer, Mode mode, int ranks, int rank);

  bool empty() const { return tables_.empty(); }

  // Makes the model's resident rows of each table the rows that `local`'s
  // Gradient(step) reads (test: those its Evaluate reads), read from the
  // replica.
  absl::Status SetStepRows(LocalStep* local, int64_t step);
  absl::Status SetTestRows(LocalStep* local);

  // After LocalStep::Gradient: the dense tensors' sample-weighted mean
  // gradient over all ranks into host[0, num_dense_params) (as
  // AllReduceWeightedMeanOfModel, the count in host[num_dense_params]), and
  // each table's rows updated as the header says, at schedule step `step`.
  // `samples` > 0 is this rank's slice. Every rank calls it with the same
  // steps. DATA_LOSS for a gathered block that does not decode (ids out of
  // the table, repeated, or not integers); the reducer's errors as they are.
  absl::Status Exchange(AllReducer* reducer, uint64_t step, uint64_t samples,
                        HostBuffer* host);

  // Current values of rows `ids` of params()[tensor] (row-major); stores
  // nothing. INVALID_ARGUMENT for a tensor that is not row-sparse or an id
  // outside the table.
  absl::StatusOr<std::vector<float>> ReadRows(int tensor,
                                              absl::Span<const int64_t> ids);

  // Rows of all tables the replica stores.
  uint64_t stored_rows() const;

 private:
  struct Table {
    int tensor = 0;  // index in model->params()
    int64_t rows = 0, dim = 0;
    int limbs = 1;  // floats per id in a gathered block (24 bits each)
    std::unique_ptr<SparseTable> replica;
  };
  RowReplicas(Model* model, Mode mode, int ranks, int rank)
      : model_(model), mode_(mode), ranks_(ranks), rank_(rank) {}

  absl::Status SetRows(const std::vector<std::vector<int64_t>>& ids);
  absl::Status ExchangeDense(AllReducer* reducer, uint64_t step, float n,
                             HostBuffer* host);
  absl::Status ExchangeAllGather(AllReducer* reducer, uint64_t step, float n,
                                 HostBuffer* host);

  Model* const model_;
  const Mode mode_;
  const int ranks_, rank_;
  std::vector<Table> tables_;
  std::vector<float> flat_;  // what the ring all-reduces
  std::vector<float> gathered_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_ROW_REPLICAS_H_
