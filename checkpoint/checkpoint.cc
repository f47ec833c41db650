#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/optimizer.h"
#include "common/sparse_rows.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint format stores host floats as little-endian");

using json = nlohmann::json;

constexpr char kMagic[8] = {'P', 'S', 'T', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kPreambleBytes = 16;  // magic + header length
constexpr char kStepPrefix[] = "step-";
constexpr char kTmpSuffix[] = ".tmp";

struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

std::string Hex32(uint32_t v) { return absl::StrFormat("0x%08x", v); }

std::string Join(const std::string& dir, const std::string& name) {
  return dir + "/" + name;
}

std::string Parent(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return dir.substr(0, slash);
}

// Writes `parts` as `dir/name` atomically (tmp, fsync, rename, fsync dir).
absl::StatusOr<CheckpointFile> WriteAtomically(
    CheckpointEnv* env, const std::string& dir, const std::string& name,
    const std::vector<absl::string_view>& parts) {
  const std::string path = Join(dir, name);
  const std::string tmp = path + kTmpSuffix;
  CheckpointFile file;
  file.name = name;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out,
                      env->NewWritableFile(tmp));
  for (absl::string_view part : parts) {
    PS_RETURN_IF_ERROR(out->Append(part));
    file.crc32c = Crc32c(part, file.crc32c);
    file.bytes += part.size();
  }
  PS_RETURN_IF_ERROR(out->Sync());
  PS_RETURN_IF_ERROR(out->Close());
  PS_RETURN_IF_ERROR(env->RenameFile(tmp, path));
  PS_RETURN_IF_ERROR(env->SyncDir(dir));
  return file;
}

// Rewriting files under an existing manifest would make a complete
// checkpoint inconsistent (and a crash then would lose it).
absl::Status RefuseComplete(CheckpointEnv* env, const std::string& dir) {
  if (env->FileExists(Join(dir, kCheckpointManifest))) {
    return absl::AlreadyExistsError(absl::StrCat(
        "checkpoint ", dir, " is already complete; it is never rewritten"));
  }
  return absl::OkStatus();
}

bool ParseStepDir(const std::string& name, uint64_t* step) {
  if (!absl::StartsWith(name, kStepPrefix)) return false;
  return absl::SimpleAtoi(name.substr(sizeof(kStepPrefix) - 1), step);
}

json ShardMapJson(const pstrain::v1::ShardMap& map) {
  json tensors = json::array();
  for (const auto& t : map.tensors()) {
    json shape = json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    json tensor = {{"name", t.name()}, {"shape", shape}, {"dtype", "F32"}};
    if (t.row_sparse()) tensor["row_sparse"] = true;
    tensors.push_back(tensor);
  }
  json chunks = json::array();
  for (const auto& c : map.chunks()) {
    chunks.push_back({{"tensor", c.tensor()},
                      {"index", c.index()},
                      {"offset", c.offset()},
                      {"length", c.length()},
                      {"shard", c.shard()}});
  }
  return {{"tensors", tensors}, {"chunks", chunks}};
}

absl::Status DataLoss(const std::string& path, absl::string_view problem) {
  return absl::DataLossError(
      absl::StrCat("checkpoint file ", path, ": ", problem));
}

