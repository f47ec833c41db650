#include "server/shard.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/client_text.h"
#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/status_macros.h"
#include "common/tensor_codec.h"

namespace pstrain {

using pstrain::v1::ChunkData;
using pstrain::v1::PushHeader;

namespace {
// Staleness histogram buckets; the last one also counts anything larger.
constexpr size_t kHistogramBuckets = 64;
}  // namespace

absl::StatusOr<std::unique_ptr<Shard>> Shard::Create(ShardOptions options) {
  const pstrain::v1::JobSpec& job = options.job;
  if (job.num_workers() == 0) {
    return absl::InvalidArgumentError("job has no workers");
  }
  if (job.mode() != pstrain::v1::MODE_SYNC &&
      job.mode() != pstrain::v1::MODE_ASYNC) {
    return absl::InvalidArgumentError(
        "job mode must be MODE_SYNC or MODE_ASYNC");
  }
  const bool sync = job.mode() == pstrain::v1::MODE_SYNC;
  if (job.backup_workers() > 0 &&
      (!sync || job.backup_workers() >= job.num_workers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backup_workers needs MODE_SYNC and must be below num_workers (",
        job.num_workers(), "), got ", job.backup_workers()));
  }
  if ((job.staleness_aware_lr() || job.dc_lambda() != 0) && sync) {
    return absl::InvalidArgumentError(
        "staleness_aware_lr and dc_lambda need MODE_ASYNC");
  }
  if (!(job.dc_lambda() >= 0) || !std::isfinite(job.dc_lambda())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dc_lambda must be finite and >= 0, got ", job.dc_lambda()));
  }
  if (options.shard_id >= std::max<uint32_t>(job.num_servers(), 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard id ", options.shard_id, " >= num_servers ", job.num_servers()));
  }
  std::unique_ptr<Shard> shard(new Shard(std::move(options)));
  const pstrain::v1::ShardMap& map = shard->options_.job.shard_map();
  PS_ASSIGN_OR_RETURN(shard->optimizer_,
                      Optimizer::Create(shard->options_.job.optimizer()));

  absl::flat_hash_map<std::string, const pstrain::v1::TensorSpec*> specs;
  for (const auto& t : map.tensors()) specs[t.name()] = &t;
  for (const auto& c : map.chunks()) {
    auto& owners = shard->chunk_owner_[c.tensor()];
    if (owners.size() <= c.index()) owners.resize(c.index() + 1);
    owners[c.index()] = c.shard();
    if (c.shard() != shard->shard_id()) continue;
    if (!specs.contains(c.tensor())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard map chunk names unknown tensor '", c.tensor(), "'"));
    }
    shard->local_index_[{c.tensor(), c.index()}] = shard->chunks_.size();
    shard->chunks_.push_back(LocalChunk{c.tensor(), c.index(), c.offset(),
                                        c.length(), shard->num_elements_});
    shard->num_elements_ += c.length();
  }

  absl::MutexLock lock(&shard->mu_);
  shard->weights_.resize(shard->num_elements_);
  for (size_t i = 0; i < shard->chunks_.size(); ++i) {
    const LocalChunk& lc = shard->chunks_[i];
    InitialValues(*specs[lc.tensor], lc.tensor_offset, lc.length,
                  shard->weights_.data() + lc.local_offset);
    shard->slots_.push_back(shard->optimizer_->InitSlots(lc.length));
  }
  const uint32_t n = shard->options_.job.num_workers();
  shard->clocks_.assign(n, 0);
  shard->pending_.resize(n);
  shard->pending_samples_.assign(n, 0);
  shard->read_weights_.resize(n);
  shard->staleness_hist_.assign(kHistogramBuckets, 0);
  return shard;
}

absl::Status Shard::DecodePush(const PushHeader& header,
                               const std::vector<const ChunkData*>& chunks,
                               std::vector<float>* grad) const {
  if (header.worker() >= options_.job.num_workers()) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", header.worker(),
                                            " (job has ",
                                            options_.job.num_workers(), ")"));
  }
  if (header.num_samples() == 0) {
    return absl::InvalidArgumentError("push has num_samples 0");
  }
  grad->assign(num_elements_, 0.0f);
  std::vector<bool> seen(chunks_.size(), false);
  for (const ChunkData* c : chunks) {
    auto owners = chunk_owner_.find(c->tensor());
    if (owners == chunk_owner_.end()) {
      return absl::NotFoundError(
          absl::StrCat("unknown tensor '", EchoClientText(c->tensor()), "'"));
    }
    if (c->index() >= owners->second.size()) {
      return absl::OutOfRangeError(absl::StrCat(
          "tensor '", EchoClientText(c->tensor()), "' chunk ", c->index(),
          " out of range [0, ", owners->second.size(), ")"));
    }
    auto it = local_index_.find({c->tensor(), c->index()});
    if (it == local_index_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", EchoClientText(c->tensor()), "' chunk ",
                       c->index(), " is held by shard ",
                       owners->second[c->index()], ", not shard ", shard_id()));
    }
    if (seen[it->second]) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", EchoClientText(c->tensor()), "' chunk ",
                       c->index(), " sent twice"));
    }
    seen[it->second] = true;
    const LocalChunk& lc = chunks_[it->second];
    PS_RETURN_IF_ERROR(DecodeChunk(*c, lc.length, /*require_finite=*/true,
                                   grad->data() + lc.local_offset));
  }
  const size_t missing = std::count(seen.begin(), seen.end(), false);
  if (missing > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push is missing ", missing, " of ", chunks_.size(),
                     " chunks of shard ", shard_id()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> Shard::Push(
    const PushHeader& header, const std::vector<const ChunkData*>& chunks) {
  std::vector<float> grad;
  PS_RETURN_IF_ERROR(DecodePush(header, chunks, &grad));
  const uint32_t w = header.worker();

  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("shard is shutting down");
  if (header.clock() != clocks_[w]) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", w, " pushed clock ", header.clock(),
                     " but its next clock is ", clocks_[w]));
  }
  if (header.read_min_clock() > header.clock()) {
    return absl::InvalidArgumentError(
        absl::StrCat("read_min_clock ", header.read_min_clock(),
                     " is ahead of clock ", header.clock()));
  }
  PushResult result;
  result.staleness = header.clock() - header.read_min_clock();
  if (options_.job.mode() == pstrain::v1::MODE_SYNC) {
    if (header.clock() > version_) {
      // Unreachable with well-behaved clients: a worker pulls clock c only
      // once version >= c, and a step cannot complete twice.
      return absl::FailedPreconditionError(absl::StrCat(
          "sync step is ", version_, ", push is for clock ", header.clock()));
    }
    ++clocks_[w];
    if (header.clock() < version_) {
      // Step header.clock() completed with the first N - b pushes (only
      // possible with backup workers): too late, drop it.
      ++dropped_;
      result.dropped = true;
    } else {
      AccumulateSyncLocked(w, header.num_samples(), std::move(grad), &result);
    }
  } else {
    ApplyAsyncLocked(w, header.clock(), result.staleness, std::move(grad),
                     &result);
    ++clocks_[w];
  }
  RecordStalenessLocked(result.staleness);
  result.version = version_;
  return result;
}

