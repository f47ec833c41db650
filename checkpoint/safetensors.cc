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
  // Each tensor's weights, then (optionally) its slots as separate tensors.
  std::vector<std::vector<float>> blobs;
  uint64_t offset = 0;
  for (const pstrain::v1::TensorSpec& t : m.shard_map.tensors()) {
    const uint64_t n = NumElements(t);
    std::vector<float> weights(n);
    std::vector<float> slots(n * m.num_slots);
    PS_RETURN_IF_ERROR(
        reader.ReadRange(t.name(), 0, n, weights.data(), slots.data()));
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    auto add = [&](const std::string& name, std::vector<float> values) {
      const uint64_t bytes = values.size() * sizeof(float);
      header[name] = {{"dtype", "F32"},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      blobs.push_back(std::move(values));
    };
    add(t.name(), std::move(weights));
    for (int s = 0; with_slots && s < m.num_slots; ++s) {
      add(absl::StrCat(t.name(), ":slot", s),
          std::vector<float>(slots.begin() + s * n,
                             slots.begin() + (s + 1) * n));
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
  for (const std::vector<float>& b : blobs) {
    PS_RETURN_IF_ERROR(out->Append(absl::string_view(
        reinterpret_cast<const char*>(b.data()), b.size() * sizeof(float))));
  }
  PS_RETURN_IF_ERROR(out->Sync());
  PS_RETURN_IF_ERROR(out->Close());
  return env->RenameFile(tmp, path);
}

}  // namespace pstrain
