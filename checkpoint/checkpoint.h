// Checkpoints of a parameter-server job: every shard's state at one
// consistent cut (server/shard.h, "Checkpoints"), on disk in a documented
// format that does not depend on the shard layout, written so that a crash at
// any point leaves the previous checkpoint intact and loadable.
//
// On-disk format (version 1; all integers and floats little-endian):
//
//   ROOT/                              checkpoint.dir
//     step-000000000120/               one checkpoint: the cut (step) 120
//       shard-00000-of-00002.ckpt      shard 0's state
//       shard-00001-of-00002.ckpt
//       MANIFEST.json                  written last: the checkpoint exists
//                                      iff this file does
//
// A shard file is
//   bytes 0..7    magic "PSTCKPT1"
//   bytes 8..15   u64 H, the header length
//   bytes 16..    H bytes of JSON header:
//                 {"format": 1, "shard": k, "num_shards": K, "cut": c,
//                  "version": v, "schedule_step": s, "clocks": [per worker],
//                  "num_slots": S,
//                  "records": [{"tensor": name, "offset": first element,
//                               "length": n, "exponent": E or null,
//                               "data_offset": byte offset in the data}],
//                  and in a job with row-sparse tensors (docs/sparse.md)
//                  "row_version": row steps applied, "row_clocks": [per
//                  worker], "row_tables": [{"tensor": name, "rows": n,
//                  "row_floats": F, "data_offset": byte offset}]}
//   then the data: per record, at 16 + H + data_offset, n fp32 weights then
//   S * n fp32 slot values (slot-major: slot 0's n values, then slot 1's;
//   the slots of common/optimizer.h: momentum 1, Adam/AdamW first and second
//   moment, AdaGrad the accumulator, SGD none). A row table's data, at its
//   data_offset: n int64 row ids, n uint64 per-row update counts, then n
//   rows of F = dim * (1 + S) fp32 values (the row's weights, then its S
//   slots of dim values each). Rows are keyed by id, so they restore onto
//   any number of shards (RowShard, common/sparse_rows.h).
// Records are keyed by (tensor, element range), so a reader can assemble any
// range of any tensor whichever shard wrote it: a checkpoint taken with K
// shards and one chunk size restores onto K' shards with another.
//
// MANIFEST.json is
//   {"format": 1, "job": name, "step": cut,
//    "mode": "sync"|"async"|"allreduce" (worker/allreduce/checkpointing.h:
//    one replica as one shard),
//    "num_shards": K, "num_workers": N, "optimizer": "ADAM", "num_slots": S,
//    "shard_map": {"tensors": [{"name", "shape": [...],
//                  "dtype": "F32"}], "chunks": [{"tensor", "index", "offset",
//                  "length", "shard"}]},
//    "files": [{"name": "shard-00000-of-00002.ckpt", "shard": 0,
//               "bytes": size, "crc32c": "0x1234abcd"}]}
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, the checksum of
// iSCSI, ext4 and leveldb) is taken over each whole file.
//
// Atomicity: every file is written as NAME.tmp, fsync'ed, closed, renamed to
// NAME, and the directory fsync'ed; the manifest comes last, after every
// shard file is durable. A crash before the manifest's rename leaves a step
// directory without MANIFEST.json ("torn"): readers ignore it, the previous
// checkpoint is untouched, and retention removes the torn directory once a
// newer checkpoint is complete. Shard files of one checkpoint may be written
// by different processes (each server its own, the coordinator the manifest
// once all are reported) on a file system they share.
#ifndef PSTRAIN_CHECKPOINT_CHECKPOINT_H_
#define PSTRAIN_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "checkpoint/env.h"
#include "checkpoint/state.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

inline constexpr int kCheckpointFormat = 1;
inline constexpr char kCheckpointManifest[] = "MANIFEST.json";

// The checkpoint.* config keys (parsed by the job config; plain data).
struct CheckpointOptions {
  std::string dir;           // checkpoint.dir; empty: no checkpoints
  uint64_t every_steps = 0;  // checkpoint.every_steps; 0: off
  double every_seconds = 0;  // checkpoint.every_seconds; 0: off
  uint32_t keep = 0;         // checkpoint.keep: last k complete; 0: all
};

// CRC-32C of `data`, continuing from `crc` (0 to start).
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

