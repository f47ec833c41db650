#include "server/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
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
// Sync accumulator: the first step's exponent, the headroom over the last
// step's largest term, and the range kept for the exponent (2^L stays a
// normal double for every L = E - 62..E).
constexpr int kInitialExponent = 32;
constexpr int kHeadroomBits = 12;
constexpr int kMinExponent = -900;
constexpr int kMaxExponent = 1000;
// Per-chunk framing allowance of a push stream (field tags, index, shape).
constexpr uint64_t kChunkOverheadBytes = 64;
constexpr uint64_t kStreamOverheadBytes = 4096;
// Below this many elements a shard applies updates on one thread.
constexpr uint64_t kParallelElements = 256 * 1024;

int CeilLog2(uint32_t n) {
  int bits = 0;
  while ((uint64_t{1} << bits) < n) ++bits;
  return bits;
}

// The exponent of the next step: ceil(log2 max) + headroom, so max < 2^E.
int NextExponent(double max_abs, int current) {
  if (!(max_abs > 0)) return current;
  const int e = std::ilogb(max_abs) + 1;
  return std::clamp(e + kHeadroomBits, kMinExponent, kMaxExponent);
}

uint64_t Fingerprint(const PushHeader& h,
                     const std::vector<const ChunkData*>& ordered) {
  uint64_t fp = absl::HashOf(h.worker(), h.clock(), h.read_version(),
                             h.read_min_clock(), h.num_samples());
  for (const ChunkData* c : ordered) {
    fp = absl::HashOf(fp, absl::string_view(c->data()));
  }
  return fp;
}
}  // namespace

// A fixed set of helper threads that, with the caller, run the tasks of one
// ParallelFor at a time. Threads start in Start and stop in the destructor.
class ChunkPool {
 public:
  static std::unique_ptr<ChunkPool> Start(int threads) {
    std::unique_ptr<ChunkPool> pool(new ChunkPool(threads));
    for (int slot = 1; slot < threads; ++slot) {
      pool->helpers_.emplace_back([p = pool.get(), slot] { p->Loop(slot); });
    }
    return pool;
  }

