#include "server/shard.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <deque>
#include <optional>
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
#include "server/chunk_fingerprint.h"
#include "server/chunk_pool.h"
#include "server/fixed_point_kernels.h"

namespace pstrain {

using fixed_point::AddFixedFast;
using fixed_point::FixedFitsFast;
using fixed_point::FixedToFloat;
using fixed_point::HeldToFloat;
using fixed_point::kFastLimit;
using fixed_point::kNonFiniteBits;
using fixed_point::MaxAbsBits;
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

// One chunk's part of a push fingerprint: its position and bytes
// (server/chunk_fingerprint.h: what a collision could do, and its odds).
uint64_t ChunkHash(size_t k, absl::string_view bytes) {
  return absl::HashOf(k, PayloadFingerprint(bytes.data(), bytes.size()));
}

// An fp32 chunk read once (ScanFloats, one loop over the bytes): the bits of
// its largest |g| (as MaxAbsBits: NaN or Inf gives kNonFiniteBits or more)
// and ChunkHash of its bytes.
struct ChunkScan {
  uint32_t max_bits = 0;
  uint64_t hash = 0;
};
ChunkScan ScanFloats(size_t k, const char* src, uint64_t len) {
  ChunkScan scan;
  const uint64_t fingerprint =
      ScanFingerprint(src, len * sizeof(float), &scan.max_bits);
  scan.hash = absl::HashOf(k, fingerprint);
  return scan;
}

// The fields of a header that a retry must repeat.
uint64_t HeaderHash(const PushHeader& h) {
  return absl::HashOf(h.worker(), h.clock(), h.read_version(),
                      h.read_min_clock(), h.num_samples());
}

// The push's fingerprint from its header and every chunk's hash, summed so
// the order of arrival does not matter.
uint64_t Fingerprint(const PushHeader& h,
                     const std::vector<uint64_t>& chunk_hashes) {
  uint64_t sum = 0;
  for (uint64_t x : chunk_hashes) sum += x;
  return absl::HashOf(HeaderHash(h), sum);
}
}  // namespace

// Chunk k's sync state (see shard.h, "Summing on arrival").
struct Shard::ChunkSum {
  // A worker's chunk summed into the open step.
  struct Contribution {
    bool present = false;
    uint64_t hash = 0;
    uint64_t num_samples = 0;
    double max_abs = 0;
    uint64_t clipped = 0;
  };
  absl::Mutex mu;
  uint64_t epoch ABSL_GUARDED_BY(mu) = 0;  // Shard::sum_epoch_ it belongs to
  int exponent ABSL_GUARDED_BY(mu) = kInitialExponent;
  double max_abs ABSL_GUARDED_BY(mu) = 0;  // committed pushes' largest |x|
  std::vector<Contribution> by_worker ABSL_GUARDED_BY(mu);
  uint32_t summed ABSL_GUARDED_BY(mu) = 0;   // contributions present
  bool applied ABSL_GUARDED_BY(mu) = false;  // on arrival, this epoch
  // What the chunk's share of the accumulator holds (Shard::SumChunk):
  // zeros; the step's only term, as the pushed floats (first half), pushed
  // with num_samples `held_n`; the fixed-point sum; or nothing of use (a
  // held term was applied), to be zeroed before a fixed-point sum.
  enum class Acc { kZero, kHeld, kFixed, kStale };
  Acc acc ABSL_GUARDED_BY(mu) = Acc::kZero;
  double held_n ABSL_GUARDED_BY(mu) = 0;

  // Forgets the step's contributions and moves to sum epoch `next`.
  void ResetLocked(uint64_t next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    max_abs = 0;
    for (Contribution& c : by_worker) c = {};
    summed = 0;
    applied = false;
    epoch = next;
  }
};

Shard::Shard(ShardOptions options) : options_(std::move(options)) {}

Shard::~Shard() {
  applier_.reset();  // its tasks use the rest of the shard
}

ShardOptions ShardOptionsFromJob(const pstrain::v1::JobSpec& job,
                                 uint32_t shard_id) {
  ShardOptions o;
  o.shard_id = shard_id;
  o.num_shards = std::max<uint32_t>(job.num_servers(), 1);
  o.shard_map = job.shard_map();
  const v1::TrainingConfig& t = job.config().training();
  o.optimizer = t.optimizer();
  o.rule = ConsistencyOptionsFromTraining(t, job.config().job().workers());
  o.sparse_max_rows = static_cast<uint64_t>(
      std::max<int64_t>(job.config().server().sparse_max_rows(), 0));
  o.sparse_on_full = job.config().server().sparse_on_full() ==
                             pstrain::v1::ServerConfig::REJECT
                         ? SparseTableOptions::OnFull::kReject
                         : SparseTableOptions::OnFull::kEvict;
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

std::shared_ptr<void> PulledWeights::Pin(size_t i) const {
  std::shared_ptr<ChunkBuffer> buffer = chunks_[i];
  buffer->readers.fetch_add(1, std::memory_order_relaxed);
  float* data = buffer->values.data();
  return std::shared_ptr<void>(data, [buffer = std::move(buffer)](void*) {
    buffer->readers.fetch_sub(1, std::memory_order_release);
  });
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
  if (options.apply_block % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("apply_block ", options.apply_block,
                     " is not a multiple of 16 elements"));
  }
  std::unique_ptr<Shard> shard(new Shard(std::move(options)));
  shard->rule_ = std::move(rule);
  const pstrain::v1::ShardMap& map = shard->options_.shard_map;
  PS_ASSIGN_OR_RETURN(shard->optimizer_,
                      Optimizer::Create(shard->options_.optimizer));

  bool any_sparse = false;
  for (const auto& t : map.tensors()) any_sparse = any_sparse || t.row_sparse();
  if (any_sparse) {
    SparseShardOptions so;
    so.shard_id = shard->options_.shard_id;
    so.num_shards = std::max<uint32_t>(shard->options_.num_shards, 1);
    so.tensors.assign(map.tensors().begin(), map.tensors().end());
    so.optimizer = shard->options_.optimizer;
    so.rule = shard->options_.rule;
    so.wire_dtype = shard->options_.wire_dtype;
    so.max_rows = shard->options_.sparse_max_rows;
    so.on_full = shard->options_.sparse_on_full;
    PS_ASSIGN_OR_RETURN(shard->sparse_, SparseShard::Create(std::move(so)));
  }

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
  shard->hold_terms_ = shard->options_.hold_first_term && n == 1;

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
  shard->departed_.assign(n, false);
  shard->last_push_.resize(n);
  shard->prev_push_.resize(n);
  if (shard->rule_->records_pushes()) {
    shard->accumulator_.assign(shard->num_elements_, 0);
    shard->sums_ = std::make_unique<ChunkSum[]>(shard->chunks_.size());
    for (size_t k = 0; k < shard->chunks_.size(); ++k) {
      absl::MutexLock sum_lock(&shard->sums_[k].mu);
      shard->sums_[k].by_worker.resize(n);
    }
    shard->sums_on_arrival_ = shard->options_.rule.backup_workers == 0;
  }
  if (shard->sums_on_arrival_ && shard->options_.early_apply) {
    shard->applier_ =
        ChunkApplier::Start([s = shard.get()](size_t k, uint64_t epoch) {
          s->ApplyOnArrival(k, epoch);
        });
  }
  shard->scratch_.assign(threads, std::vector<float>(shard->max_chunk_length_));
  shard->read_weights_.resize(n);
  shard->staleness_hist_.assign(kHistogramBuckets, 0);
  return shard;
}

