#include "coordinator/checkpoint_orderer.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/pstrain.grpc.pb.h"

namespace pstrain {

absl::StatusOr<std::string> CheckpointRoot(const JobConfig& config,
                                           const std::string& out) {
  const pstrain::v1::CheckpointConfig& c = config.checkpoint();
  if (!c.dir().empty()) return c.dir();
  if (c.every_steps() == 0 && c.every_seconds() == 0) return std::string();
  if (out.empty()) {
    return absl::InvalidArgumentError(
        "checkpoint.dir: checkpoint.every_steps/every_seconds are set but "
        "there is neither a checkpoint.dir nor an --out directory to hold "
        "the checkpoints");
  }
  return out + "/ckpt";
}

absl::StatusOr<ResumePoint> ResolveResume(CheckpointEnv* env,
                                          const std::string& resume,
                                          const std::string& root,
                                          const pstrain::v1::JobSpec& job) {
  auto prefixed = [&](const absl::Status& st) {
    return absl::Status(st.code(),
                        absl::StrCat("--resume ", resume, ": ", st.message()));
  };
  const pstrain::v1::ConsistencyMode mode = job.config().training().mode();
  if (mode != pstrain::v1::MODE_SYNC && mode != pstrain::v1::MODE_ASYNC &&
      mode != pstrain::v1::MODE_ALLREDUCE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resume ", resume,
        ": resuming is supported in training.mode sync, async and allreduce "
        "only"));
  }
  // Mode allreduce: one replica saved as one shard by rank 0
  // (worker/allreduce/checkpointing.h); like sync and async, its checkpoints
  // resume jobs of its own mode only.
  const std::string mode_name = mode == pstrain::v1::MODE_SYNC    ? "sync"
                                : mode == pstrain::v1::MODE_ASYNC ? "async"
                                                                  : "allreduce";
  std::string dir = resume;
  std::string from_root;  // the root whose newest usable checkpoint is taken
  if (resume == "latest") {
    if (root.empty()) {
      return absl::InvalidArgumentError(
          "--resume latest: the job has no checkpoint directory "
          "(checkpoint.dir, or --out with checkpoint.every_*)");
    }
    from_root = root;
  } else if (!env->FileExists(dir + "/" + kCheckpointManifest)) {
    // A root holding step directories: its newest complete checkpoint.
    from_root = dir;
  }
  std::vector<std::string> skipped;
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader;
  if (from_root.empty()) {
    reader = CheckpointReader::Open(env, dir);
  } else {
    absl::StatusOr<CheckpointListing> listing = ListCheckpoints(env, from_root);
    if (!listing.ok()) return prefixed(listing.status());
    if (listing->complete.empty()) {
      return prefixed(LatestCheckpoint(env, from_root).status());
    }
    // Newest first; a damaged one (a crash or a disk error after its
    // manifest was written) gives way to the one before it.
    for (auto it = listing->complete.rbegin(); it != listing->complete.rend();
         ++it) {
      dir = CheckpointDir(from_root, *it);
      reader = CheckpointReader::Open(env, dir);
      if (reader.ok() ||
          reader.status().code() != absl::StatusCode::kDataLoss) {
        break;
      }
      skipped.push_back(absl::StrCat(dir, ": ", reader.status().message()));
      PS_LOG_WARN(
          "--resume %s: skipping the damaged checkpoint %s (%s); trying the "
          "previous complete one",
          resume, dir, reader.status().message());
    }
  }
  if (!reader.ok()) {
    if (skipped.size() > 1) {
      return prefixed(absl::DataLossError(
          absl::StrCat("no complete checkpoint under ", from_root,
                       " reads back whole; the damaged ones: ",
                       absl::StrJoin(skipped, "; "))));
    }
    return prefixed(reader.status());
  }
  if (!skipped.empty()) {
    PS_LOG_WARN(
        "--resume %s: resuming from %s, %d newer damaged checkpoint%s "
        "skipped",
        resume, dir, skipped.size(), skipped.size() > 1 ? "s" : "");
  }
  const CheckpointManifest& m = (*reader)->manifest();
  if (m.mode != mode_name) {
    // A sync cut and an async cut mean different things (server/shard.h).
    return prefixed(absl::FailedPreconditionError(
        absl::StrCat(dir, " is a checkpoint of a job in mode ", m.mode,
                     ", not ", mode_name)));
  }
  if (m.step > job.config().training().steps()) {
    return prefixed(absl::FailedPreconditionError(
        absl::StrCat(dir, " is at step ", m.step, " but training.steps is ",
                     job.config().training().steps())));
  }
  absl::Status fits = (*reader)->CheckCompatible(job);
  if (!fits.ok()) {
    return prefixed(absl::Status(
        fits.code(),
        absl::StrCat(dir, " does not fit the job: ", fits.message())));
  }
  return ResumePoint{dir, m.step, std::move(skipped)};
}

