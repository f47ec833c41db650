#include "worker/allreduce/checkpointing.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr char kMode[] = "allreduce";

absl::Status Prefixed(const std::string& dir, const absl::Status& st) {
  return absl::Status(st.code(),
                      absl::StrCat("checkpoint ", dir, ": ", st.message()));
}

}  // namespace

AllReduceCheckpointOptions AllReduceCheckpointOptionsFromJob(
    const pstrain::v1::JobSpec& job, uint32_t rank) {
  AllReduceCheckpointOptions o;
  o.job = job;
  const pstrain::v1::CheckpointConfig& c = job.config().checkpoint();
  o.root = job.checkpoint_dir();
  o.every_steps = static_cast<uint64_t>(c.every_steps());
  o.every_seconds = c.every_seconds();
  o.keep = static_cast<uint32_t>(c.keep());
  o.writer = rank == 0;
  o.resume_from = job.resume_from();
  return o;
}

absl::StatusOr<CheckpointManifest> AllReduceManifest(
    const pstrain::v1::JobSpec& job, uint64_t step) {
  PS_ASSIGN_OR_RETURN(CheckpointManifest m, ManifestForJob(job, step));
  m.mode = kMode;
  m.num_shards = 1;
  // The shard map for K = 1 with each tensor one whole chunk.
  m.shard_map.clear_chunks();
  for (const pstrain::v1::TensorSpec& t : m.shard_map.tensors()) {
    pstrain::v1::ChunkInfo* c = m.shard_map.add_chunks();
    c->set_tensor(t.name());
    c->set_index(0);
    c->set_offset(0);
    c->set_length(NumElements(t));
    c->set_shard(0);
  }
  return m;
}

absl::StatusOr<std::string> SaveReplicaCheckpoint(
    CheckpointEnv* env, const std::string& root,
    const pstrain::v1::JobSpec& job, uint64_t step, const ReplicaView& state,
    uint32_t keep) {
  PS_ASSIGN_OR_RETURN(CheckpointManifest manifest,
                      AllReduceManifest(job, step));
  const auto& tensors = manifest.shard_map.tensors();
  if (state.slots == nullptr ||
      state.slots->size() != static_cast<size_t>(tensors.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica state: slots for ",
                     state.slots == nullptr ? 0 : state.slots->size(),
                     " tensors, the job has ", tensors.size()));
  }
  ShardState shard;
  shard.cut = step;
  shard.version = step;  // one optimizer update per step, as a sync shard
  shard.schedule_step = step;
  shard.clocks.assign(job.config().job().workers(), step);
  shard.num_slots = manifest.num_slots;
  uint64_t at = 0;
  for (int i = 0; i < tensors.size(); ++i) {
    const uint64_t n = NumElements(tensors[i]);
    if (at + n > state.weights.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica state: ", state.weights.size(),
                       " weights, fewer than the job's tensors need"));
    }
    ChunkState c;
    c.tensor = tensors[i].name();
    c.offset = 0;
    c.length = n;
    c.weights.assign(state.weights.begin() + at,
                     state.weights.begin() + at + n);
    c.slots = (*state.slots)[i];  // WriteShardFile checks its size
    shard.chunks.push_back(std::move(c));
    at += n;
  }
  if (at != state.weights.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica state: ", state.weights.size(),
                     " weights, the job's tensors have ", at));
  }
  const std::string dir = CheckpointDir(root, step);
  if (env->FileExists(dir + "/" + kCheckpointManifest)) {
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint ", dir, " is already complete"));
  }
  std::vector<ShardState> shards;
  shards.push_back(std::move(shard));
  return SaveCheckpoint(env, root, std::move(manifest), shards, keep);
}

absl::Status LoadReplicaCheckpoint(CheckpointEnv* env, const std::string& dir,
                                   const pstrain::v1::JobSpec& job,
                                   uint64_t step,
                                   std::vector<std::vector<float>>* weights,
                                   std::vector<std::vector<float>>* slots) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                      CheckpointReader::Open(env, dir));
  const CheckpointManifest& m = reader->manifest();
  if (m.mode != kMode) {
    return Prefixed(dir,
                    absl::FailedPreconditionError(absl::StrCat(
                        "is a checkpoint of a job in mode ", m.mode,
                        ", not allreduce (a sync shard sums with a fixed-point "
                        "accumulator, so the modes differ in the last bits)")));
  }
  if (m.step != step) {
    return Prefixed(dir,
                    absl::FailedPreconditionError(absl::StrCat(
                        "is at step ", m.step, ", the job starts at ", step)));
  }
  absl::Status fits = reader->CheckCompatible(job);
  if (!fits.ok()) return Prefixed(dir, fits);
  const auto& tensors = job.shard_map().tensors();
  std::vector<std::vector<float>> w(tensors.size()), s(tensors.size());
  for (int i = 0; i < tensors.size(); ++i) {
    const uint64_t n = NumElements(tensors[i]);
    w[i].resize(n);
    s[i].resize(n * m.num_slots);
    PS_RETURN_IF_ERROR(reader->ReadRange(tensors[i].name(), 0, n, w[i].data(),
                                         s[i].empty() ? nullptr : s[i].data()));
  }
  *weights = std::move(w);
  *slots = std::move(s);
  return absl::OkStatus();
}

AllReduceCheckpointSchedule::AllReduceCheckpointSchedule(
    const AllReduceCheckpointOptions& options, uint64_t steps, absl::Time start)
    : every_steps_(options.every_steps),
      every_seconds_(options.every_seconds),
      steps_(steps),
      on_(options.writer && !options.root.empty() &&
          (options.every_steps > 0 || options.every_seconds > 0)),
      last_(start) {}

bool AllReduceCheckpointSchedule::Due(uint64_t cut, absl::Time now) const {
  if (!on_) return false;
  if (cut == steps_) return true;
  if (every_steps_ > 0 && cut % every_steps_ == 0) return true;
  return every_seconds_ > 0 &&
         absl::ToDoubleSeconds(now - last_) >= every_seconds_;
}

}  // namespace pstrain