absl::Status Shard::ValidateChunk(const ChunkData& c,
                                  const std::vector<bool>& seen, int* local,
                                  bool check_finite) const {
  return ValidateChunk(FieldsOf(c), seen, local, check_finite);
}

absl::Status Shard::ValidateChunk(const ChunkFields& c,
                                  const std::vector<bool>& seen, int* local,
                                  bool check_finite) const {
  auto owners = chunk_owner_.find(c.tensor);
  if (owners == chunk_owner_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown tensor '", EchoClientText(c.tensor), "'"));
  }
  if (c.index >= owners->second.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("tensor '", EchoClientText(c.tensor), "' chunk ", c.index,
                     " out of range [0, ", owners->second.size(), ")"));
  }
  auto it = local_index_.find({std::string(c.tensor), c.index});
  if (it == local_index_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", EchoClientText(c.tensor), "' chunk ", c.index,
                     " is held by shard ", owners->second[c.index],
                     ", not shard ", shard_id()));
  }
  if (seen[it->second]) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", EchoClientText(c.tensor), "' chunk ", c.index,
                     " sent twice"));
  }
  PS_RETURN_IF_ERROR(
      CheckChunk(c, chunks_[it->second].length, check_finite, wire_dtype()));
  *local = it->second;
  return absl::OkStatus();
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
  if (header.parts() > 1 && !sums_on_arrival_) {
    return absl::InvalidArgumentError(
        absl::StrCat("push split into ", header.parts(),
                     " streams (PushHeader.parts), but shard ", shard_id(),
                     " takes a push as one stream (async or backup workers: "
                     "network.push_streams must be 1); nothing applied"));
  }
  ordered->assign(chunks_.size(), nullptr);
  std::vector<bool> seen(chunks_.size(), false);
  for (const ChunkData* c : chunks) {
    int k = 0;
    PS_RETURN_IF_ERROR(ValidateChunk(*c, seen, &k));
    seen[k] = true;
    (*ordered)[k] = c;
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
  std::vector<const ChunkData*> ordered;
  PS_RETURN_IF_ERROR(ValidatePush(header, chunks, &ordered));
  if (sums_on_arrival_) {
    // Everything is valid: the stream below can only fail on the clock, a
    // contribution mismatch or a restore, all before or without any effect.
    PS_ASSIGN_OR_RETURN(std::unique_ptr<IncomingPush> push, BeginPush(header));
    for (const ChunkData* c : ordered) PS_RETURN_IF_ERROR(push->Add(*c));
    return push->Finish();
  }
  std::vector<uint64_t> hashes(ordered.size());
  for (size_t k = 0; k < ordered.size(); ++k) {
    hashes[k] = ChunkHash(k, ordered[k]->data());
  }
  const uint64_t fingerprint = Fingerprint(header, hashes);
  const uint32_t w = header.worker();

  absl::MutexLock lock(&mu_);
  return AcceptLocked(
      header, fingerprint,
      [&](PushResult* result) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        RecordLocked(ordered, header.num_samples(), result);
        return absl::OkStatus();
      },
      [&](const PushDecision& decision, PushResult* result)
          ABSL_NO_THREAD_SAFETY_ANALYSIS {
            ApplyPushLocked(w, ordered, decision, result);
          });
}

absl::StatusOr<PushResult> Shard::AcceptLocked(
    const PushHeader& header, uint64_t fingerprint,
    const std::function<absl::Status(PushResult*)>& record,
    const std::function<void(const PushDecision&, PushResult*)>& apply,
    std::vector<uint64_t> chunk_hashes) {
  const uint32_t w = header.worker();
  if (closed_) return absl::UnavailableError("shard is shutting down");
  // A retry of an accepted push (a lost reply, or elastic: a stand-in
  // re-pushing a step the rank's dead process pushed): same answer.
  for (const LastPush* p : {&last_push_[w], &prev_push_[w]}) {
    if (p->valid && p->clock == header.clock() &&
        p->fingerprint == fingerprint) {
      return p->result;
    }
  }
  // A rank joined again, whose dead process pushed this clock already
  // (async; shard.h, "Pushes are idempotent").
  if (rule_->AcknowledgesRejoinedPushes() && header.clock() < clocks_[w] &&
      last_push_[w].valid && last_push_[w].session != header.session_id()) {
    PushResult result;
    result.version = version_;
    return result;
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
      PS_RETURN_IF_ERROR(record(&result));
      break;
    case PushDecision::Action::kApply:
      apply(decision, &result);
      break;
  }
  ++clocks_[w];
  RecordStalenessLocked(result.staleness);
  result.version = version_;
  prev_push_[w] = std::move(last_push_[w]);
  last_push_[w] = LastPush{true,
                           header.clock(),
                           fingerprint,
                           result,
                           header.session_id(),
                           HeaderHash(header),
                           std::move(chunk_hashes)};
  ServeSnapshotsLocked();
  return result;
}