// Parses the manifest at `path` (nlohmann throws on type errors).
absl::StatusOr<CheckpointManifest> ParseManifest(const std::string& path,
                                                 const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLoss(path, "not a JSON object");
  }
  CheckpointManifest m;
  try {
    m.format = j.at("format").get<int>();
    if (m.format != kCheckpointFormat) {
      return DataLoss(path, absl::StrCat("format ", m.format,
                                         " is not supported (expected ",
                                         kCheckpointFormat, ")"));
    }
    m.job = j.at("job").get<std::string>();
    m.step = j.at("step").get<uint64_t>();
    m.mode = j.at("mode").get<std::string>();
    m.num_shards = j.at("num_shards").get<uint32_t>();
    m.num_workers = j.at("num_workers").get<uint32_t>();
    m.optimizer = j.at("optimizer").get<std::string>();
    m.num_slots = j.at("num_slots").get<int>();
    const json& map = j.at("shard_map");
    for (const json& t : map.at("tensors")) {
      auto* spec = m.shard_map.add_tensors();
      spec->set_name(t.at("name").get<std::string>());
      for (const json& d : t.at("shape")) spec->add_shape(d.get<int64_t>());
      spec->set_dtype(pstrain::v1::DTYPE_F32);
      if (t.contains("row_sparse")) {
        spec->set_row_sparse(t.at("row_sparse").get<bool>());
      }
      if (t.at("dtype").get<std::string>() != "F32") {
        return DataLoss(path, absl::StrCat("tensor '", spec->name(),
                                           "' has a dtype other than F32"));
      }
    }
    for (const json& c : map.at("chunks")) {
      auto* info = m.shard_map.add_chunks();
      info->set_tensor(c.at("tensor").get<std::string>());
      info->set_index(c.at("index").get<uint32_t>());
      info->set_offset(c.at("offset").get<uint64_t>());
      info->set_length(c.at("length").get<uint64_t>());
      info->set_shard(c.at("shard").get<uint32_t>());
    }
    for (const json& f : j.at("files")) {
      CheckpointFile file;
      file.name = f.at("name").get<std::string>();
      file.shard = f.at("shard").get<uint32_t>();
      file.bytes = f.at("bytes").get<uint64_t>();
      const std::string crc = f.at("crc32c").get<std::string>();
      if (!absl::StartsWith(crc, "0x") ||
          !absl::SimpleHexAtoi(crc.substr(2), &file.crc32c)) {
        return DataLoss(path, absl::StrCat("bad crc32c '", crc, "'"));
      }
      if (file.name.empty() || file.name.find('/') != std::string::npos) {
        return DataLoss(path, absl::StrCat("bad file name '", file.name, "'"));
      }
      m.files.push_back(std::move(file));
    }
  } catch (const json::exception& e) {
    return DataLoss(path, absl::StrCat("bad manifest: ", e.what()));
  }
  if (m.files.size() != m.num_shards) {
    return DataLoss(path, absl::StrCat("lists ", m.files.size(), " files for ",
                                       m.num_shards, " shards"));
  }
  if (m.num_slots < 0 || m.num_slots > 2) {
    return DataLoss(path, absl::StrCat("bad num_slots ", m.num_slots));
  }
  return m;
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  static const Crc32cTable* table = new Crc32cTable;
  crc = ~crc;
  for (unsigned char b : data) crc = table->t[(crc ^ b) & 0xff] ^ (crc >> 8);
  return ~crc;
}

absl::StatusOr<CheckpointManifest> ManifestForJob(
    const pstrain::v1::JobSpec& job, uint64_t step) {
  CheckpointManifest m;
  m.job = job.config().job().name();
  m.step = step;
  m.mode = job.config().training().mode() == pstrain::v1::MODE_SYNC ? "sync"
           : job.config().training().mode() == pstrain::v1::MODE_ALLREDUCE
               ? "allreduce"  // worker/allreduce/checkpointing.h
               : "async";
  m.num_shards = job.num_servers();
  m.num_workers = job.config().job().workers();
  m.optimizer = pstrain::v1::OptimizerConfig::Kind_Name(
      job.config().training().optimizer().kind());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                      Optimizer::Create(job.config().training().optimizer()));
  m.num_slots = optimizer->num_slots();
  m.shard_map = job.shard_map();
  m.shard_map.clear_server_addresses();
  return m;
}

std::string CheckpointDir(const std::string& root, uint64_t step) {
  return absl::StrFormat("%s/%s%012u", root, kStepPrefix, step);
}

std::string ShardFileName(uint32_t shard, uint32_t num_shards) {
  return absl::StrFormat("shard-%05u-of-%05u.ckpt", shard, num_shards);
}

