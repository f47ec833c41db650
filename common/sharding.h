// Cutting tensors into chunks and spreading the chunks over server shards.
#ifndef PSTRAIN_COMMON_SHARDING_H_
#define PSTRAIN_COMMON_SHARDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Largest chunk payload on the wire. gRPC messages stay far below the 32 MiB
// size at which unary transfers collapse on this machine.
inline constexpr uint64_t kMaxChunkBytes = 4u << 20;
// Budget of chunk payload per streamed message.
inline constexpr uint64_t kMaxMessagePayloadBytes = 4u << 20;
// The worker's push messages (PsClientOptions::push_message_bytes): smaller,
// so that a server summing on arrival sums one message while the next is
// received (a chunk larger than this travels alone). docs/performance.md,
// "Push messages of 1 MiB".
inline constexpr uint64_t kPushMessagePayloadBytes = 1u << 20;
// The server's pull messages (PsServiceOptions::pull_message_bytes), for the
// same reason the other way: the worker decodes one message while the next
// is received. docs/performance-log.md, "Pull messages of 1 MiB".
inline constexpr uint64_t kPullMessagePayloadBytes = 1u << 20;

// Largest chunk the automatic choice makes. A shard that sums on arrival
// scans and applies a chunk only once it is whole, so the chunk is the
// grain of the pipeline between the wire and the apply: at 4 MiB the last
// chunk's apply (about 1.5 ms here) ran after the transfer and a 16 MB push
// had four stages. docs/performance-log.md, "Chunks of at most 1 MiB".
inline constexpr uint64_t kAutoMaxChunkBytes = 1u << 20;

// Picks elements per chunk when the config says "automatic" (chunk_bytes 0):
// about eight chunks per shard so that small models still use every shard,
// between 1 KiB and kAutoMaxChunkBytes. Row-sparse tensors do not count.
uint64_t AutoChunkElems(const std::vector<pstrain::v1::TensorSpec>& tensors,
                        int num_shards);

// Cuts every tensor into chunks of `chunk_elems` elements (the last chunk of a
// tensor may be shorter) and assigns each chunk to the shard holding the
// fewest bytes so far, largest chunks first. Bytes per shard then differ by at
// most one chunk, even for a single huge tensor. Deterministic. Row-sparse
// tensors (TensorSpec.row_sparse) are listed in the map's tensors but get no
// chunks: their rows are spread by RowShard (common/sparse_rows.h).
absl::StatusOr<pstrain::v1::ShardMap> BuildShardMap(
    const std::vector<pstrain::v1::TensorSpec>& tensors, int num_shards,
    uint64_t chunk_elems);

// Bytes of payload held by each shard under `map`.
std::vector<uint64_t> BytesPerShard(const pstrain::v1::ShardMap& map,
                                    int num_shards);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SHARDING_H_