absl::StatusOr<std::unique_ptr<Shard::IncomingPush>> Shard::BeginPush(
    const PushHeader& header) {
  if (!sums_on_arrival_) {
    return absl::FailedPreconditionError(
        "this shard does not sum pushes on arrival (async or backup workers)");
  }
  const uint32_t w = header.worker();
  if (w >= num_workers()) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", w, " (job has ", num_workers(), ")"));
  }
  if (header.num_samples() == 0) {
    return absl::InvalidArgumentError("push has num_samples 0");
  }
  if (header.read_min_clock() > header.clock()) {
    return absl::InvalidArgumentError(
        absl::StrCat("read_min_clock ", header.read_min_clock(),
                     " is ahead of clock ", header.clock()));
  }
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("shard is shutting down");
  // A retry of one of the worker's last two accepted pushes (a lost reply,
  // or an elastic stand-in re-pushing the dead process's step): answered
  // from its hash by AcceptLocked, nothing summed.
  const bool maybe_retry =
      (last_push_[w].valid && last_push_[w].clock == header.clock()) ||
      (prev_push_[w].valid && prev_push_[w].clock == header.clock());
  if (header.clock() != clocks_[w] && !maybe_retry) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", w, " pushed clock ", header.clock(),
                     " but its next clock is ", clocks_[w]));
  }
  if (header.clock() > version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sync step is ", version_, ", push is for clock ", header.clock()));
  }
  // Only the worker's next clock in the open step is summed; anything else
  // is at best a retry of the last accepted push, answered from its hash.
  const bool summing = header.clock() == clocks_[w] &&
                       header.clock() == version_ && !maybe_retry;
  return std::unique_ptr<IncomingPush>(
      new IncomingPush(this, header, sum_epoch_, summing));
}

Shard::IncomingPush::IncomingPush(Shard* shard, const PushHeader& header,
                                  uint64_t epoch, bool summing)
    : shard_(shard),
      header_(header),
      epoch_(epoch),
      summing_(summing),
      part_(header.parts() > 1),
      hashes_(shard->chunks_.size(), 0),
      seen_(shard->chunks_.size(), false) {}

Shard::IncomingPush::~IncomingPush() {
  if (term_g_.empty() && gathered_.empty()) return;
  absl::MutexLock lock(&shard_->spare_mu_);
  for (std::vector<float>* v : {&term_g_, &gathered_}) {
    if (!v->empty()) shard_->spare_g_.push_back(std::move(*v));
  }
}

std::vector<float> Shard::IncomingPush::TakeSpare() {
  std::vector<float> v;
  {
    absl::MutexLock lock(&shard_->spare_mu_);
    if (!shard_->spare_g_.empty()) {
      v = std::move(shard_->spare_g_.back());
      shard_->spare_g_.pop_back();
    }
  }
  v.resize(shard_->max_chunk_length_);
  return v;
}

absl::Status Shard::IncomingPush::Add(const ChunkData& c) {
  ChunkFields f = FieldsOf(c);
  f.data = nullptr;
  const absl::string_view data = c.data();
  return AddPieces(f, absl::MakeConstSpan(&data, 1), nullptr);
}

absl::Status Shard::IncomingPush::Add(const ChunkView& c,
                                      const Scanned* scanned) {
  ChunkFields f;
  f.tensor = c.tensor;
  f.index = c.index;
  f.dtype = c.dtype;
  f.shape = c.shape;
  f.data_size = c.data_size;
  return AddPieces(f, c.data, scanned);
}

absl::Status Shard::IncomingPush::AddPieces(
    ChunkFields c, absl::Span<const absl::string_view> pieces,
    const Scanned* scanned) {
  int k = 0;
  // The layout first, reading no value.
  PS_RETURN_IF_ERROR(
      shard_->ValidateChunk(c, seen_, &k, /*check_finite=*/false));
  const LocalChunk& lc = shard_->chunks_[k];
  // An fp32 chunk that is summed is checked for NaN and Inf below, by the
  // loop that also fingerprints it (ScanFloats); every other chunk here.
  const bool check_later =
      summing_ && shard_->wire_dtype() == pstrain::v1::DTYPE_F32;
  // The payload where it lies (one piece aligned for its floats: a
  // ChunkData's string, heap or inline), or gathered from its pieces into a
  // spare: a summed fp32 one by the loop that also fingerprints and scans
  // it.
  std::optional<ChunkScan> scan;
  if (check_later && scanned != nullptr) {
    // Of exactly these bytes, which the layout check found lc.length floats.
    scan = ChunkScan{scanned->max_abs_bits, absl::HashOf(static_cast<size_t>(k),
                                                         scanned->fingerprint)};
  }
  if (pieces.size() == 1 &&
      reinterpret_cast<uintptr_t>(pieces[0].data()) % alignof(float) == 0) {
    c.data = pieces[0].data();
  } else if (c.data_size == 0) {
    c.data = "";
  } else {
    if (gathered_.empty()) gathered_ = TakeSpare();
    char* dst = reinterpret_cast<char*>(gathered_.data());
    if (check_later) {
      ChunkScan s;
      s.hash = absl::HashOf(
          static_cast<size_t>(k),
          GatherScanFingerprint(pieces, c.data_size, dst, &s.max_bits));
      scan = s;
    } else {
      GatherPieces(pieces, c.data_size, dst);
    }
    c.data = dst;
  }
  if (!check_later) {
    PS_RETURN_IF_ERROR(CheckChunk(c, lc.length, /*require_finite=*/true,
                                  shard_->wire_dtype()));
  }
  seen_[k] = true;
  ++seen_count_;
  const char* src = c.data;
  // A summed fp32 chunk is read once for its hash, its largest |x| and
  // NaN/Inf (ScanFloats); the sum or apply below takes that largest |x|.
  std::optional<uint32_t> max_bits;
  uint64_t hash = 0;
  if (check_later) {
    if (!scan.has_value()) scan = ScanFloats(k, src, lc.length);
    if (scan->max_bits >= kNonFiniteBits) {
      // CheckChunk's error names the element.
      absl::Status st = CheckChunk(c, lc.length, /*require_finite=*/true,
                                   shard_->wire_dtype());
      return st.ok() ? absl::InternalError(absl::StrCat(
                           "tensor '", lc.tensor, "' chunk ", lc.index,
                           " has a value that is not finite"))
                     : st;
    }
    max_bits = scan->max_bits;
    hash = scan->hash;
  } else {
    hash = ChunkHash(k, absl::string_view(src, c.data_size));
  }
  hashes_[k] = hash;
  if (!summing_) return absl::OkStatus();
  if (shard_->wire_dtype() != pstrain::v1::DTYPE_F32) {
    // Decoded exactly to fp32 first, outside the chunk's lock.
    decoded_.resize(lc.length);
    DecodeElements(shard_->wire_dtype(), src, lc.length, decoded_.data());
    src = reinterpret_cast<const char*>(decoded_.data());
    return SumLocked(c, k, src, hash, /*apply=*/false, std::nullopt);
  }
  if (!shard_->hold_terms_ || shard_->applier_ == nullptr ||
      !shard_->options_.apply_terms_on_arrival) {
    return SumLocked(c, k, src, hash, /*apply=*/false, max_bits);
  }
  // One worker applying on arrival: the chunk's term is its step's only
  // one, applied here rather than held for the applier, under the shard's
  // mutex shared as the applier's apply is (taken before the chunk's).
  if (term_g_.size() < lc.length) term_g_ = TakeSpare();
  absl::ReaderMutexLock shard_lock(&shard_->mu_);
  return SumLocked(c, k, src, hash, !shard_->closed_, max_bits);
}