absl::StatusOr<CheckpointFile> WriteShardFile(CheckpointEnv* env,
                                              const std::string& dir,
                                              uint32_t shard,
                                              uint32_t num_shards,
                                              const ShardState& state) {
  json records = json::array();
  uint64_t data_offset = 0;
  for (const ChunkState& c : state.chunks) {
    if (c.weights.size() != c.length ||
        c.slots.size() != c.length * static_cast<uint64_t>(state.num_slots)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", shard, " state: chunk '", c.tensor, "' [",
                       c.offset, ", +", c.length, ") has ", c.weights.size(),
                       " weights and ", c.slots.size(), " slot values"));
    }
    records.push_back(
        {{"tensor", c.tensor},
         {"offset", c.offset},
         {"length", c.length},
         {"exponent", c.has_exponent ? json(c.exponent) : json(nullptr)},
         {"data_offset", data_offset}});
    data_offset += (c.weights.size() + c.slots.size()) * sizeof(float);
  }
  // Row-sparse tables: per table n ids (int64), n update counts (uint64),
  // then n rows of `row_floats` floats (weights, then slots).
  json row_tables = json::array();
  std::vector<std::vector<int64_t>> row_ids;
  std::vector<std::vector<uint64_t>> row_updates;
  if (state.has_rows) {
    const SparseShardState& rs = state.rows;
    if (rs.rows.size() != rs.tensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", shard, " state: ", rs.rows.size(),
                       " row tables for ", rs.tensors.size(), " tensors"));
    }
    for (size_t t = 0; t < rs.tensors.size(); ++t) {
      const auto& rows = rs.rows[t];
      const uint64_t row_floats = rows.empty() ? 0 : rows[0].data.size();
      row_ids.emplace_back();
      row_updates.emplace_back();
      for (const SparseRowState& r : rows) {
        if (r.data.size() != row_floats) {
          return absl::InvalidArgumentError(
              absl::StrCat("shard ", shard, " state: rows of '", rs.tensors[t],
                           "' differ in size"));
        }
        row_ids.back().push_back(r.id);
        row_updates.back().push_back(r.updates);
      }
      row_tables.push_back({{"tensor", rs.tensors[t]},
                            {"rows", rows.size()},
                            {"row_floats", row_floats},
                            {"data_offset", data_offset}});
      data_offset +=
          rows.size() * (2 * sizeof(uint64_t) + row_floats * sizeof(float));
    }
  }
  json header = {
      {"format", kCheckpointFormat}, {"shard", shard},
      {"num_shards", num_shards},    {"cut", state.cut},
      {"version", state.version},    {"schedule_step", state.schedule_step},
      {"clocks", state.clocks},      {"num_slots", state.num_slots},
      {"records", records}};
  if (state.has_rows) {
    header["row_version"] = state.rows.version;
    header["row_clocks"] = state.rows.clocks;
    header["row_tables"] = row_tables;
  }
  const std::string header_text = header.dump();
  std::string preamble(kMagic, sizeof(kMagic));
  const uint64_t h = header_text.size();
  preamble.append(reinterpret_cast<const char*>(&h), sizeof(h));
  std::vector<absl::string_view> parts = {preamble, header_text};
  for (const ChunkState& c : state.chunks) {
    parts.emplace_back(reinterpret_cast<const char*>(c.weights.data()),
                       c.weights.size() * sizeof(float));
    parts.emplace_back(reinterpret_cast<const char*>(c.slots.data()),
                       c.slots.size() * sizeof(float));
  }
  for (size_t t = 0; t < row_ids.size(); ++t) {
    parts.emplace_back(reinterpret_cast<const char*>(row_ids[t].data()),
                       row_ids[t].size() * sizeof(int64_t));
    parts.emplace_back(reinterpret_cast<const char*>(row_updates[t].data()),
                       row_updates[t].size() * sizeof(uint64_t));
    for (const SparseRowState& r : state.rows.rows[t]) {
      parts.emplace_back(reinterpret_cast<const char*>(r.data.data()),
                         r.data.size() * sizeof(float));
    }
  }
  PS_RETURN_IF_ERROR(RefuseComplete(env, dir));
  PS_RETURN_IF_ERROR(env->CreateDirs(dir));
  PS_ASSIGN_OR_RETURN(
      CheckpointFile file,
      WriteAtomically(env, dir, ShardFileName(shard, num_shards), parts));
  file.shard = shard;
  return file;
}

