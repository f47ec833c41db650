// Export of a checkpoint's weights to safetensors, the format PyTorch and
// Hugging Face load (https://github.com/huggingface/safetensors):
//   bytes 0..7   u64 little-endian N, the header length
//   bytes 8..    N bytes of JSON: {"__metadata__": {string: string},
//                "tensor name": {"dtype": "F32", "shape": [...],
//                                "data_offsets": [begin, end]}, ...}
//                padded with spaces to a multiple of 8 bytes
//   then the data: each tensor's little-endian fp32 elements (row-major) at
//   [begin, end) relative to the data's start; tensors are contiguous in
//   the order of the checkpoint's tensor list.
#ifndef PSTRAIN_CHECKPOINT_SAFETENSORS_H_
#define PSTRAIN_CHECKPOINT_SAFETENSORS_H_

#include <string>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"

namespace pstrain {

// Writes every tensor's weights (optimizer slots too, as "NAME:slotK", when
// `with_slots`) to `path` (written as path.tmp, fsync'ed and renamed).
// __metadata__ holds the job, step, mode and optimizer.
absl::Status ExportSafetensors(const CheckpointReader& reader,
                               CheckpointEnv* env, const std::string& path,
                               bool with_slots);

}  // namespace pstrain

#endif  // PSTRAIN_CHECKPOINT_SAFETENSORS_H_