absl::Status Shard::IncomingPush::SumLocked(const ChunkFields& c, size_t k,
                                            const char* src, uint64_t hash,
                                            bool apply,
                                            std::optional<uint32_t> max_bits)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // with `apply`, the caller holds mu_
  const LocalChunk& lc = shard_->chunks_[k];
  // Every value was checked for NaN and Inf before (ValidateChunk, or Add's
  // scan), but for a decoded bf16/fp16 chunk, which SumChunk checks.
  auto not_finite = [&] {
    absl::Status st =
        CheckChunk(c, lc.length, /*require_finite=*/true, shard_->wire_dtype());
    return st.ok() ? absl::InternalError(absl::StrCat(
                         "tensor '", lc.tensor, "' chunk ", lc.index,
                         " has a value that is not finite"))
                   : st;
  };
  ChunkSum& sum = shard_->sums_[k];
  absl::MutexLock lock(&sum.mu);
  if (sum.epoch != epoch_) {
    // The step was applied (a twin stream of this push completed it) or
    // the state restored: nothing more is added; Finish decides.
    summing_ = false;
    return absl::OkStatus();
  }
  ChunkSum::Contribution& mine = sum.by_worker[header_.worker()];
  if (mine.present) {
    if (mine.hash == hash && mine.num_samples == header_.num_samples()) {
      return absl::OkStatus();  // summed already
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", lc.tensor, "' chunk ", lc.index, " of worker ",
        header_.worker(), " clock ", header_.clock(),
        " was already summed with other values or num_samples (an earlier "
        "stream of this push failed half-way); nothing applied"));
  }
  const double n = static_cast<double>(header_.num_samples());
  TermOutcome applied = TermOutcome::kNotHeld;
  if (apply && !sum.applied) {
    applied = shard_->ApplyTermLocked(k, sum, src, n, &mine.max_abs,
                                      term_g_.data(), max_bits);
    if (applied == TermOutcome::kNotFinite) return not_finite();
  }
  if (applied != TermOutcome::kApplied &&
      !shard_->SumChunk(k, sum, src, n, &mine.max_abs, &mine.clipped,
                        max_bits)) {
    return not_finite();
  }
  mine.hash = hash;
  mine.num_samples = header_.num_samples();
  mine.present = true;
  // The last contribution: the chunk is final for this step (nothing can
  // be added any more), so it can be applied now, off this thread (unless
  // it was, above).
  if (++sum.summed == shard_->num_workers() && shard_->applier_ != nullptr &&
      applied != TermOutcome::kApplied) {
    shard_->applier_->Post(k, epoch_);
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> Shard::IncomingPush::Finish() {
  if (seen_count_ < seen_.size() && !part_) {
    return absl::InvalidArgumentError(
        absl::StrCat("push is missing ", seen_.size() - seen_count_, " of ",
                     seen_.size(), " chunks of shard ", shard_->shard_id()));
  }
  Shard& s = *shard_;
  const uint32_t w = header_.worker();
  uint64_t fingerprint = Fingerprint(header_, hashes_);
  absl::MutexLock lock(&s.mu_);
  if (part_) {
    // A part of an accepted push (finishing after the part that committed
    // it, or a retry): the same header and, chunk by chunk, the same bytes.
    const uint64_t header_hash = HeaderHash(header_);
    for (const LastPush* p : {&s.last_push_[w], &s.prev_push_[w]}) {
      if (!p->valid || p->clock != header_.clock() ||
          p->header_hash != header_hash ||
          p->chunk_hashes.size() != hashes_.size()) {
        continue;
      }
      bool same = true;
      for (size_t k = 0; same && k < hashes_.size(); ++k) {
        same = !seen_[k] || p->chunk_hashes[k] == hashes_[k];
      }
      if (same) return p->result;
    }
    // The push commits with this part only if every chunk is summed; it
    // then has the fingerprint of one stream of the same chunks.
    if (summing_ && epoch_ == s.sum_epoch_ && header_.clock() == s.clocks_[w]) {
      uint64_t missing = 0;
      for (size_t k = 0; k < s.chunks_.size(); ++k) {
        ChunkSum& sum = s.sums_[k];
        absl::MutexLock sum_lock(&sum.mu);
        const ChunkSum::Contribution& mine = sum.by_worker[w];
        if (sum.epoch != epoch_ || !mine.present) {
          ++missing;
          continue;
        }
        if (mine.num_samples != header_.num_samples()) {
          const LocalChunk& lc = s.chunks_[k];
          return absl::FailedPreconditionError(absl::StrCat(
              "tensor '", lc.tensor, "' chunk ", lc.index, " of worker ", w,
              " clock ", header_.clock(), " was summed with num_samples ",
              mine.num_samples, " by another part of this push, not ",
              header_.num_samples(), "; nothing committed"));
        }
        hashes_[k] = mine.hash;
      }
      if (missing > 0) {
        PushResult pending;
        pending.pending = true;
        pending.missing_chunks = missing;
        pending.version = s.version_;
        return pending;
      }
      fingerprint = Fingerprint(header_, hashes_);
    }
  }
  return s.AcceptLocked(
      header_, fingerprint,
      [&](PushResult* result) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        // Reached only for the worker's next clock in the open step.
        if (!summing_ || epoch_ != s.sum_epoch_) {
          return absl::UnavailableError(
              "the shard's state changed while the push streamed (a restore "
              "or a twin stream); nothing applied");
        }
        for (size_t k = 0; k < s.chunks_.size(); ++k) {
          ChunkSum& sum = s.sums_[k];
          absl::MutexLock sum_lock(&sum.mu);
          ChunkSum::Contribution& mine = sum.by_worker[header_.worker()];
          sum.max_abs = std::max(sum.max_abs, mine.max_abs);
          s.clipped_ += mine.clipped;
        }
        s.CountRecordedLocked(header_.num_samples(), result);
        return absl::OkStatus();
      },
      [](const PushDecision&, PushResult*) {}, std::move(hashes_));
}
bool Shard::SumChunk(size_t k, ChunkSum& sum, const char* src,
                     double num_samples, double* max_abs, uint64_t* clipped,
                     std::optional<uint32_t> scanned_max_bits)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // the caller holds sum.mu
  const LocalChunk& lc = chunks_[k];
  const int e = sum.exponent;
  const int lsb = e - accumulator_bits_;
  const double to_fixed = std::ldexp(1.0, -lsb);
  const double limit = std::ldexp(1.0, e);
  const double largest = limit - std::ldexp(1.0, lsb);
  const double n = num_samples;
  int64_t* acc = accumulator_.data() + lc.local_offset;
  using Acc = ChunkSum::Acc;
  // The chunk's term of the step may be held (one worker: the only one; a
  // retry of it is skipped by its contribution, so nothing is added to a
  // held term): it is copied there while its largest |x| is found, in one
  // pass (most terms are held; for one that is not, the copy is zeroed and
  // the term summed).
  const bool may_hold =
      hold_terms_ && (sum.acc == Acc::kZero || sum.acc == Acc::kStale);
  bool zero_first = sum.acc == Acc::kStale;
  uint32_t max_bits = 0;
  if (scanned_max_bits.has_value()) {
    // Scanned already: only the copy of a term that may be held is left.
    max_bits = *scanned_max_bits;
    if (max_bits >= kNonFiniteBits) return false;
    if (may_hold) {
      std::memcpy(acc, src, lc.length * sizeof(float));
      zero_first = true;
    }
  } else if (may_hold) {
    max_bits = MaxAbsBits(src, lc.length, reinterpret_cast<char*>(acc));
    if (max_bits >= kNonFiniteBits) {
      // Nothing changes: zeros stay zeros.
      if (sum.acc == Acc::kZero) std::fill_n(acc, (lc.length + 1) / 2, 0);
      return false;
    }
    zero_first = true;
  } else {
    max_bits = MaxAbsBits(src, lc.length);
    if (max_bits >= kNonFiniteBits) return false;
  }
  float max_g;
  std::memcpy(&max_g, &max_bits, sizeof(max_g));
  // max_i |n * g[i]| is n * max_i |g[i]| (rounding is monotonic).
  const double chunk_max = n * static_cast<double>(max_g);
  // Nothing clipped, every term within the fast conversion's range.
  const bool fast = chunk_max < limit && chunk_max * to_fixed < kFastLimit;
  if (fast && may_hold) {
    // Kept as the copied floats (4 of the chunk's 8 bytes per element) and
    // applied straight from them (HeldToFloat), which gives what
    // AddFixedFast here and FixedToFloat at the apply would have (the
    // exponent stays until the apply).
    sum.acc = Acc::kHeld;
    sum.held_n = n;
    *max_abs = std::max(*max_abs, chunk_max);
    return true;
  }
  if (zero_first) std::fill_n(acc, lc.length, 0);
  sum.acc = Acc::kFixed;
  if (fast) {
    AddFixedFast(src, lc.length, n, to_fixed, acc);
    *max_abs = std::max(*max_abs, chunk_max);
    return true;
  }
  double max = *max_abs;
  uint64_t clips = 0;
  for (uint64_t i = 0; i < lc.length; ++i) {
    float g;
    std::memcpy(&g, src + i * sizeof(float), sizeof(float));
    double x = n * static_cast<double>(g);
    const double ax = std::fabs(x);
    max = std::max(max, ax);
    if (ax >= limit) {
      x = std::copysign(largest, x);
      ++clips;
    }
    acc[i] += std::llrint(x * to_fixed);
  }
  *max_abs = max;
  *clipped += clips;
  return true;
}