absl::Status WriteManifest(CheckpointEnv* env, const std::string& dir,
                           const CheckpointManifest& m) {
  json files = json::array();
  for (const CheckpointFile& f : m.files) {
    files.push_back({{"name", f.name},
                     {"shard", f.shard},
                     {"bytes", f.bytes},
                     {"crc32c", Hex32(f.crc32c)}});
  }
  const json j = {{"format", m.format},
                  {"job", m.job},
                  {"step", m.step},
                  {"mode", m.mode},
                  {"num_shards", m.num_shards},
                  {"num_workers", m.num_workers},
                  {"optimizer", m.optimizer},
                  {"num_slots", m.num_slots},
                  {"shard_map", ShardMapJson(m.shard_map)},
                  {"files", files}};
  const std::string text = j.dump(1) + "\n";
  PS_RETURN_IF_ERROR(RefuseComplete(env, dir));
  PS_RETURN_IF_ERROR(env->CreateDirs(dir));
  PS_RETURN_IF_ERROR(
      WriteAtomically(env, dir, kCheckpointManifest, {text}).status());
  return env->SyncDir(Parent(dir));
}

absl::StatusOr<std::string> SaveCheckpoint(
    CheckpointEnv* env, const std::string& root, CheckpointManifest manifest,
    const std::vector<ShardState>& shards, uint32_t keep) {
  if (shards.size() != manifest.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint of ", manifest.num_shards, " shards given ",
                     shards.size(), " shard states"));
  }
  const std::string dir = CheckpointDir(root, manifest.step);
  manifest.files.clear();
  for (uint32_t k = 0; k < shards.size(); ++k) {
    PS_ASSIGN_OR_RETURN(
        CheckpointFile file,
        WriteShardFile(env, dir, k, manifest.num_shards, shards[k]));
    manifest.files.push_back(std::move(file));
  }
  PS_RETURN_IF_ERROR(WriteManifest(env, dir, manifest));
  PS_RETURN_IF_ERROR(ApplyRetention(env, root, keep));
  return dir;
}

absl::StatusOr<CheckpointListing> ListCheckpoints(CheckpointEnv* env,
                                                  const std::string& root) {
  PS_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(root));
  CheckpointListing listing;
  for (const std::string& name : names) {
    uint64_t step = 0;
    if (!ParseStepDir(name, &step) || !env->IsDir(Join(root, name))) continue;
    if (env->FileExists(Join(Join(root, name), kCheckpointManifest))) {
      listing.complete.push_back(step);
    } else {
      listing.torn.push_back(step);
    }
  }
  std::sort(listing.complete.begin(), listing.complete.end());
  std::sort(listing.torn.begin(), listing.torn.end());
  return listing;
}

absl::StatusOr<std::string> LatestCheckpoint(CheckpointEnv* env,
                                             const std::string& root) {
  PS_ASSIGN_OR_RETURN(CheckpointListing listing, ListCheckpoints(env, root));
  if (listing.complete.empty()) {
    return absl::NotFoundError(absl::StrCat("no complete checkpoint (with ",
                                            kCheckpointManifest, ") under ",
                                            root));
  }
  return CheckpointDir(root, listing.complete.back());
}