  ~ChunkPool() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : helpers_) t.join();
  }

  int threads() const { return threads_; }

  // Runs fn(task, slot) for every task in [0, n); slot < threads() names
  // the thread. One call at a time.
  void ParallelFor(size_t n, const std::function<void(size_t, int)>& fn) {
    {
      absl::MutexLock lock(&mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      running_ = static_cast<int>(helpers_.size());
      ++generation_;
    }
    RunTasks(0);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &running_));
    fn_ = nullptr;
  }

 private:
  explicit ChunkPool(int threads) : threads_(threads) {}

  void Loop(int slot) {
    uint64_t seen = 0;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || generation_ != seen;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_) return;
        seen = generation_;
      }
      RunTasks(slot);
      absl::MutexLock lock(&mu_);
      --running_;
    }
  }

  void RunTasks(int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // fn_ and n_ were published under mu_ before this round started.
    for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
      (*fn_)(i, slot);
    }
  }

  const int threads_;
  std::vector<std::thread> helpers_;
  absl::Mutex mu_;
  const std::function<void(size_t, int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t n_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> next_{0};
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

Shard::Shard(ShardOptions options) : options_(std::move(options)) {}

Shard::~Shard() = default;

ShardOptions ShardOptionsFromJob(const pstrain::v1::JobSpec& job,
                                 uint32_t shard_id) {
  ShardOptions o;
  o.shard_id = shard_id;
  o.num_shards = std::max<uint32_t>(job.num_servers(), 1);
  o.shard_map = job.shard_map();
  const v1::TrainingConfig& t = job.config().training();
  o.optimizer = t.optimizer();
  ConsistencyOptions& r = o.rule;
  switch (t.mode()) {
    case pstrain::v1::MODE_SYNC:
      r.kind = ConsistencyOptions::Kind::kBsp;
      break;
    case pstrain::v1::MODE_ASYNC:
      r.kind = ConsistencyOptions::Kind::kSsp;
      break;
    default:
      r.kind = ConsistencyOptions::Kind::kUnspecified;
  }
  r.num_workers = job.config().job().workers();
  r.backup_workers = t.backup_workers();
  r.staleness = t.staleness();
  r.staleness_aware_lr = t.staleness_aware_lr();
  r.dc_lambda = t.dc_lambda();
  o.wire_dtype =
      job.config().network().wire_dtype() == pstrain::v1::DTYPE_UNSPECIFIED
          ? pstrain::v1::DTYPE_F32
          : job.config().network().wire_dtype();
  return o;
}

PulledWeights& PulledWeights::operator=(PulledWeights&& other) {
  if (this != &other) {
    Release();
    version = other.version;
    min_clock = other.min_clock;
    wait_seconds = other.wait_seconds;
    chunks_ = std::move(other.chunks_);
    other.chunks_.clear();
  }
  return *this;
}

void PulledWeights::Release() {
  // Release: the shard's acquire load of 0 then orders our reads before its
  // next in-place write.
  for (auto& c : chunks_) c->readers.fetch_sub(1, std::memory_order_release);
  chunks_.clear();
}

absl::StatusOr<std::unique_ptr<Shard>> Shard::Create(ShardOptions options) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ConsistencyRule> rule,
                      MakeConsistencyRule(options.rule));
  if (options.shard_id >= std::max<uint32_t>(options.num_shards, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard id ", options.shard_id, " >= num_servers ", options.num_shards));
  }
  if (!IsWireDtype(options.wire_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wire dtype ", DtypeName(options.wire_dtype),
                     " is not one of DTYPE_F32, DTYPE_BF16, DTYPE_F16"));
  }
  std::unique_ptr<Shard> shard(new Shard(std::move(options)));
  shard->rule_ = std::move(rule);
  const pstrain::v1::ShardMap& map = shard->options_.shard_map;
  PS_ASSIGN_OR_RETURN(shard->optimizer_,
                      Optimizer::Create(shard->options_.optimizer));

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
    shard->max_chunk_length_ =
        std::max<uint64_t>(shard->max_chunk_length_, c.length());
    shard->max_push_bytes_ +=
        c.length() * sizeof(float) + c.tensor().size() + kChunkOverheadBytes;
  }
  shard->max_push_bytes_ += kStreamOverheadBytes;
  int threads = shard->options_.apply_threads;
  if (threads <= 0) {
    threads = shard->num_elements_ < kParallelElements
                  ? 1
                  : std::clamp<int>(std::thread::hardware_concurrency(), 1, 4);
  }
  threads = std::min<int>(threads, shard->chunks_.size());
  if (threads > 1) shard->pool_ = ChunkPool::Start(threads);
  const uint32_t n = shard->num_workers();
  shard->accumulator_bits_ = 62 - CeilLog2(n);

  absl::MutexLock lock(&shard->mu_);
  for (size_t i = 0; i < shard->chunks_.size(); ++i) {
    const LocalChunk& lc = shard->chunks_[i];
    auto buffer = std::make_shared<ChunkBuffer>();
    buffer->values.resize(lc.length);
    InitialValues(*specs[lc.tensor], lc.tensor_offset, lc.length,
                  buffer->values.data());
    shard->weights_.push_back(std::move(buffer));
    shard->slots_.push_back(shard->optimizer_->InitSlots(lc.length));
  }
  shard->clocks_.assign(n, 0);
  shard->last_push_.resize(n);
  if (shard->rule_->records_pushes()) {
    shard->accumulator_.assign(shard->num_elements_, 0);
    shard->chunk_exponent_.assign(shard->chunks_.size(), kInitialExponent);
    shard->chunk_max_.assign(shard->chunks_.size(), 0.0);
  }
  shard->scratch_.assign(threads, std::vector<float>(shard->max_chunk_length_));
  shard->read_weights_.resize(n);
  shard->staleness_hist_.assign(kHistogramBuckets, 0);
  return shard;
}