void Shard::RecordLocked(const std::vector<const ChunkData*>& ordered,
                         uint64_t num_samples, PushResult* result) {
  const double n = static_cast<double>(num_samples);
  std::vector<uint64_t> clipped(chunks_.size(), 0);
  ForEachChunkLocked([&](size_t k, int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const LocalChunk& lc = chunks_[k];
    const char* src = ordered[k]->data().data();
    if (wire_dtype() != pstrain::v1::DTYPE_F32) {
      // Decoded exactly to fp32 first: the sum below sees the same floats as
      // an fp32 push of the 16-bit values would carry.
      DecodeElements(wire_dtype(), src, lc.length, scratch_[slot].data());
      src = reinterpret_cast<const char*>(scratch_[slot].data());
    }
    ChunkSum& sum = sums_[k];
    absl::MutexLock sum_lock(&sum.mu);
    // Finite: ValidatePush checked every value.
    const bool finite = SumChunk(k, sum, src, n, &sum.max_abs, &clipped[k]);
    (void)finite;
  });
  for (uint64_t c : clipped) clipped_ += c;
  CountRecordedLocked(num_samples, result);
}

void Shard::CountRecordedLocked(uint64_t num_samples, PushResult* result) {
  pending_samples_ += static_cast<double>(num_samples);
  ++pending_count_;
  if (!rule_->StepComplete(pending_count_)) return;

  const absl::Time start = absl::Now();
  const uint64_t next_epoch = sum_epoch_ + 1;
  ForEachChunkLocked([&](size_t k, int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    ChunkSum& sum = sums_[k];
    absl::MutexLock sum_lock(&sum.mu);
    // A chunk applied on arrival had the same samples (every worker's
    // contribution) and largest |x| (every committed push's) as here.
    if (!sum.applied) {
      ApplySumLocked(k, sum, pending_samples_, sum.max_abs,
                     scratch_[slot].data());
    }
    sum.ResetLocked(next_epoch);
  });
  chunks_applied_early_.store(0, std::memory_order_relaxed);
  sum_epoch_ = next_epoch;
  ++version_;
  result->apply_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->applied = true;
  pending_samples_ = 0;
  pending_count_ = 0;
}