absl::Status ApplyRetention(CheckpointEnv* env, const std::string& root,
                            uint32_t keep) {
  PS_ASSIGN_OR_RETURN(CheckpointListing listing, ListCheckpoints(env, root));
  if (listing.complete.empty()) return absl::OkStatus();
  std::vector<uint64_t> doomed;
  if (keep > 0 && listing.complete.size() > keep) {
    doomed.assign(listing.complete.begin(),
                  listing.complete.end() - static_cast<ptrdiff_t>(keep));
  }
  for (uint64_t step : listing.torn) {
    if (step < listing.complete.back()) doomed.push_back(step);
  }
  for (uint64_t step : doomed) {
    const std::string dir = CheckpointDir(root, step);
    PS_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
    // The manifest first: a half-deleted checkpoint must not look complete.
    if (std::find(names.begin(), names.end(), kCheckpointManifest) !=
        names.end()) {
      PS_RETURN_IF_ERROR(env->DeleteFile(Join(dir, kCheckpointManifest)));
      PS_RETURN_IF_ERROR(env->SyncDir(dir));
    }
    for (const std::string& name : names) {
      if (name == kCheckpointManifest) continue;
      PS_RETURN_IF_ERROR(env->DeleteFile(Join(dir, name)));
    }
    PS_RETURN_IF_ERROR(env->DeleteDir(dir));
  }
  if (!doomed.empty()) PS_RETURN_IF_ERROR(env->SyncDir(root));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    CheckpointEnv* env, const std::string& dir) {
  const std::string manifest_path = Join(dir, kCheckpointManifest);
  if (!env->FileExists(manifest_path)) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint at ", dir, ": ", kCheckpointManifest,
                     " is missing (an absent or torn checkpoint)"));
  }
  PS_ASSIGN_OR_RETURN(std::string text, env->ReadFile(manifest_path));
  std::unique_ptr<CheckpointReader> reader(new CheckpointReader);
  PS_ASSIGN_OR_RETURN(reader->manifest_, ParseManifest(manifest_path, text));
  const CheckpointManifest& m = reader->manifest_;
  reader->contents_.resize(m.files.size());
  reader->headers_.resize(m.files.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    const CheckpointFile& f = m.files[i];
    const std::string path = Join(dir, f.name);
    absl::StatusOr<std::string> read = env->ReadFile(path);
    if (!read.ok()) {
      return DataLoss(path, absl::StrCat("listed in the manifest but ",
                                         read.status().message()));
    }
    std::string& data = reader->contents_[i];
    data = *std::move(read);
    if (data.size() != f.bytes) {
      return DataLoss(
          path, absl::StrCat("has ", data.size(), " bytes, the manifest says ",
                             f.bytes));
    }
    const uint32_t crc = Crc32c(data);
    if (crc != f.crc32c) {
      return DataLoss(path, absl::StrCat("CRC-32C ", Hex32(crc),
                                         " does not match the manifest's ",
                                         Hex32(f.crc32c), " (corrupted)"));
    }
    if (data.size() < kPreambleBytes ||
        std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
      return DataLoss(path, "not a pstrain shard checkpoint (bad magic)");
    }
    uint64_t h = 0;
    std::memcpy(&h, data.data() + sizeof(kMagic), sizeof(h));
    if (h > data.size() - kPreambleBytes) {
      return DataLoss(path, "header runs past the end of the file");
    }
    const json header = json::parse(data.substr(kPreambleBytes, h), nullptr,
                                    /*allow_exceptions=*/false);
    if (header.is_discarded() || !header.is_object()) {
      return DataLoss(path, "header is not a JSON object");
    }
    const uint64_t data_start = kPreambleBytes + h;
    const uint64_t data_bytes = data.size() - data_start;
    try {
      if (header.at("num_slots").get<int>() != m.num_slots) {
        return DataLoss(path, "num_slots differs from the manifest's");
      }
      ShardHeader& sh = reader->headers_[i];
      sh.cut = header.at("cut").get<uint64_t>();
      sh.version = header.at("version").get<uint64_t>();
      sh.schedule_step = header.at("schedule_step").get<uint64_t>();
      sh.clocks = header.at("clocks").get<std::vector<uint64_t>>();
      const uint64_t per_element = sizeof(float) * (1 + m.num_slots);
      for (const json& r : header.at("records")) {
        Record rec;
        const std::string tensor = r.at("tensor").get<std::string>();
        rec.offset = r.at("offset").get<uint64_t>();
        rec.length = r.at("length").get<uint64_t>();
        const uint64_t at = r.at("data_offset").get<uint64_t>();
        if (rec.length > data_bytes / per_element ||
            at > data_bytes - rec.length * per_element) {
          return DataLoss(
              path, absl::StrCat("record '", tensor, "' [", rec.offset, ", +",
                                 rec.length, ") runs past the end"));
        }
        rec.data = data.data() + data_start + at;
        if (!r.at("exponent").is_null()) {
          rec.has_exponent = true;
          rec.exponent = r.at("exponent").get<int32_t>();
        }
        reader->records_[tensor].push_back(rec);
      }
      if (header.contains("row_tables")) {
        sh.has_rows = true;
        sh.row_version = header.at("row_version").get<uint64_t>();
        sh.row_clocks = header.at("row_clocks").get<std::vector<uint64_t>>();
        for (const json& r : header.at("row_tables")) {
          const std::string tensor = r.at("tensor").get<std::string>();
          const uint64_t n = r.at("rows").get<uint64_t>();
          const uint64_t row_floats = r.at("row_floats").get<uint64_t>();
          const uint64_t at = r.at("data_offset").get<uint64_t>();
          const uint64_t per_row = 2 * sizeof(uint64_t);
          if (row_floats > data_bytes / sizeof(float) ||
              n > data_bytes / (per_row + row_floats * sizeof(float)) ||
              at > data_bytes - n * (per_row + row_floats * sizeof(float))) {
            return DataLoss(
                path, absl::StrCat("rows of '", tensor, "' run past the end"));
          }
          const char* p = data.data() + data_start + at;
          std::vector<SparseRowState>& out = reader->rows_[tensor];
          for (uint64_t i = 0; i < n; ++i) {
            SparseRowState row;
            std::memcpy(&row.id, p + i * sizeof(int64_t), sizeof(int64_t));
            std::memcpy(&row.updates, p + n * sizeof(int64_t) + i * 8, 8);
            row.data.resize(row_floats);
            std::memcpy(row.data.data(),
                        p + n * per_row + i * row_floats * sizeof(float),
                        row_floats * sizeof(float));
            out.push_back(std::move(row));
          }
        }
      }
    } catch (const json::exception& e) {
      return DataLoss(path, absl::StrCat("bad header: ", e.what()));
    }
  }
  for (auto& [tensor, recs] : reader->records_) {
    std::sort(recs.begin(), recs.end(), [](const Record& a, const Record& b) {
      return a.offset < b.offset;
    });
  }
  return reader;
}