void Shard::AccumulateSyncLocked(uint32_t w, uint64_t num_samples,
                                 std::vector<float> grad, PushResult* result) {
  pending_[w] = std::move(grad);
  pending_samples_[w] = num_samples;
  ++pending_count_;
  if (pending_count_ <
      options_.job.num_workers() - options_.job.backup_workers()) {
    return;
  }
  // Weighted average in rank order over the workers that made it:
  // deterministic whatever the arrival order.
  double total = 0;
  for (uint64_t s : pending_samples_) total += static_cast<double>(s);
  std::vector<double> acc(num_elements_, 0.0);
  for (uint32_t r = 0; r < pending_.size(); ++r) {
    if (pending_samples_[r] == 0) continue;
    const double weight = static_cast<double>(pending_samples_[r]) / total;
    const float* g = pending_[r].data();
    for (uint64_t i = 0; i < num_elements_; ++i) acc[i] += weight * g[i];
  }
  std::vector<float> avg(acc.begin(), acc.end());
  const absl::Time start = absl::Now();
  ApplyLocked(version_, avg.data());
  result->apply_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->applied = true;
  for (auto& p : pending_) std::vector<float>().swap(p);
  std::fill(pending_samples_.begin(), pending_samples_.end(), 0);
  pending_count_ = 0;
}

void Shard::ApplyAsyncLocked(uint32_t w, uint64_t clock, uint64_t staleness,
                             std::vector<float> grad, PushResult* result) {
  const absl::Time start = absl::Now();
  const std::vector<float>& read = read_weights_[w];
  if (options_.job.dc_lambda() > 0 && !read.empty()) {
    // DC-ASGD: a first-order Taylor correction of g towards the gradient at
    // the current weights, with lambda * g * g standing in for the Hessian.
    const float lambda = static_cast<float>(options_.job.dc_lambda());
    for (uint64_t i = 0; i < num_elements_; ++i) {
      grad[i] += lambda * grad[i] * grad[i] * (weights_[i] - read[i]);
    }
  }
  double lr_scale = 1.0;
  if (options_.job.staleness_aware_lr() && staleness > 1) {
    lr_scale = 1.0 / static_cast<double>(staleness);
  }
  ApplyLocked(clock, grad.data(), lr_scale);
  result->apply_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->applied = true;
}