CheckpointOrderer::CheckpointOrderer(CheckpointOrdererOptions options)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : CheckpointEnv::Default()),
      notes_(options_.supervision_file) {
  absl::MutexLock lock(&mu_);
  last_saved_ = options_.start_step;
}

void CheckpointOrderer::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

bool CheckpointOrderer::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_ || interrupted_;
}

void CheckpointOrderer::Interrupt() {
  absl::MutexLock lock(&mu_);
  interrupted_ = true;
}

bool CheckpointOrderer::interrupted() const {
  absl::MutexLock lock(&mu_);
  return interrupted_;
}

bool CheckpointOrderer::WaitIdle(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !running_; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

void CheckpointOrderer::Resume(uint64_t step) {
  absl::MutexLock lock(&mu_);
  interrupted_ = false;
  last_saved_ = step;
}

bool CheckpointOrderer::WaitResumed() const {
  absl::MutexLock lock(&mu_);
  auto resumed = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stop_ || !interrupted_;
  };
  mu_.Await(absl::Condition(&resumed));
  return !stop_;
}

uint64_t CheckpointOrderer::last_saved() const {
  absl::MutexLock lock(&mu_);
  return last_saved_;
}

uint64_t CheckpointOrderer::MaxVersion(uint64_t floor) {
  // Sync: the version is the step; async: the clocks are (the version
  // counts pushes there).
  const bool async =
      options_.job.config().training().mode() == pstrain::v1::MODE_ASYNC;
  uint64_t v = floor;
  for (auto& stub : stubs_) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, options_.poll);
    pstrain::v1::ShardStats stats;
    if (stub->GetStats(&ctx, {}, &stats).ok()) {
      v = std::max(v, async ? stats.max_clock() : stats.version());
    }
  }
  return v;
}

absl::Status CheckpointOrderer::Round(uint64_t cut, absl::Duration wait,
                                      std::vector<CheckpointFile>* files,
                                      std::vector<bool>* have) {
  const size_t k = stubs_.size();
  std::vector<absl::Status> status(k);
  std::vector<pstrain::v1::CheckpointResponse> reply(k);
  std::vector<std::thread> calls;
  for (size_t i = 0; i < k; ++i) {
    if ((*have)[i]) continue;
    calls.emplace_back([&, i] {
      grpc::ClientContext ctx;
      SetTimeout(&ctx, wait);
      AddCoordinatorKey(&ctx, options_.coordinator_key);
      pstrain::v1::CheckpointRequest req;
      req.set_step(cut);
      status[i] = FromGrpcStatus(stubs_[i]->Checkpoint(&ctx, req, &reply[i]));
    });
  }
  for (std::thread& t : calls) t.join();
  absl::Status worst;  // the first hard error, else missed/exists, else retry
  bool retry = false;
  for (size_t i = 0; i < k; ++i) {
    if ((*have)[i]) continue;
    const absl::Status& st = status[i];
    if (st.ok()) {
      (*have)[i] = true;
      (*files)[i] = CheckpointFile{reply[i].file(), reply[i].shard(),
                                   reply[i].bytes(), reply[i].crc32c()};
      continue;
    }
    switch (st.code()) {
      case absl::StatusCode::kDeadlineExceeded:  // the cut is still ahead
      case absl::StatusCode::kUnavailable:       // a shard restarting
      case absl::StatusCode::kCancelled:
        retry = true;
        break;
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kAlreadyExists:
        if (worst.ok()) worst = st;
        break;
      default:
        return absl::Status(
            st.code(), absl::StrCat("checkpoint of step ", cut, " on shard ", i,
                                    ": ", st.message()));
    }
  }
  if (!worst.ok()) return worst;
  if (retry) return absl::UnavailableError("not every shard has saved yet");
  return absl::OkStatus();
}