absl::Status CheckpointReader::ReadRange(const std::string& tensor,
                                         uint64_t offset, uint64_t length,
                                         float* weights, float* slots) const {
  auto it = records_.find(tensor);
  if (it == records_.end()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint has no tensor '", tensor, "'"));
  }
  const int num_slots = manifest_.num_slots;
  uint64_t next = offset;  // first element not yet copied
  const uint64_t end = offset + length;
  for (const Record& r : it->second) {
    if (next >= end) break;
    if (r.offset + r.length <= next) continue;
    if (r.offset > next) break;  // a gap
    const uint64_t n = std::min(end, r.offset + r.length) - next;
    const uint64_t skip = next - r.offset;
    std::memcpy(weights + (next - offset), r.data + skip * sizeof(float),
                n * sizeof(float));
    for (int s = 0; slots != nullptr && s < num_slots; ++s) {
      std::memcpy(slots + s * length + (next - offset),
                  r.data + ((1 + s) * r.length + skip) * sizeof(float),
                  n * sizeof(float));
    }
    next += n;
  }
  if (next < end) {
    return absl::DataLossError(
        absl::StrCat("checkpoint does not cover tensor '", tensor,
                     "' elements [", next, ", ", end, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::CheckCompatible(
    const pstrain::v1::JobSpec& job) const {
  return CheckCompatible(job.shard_map(), job.config().job().workers(),
                         job.config().training().optimizer().kind());
}

absl::Status CheckpointReader::CheckCompatible(
    const pstrain::v1::ShardMap& shard_map, uint32_t num_workers,
    pstrain::v1::OptimizerConfig::Kind optimizer) const {
  const CheckpointManifest& m = manifest_;
  const auto& want = shard_map.tensors();
  const auto& have = m.shard_map.tensors();
  if (want.size() != have.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint has ", have.size(), " tensors, the job has ", want.size()));
  }
  for (int i = 0; i < want.size(); ++i) {
    if (want[i].name() != have[i].name() ||
        !std::equal(want[i].shape().begin(), want[i].shape().end(),
                    have[i].shape().begin(), have[i].shape().end())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint tensor ", i, " is '", have[i].name(), "' [",
          absl::StrJoin(have[i].shape(), ", "), "], the job's is '",
          want[i].name(), "' [", absl::StrJoin(want[i].shape(), ", "), "]"));
    }
  }
  if (m.num_workers != num_workers) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint has ", m.num_workers, " workers, the job has ",
                     num_workers));
  }
  const std::string kind = pstrain::v1::OptimizerConfig::Kind_Name(optimizer);
  if (m.optimizer != kind) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint optimizer is ", m.optimizer, ", the job's is ", kind));
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseShardState> CheckpointReader::RowsFor(
    const std::vector<std::string>& tables, uint32_t shard_id,
    uint32_t num_shards) const {
  SparseShardState state;
  for (size_t i = 0; i < headers_.size(); ++i) {
    const ShardHeader& h = headers_[i];
    if (!h.has_rows) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint shard ", i, " holds no rows, the job has ",
                       "row-sparse tensor '",
                       tables.empty() ? std::string() : tables[0], "'"));
    }
    if (i == 0) {
      state.version = h.row_version;
      state.clocks = h.row_clocks;
    } else if (h.row_version != state.version || h.row_clocks != state.clocks) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint shards disagree on the rows' cut: shard 0 has row step ",
          state.version, ", shard ", i, " has ", h.row_version));
    }
  }
  for (const std::string& table : tables) {
    state.tensors.push_back(table);
    state.rows.emplace_back();
    auto it = rows_.find(table);
    if (it == rows_.end()) continue;  // no row of the table was stored
    for (const SparseRowState& r : it->second) {
      if (RowShard(r.id, num_shards) == shard_id)
        state.rows.back().push_back(r);
    }
    std::sort(state.rows.back().begin(), state.rows.back().end(),
              [](const SparseRowState& a, const SparseRowState& b) {
                return a.id < b.id;
              });
  }
  return state;
}