void Shard::ApplyLocked(uint64_t schedule_step, const float* grad,
                        double lr_scale) {
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const LocalChunk& c = chunks_[i];
    optimizer_->Apply(schedule_step, version_, weights_.data() + c.local_offset,
                      grad + c.local_offset, slots_[i].data(), c.length,
                      lr_scale);
  }
  ++version_;
}

void Shard::RecordStalenessLocked(uint64_t staleness) {
  ++pushes_;
  staleness_sum_ += staleness;
  staleness_max_ = std::max(staleness_max_, staleness);
  ++staleness_hist_[std::min(staleness, kHistogramBuckets - 1)];
}

uint64_t Shard::MinClockLocked() const {
  return *std::min_element(clocks_.begin(), clocks_.end());
}

bool Shard::ReadableLocked(uint64_t clock) const {
  if (closed_) return true;
  if (options_.job.mode() == pstrain::v1::MODE_SYNC) return version_ >= clock;
  const int64_t s = options_.job.staleness();
  if (s < 0 || clock <= static_cast<uint64_t>(s)) return true;
  return MinClockLocked() >= clock - static_cast<uint64_t>(s);
}

std::string Shard::LaggardsLocked(uint64_t clock) const {
  const int64_t s = options_.job.mode() == pstrain::v1::MODE_SYNC
                        ? 0
                        : std::max<int64_t>(options_.job.staleness(), 0);
  const uint64_t need = clock > static_cast<uint64_t>(s) ? clock - s : 0;
  std::vector<std::string> late;
  for (uint32_t r = 0; r < clocks_.size(); ++r) {
    if (clocks_[r] < need) late.push_back(absl::StrCat(r, "@", clocks_[r]));
  }
  return absl::StrJoin(late, ", ");
}

absl::StatusOr<PullResult> Shard::Pull(uint32_t worker, uint64_t clock,
                                       absl::Time deadline) {
  if (worker >= options_.job.num_workers()) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", worker,
                                            " (job has ",
                                            options_.job.num_workers(), ")"));
  }
  absl::MutexLock lock(&mu_);
  if (clock > clocks_[worker]) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " has pushed ", clocks_[worker],
                     " clocks and cannot read clock ", clock));
  }
  PullResult result;
  if (!ReadableLocked(clock)) {
    const absl::Time start = absl::Now();
    std::pair<const Shard*, uint64_t> arg(this, clock);
    const bool ready = mu_.AwaitWithDeadline(
        absl::Condition(
            +[](std::pair<const Shard*, uint64_t>* a)
                 ABSL_NO_THREAD_SAFETY_ANALYSIS {
                   return a->first->ReadableLocked(a->second);
                 },
            &arg),
        deadline);
    const absl::Duration waited = absl::Now() - start;
    barrier_wait_ += waited;
    result.wait_seconds = absl::ToDoubleSeconds(waited);
    if (!ready) {
      return absl::DeadlineExceededError(absl::StrCat(
          "worker ", worker, " waited for clock ", clock, " on shard ",
          shard_id(), "; behind (worker@clock): ", LaggardsLocked(clock)));
    }
  }
  if (closed_) return absl::UnavailableError("shard is shutting down");
  result.version = version_;
  result.min_clock = options_.job.mode() == pstrain::v1::MODE_SYNC
                         ? std::min(version_, clock)
                         : MinClockLocked();
  result.values = weights_;
  if (options_.job.dc_lambda() > 0) read_weights_[worker] = weights_;
  return result;
}

pstrain::v1::ShardStats Shard::Stats() const {
  absl::MutexLock lock(&mu_);
  pstrain::v1::ShardStats s;
  s.set_shard(shard_id());
  s.set_version(version_);
  s.set_pushes(pushes_);
  s.set_dropped_pushes(dropped_);
  s.set_staleness_max(staleness_max_);
  s.set_staleness_mean(pushes_ ? static_cast<double>(staleness_sum_) / pushes_
                               : 0.0);
  size_t last = staleness_hist_.size();
  while (last > 0 && staleness_hist_[last - 1] == 0) --last;
  for (size_t i = 0; i < last; ++i)
    s.add_staleness_histogram(staleness_hist_[i]);
  s.set_num_elements(num_elements_);
  s.set_barrier_wait_s(absl::ToDoubleSeconds(barrier_wait_));
  return s;
}

void Shard::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace pstrain