void Shard::ApplySumLocked(size_t k, ChunkSum& sum, double samples,
                           double max_abs, float* g)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // the caller holds sum.mu
  const LocalChunk& lc = chunks_[k];
  const int lsb = sum.exponent - accumulator_bits_;
  const double from_fixed = std::ldexp(1.0, lsb);
  int64_t* acc = accumulator_.data() + lc.local_offset;
  using Acc = ChunkSum::Acc;
  if (sum.acc == Acc::kHeld) {
    const char* held = reinterpret_cast<const char*>(acc);
    const double to_fixed = std::ldexp(1.0, -lsb);
    ApplyInBlocksLocked(
        k, version_, 1.0, g,
        [&](uint64_t offset, uint64_t n, const float*, float* out) {
          HeldToFloat(held + offset * sizeof(float), n, sum.held_n, to_fixed,
                      from_fixed, samples, out);
        });
    sum.acc = Acc::kStale;
  } else {
    // kStale here: no term at all (not reached: a chunk is applied with
    // every worker's), so the sum is zero.
    if (sum.acc == Acc::kStale) std::fill_n(acc, lc.length, 0);
    ApplyInBlocksLocked(
        k, version_, 1.0, g,
        [&](uint64_t offset, uint64_t n, const float*, float* out) {
          // The fast conversion's condition per block: the same
          // values either way (FixedToFloatLoops).
          FixedToFloat(acc + offset, n, from_fixed, samples,
                       FixedFitsFast(acc + offset, n), out);
        });
    sum.acc = Acc::kZero;
  }
  sum.exponent = NextExponent(max_abs, sum.exponent);
}

void Shard::ApplyInBlocksLocked(
    size_t k, uint64_t step, double lr_scale, float* g,
    absl::FunctionRef<void(uint64_t, uint64_t, const float*, float*)> fill)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // the caller holds mu_, maybe shared
  const uint64_t length = chunks_[k].length;
  float* w = MutableChunkLocked(k);
  float* slots = slots_[k].data();
  const bool has_slots = optimizer_->num_slots() > 0;
  const uint64_t block =
      options_.apply_block > 0 ? options_.apply_block : length;
  for (uint64_t offset = 0; offset < length; offset += block) {
    const uint64_t n = std::min(block, length - offset);
    fill(offset, n, w + offset, g);
    // Slot j of element offset + i is at slots[j * length + offset + i].
    optimizer_->Apply(step, version_, w + offset, g,
                      has_slots ? slots + offset : slots, n, lr_scale, length);
  }
}

Shard::TermOutcome Shard::ApplyTermLocked(
    size_t k, ChunkSum& sum, const char* src, double num_samples,
    double* max_abs, float* g, std::optional<uint32_t> scanned_max_bits)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // the caller holds sum.mu
  using Acc = ChunkSum::Acc;
  // SumChunk's conditions for holding the term.
  if (sum.acc != Acc::kZero && sum.acc != Acc::kStale) {
    return TermOutcome::kNotHeld;
  }
  const LocalChunk& lc = chunks_[k];
  const uint32_t max_bits = scanned_max_bits.has_value()
                                ? *scanned_max_bits
                                : MaxAbsBits(src, lc.length);
  if (max_bits >= kNonFiniteBits) return TermOutcome::kNotFinite;
  float max_g;
  std::memcpy(&max_g, &max_bits, sizeof(max_g));
  const int lsb = sum.exponent - accumulator_bits_;
  const double to_fixed = std::ldexp(1.0, -lsb);
  const double limit = std::ldexp(1.0, sum.exponent);
  const double chunk_max = num_samples * static_cast<double>(max_g);
  if (!(chunk_max < limit && chunk_max * to_fixed < kFastLimit)) {
    return TermOutcome::kNotHeld;
  }
  *max_abs = std::max(*max_abs, chunk_max);
  // ApplySumLocked of the held term with ApplyOnArrival's numbers (one
  // contribution: its num_samples and largest |x|). In one pass where the
  // rule has one (SGD, momentum) and HeldToFloat multiplies by
  // from_fixed / num_samples (a power of two): the same bits, one pass over
  // the chunk fewer.
  const double from_fixed = std::ldexp(1.0, lsb);
  const double scale = from_fixed / num_samples;
  int e = 0;
  const bool one_pass = std::frexp(num_samples, &e) == 0.5 &&
                        scale >= DBL_MIN && options_.apply_held_in_one_pass;
  if (!one_pass ||
      !optimizer_->ApplyHeld(
          version_, version_, MutableChunkLocked(k),
          Optimizer::HeldGradient{src, num_samples, to_fixed, scale},
          slots_[k].data(), lc.length, /*lr_scale=*/1.0, lc.length)) {
    ApplyInBlocksLocked(
        k, version_, 1.0, g,
        [&](uint64_t offset, uint64_t n, const float*, float* out) {
          HeldToFloat(src + offset * sizeof(float), n, num_samples, to_fixed,
                      from_fixed, num_samples, out);
        });
  }
  sum.exponent = NextExponent(*max_abs, sum.exponent);
  sum.applied = true;
  chunks_applied_early_.fetch_add(1, std::memory_order_relaxed);
  return TermOutcome::kApplied;
}

void Shard::ApplyOnArrival(size_t k,
                           uint64_t epoch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Shared: other writers of weights and slots (a commit, Restore) and the
  // readers that need one whole version (pulls, checkpoint captures) hold
  // mu_ exclusively, so they never overlap this. scratch_[0] is used only
  // under mu_ held exclusively otherwise, and this is the only thread that
  // applies under a shared lock.
  absl::ReaderMutexLock lock(&mu_);
  ChunkSum& sum = sums_[k];
  absl::MutexLock sum_lock(&sum.mu);
  // A later step, a restore, or applied already: nothing to do.
  if (sum.epoch != epoch || sum.applied || closed_) return;
  if (sum.summed != num_workers()) return;
  double samples = 0;
  double max_abs = 0;
  for (const ChunkSum::Contribution& c : sum.by_worker) {
    samples += static_cast<double>(c.num_samples);
    max_abs = std::max(max_abs, c.max_abs);
  }
  ApplySumLocked(k, sum, samples, max_abs, scratch_[0].data());
  sum.applied = true;
  chunks_applied_early_.fetch_add(1, std::memory_order_relaxed);
}