absl::StatusOr<ShardState> CheckpointReader::StateFor(
    const std::vector<TensorRange>& chunks) const {
  ShardState state;
  state.num_slots = manifest_.num_slots;
  state.cut = manifest_.step;
  for (size_t i = 0; i < headers_.size(); ++i) {
    const ShardHeader& h = headers_[i];
    if (i == 0) {
      state.version = h.version;
      state.schedule_step = h.schedule_step;
      state.clocks = h.clocks;
      continue;
    }
    if (h.version != state.version || h.schedule_step != state.schedule_step ||
        h.clocks.size() != state.clocks.size()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint shards disagree: shard 0 has version ", state.version,
          ", shard ", i, " has version ", h.version, " (not one cut)"));
    }
    for (size_t w = 0; w < h.clocks.size(); ++w) {
      state.clocks[w] = std::min(state.clocks[w], h.clocks[w]);
    }
  }
  for (const TensorRange& lc : chunks) {
    ChunkState c;
    c.tensor = lc.tensor;
    c.offset = lc.offset;
    c.length = lc.length;
    c.weights.resize(lc.length);
    c.slots.resize(lc.length * state.num_slots);
    PS_RETURN_IF_ERROR(ReadRange(lc.tensor, lc.offset, lc.length,
                                 c.weights.data(), c.slots.data()));
    for (const Record& r : records_.at(lc.tensor)) {
      if (r.offset >= lc.offset + lc.length ||
          r.offset + r.length <= lc.offset || !r.has_exponent) {
        continue;
      }
      c.exponent =
          c.has_exponent ? std::max(c.exponent, r.exponent) : r.exponent;
      c.has_exponent = true;
    }
    state.chunks.push_back(std::move(c));
  }
  return state;
}

}  // namespace pstrain