absl::Status CheckpointOrderer::WriteManifestAndRetain(
    uint64_t cut, std::vector<CheckpointFile> files) {
  PS_ASSIGN_OR_RETURN(CheckpointManifest m, ManifestForJob(options_.job, cut));
  m.files = std::move(files);
  const std::string dir = CheckpointDir(options_.root, cut);
  PS_RETURN_IF_ERROR(WriteManifest(env_, dir, m));
  uint64_t bytes = 0;
  for (const CheckpointFile& f : m.files) bytes += f.bytes;
  PS_LOG_INFO("checkpoint of step %d saved: %s (%d files, %d bytes)", cut, dir,
              m.files.size(), bytes);
  notes_.CheckpointSaved(cut, dir);
  return ApplyRetention(env_, options_.root, options_.keep);
}

absl::Status CheckpointOrderer::Run(const std::vector<std::string>& addresses) {
  {
    absl::MutexLock lock(&mu_);
    running_ = true;
  }
  absl::Status st = RunCuts(addresses);
  absl::MutexLock lock(&mu_);
  running_ = false;
  return st;
}

absl::Status CheckpointOrderer::RunCuts(
    const std::vector<std::string>& addresses) {
  stubs_.clear();
  for (const std::string& a : addresses) {
    stubs_.push_back(pstrain::v1::ParameterServer::NewStub(
        MakeChannel(a, options_.credentials)));
  }
  const uint64_t steps = options_.job.config().training().steps();
  const uint64_t every = options_.every_steps;
  uint64_t last = last_saved();
  uint64_t floor = last;  // cuts at or below it are taken or missed
  absl::Time last_time = absl::Now();
  uint64_t cut = 0;       // the cut being saved; 0: none chosen
  bool time_cut = false;  // `cut` was chosen by every_seconds
  std::vector<CheckpointFile> files(stubs_.size());
  std::vector<bool> have(stubs_.size(), false);
  while (last < steps && !stopping()) {
    // The step cut ahead, unless every_seconds passed: then the next cut the
    // shards can reach, when earlier. A time cut is kept until saved or
    // missed; a step cut may still give way to one while no shard saved it.
    const bool none_saved =
        std::none_of(have.begin(), have.end(), [](bool b) { return b; });
    uint64_t want = cut;
    if (cut == 0 || (none_saved && !time_cut)) {
      want = every > 0 ? std::min((floor / every + 1) * every, steps) : steps;
      time_cut = false;
      if (options_.every_seconds > 0 &&
          absl::Now() - last_time >= absl::Seconds(options_.every_seconds)) {
        const uint64_t reachable = MaxVersion(floor) + 1;
        if (reachable < want) {
          want = reachable;
          time_cut = true;
        }
      }
    }
    if (want != cut) {  // a new cut: drop what a previous one collected
      cut = want;
      files.assign(stubs_.size(), CheckpointFile{});
      have.assign(stubs_.size(), false);
    }
    const absl::Time round_start = absl::Now();
    // A step cut is awaited no longer than until a time cut is due.
    absl::Duration wait = options_.poll;
    if (options_.every_seconds > 0 && !time_cut) {
      const absl::Duration due =
          last_time + absl::Seconds(options_.every_seconds) - absl::Now();
      wait = std::max(absl::Milliseconds(20), std::min(wait, due));
    }
    absl::Status st = Round(cut, wait, &files, &have);
    if (st.ok()) {
      PS_RETURN_IF_ERROR(WriteManifestAndRetain(cut, std::move(files)));
    } else if (st.code() == absl::StatusCode::kAlreadyExists) {
      PS_LOG_INFO("checkpoint of step %d already complete on disk; kept", cut);
    } else if (st.code() == absl::StatusCode::kFailedPrecondition) {
      // Saving the previous cut took longer than the steps in between.
      PS_LOG_WARN("checkpoint of step %d missed (%s); the shards are at %d",
                  cut, st.message(), MaxVersion(cut));
      // The next step cut after it may still be held by the shards.
      floor = std::max(floor, cut);
      cut = 0;
      time_cut = false;
      continue;
    } else if (st.code() == absl::StatusCode::kUnavailable) {
      // Not every shard there yet: ask again (calls that failed at once
      // are not repeated faster than every 100 ms).
      const absl::Duration took = absl::Now() - round_start;
      if (took < absl::Milliseconds(100))
        absl::SleepFor(absl::Milliseconds(100) - took);
      continue;
    } else {
      return st;
    }
    {
      absl::MutexLock lock(&mu_);
      last_saved_ = cut;
    }
    last = floor = cut;
    last_time = absl::Now();
    cut = 0;
    time_cut = false;
    files.assign(stubs_.size(), CheckpointFile{});
    have.assign(stubs_.size(), false);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