size_t Shard::chunks_applied_early() const {
  absl::MutexLock lock(&mu_);
  return chunks_applied_early_.load(std::memory_order_relaxed);
}

void Shard::ApplyPushLocked(uint32_t worker,
                            const std::vector<const ChunkData*>& ordered,
                            const PushDecision& decision, PushResult* result) {
  const absl::Time start = absl::Now();
  const std::vector<float>& read = read_weights_[worker];
  const bool compensate = rule_->dc_lambda() > 0 && !read.empty();
  const float lambda = static_cast<float>(rule_->dc_lambda());
  const uint64_t wire_bytes = WireElementBytes(wire_dtype());
  ForEachChunkLocked([&](size_t k, int slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const LocalChunk& lc = chunks_[k];
    const char* src = ordered[k]->data().data();
    ApplyInBlocksLocked(
        k, decision.schedule_step, decision.lr_scale, scratch_[slot].data(),
        [&](uint64_t offset, uint64_t n, const float* w, float* g) {
          DecodeElements(wire_dtype(), src + offset * wire_bytes, n, g);
          if (!compensate) return;
          // DC-ASGD: a first-order Taylor correction of g towards the
          // gradient at the current weights, with lambda * g * g standing in
          // for the Hessian.
          const float* r = read.data() + lc.local_offset + offset;
          for (uint64_t i = 0; i < n; ++i) {
            g[i] += lambda * g[i] * g[i] * (w[i] - r[i]);
          }
        });
  });
  ++version_;
  result->apply_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->applied = true;
}

float* Shard::MutableChunkLocked(size_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Chunk i's pointer is replaced under mu_ held exclusively, or by the
  // applier under mu_ shared with chunk i's sum mutex, while no other thread
  // touches chunk i.
  if (weights_[i]->readers.load(std::memory_order_acquire) != 0) {
    // A pull still reads this buffer: give the update a fresh copy.
    copied_on_write_.fetch_add(1, std::memory_order_relaxed);
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
  uint64_t min = UINT64_MAX;
  for (size_t r = 0; r < clocks_.size(); ++r) {
    if (!departed_[r]) min = std::min(min, clocks_[r]);
  }
  // Every rank departed (the job is failing): nobody to wait for.
  if (min == UINT64_MAX) {
    return *std::max_element(clocks_.begin(), clocks_.end());
  }
  return min;
}

void Shard::SetMembership(const std::vector<bool>& departed,
                          const std::vector<uint64_t>& start_steps) {
  absl::MutexLock lock(&mu_);
  if (departed.size() == departed_.size()) departed_ = departed;
  if (start_steps.size() == clocks_.size()) {
    for (size_t r = 0; r < clocks_.size(); ++r) {
      if (!departed_[r]) clocks_[r] = std::max(clocks_[r], start_steps[r]);
    }
  }
}

ShardProgress Shard::ProgressLocked() const {
  ShardProgress p;
  p.version = version_;
  p.min_clock = MinClockLocked();
  p.next_cut = NextCutLocked(p.min_clock);
  return p;
}

uint64_t Shard::NextCutLocked(uint64_t min_clock) const {
  if (!rule_->HoldsReadsAtCuts()) return 0;
  uint64_t next = 0;
  auto consider = [&](uint64_t cut) {
    // The final cut needs no hold: no push of clock training.steps exists.
    if (cut > min_clock && cut != standing_last_ && (next == 0 || cut < next)) {
      next = cut;
    }
  };
  if (standing_every_ > 0) {
    consider((min_clock / standing_every_ + 1) * standing_every_);
  }
  for (const PendingSnapshot* p : pending_snapshots_) {
    if (!p->done) consider(p->cut);
  }
  for (uint64_t cut : ordered_cuts_) consider(cut);
  return next;
}

bool Shard::ReadableLocked(uint64_t clock) const {
  if (closed_) return true;
  return rule_->Readable(clock, ProgressLocked());
}

std::string Shard::LaggardsLocked(uint64_t clock) const {
  const uint64_t need = rule_->RequiredClock(clock, ProgressLocked());
  std::vector<std::string> late;
  for (uint32_t r = 0; r < clocks_.size(); ++r) {
    if (clocks_[r] < need && !departed_[r]) {
      late.push_back(absl::StrCat(r, "@", clocks_[r]));
    }
  }
  return absl::StrJoin(late, ", ");
}

absl::StatusOr<PulledWeights> Shard::PullWeights(
    uint32_t worker, uint64_t clock, absl::Time deadline,
    const std::atomic<bool>* cancelled) {
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
  // Readable, and (sync) not in the middle of a step applied on arrival:
  // a re-read of a step already pushed then waits for the commit.
  auto pinnable = [this](uint64_t c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ReadableLocked(c) && (closed_ || WholeVersionLocked());
  };
  if (!pinnable(clock)) {
    const absl::Time start = absl::Now();
    struct Wait {
      const Shard* shard;
      uint64_t clock;
      const std::atomic<bool>* cancelled;
    } arg{this, clock, cancelled};
    const bool ready = mu_.AwaitWithDeadline(
        absl::Condition(
            +[](Wait* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              const Shard* s = a->shard;
              return (a->cancelled != nullptr && a->cancelled->load()) ||
                     (s->ReadableLocked(a->clock) &&
                      (s->closed_ || s->WholeVersionLocked()));
            },
            &arg),
        deadline);
    const absl::Duration waited = absl::Now() - start;
    barrier_wait_ += waited;
    result.wait_seconds = absl::ToDoubleSeconds(waited);
    if (cancelled != nullptr && cancelled->load() && !pinnable(clock)) {
      return absl::CancelledError(absl::StrCat(
          "worker ", worker, "'s pull of clock ", clock, " on shard ",
          shard_id(), " was cancelled while it waited"));
    }
    if (!ready) {
      if (ReadableLocked(clock)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "worker ", worker, " waited for clock ", clock, " on shard ",
            shard_id(), ": step ", version_,
            " is half applied and not committed; pushes committed: ",
            pending_count_, " of ", num_workers()));
      }
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
  pstrain::v1::ShardStats s = DenseStats();
  if (sparse_ != nullptr) {
    for (size_t t = 0; t < sparse_->num_tables(); ++t) {
      pstrain::v1::SparseTableStats* table = s.add_sparse_tables();
      table->set_tensor(sparse_->table_name(t));
      table->set_rows_stored(sparse_->stored_rows(t));
      table->set_rows_evicted(sparse_->evicted_rows(t));
    }
  }
  return s;
}

pstrain::v1::ShardStats Shard::DenseStats() const {
  absl::MutexLock lock(&mu_);
  pstrain::v1::ShardStats s;
  s.set_shard(shard_id());
  s.set_version(version_);
  s.set_max_clock(*std::max_element(clocks_.begin(), clocks_.end()));
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
  s.set_chunks_copied_on_write(
      copied_on_write_.load(std::memory_order_relaxed));
  return s;
}

uint64_t Shard::clipped_elements() const {
  absl::MutexLock lock(&mu_);
  return clipped_;
}

uint64_t Shard::MinClock() const {
  absl::ReaderMutexLock lock(&mu_);
  return MinClockLocked();
}

void Shard::WakePulls() {
  // Releasing the mutex re-evaluates the waiters' conditions.
  absl::MutexLock lock(&mu_);
}

void Shard::Close() {
  if (sparse_ != nullptr) sparse_->Close();
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

// ---- Checkpoints: state export and import ---------------------------------

CutProgress Shard::CutProgressLocked() const {
  CutProgress p;
  p.version = version_;
  p.step_open = pending_count_ > 0 || !WholeVersionLocked();
  p.min_clock = MinClockLocked();
  const auto [lowest, highest] =
      std::minmax_element(clocks_.begin(), clocks_.end());
  p.lowest_clock = *lowest;
  p.highest_clock = *highest;
  return p;
}

bool Shard::AtCutLocked(uint64_t cut) const {
  return rule_->AtCut(cut, CutProgressLocked());
}

bool Shard::PastCutLocked(uint64_t cut) const {
  return rule_->PastCut(cut, CutProgressLocked());
}

ShardState Shard::CaptureLocked(uint64_t cut) const {
  ShardState s;
  s.cut = cut;
  s.version = version_;
  s.clocks = clocks_;
  // Sync cuts are versions, async ones clocks: either way the schedule's
  // step (ConsistencyRule::OnPush) at the cut.
  s.schedule_step = cut;
  s.num_slots = optimizer_->num_slots();
  s.chunks.reserve(chunks_.size());
  for (size_t k = 0; k < chunks_.size(); ++k) {
    ChunkState c;
    c.tensor = chunks_[k].tensor;
    c.offset = chunks_[k].tensor_offset;
    c.length = chunks_[k].length;
    c.weights = weights_[k]->values;
    c.slots = slots_[k];
    if (sums_ != nullptr) {
      absl::MutexLock sum_lock(&sums_[k].mu);
      c.has_exponent = true;
      c.exponent = sums_[k].exponent;
    }
    s.chunks.push_back(std::move(c));
  }
  return s;
}

absl::StatusOr<ShardState> Shard::Snapshot() const {
  absl::MutexLock lock(&mu_);
  const CutProgress p = CutProgressLocked();
  const uint64_t cut = rule_->ReachedCut(p);
  if (!rule_->AtCut(cut, p)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard_id(), " is not at a checkpoint cut (a step boundary ",
        "or a clock cut): version ", version_, ", ", pending_count_,
        " push(es) of step ", version_, " recorded, ",
        chunks_applied_early_.load(std::memory_order_relaxed),
        " chunk(s) of it applied, worker clocks ",
        absl::StrJoin(clocks_, ",")));
  }
  return CaptureLocked(cut);
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
  if (rule_->HoldsReadsAtCuts() && standing_max_held_ > 0 &&
      !PastCutLocked(cut)) {
    ordered_cuts_.insert(cut);  // still held; captured when reached
  }
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
  if (sparse_ != nullptr) sparse_->SetStandingCuts(every, last, max_held);
  absl::MutexLock lock(&mu_);
  standing_every_ = every;
  standing_last_ = last;
  standing_max_held_ = max_held;
}