absl::Status Shard::ValidatePush(const PushHeader& header,
                                 const std::vector<const ChunkData*>& chunks,
                                 std::vector<const ChunkData*>* ordered) const {
  if (header.worker() >= num_workers()) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", header.worker(),
                                            " (job has ", num_workers(), ")"));
  }
  if (header.num_samples() == 0) {
    return absl::InvalidArgumentError("push has num_samples 0");
  }
  ordered->assign(chunks_.size(), nullptr);
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
    if ((*ordered)[it->second] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", EchoClientText(c->tensor()), "' chunk ",
                       c->index(), " sent twice"));
    }
    (*ordered)[it->second] = c;
    PS_RETURN_IF_ERROR(CheckChunk(*c, chunks_[it->second].length,
                                  /*require_finite=*/true, wire_dtype()));
  }
  const size_t missing = std::count(ordered->begin(), ordered->end(), nullptr);
  if (missing > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push is missing ", missing, " of ", chunks_.size(),
                     " chunks of shard ", shard_id()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> Shard::Push(
    const PushHeader& header, const std::vector<const ChunkData*>& chunks) {
  std::vector<const ChunkData*> ordered;
  PS_RETURN_IF_ERROR(ValidatePush(header, chunks, &ordered));
  const uint64_t fingerprint = Fingerprint(header, ordered);
  const uint32_t w = header.worker();

  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("shard is shutting down");
  const LastPush& last = last_push_[w];
  if (last.valid && last.clock == header.clock() &&
      last.fingerprint == fingerprint) {
    return last.result;  // a retry of an accepted push: same answer
  }
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
  PS_ASSIGN_OR_RETURN(
      PushDecision decision,
      rule_->OnPush(header.clock(), result.staleness, ProgressLocked()));
  switch (decision.action) {
    case PushDecision::Action::kDrop:
      ++dropped_;
      result.dropped = true;
      break;
    case PushDecision::Action::kRecord:
      RecordLocked(ordered, header.num_samples(), &result);
      break;
    case PushDecision::Action::kApply:
      ApplyPushLocked(w, ordered, decision, &result);
      break;
  }
  ++clocks_[w];
  RecordStalenessLocked(result.staleness);
  result.version = version_;
  last_push_[w] = LastPush{true, header.clock(), fingerprint, result};
  ServeSnapshotsLocked();
  return result;
}

void Shard::RecordLocked(const std::vector<const ChunkData*>& ordered,
                         uint64_t num_samples, PushResult* result) {
  const double n = static_cast<double>(num_samples);
  std::vector<uint64_t> clipped(chunks_.size(), 0);
  ForEachChunkLocked([&](size_t k, int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const LocalChunk& lc = chunks_[k];
    const int e = chunk_exponent_[k];
    const int lsb = e - accumulator_bits_;
    const double to_fixed = std::ldexp(1.0, -lsb);
    const double limit = std::ldexp(1.0, e);
    const double largest = limit - std::ldexp(1.0, lsb);
    const char* src = ordered[k]->data().data();
    if (wire_dtype() != pstrain::v1::DTYPE_F32) {
      // Decoded exactly to fp32 first: the sum below sees the same floats as
      // an fp32 push of the 16-bit values would carry.
      DecodeElements(wire_dtype(), src, lc.length, scratch_[slot].data());
      src = reinterpret_cast<const char*>(scratch_[slot].data());
    }
    int64_t* acc = accumulator_.data() + lc.local_offset;
    double max_abs = chunk_max_[k];
    for (uint64_t i = 0; i < lc.length; ++i) {
      float g;
      std::memcpy(&g, src + i * sizeof(float), sizeof(float));
      double x = n * static_cast<double>(g);
      const double ax = std::fabs(x);
      max_abs = std::max(max_abs, ax);
      if (ax >= limit) {
        x = std::copysign(largest, x);
        ++clipped[k];
      }
      acc[i] += std::llrint(x * to_fixed);
    }
    chunk_max_[k] = max_abs;
  });
  for (uint64_t c : clipped) clipped_ += c;
  pending_samples_ += n;
  ++pending_count_;
  if (!rule_->StepComplete(pending_count_)) return;

  const absl::Time start = absl::Now();
  ForEachChunkLocked([&](size_t k, int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const LocalChunk& lc = chunks_[k];
    const double from_fixed =
        std::ldexp(1.0, chunk_exponent_[k] - accumulator_bits_);
    int64_t* acc = accumulator_.data() + lc.local_offset;
    float* g = scratch_[slot].data();
    for (uint64_t i = 0; i < lc.length; ++i) {
      g[i] = static_cast<float>(static_cast<double>(acc[i]) * from_fixed /
                                pending_samples_);
      acc[i] = 0;
    }
    optimizer_->Apply(version_, version_, MutableChunkLocked(k), g,
                      slots_[k].data(), lc.length);
    chunk_exponent_[k] = NextExponent(chunk_max_[k], chunk_exponent_[k]);
    chunk_max_[k] = 0;
  });
  ++version_;
  result->apply_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->applied = true;
  pending_samples_ = 0;
  pending_count_ = 0;
}

void Shard::ApplyPushLocked(uint32_t worker,
                            const std::vector<const ChunkData*>& ordered,
                            const PushDecision& decision, PushResult* result) {
  const absl::Time start = absl::Now();
  const std::vector<float>& read = read_weights_[worker];
  const bool compensate = rule_->dc_lambda() > 0 && !read.empty();
  const float lambda = static_cast<float>(rule_->dc_lambda());
  ForEachChunkLocked([&](size_t k, int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const LocalChunk& lc = chunks_[k];
    float* g = scratch_[slot].data();
    DecodeElements(wire_dtype(), ordered[k]->data().data(), lc.length, g);
    float* w = MutableChunkLocked(k);
    if (compensate) {
      // DC-ASGD: a first-order Taylor correction of g towards the gradient
      // at the current weights, with lambda * g * g standing in for the
      // Hessian.
      const float* r = read.data() + lc.local_offset;
      for (uint64_t i = 0; i < lc.length; ++i) {
        g[i] += lambda * g[i] * g[i] * (w[i] - r[i]);
      }
    }
    optimizer_->Apply(decision.schedule_step, version_, w, g, slots_[k].data(),
                      lc.length, decision.lr_scale);
  });
  ++version_;
  result->apply_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->applied = true;
}

float* Shard::MutableChunkLocked(size_t i) {
  if (weights_[i]->readers.load(std::memory_order_acquire) != 0) {
    // A pull still reads this buffer: give the update a fresh copy.
    auto fresh = std::make_shared<ChunkBuffer>();
    fresh->values = weights_[i]->values;
    weights_[i] = std::move(fresh);
  }
  return weights_[i]->values.data();
}

void Shard::ForEachChunkLocked(const std::function<void(size_t, int)>& fn) {
  if (pool_ == nullptr) {
    for (size_t k = 0; k < chunks_.size(); ++k) fn(k, 0);
    return;
  }
  pool_->ParallelFor(chunks_.size(), fn);
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

ShardProgress Shard::ProgressLocked() const {
  ShardProgress p;
  p.version = version_;
  p.min_clock = MinClockLocked();
  return p;
}

bool Shard::ReadableLocked(uint64_t clock) const {
  if (closed_) return true;
  return rule_->Readable(clock, ProgressLocked());
}

std::string Shard::LaggardsLocked(uint64_t clock) const {
  const uint64_t need = rule_->RequiredClock(clock);
  std::vector<std::string> late;
  for (uint32_t r = 0; r < clocks_.size(); ++r) {
    if (clocks_[r] < need) late.push_back(absl::StrCat(r, "@", clocks_[r]));
  }
  return absl::StrJoin(late, ", ");
}

absl::StatusOr<PulledWeights> Shard::PullWeights(uint32_t worker,
                                                 uint64_t clock,
                                                 absl::Time deadline) {
  if (worker >= num_workers()) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", worker,
                                            " (job has ", num_workers(), ")"));
  }
  absl::MutexLock lock(&mu_);
  if (clock > clocks_[worker]) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " has pushed ", clocks_[worker],
                     " clocks and cannot read clock ", clock));
  }
  PulledWeights result;
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
  result.min_clock = rule_->ReadMinClock(clock, ProgressLocked());
  result.chunks_.reserve(weights_.size());
  for (const auto& c : weights_) {
    c->readers.fetch_add(1, std::memory_order_relaxed);
    result.chunks_.push_back(c);
  }
  if (rule_->dc_lambda() > 0) {
    std::vector<float>& read = read_weights_[worker];
    read.resize(num_elements_);
    for (size_t k = 0; k < chunks_.size(); ++k) {
      std::copy(weights_[k]->values.begin(), weights_[k]->values.end(),
                read.begin() + chunks_[k].local_offset);
    }
    RoundToWire(wire_dtype(), read.data(), read.size());
  }
  return result;
}

