#include "tools/checkpoint/commands.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/env.h"
#include "checkpoint/safetensors.h"

namespace pstrain {
namespace checkpoint_cli {
namespace {

constexpr char kUsage[] =
    "usage: ps_checkpoint inspect DIR\n"
    "       ps_checkpoint export DIR --safetensors OUT [--with_slots]\n";

int UsageError(const std::string& problem) {
  std::fprintf(stderr, "ps_checkpoint: %s\n%s", problem.c_str(), kUsage);
  return 2;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_checkpoint: %s\n", status.ToString().c_str());
  return 1;
}

// DIR itself when it holds a manifest; else the newest complete checkpoint
// under it (listing what is there when `verbose`).
absl::StatusOr<std::string> ResolveDir(CheckpointEnv* env,
                                       const std::string& dir, bool verbose) {
  if (env->FileExists(dir + "/" + kCheckpointManifest)) return dir;
  if (!env->IsDir(dir)) {
    return absl::NotFoundError(absl::StrCat("no directory ", dir));
  }
  absl::StatusOr<CheckpointListing> listing = ListCheckpoints(env, dir);
  if (!listing.ok()) return listing.status();
  if (listing->complete.empty() && listing->torn.empty()) {
    return absl::NotFoundError(
        absl::StrCat(dir, " is neither a checkpoint (no ", kCheckpointManifest,
                     ") nor a checkpoint.dir (no step-* directories)"));
  }
  if (verbose) {
    std::printf("root: %s\n", dir.c_str());
    for (uint64_t s : listing->complete) {
      std::printf("  complete  step %llu\n",
                  static_cast<unsigned long long>(s));
    }
    for (uint64_t s : listing->torn) {
      std::printf("  torn      step %llu (no manifest; ignored)\n",
                  static_cast<unsigned long long>(s));
    }
  }
  return LatestCheckpoint(env, dir);
}

int Inspect(CheckpointEnv* env, const std::string& arg) {
  absl::StatusOr<std::string> dir = ResolveDir(env, arg, /*verbose=*/true);
  if (!dir.ok()) return Fail(dir.status());
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(env, *dir);
  if (!reader.ok()) return Fail(reader.status());
  const CheckpointManifest& m = (*reader)->manifest();
  std::printf("checkpoint: %s\n", dir->c_str());
  std::printf("job: %s\nstep: %llu\nmode: %s\nworkers: %u\n", m.job.c_str(),
              static_cast<unsigned long long>(m.step), m.mode.c_str(),
              m.num_workers);
  std::printf("optimizer: %s (%d slots per element)\n", m.optimizer.c_str(),
              m.num_slots);
  std::printf("shards: %u (%d chunks)\n", m.num_shards,
              m.shard_map.chunks_size());
  uint64_t total = 0;
  std::printf("tensors: %d\n", m.shard_map.tensors_size());
  for (const auto& t : m.shard_map.tensors()) {
    uint64_t n = 1;
    for (int64_t d : t.shape()) n *= static_cast<uint64_t>(d);
    if (t.row_sparse()) {
      // Only the rows stored at the cut are in the files (docs/sparse.md).
      absl::StatusOr<SparseShardState> rows =
          (*reader)->RowsFor({t.name()}, 0, 1);
      if (!rows.ok()) return Fail(rows.status());
      uint64_t updates = 0;
      for (const SparseRowState& r : rows->rows[0]) updates += r.updates;
      const uint64_t stored = rows->rows[0].size();
      const uint64_t dim = t.shape_size() == 2 ? t.shape(1) : 0;
      total += stored * dim;
      std::printf(
          "  %-32s F32 [%s] row-sparse: %llu rows stored (%llu elements), "
          "%llu row updates, row step %llu\n",
          t.name().c_str(), absl::StrJoin(t.shape(), ", ").c_str(),
          static_cast<unsigned long long>(stored),
          static_cast<unsigned long long>(stored * dim),
          static_cast<unsigned long long>(updates),
          static_cast<unsigned long long>(rows->version));
      continue;
    }
    total += n;
    std::printf("  %-32s F32 [%s] %llu elements\n", t.name().c_str(),
                absl::StrJoin(t.shape(), ", ").c_str(),
                static_cast<unsigned long long>(n));
  }
  std::printf("elements: %llu\n", static_cast<unsigned long long>(total));
  const auto& headers = (*reader)->shard_headers();
  for (size_t i = 0; i < m.files.size(); ++i) {
    const CheckpointFile& f = m.files[i];
    std::printf(
        "  %s  shard %u  %llu bytes  crc32c 0x%08x ok  version %llu  "
        "clocks [%s]\n",
        f.name.c_str(), f.shard, static_cast<unsigned long long>(f.bytes),
        f.crc32c, static_cast<unsigned long long>(headers[i].version),
        absl::StrJoin(headers[i].clocks, ",").c_str());
  }
  std::printf("checksums: all %zu files verified\n", m.files.size());
  return 0;
}

int Export(CheckpointEnv* env, const std::vector<std::string>& args) {
  std::string dir, out;
  bool with_slots = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--safetensors") {
      if (i + 1 >= args.size()) return UsageError("--safetensors needs a file");
      out = args[++i];
    } else if (a.rfind("--safetensors=", 0) == 0) {
      out = a.substr(std::strlen("--safetensors="));
    } else if (a == "--with_slots") {
      with_slots = true;
    } else if (a.rfind("--", 0) == 0) {
      return UsageError(absl::StrCat("unknown flag ", a));
    } else if (dir.empty()) {
      dir = a;
    } else {
      return UsageError(absl::StrCat("unexpected argument '", a, "'"));
    }
  }
  if (dir.empty()) return UsageError("export needs a checkpoint DIR");
  if (out.empty()) return UsageError("export needs --safetensors OUT");
  absl::StatusOr<std::string> resolved = ResolveDir(env, dir, false);
  if (!resolved.ok()) return Fail(resolved.status());
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(env, *resolved);
  if (!reader.ok()) return Fail(reader.status());
  absl::Status s = ExportSafetensors(**reader, env, out, with_slots);
  if (!s.ok()) return Fail(s);
  std::printf("wrote %s (step %llu of %s)\n", out.c_str(),
              static_cast<unsigned long long>((*reader)->manifest().step),
              resolved->c_str());
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  CheckpointEnv* env = CheckpointEnv::Default();
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "inspect") {
    if (args.size() != 1) return UsageError("inspect takes one DIR");
    return Inspect(env, args[0]);
  }
  if (command == "export") return Export(env, args);
  return UsageError(absl::StrCat("unknown command '", command, "'"));
}

}  // namespace checkpoint_cli
}  // namespace pstrain