void Shard::ServeSnapshotsLocked() {
  // A standing cut is the cut the shard just reached: the version (sync) or
  // the clock every live worker reached (async; ConsistencyRule::ReachedCut).
  const uint64_t v = rule_->ReachedCut(CutProgressLocked());
  if (standing_max_held_ > 0 && v > 0 &&
      (v == standing_last_ || ordered_cuts_.count(v) > 0 ||
       (standing_every_ > 0 && v % standing_every_ == 0)) &&
      (standing_held_.empty() || standing_held_.back().cut < v) &&
      AtCutLocked(v)) {
    if (standing_held_.size() >= standing_max_held_) standing_held_.pop_front();
    standing_held_.push_back(CaptureLocked(v));
  }
  // Ordered cuts now captured, or passed without stopping there.
  for (auto it = ordered_cuts_.begin(); it != ordered_cuts_.end();) {
    it = *it <= v || PastCutLocked(*it) ? ordered_cuts_.erase(it) : ++it;
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
  for (LastPush& p : prev_push_) p = LastPush{};
  if (sums_ != nullptr) {
    // The open step's sum goes, uncommitted contributions included; pushes
    // still streaming into it add nothing more and cannot commit (epoch).
    ++sum_epoch_;
    for (size_t k = 0; k < chunks_.size(); ++k) {
      const ChunkState& c = state.chunks[k];
      ChunkSum& sum = sums_[k];
      absl::MutexLock sum_lock(&sum.mu);
      std::fill_n(accumulator_.begin() + chunks_[k].local_offset,
                  chunks_[k].length, 0);
      sum.acc = ChunkSum::Acc::kZero;
      sum.exponent = c.has_exponent ? std::clamp<int>(c.exponent, kMinExponent,
                                                      kMaxExponent)
                                    : kInitialExponent;
      sum.ResetLocked(sum_epoch_);
    }
    chunks_applied_early_.store(0, std::memory_order_relaxed);
  }
  pending_count_ = 0;
  pending_samples_ = 0;
  for (std::vector<float>& r : read_weights_) r.clear();
  ServeSnapshotsLocked();
  return absl::OkStatus();
}

}  // namespace pstrain