absl::StatusOr<PullResult> Shard::Pull(uint32_t worker, uint64_t clock,
                                       absl::Time deadline) {
  PS_ASSIGN_OR_RETURN(PulledWeights pulled,
                      PullWeights(worker, clock, deadline));
  PullResult result;
  result.version = pulled.version;
  result.min_clock = pulled.min_clock;
  result.wait_seconds = pulled.wait_seconds;
  result.values.resize(num_elements_);
  for (size_t k = 0; k < chunks_.size(); ++k) {
    std::memcpy(result.values.data() + chunks_[k].local_offset, pulled.chunk(k),
                chunks_[k].length * sizeof(float));
  }
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

uint64_t Shard::clipped_elements() const {
  absl::MutexLock lock(&mu_);
  return clipped_;
}

void Shard::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

// ---- Checkpoints: state export and import ---------------------------------

bool Shard::AtCutLocked(uint64_t cut) const {
  if (!accumulator_.empty()) return version_ == cut && pending_count_ == 0;
  return std::all_of(clocks_.begin(), clocks_.end(),
                     [cut](uint64_t c) { return c == cut; });
}

bool Shard::PastCutLocked(uint64_t cut) const {
  if (!accumulator_.empty()) {
    return version_ > cut || (version_ == cut && pending_count_ > 0);
  }
  return *std::max_element(clocks_.begin(), clocks_.end()) > cut;
}

ShardState Shard::CaptureLocked(uint64_t cut) const {
  ShardState s;
  s.cut = cut;
  s.version = version_;
  s.clocks = clocks_;
  s.schedule_step = accumulator_.empty() ? cut : version_;
  s.num_slots = optimizer_->num_slots();
  s.chunks.reserve(chunks_.size());
  for (size_t k = 0; k < chunks_.size(); ++k) {
    ChunkState c;
    c.tensor = chunks_[k].tensor;
    c.offset = chunks_[k].tensor_offset;
    c.length = chunks_[k].length;
    c.weights = weights_[k]->values;
    c.slots = slots_[k];
    if (!accumulator_.empty()) {
      c.has_exponent = true;
      c.exponent = chunk_exponent_[k];
    }
    s.chunks.push_back(std::move(c));
  }
  return s;
}

absl::StatusOr<ShardState> Shard::Snapshot() const {
  absl::MutexLock lock(&mu_);
  if (!accumulator_.empty()) {
    if (pending_count_ > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", shard_id(), " is not at a step boundary: ", pending_count_,
          " push(es) of step ", version_, " recorded"));
    }
    return CaptureLocked(version_);
  }
  if (!AtCutLocked(clocks_[0])) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard_id(), " is not at a clock cut: worker clocks are ",
        absl::StrJoin(clocks_, ",")));
  }
  return CaptureLocked(clocks_[0]);
}

