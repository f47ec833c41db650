// Row-sparse tensors (TensorSpec.row_sparse, docs/sparse.md): which shard
// holds a row, and the packing of row ids and row values on the wire.
//
// Row r of a table lives on shard RowShard(r, K) = splitmix64(r) mod K.
// splitmix64's finaliser is a bijection of 64-bit integers whose output
// bits each depend on every input bit, so consecutive ids, ids with a
// common stride and Zipf-popular ids alike spread evenly: K shards hold
// rows/K +- O(sqrt(rows/K)) rows each (sparse_rows_test measures it). The
// function depends only on (r, K), never on the table or the run, so
// servers, clients and checkpoint resharding agree without talking.
//
// Ids travel as packed little-endian int64 (8 bytes each); values as the
// wire dtype (common/tensor_codec.h), row after row.
#ifndef PSTRAIN_COMMON_SPARSE_ROWS_H_
#define PSTRAIN_COMMON_SPARSE_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// splitmix64's output function (Steele, Lea and Flood 2014).
uint64_t SplitMix64(uint64_t x);

// The shard (0..num_shards-1) that holds row `row`; num_shards >= 1.
uint32_t RowShard(int64_t row, uint32_t num_shards);

// Rows and width of a row-sparse tensor: shape [rows, dim] with both >= 1;
// INVALID_ARGUMENT naming the tensor otherwise.
struct TableShape {
  int64_t rows = 0;
  int64_t dim = 0;
};
absl::StatusOr<TableShape> RowSparseShape(const pstrain::v1::TensorSpec& spec);

// Appends the packed little-endian bytes of `ids` to `out`.
void AppendRowIds(absl::Span<const int64_t> ids, std::string* out);
// Decodes packed ids; INVALID_ARGUMENT naming `tensor` when the byte count
// is not a multiple of 8.
absl::StatusOr<std::vector<int64_t>> DecodeRowIds(const std::string& bytes,
                                                  const std::string& tensor);

// Appends `n` fp32 values encoded in `dtype` (a wire dtype) to `out`; fp16
// saturation is reported naming `tensor` (NoteF16Saturation).
void AppendRowValues(const float* values, uint64_t n, pstrain::v1::DType dtype,
                     const std::string& tensor, std::string* out);

// Rows of one message (at most kMaxMessagePayloadBytes of ids and values) a
// piece of `dim`-wide rows in `dtype` may carry: at least 1.
uint64_t RowsPerMessage(uint64_t dim, pstrain::v1::DType dtype,
                        bool with_values);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SPARSE_ROWS_H_
