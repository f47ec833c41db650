// Export of a checkpoint's weights to safetensors, the format PyTorch and
// Hugging Face load (https://github.com/huggingface/safetensors):
//   bytes 0..7   u64 little-endian N, the header length
//   bytes 8..    N bytes of JSON: {"__metadata__": {string: string},
//                "tensor name": {"dtype": "F32", "shape": [...],
//                                "data_offsets": [begin, end]}, ...}
//                padded with spaces to a multiple of 8 bytes
//   then the data: each tensor's little-endian elements (row-major) at
//   [begin, end) relative to the data's start; tensors are contiguous in
//   the order of the checkpoint's tensor list.
//
// A row-sparse tensor NAME of shape [R, D] (docs/sparse.md) is exported as
// the n rows stored at the cut, by increasing id (a row never stored reads
// as its initial value and is not exported):
//   NAME           F32 [n, D]  the rows' weights
//   NAME.ids       I64 [n]     their row ids, increasing
//   NAME.updates   I64 [n]     their per-row update counts (lazy optimizer)
//   NAME:slotK     F32 [n, D]  optimizer slot K of the rows (with_slots)
// and __metadata__ "row_sparse:NAME" holds the table's shape "[R, D]".
#ifndef PSTRAIN_CHECKPOINT_SAFETENSORS_H_
#define PSTRAIN_CHECKPOINT_SAFETENSORS_H_

#include <string>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"

namespace pstrain {

// Writes every tensor's weights (optimizer slots too, as "NAME:slotK", when
// `with_slots`; row-sparse tensors as above) to `path` (written as path.tmp,
// fsync'ed and renamed). __metadata__ holds the job, step, mode and
// optimizer. FAILED_PRECONDITION when the job has row-sparse tensors and
// the checkpoint holds no rows.
absl::Status ExportSafetensors(const CheckpointReader& reader,
                               CheckpointEnv* env, const std::string& path,
                               bool with_slots);

}  // namespace pstrain

#endif  // PSTRAIN_CHECKPOINT_SAFETENSORS_H_