absl::StatusOr<ShardState> Shard::SnapshotAt(uint64_t cut,
                                             absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("shard is shutting down");
  for (auto it = standing_held_.begin(); it != standing_held_.end(); ++it) {
    if (it->cut != cut) continue;
    ShardState state = std::move(*it);
    standing_held_.erase(it);
    return state;
  }
  if (AtCutLocked(cut)) return CaptureLocked(cut);
  if (PastCutLocked(cut)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard_id(), " is past cut ", cut, " (version ", version_,
        ", worker clocks ", absl::StrJoin(clocks_, ","), ")"));
  }
  PendingSnapshot pending;
  pending.cut = cut;
  pending_snapshots_.push_back(&pending);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending.done || closed_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  pending_snapshots_.erase(std::find(pending_snapshots_.begin(),
                                     pending_snapshots_.end(), &pending));
  if (pending.done) {
    if (!pending.status.ok()) return pending.status;
    return std::move(pending.state);
  }
  if (closed_) return absl::UnavailableError("shard is shutting down");
  std::vector<std::string> behind;
  for (uint32_t r = 0; r < clocks_.size(); ++r) {
    if (clocks_[r] < cut) behind.push_back(absl::StrCat(r, "@", clocks_[r]));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "shard ", shard_id(), " waited for cut ", cut, " (version ", version_,
      "); behind (worker@clock): ", absl::StrJoin(behind, ", ")));
}