struct CheckpointFile {
  std::string name;  // within the checkpoint's directory
  uint32_t shard = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct CheckpointManifest {
  int format = kCheckpointFormat;
  std::string job;
  uint64_t step = 0;  // the cut
  std::string mode;   // "sync", "async" or "allreduce"
  uint32_t num_shards = 0;
  uint32_t num_workers = 0;
  std::string optimizer;  // OptimizerConfig.Kind name
  int num_slots = 0;
  // Tensors (name, shape, dtype; init rules are not kept) and chunks.
  pstrain::v1::ShardMap shard_map;
  std::vector<CheckpointFile> files;  // one per shard, by shard
};

// The manifest of a checkpoint of `job` at cut `step` (job, mode, shard and
// worker counts, optimizer and its number of slots, shard map without
// addresses), files still empty. INVALID_ARGUMENT for a bad optimizer.
absl::StatusOr<CheckpointManifest> ManifestForJob(
    const pstrain::v1::JobSpec& job, uint64_t step);

// ROOT/step-NNNNNNNNNNNN (12 digits).
std::string CheckpointDir(const std::string& root, uint64_t step);
// "shard-KKKKK-of-NNNNN.ckpt".
std::string ShardFileName(uint32_t shard, uint32_t num_shards);

// Writes `state` as shard `shard`'s file in `dir` (created if missing):
// NAME.tmp, fsync, rename, fsync of `dir`. Returns its manifest entry.
// ALREADY_EXISTS if `dir` holds a manifest: a complete checkpoint is never
// rewritten (a torn one is, file by file). Same for WriteManifest.
absl::StatusOr<CheckpointFile> WriteShardFile(CheckpointEnv* env,
                                              const std::string& dir,
                                              uint32_t shard,
                                              uint32_t num_shards,
                                              const ShardState& state);

// Writes MANIFEST.json into `dir` the same way, then fsyncs `dir`'s parent.
// Call it only once every file it lists is written.
absl::Status WriteManifest(CheckpointEnv* env, const std::string& dir,
                           const CheckpointManifest& manifest);

// One process holding every shard (tests, tools): writes each state
// (shards[k] is shard k), then the manifest with their entries (manifest.files
// is filled in), then applies retention with `keep`. Returns the directory.
absl::StatusOr<std::string> SaveCheckpoint(
    CheckpointEnv* env, const std::string& root, CheckpointManifest manifest,
    const std::vector<ShardState>& shards, uint32_t keep);

// The checkpoints under `root`: complete ones (with a manifest) by step, and
// torn step directories (no manifest).
struct CheckpointListing {
  std::vector<uint64_t> complete;
  std::vector<uint64_t> torn;
};
absl::StatusOr<CheckpointListing> ListCheckpoints(CheckpointEnv* env,
                                                  const std::string& root);

// The directory of the newest complete checkpoint; NOT_FOUND if none.
absl::StatusOr<std::string> LatestCheckpoint(CheckpointEnv* env,
                                             const std::string& root);

// Keeps the newest `keep` complete checkpoints (all when 0); deletes older
// complete ones and torn directories older than the newest complete one (a
// newer torn one may still be being written).
absl::Status ApplyRetention(CheckpointEnv* env, const std::string& root,
                            uint32_t keep);

// Elements [offset, offset + length) of one tensor: what a shard holds of
// it (StateFor reads a checkpoint onto any layout by such ranges).
struct TensorRange {
  std::string tensor;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A complete checkpoint, read and verified. Immutable; thread-safe.
class CheckpointReader {
 public:
  // Reads the manifest and every file it lists. DATA_LOSS naming the file
  // for a missing or truncated file, a checksum mismatch or a bad header;
  // NOT_FOUND when `dir` has no manifest (a torn or absent checkpoint).
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(
      CheckpointEnv* env, const std::string& dir);

  const CheckpointManifest& manifest() const { return manifest_; }
  // Every shard's (version, schedule_step, clocks) as saved.
  struct ShardHeader {
    uint64_t cut = 0;
    uint64_t version = 0;
    uint64_t schedule_step = 0;
    std::vector<uint64_t> clocks;
    // Row-sparse tables (absent in a job without them).
    bool has_rows = false;
    uint64_t row_version = 0;
    std::vector<uint64_t> row_clocks;
  };
  const std::vector<ShardHeader>& shard_headers() const { return headers_; }

  // The rows shard `shard_id` of `num_shards` holds of the row-sparse
  // `tables` (names; any number of shards wrote them: each row goes where
  // RowShard says), with the rows' version and clocks (every file must
  // agree: DATA_LOSS). FAILED_PRECONDITION when the checkpoint holds no rows.
  absl::StatusOr<SparseShardState> RowsFor(
      const std::vector<std::string>& tables, uint32_t shard_id,
      uint32_t num_shards) const;

  // Elements [offset, offset + length) of `tensor`: weights into
  // weights[0, length) and slots into slots[0, num_slots * length)
  // (slot-major with stride length; slots may be null). NOT_FOUND for an
  // unknown tensor, DATA_LOSS when the files do not cover the range.
  absl::Status ReadRange(const std::string& tensor, uint64_t offset,
                         uint64_t length, float* weights, float* slots) const;

  // Whether the checkpoint fits a job of the tensors of `shard_map` (any
  // shard layout), `num_workers` workers and `optimizer`: the same tensors
  // (names and shapes, in order), number of workers and optimizer kind.
  // FAILED_PRECONDITION naming the first difference.
  absl::Status CheckCompatible(
      const pstrain::v1::ShardMap& shard_map, uint32_t num_workers,
      pstrain::v1::OptimizerConfig::Kind optimizer) const;
  // The same for `job` (its shard map, job.workers and optimizer).
  absl::Status CheckCompatible(const pstrain::v1::JobSpec& job) const;

  // The state to restore into a shard holding `chunks` (any layout): each
  // chunk read by range; version and schedule step (which every shard must
  // agree on); worker clocks, the element-wise minimum over the saved shards
  // (they differ only for late pushes dropped by backup workers); each sync
  // exponent, the largest saved one among the records the chunk overlaps
  // (the saved value itself when the layout is unchanged).
  absl::StatusOr<ShardState> StateFor(
      const std::vector<TensorRange>& chunks) const;

 private:
  struct Record {
    uint64_t offset = 0;
    uint64_t length = 0;
    const char* data = nullptr;  // weights, then slots
    bool has_exponent = false;
    int32_t exponent = 0;
  };
  CheckpointReader() = default;

  CheckpointManifest manifest_;
  std::vector<std::string> contents_;  // per file
  std::vector<ShardHeader> headers_;
  std::map<std::string, std::vector<Record>> records_;       // by offset
  std::map<std::string, std::vector<SparseRowState>> rows_;  // every file's
};

}  // namespace pstrain

#endif  // PSTRAIN_CHECKPOINT_CHECKPOINT_H_
