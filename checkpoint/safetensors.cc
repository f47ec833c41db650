#include "checkpoint/safetensors.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

uint64_t NumElements(const pstrain::v1::TensorSpec& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape()) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

absl::Status ExportSafetensors(const CheckpointReader& reader,
                               CheckpointEnv* env, const std::string& path,
                               bool with_slots) {
  const CheckpointManifest& m = reader.manifest();
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"job", m.job},
                            {"step", absl::StrCat(m.step)},
                            {"mode", m.mode},
                            {"optimizer", m.optimizer}};
  // Each tensor's data as raw little-endian bytes (the host's: checkpoint.cc
  // writes only on little-endian hosts), in header order.
  std::vector<std::string> blobs;
  uint64_t offset = 0;
  auto add = [&](const std::string& name, const char* dtype,
                 const std::vector<int64_t>& shape, std::string bytes) {
    header[name] = {{"dtype", dtype},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes.size()}}};
    offset += bytes.size();
    blobs.push_back(std::move(bytes));
  };
  auto floats = [](const float* begin, size_t n) {
    return std::string(reinterpret_cast<const char*>(begin), n * sizeof(float));
  };
  for (const pstrain::v1::TensorSpec& t : m.shard_map.tensors()) {
    if (t.row_sparse()) {
      // The rows stored at the cut, by increasing id (rows never stored read
      // as their initial values and are not exported).
      PS_ASSIGN_OR_RETURN(SparseShardState state,
                          reader.RowsFor({t.name()}, 0, 1));
      const std::vector<SparseRowState>& rows = state.rows[0];
      const int64_t dim = t.shape_size() == 2 ? t.shape(1) : 0;
      const int64_t n = static_cast<int64_t>(rows.size());
      const size_t row_floats = static_cast<size_t>(dim) * (1 + m.num_slots);
      std::vector<int64_t> ids(n);
      std::vector<int64_t> updates(n);
      std::vector<std::vector<float>> parts(1 + m.num_slots);
      for (auto& part : parts) part.reserve(n * dim);
      for (int64_t i = 0; i < n; ++i) {
        if (rows[i].data.size() != row_floats) {
          return absl::DataLossError(absl::StrCat(
              "tensor '", t.name(), "': row ", rows[i].id, " has ",
              rows[i].data.size(), " floats, expected ", row_floats));
        }
        ids[i] = rows[i].id;
        updates[i] = static_cast<int64_t>(rows[i].updates);
        for (size_t p = 0; p < parts.size(); ++p) {
          parts[p].insert(parts[p].end(), rows[i].data.begin() + p * dim,
                          rows[i].data.begin() + (p + 1) * dim);
        }
      }
      header["__metadata__"][absl::StrCat("row_sparse:", t.name())] =
          absl::StrCat("[", t.shape(0), ", ", dim, "]");
      add(t.name(), "F32", {n, dim}, floats(parts[0].data(), parts[0].size()));
      add(t.name() + ".ids", "I64", {n},
          std::string(reinterpret_cast<const char*>(ids.data()),
                      ids.size() * sizeof(int64_t)));
      add(t.name() + ".updates", "I64", {n},
          std::string(reinterpret_cast<const char*>(updates.data()),
                      updates.size() * sizeof(int64_t)));
      for (int s = 0; with_slots && s < m.num_slots; ++s) {
        add(absl::StrCat(t.name(), ":slot", s), "F32", {n, dim},
            floats(parts[1 + s].data(), parts[1 + s].size()));
      }
      continue;
    }
    const uint64_t n = NumElements(t);
    std::vector<float> weights(n);
    std::vector<float> slots(n * m.num_slots);
    PS_RETURN_IF_ERROR(
        reader.ReadRange(t.name(), 0, n, weights.data(), slots.data()));
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    // Its weights, then (optionally) its slots as separate tensors.
    add(t.name(), "F32", shape, floats(weights.data(), n));
    for (int s = 0; with_slots && s < m.num_slots; ++s) {
      add(absl::StrCat(t.name(), ":slot", s), "F32", shape,
          floats(slots.data() + s * n, n));
    }
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();  // little-endian host (checkpoint.cc)

  const std::string tmp = path + ".tmp";
  PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out,
                      env->NewWritableFile(tmp));
  PS_RETURN_IF_ERROR(out->Append(absl::string_view(
      reinterpret_cast<const char*>(&length), sizeof(length))));
  PS_RETURN_IF_ERROR(out->Append(text));
  for (const std::string& b : blobs) PS_RETURN_IF_ERROR(out->Append(b));
  PS_RETURN_IF_ERROR(out->Sync());
  PS_RETURN_IF_ERROR(out->Close());
  return env->RenameFile(tmp, path);
}

}  // namespace pstrain