size_t Shard::waiting_snapshots() const {
  absl::MutexLock lock(&mu_);
  return pending_snapshots_.size();
}

void Shard::SetStandingCuts(uint64_t every, uint64_t last, size_t max_held) {
  absl::MutexLock lock(&mu_);
  if (accumulator_.empty()) return;  // not sync
  standing_every_ = every;
  standing_last_ = last;
  standing_max_held_ = max_held;
}

void Shard::ServeSnapshotsLocked() {
  // Sync: a standing cut is the version the shard just reached.
  const uint64_t v = version_;
  if (standing_max_held_ > 0 && v > 0 &&
      (v == standing_last_ ||
       (standing_every_ > 0 && v % standing_every_ == 0)) &&
      (standing_held_.empty() || standing_held_.back().cut < v) &&
      AtCutLocked(v)) {
    if (standing_held_.size() >= standing_max_held_) standing_held_.pop_front();
    standing_held_.push_back(CaptureLocked(v));
  }
  for (PendingSnapshot* p : pending_snapshots_) {
    if (p->done) continue;
    if (AtCutLocked(p->cut)) {
      p->state = CaptureLocked(p->cut);
      p->done = true;
    } else if (PastCutLocked(p->cut)) {
      p->status = absl::FailedPreconditionError(
          absl::StrCat("shard ", shard_id(), " passed cut ", p->cut,
                       " without stopping there (worker clocks ",
                       absl::StrJoin(clocks_, ","),
                       "): the workers must stop before pushing that clock"));
      p->done = true;
    }
  }
}

absl::Status Shard::Restore(const ShardState& state) {
  const int num_slots = optimizer_->num_slots();
  if (state.num_slots != num_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state has ", state.num_slots,
        " optimizer slots per element, the optimizer has ", num_slots));
  }
  if (state.clocks.size() != num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("state has clocks of ", state.clocks.size(),
                     " workers, the job has ", num_workers()));
  }
  if (state.chunks.size() != chunks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("state has ", state.chunks.size(), " chunks, shard ",
                     shard_id(), " has ", chunks_.size()));
  }
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const ChunkState& c = state.chunks[k];
    const LocalChunk& lc = chunks_[k];
    if (c.tensor != lc.tensor || c.offset != lc.tensor_offset ||
        c.length != lc.length || c.weights.size() != lc.length ||
        c.slots.size() != lc.length * num_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state chunk ", k, " is '", c.tensor, "' [", c.offset, ", +",
          c.length, ") with ", c.weights.size(), " weights and ",
          c.slots.size(), " slot values; shard ", shard_id(), " chunk ", k,
          " is '", lc.tensor, "' [", lc.tensor_offset, ", +", lc.length, ")"));
    }
  }
  absl::MutexLock lock(&mu_);
  for (size_t k = 0; k < chunks_.size(); ++k) {
    // A fresh buffer: pulls holding the old one keep reading it.
    auto buffer = std::make_shared<ChunkBuffer>();
    buffer->values = state.chunks[k].weights;
    weights_[k] = std::move(buffer);
    slots_[k] = state.chunks[k].slots;
  }
  version_ = state.version;
  clocks_ = state.clocks;
  for (LastPush& p : last_push_) p = LastPush{};
  if (!accumulator_.empty()) {
    std::fill(accumulator_.begin(), accumulator_.end(), 0);
    for (size_t k = 0; k < chunks_.size(); ++k) {
      const ChunkState& c = state.chunks[k];
      chunk_exponent_[k] =
          c.has_exponent
              ? std::clamp<int>(c.exponent, kMinExponent, kMaxExponent)
              : kInitialExponent;
      chunk_max_[k] = 0;
    }
  }
  pending_count_ = 0;
  pending_samples_ = 0;
  for (std::vector<float>& r : read_weights_) r.clear();
  ServeSnapshotsLocked();
  return absl::OkStatus();
}

}  // namespace pstrain
