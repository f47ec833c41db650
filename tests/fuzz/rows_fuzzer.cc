// Fuzzes the row-sparse messages (docs/sparse.md): SparseShard's decoding
// and validation of PushRowsRequest and PullRowsRequest bytes, on shard 0
// of two holding the rows of "emb" [64, 3] with a bound of 4 rows. Byte 0
// picks mode (sync / async), optimizer (SGD / Adam), what happens at the
// bound (evict / reject) and the wire dtype (fp32 / bf16); then up to 8
// frames, each tried as a one-message row push and as a row pull.
// Properties: nothing crashes; a rejected push changes nothing (version,
// clocks and every row's values as before); a push never stores more rows
// than the bound; a pull at clock 0 (always readable) that decodes answers
// one value per requested id and column.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/sparse_rows.h"
#include "proto/pstrain.pb.h"
#include "server/sparse_shard.h"
#include "tests/fuzz/fuzz_input.h"

namespace pstrain {
namespace fuzz {
namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kDim = 3;
constexpr uint64_t kMaxRows = 4;

std::unique_ptr<SparseShard> MakeRows(uint8_t variant) {
  SparseShardOptions o;
  o.shard_id = 0;
  o.num_shards = 2;
  pstrain::v1::TensorSpec t;
  t.set_name("emb");
  t.add_shape(kRows);
  t.add_shape(kDim);
  t.set_dtype(pstrain::v1::DTYPE_F32);
  t.set_row_sparse(true);
  t.mutable_init()->set_kind(pstrain::v1::InitRule::UNIFORM);
  t.mutable_init()->set_scale(1.0f);
  t.mutable_init()->set_seed(3);
  o.tensors = {t};
  o.optimizer.set_kind((variant >> 1) & 1 ? pstrain::v1::OptimizerConfig::ADAM
                                          : pstrain::v1::OptimizerConfig::SGD);
  o.optimizer.set_base_lr(0.1);
  o.rule.kind = variant & 1 ? ConsistencyOptions::Kind::kSsp
                            : ConsistencyOptions::Kind::kBsp;
  o.rule.num_workers = 2;
  o.rule.staleness = 1;
  o.max_rows = kMaxRows;
  o.on_full = (variant >> 2) & 1 ? SparseTableOptions::OnFull::kReject
                                 : SparseTableOptions::OnFull::kEvict;
  o.wire_dtype =
      (variant >> 3) & 1 ? pstrain::v1::DTYPE_BF16 : pstrain::v1::DTYPE_F32;
  auto shard = SparseShard::Create(o);
  PS_FUZZ_CHECK(shard.ok(), "the fuzz table is valid");
  return std::move(*shard);
}

// Everything a client can observe: version, clocks, every row this shard
// holds as a pull at clock 0 reads it, and how many rows are stored.
std::string Observe(SparseShard& rows) {
  std::string state = std::to_string(rows.version());
  for (uint64_t c : rows.clocks()) state += "," + std::to_string(c);
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < kRows; ++r) {
    if (RowShard(r, 2) == 0) ids.push_back(r);
  }
  std::vector<RowBlock> blocks = {RowBlock{0, ids, {}}};
  auto pull = rows.Pull(0, 0, std::move(blocks), absl::Now());
  PS_FUZZ_CHECK(pull.ok(), "a pull at clock 0 is always readable");
  const std::vector<float>& v = pull->blocks[0].values;
  state.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  state += "/" + std::to_string(rows.stored_rows(0));
  return state;
}

}  // namespace
}  // namespace fuzz
}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const fuzz::FramedInput in = fuzz::SplitFrames(data, size, /*max_frames=*/8);
  std::unique_ptr<SparseShard> rows = fuzz::MakeRows(in.variant);
  for (const std::string& frame : in.frames) {
    v1::PushRowsRequest push;
    if (push.ParseFromString(frame)) {
      const std::string before = fuzz::Observe(*rows);
      absl::StatusOr<RowPush> decoded = rows->DecodePush({push});
      absl::Status st = decoded.status();
      if (decoded.ok()) st = rows->Push(std::move(*decoded)).status();
      if (!st.ok()) {
        PS_FUZZ_CHECK(fuzz::Observe(*rows) == before,
                      "a rejected row push must change nothing");
      }
      PS_FUZZ_CHECK(rows->stored_rows(0) <= fuzz::kMaxRows,
                    "rows stored stay within the bound");
    }
    v1::PullRowsRequest pull;
    if (pull.ParseFromString(frame)) {
      absl::StatusOr<std::vector<RowBlock>> blocks = rows->DecodePull(pull);
      if (blocks.ok()) {
        size_t ids = 0;
        for (const RowBlock& b : *blocks) ids += b.ids.size();
        auto read = rows->Pull(0, 0, std::move(*blocks), absl::Now());
        PS_FUZZ_CHECK(read.ok(), "a valid pull at clock 0 is answered");
        size_t values = 0;
        for (const RowBlock& b : read->blocks) values += b.values.size();
        PS_FUZZ_CHECK(values == ids * fuzz::kDim,
                      "one value per requested id and column");
      }
    }
  }
  rows->Close();
  return 0;
}
