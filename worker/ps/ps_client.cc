#include "worker/ps/ps_client.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/chunk_frames.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/sparse_rows.h"
#include "common/status_macros.h"
#include "common/sync_generic_call.h"
#include "common/tensor_codec.h"
#include "common/timeline.h"

namespace pstrain {

using google::protobuf::internal::WireFormatLite;
using pstrain::v1::ChunkInfo;

namespace {
constexpr char kPushMethod[] = "/pstrain.v1.ParameterServer/Push";
constexpr char kPullMethod[] = "/pstrain.v1.ParameterServer/Pull";
// Longest a push waits, after its call ended, for gRPC to drop its last
// reference to the caller's gradients (in practice: none is left).
constexpr absl::Duration kReleaseWait = absl::Seconds(10);

constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
  return static_cast<uint32_t>(field << 3) | type;
}
}  // namespace

PsOp::~PsOp() { Wait().IgnoreError(); }

absl::Status PsOp::Wait() {
  if (!waited_) {
    tasks_.Wait();
    waited_ = true;
    TimelineMark("op.waited");
  }
  for (size_t i = 0; i < statuses_.size(); ++i) {
    if (!statuses_[i].ok()) {
      return absl::Status(
          statuses_[i].code(),
          absl::StrCat("shard ", i, ": ", statuses_[i].message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const pstrain::v1::ShardMap& map,
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    PsClientOptions options,
    std::vector<std::vector<std::shared_ptr<grpc::Channel>>> push_channels) {
  if (channels.empty()) {
    return absl::InvalidArgumentError("no parameter-server shards");
  }
  if (options.push_streams < 1 || options.push_streams > kMaxPushStreams) {
    return absl::InvalidArgumentError(
        absl::StrCat("push_streams ", options.push_streams, " is outside [1, ",
                     kMaxPushStreams, "]"));
  }
  if (options.pull_streams < 1 || options.pull_streams > kMaxPushStreams) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull_streams ", options.pull_streams, " is outside [1, ",
                     kMaxPushStreams, "]"));
  }
  if (options.push_message_bytes < 1024 ||
      options.push_message_bytes > kMaxMessagePayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("push_message_bytes ", options.push_message_bytes,
                     " is outside [1024, ", kMaxMessagePayloadBytes, "]"));
  }
  if (!push_channels.empty()) {
    const int lanes_wanted =
        std::max(options.push_streams, options.pull_streams) - 1;
    bool sizes_ok = push_channels.size() == channels.size();
    for (const auto& lanes : push_channels) {
      sizes_ok = sizes_ok && static_cast<int>(lanes.size()) == lanes_wanted;
    }
    if (!sizes_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("part channels: want ", lanes_wanted,
                       " per shard (the larger of push_streams and "
                       "pull_streams, less one) for ",
                       channels.size(), " shards"));
    }
  }
  if (options.wire_dtype == pstrain::v1::DTYPE_UNSPECIFIED) {
    options.wire_dtype = pstrain::v1::DTYPE_F32;
  }
  if (!IsWireDtype(options.wire_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wire dtype ", DtypeName(options.wire_dtype),
                     " is not one of DTYPE_F32, DTYPE_BF16, DTYPE_F16"));
  }
  std::unique_ptr<PsClient> client(new PsClient(map, options));
  for (const auto& t : map.tensors()) {
    client->tensor_index_[t.name()] = client->tensor_sizes_.size();
    if (t.row_sparse()) {
      PS_ASSIGN_OR_RETURN(TableShape shape, RowSparseShape(t));
      client->row_dims_[t.name()] = shape.dim;
      client->tensor_sizes_.push_back(0);  // travels by row
      continue;
    }
    client->tensor_sizes_.push_back(NumElements(t));
  }
  client->shard_chunks_.resize(channels.size());
  for (int i = 0; i < map.chunks_size(); ++i) {
    const ChunkInfo& c = map.chunks(i);
    auto t = client->tensor_index_.find(c.tensor());
    if (t == client->tensor_index_.end() ||
        c.offset() + c.length() > client->tensor_sizes_[t->second]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard map chunk ", c.index(), " of '", c.tensor(), "' is invalid"));
    }
    if (c.shard() >= channels.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk on shard ", c.shard(), " but only ",
                       channels.size(), " shard channels"));
    }
    client->shard_chunks_[c.shard()].push_back(i);
    client->chunk_index_[{c.tensor(), c.index()}] = i;
  }
  client->tensor_chunks_.resize(client->tensor_sizes_.size());
  for (int i = 0; i < map.chunks_size(); ++i) {
    client->tensor_chunks_[client->tensor_index_.at(map.chunks(i).tensor())]
        .push_back(i);
  }
  for (std::vector<int>& chunks : client->tensor_chunks_) {
    std::stable_sort(chunks.begin(), chunks.end(), [&](int a, int b) {
      return map.chunks(a).offset() < map.chunks(b).offset();
    });
  }
  for (auto& ch : channels) {
    client->push_stubs_.push_back(std::make_unique<PushStub>(ch));
    client->pull_stubs_.push_back(std::make_unique<PullStub>(ch));
  }
  for (auto& ch : channels) {
    client->row_stubs_.push_back(pstrain::v1::ParameterServer::NewStub(ch));
  }
  client->channels_ = std::move(channels);
  for (auto& lanes : push_channels) {
    client->part_stubs_.emplace_back();
    client->part_pull_stubs_.emplace_back();
    for (auto& ch : lanes) {
      client->part_stubs_.back().push_back(std::make_unique<PushStub>(ch));
      client->part_pull_stubs_.back().push_back(std::make_unique<PullStub>(ch));
    }
  }
  client->part_channels_ = std::move(push_channels);
  return client;
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(
    const pstrain::v1::ShardMap& map, const ChannelFactory& make_channel,
    PsClientOptions options) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::vector<std::shared_ptr<grpc::Channel>>> push_channels;
  for (const std::string& address : map.server_addresses()) {
    channels.push_back(make_channel(address, 0));
    push_channels.emplace_back();
    for (int c = 1; c < std::max(options.push_streams, options.pull_streams);
         ++c) {
      push_channels.back().push_back(make_channel(address, c));
    }
  }
  return Create(map, std::move(channels), options, std::move(push_channels));
}

std::unique_ptr<PsOp> PsClient::StartPull(uint32_t worker, uint64_t clock,
                                          TensorList* params) {
  params->resize(tensor_sizes_.size());
  for (size_t i = 0; i < tensor_sizes_.size(); ++i) {
    (*params)[i].resize(tensor_sizes_[i]);
  }
  return StartPull(worker, clock,
                   MutableTensorViews(params->begin(), params->end()));
}

std::unique_ptr<PsOp> PsClient::StartPull(uint32_t worker, uint64_t clock,
                                          MutableTensorViews views) {
  return StartPull(worker, clock, std::move(views), nullptr);
}

std::unique_ptr<PsOp> PsClient::StartPull(uint32_t worker, uint64_t clock,
                                          MutableTensorViews views,
                                          TensorGate* arrived) {
  TimelineMark("pull.start", static_cast<int64_t>(clock));
  std::unique_ptr<PsOp> op(new PsOp(OpPool()));
  op->pulled_ = std::move(views);
  MutableTensorViews* params = &op->pulled_;
  const int n = num_shards();
  op->statuses_.resize(n);
  op->reads_.resize(n);
  bool shapes_ok = params->size() == tensor_sizes_.size();
  for (size_t i = 0; shapes_ok && i < params->size(); ++i) {
    shapes_ok = (*params)[i].size() == tensor_sizes_[i];
  }
  if (!shapes_ok) {
    op->statuses_.assign(n, absl::InvalidArgumentError(
                                "pull destination does not match the model"));
    return op;
  }
  if (arrived != nullptr && arrived->size() != map_.chunks_size()) {
    op->statuses_.assign(n, absl::InvalidArgumentError(
                                "pull gate does not match the shard map"));
    return op;
  }
  for (int s = 0; s < n; ++s) {
    op->tasks_.Run([this, s, worker, clock, params, arrived, op = op.get()] {
      op->statuses_[s] =
          PullShard(s, worker, clock, params, &op->reads_[s], op, arrived);
      // Whoever waits for a tensor of this shard learns it never comes.
      if (arrived != nullptr && !op->statuses_[s].ok()) {
        arrived->Abort(op->statuses_[s]);
      }
    });
  }
  return op;
}

std::unique_ptr<PsOp> PsClient::StartPush(uint32_t worker, uint64_t clock,
                                          uint64_t num_samples,
                                          const TensorList& grads,
                                          const std::vector<ShardRead>& reads) {
  return StartPush(worker, clock, num_samples,
                   TensorViews(grads.begin(), grads.end()), reads);
}

std::unique_ptr<PsOp> PsClient::StartPush(uint32_t worker, uint64_t clock,
                                          uint64_t num_samples,
                                          TensorViews views,
                                          const std::vector<ShardRead>& reads) {
  return StartPush(worker, clock, num_samples, std::move(views), reads,
                   nullptr);
}

std::unique_ptr<PsOp> PsClient::StartPush(uint32_t worker, uint64_t clock,
                                          uint64_t num_samples,
                                          TensorViews views,
                                          const std::vector<ShardRead>& reads,
                                          TensorGate* ready) {
  TimelineMark("push.start", static_cast<int64_t>(clock));
  std::unique_ptr<PsOp> op(new PsOp(OpPool()));
  op->views_ = std::move(views);
  const TensorViews& grads = op->views_;
  const int n = num_shards();
  op->statuses_.resize(n);
  bool shapes_ok = grads.size() == tensor_sizes_.size();
  for (size_t i = 0; shapes_ok && i < grads.size(); ++i) {
    shapes_ok = grads[i].size() == tensor_sizes_[i];
  }
  if (ready != nullptr && ready->size() != map_.chunks_size()) {
    shapes_ok = false;
  }
  if (!shapes_ok || reads.size() != static_cast<size_t>(n)) {
    op->statuses_.assign(n, absl::InvalidArgumentError(
                                "gradients or reads do not match the model"));
    return op;
  }
  op->reads_.resize(n);
  for (int s = 0; s < n; ++s) {
    op->tasks_.Run([this, s, worker, clock, num_samples, &grads,
                    read = reads[s], ready, op = op.get()] {
      op->statuses_[s] = PushShard(s, worker, clock, num_samples, grads, read,
                                   ready, &op->reads_[s].version);
    });
  }
  return op;
}

class PsClient::ActiveCall {
 public:
  ActiveCall(PsClient* client, grpc::ClientContext* context)
      : client_(client), context_(context) {
    absl::MutexLock lock(&client_->cancel_mu_);
    if (client_->cancelled_) context_->TryCancel();
    client_->active_.insert(context_);
  }
  ~ActiveCall() {
    absl::MutexLock lock(&client_->cancel_mu_);
    client_->active_.erase(context_);
  }

 private:
  PsClient* const client_;
  grpc::ClientContext* const context_;
};

void PsClient::Cancel() {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_ = true;
  for (grpc::ClientContext* c : active_) c->TryCancel();
}

void PsClient::AwaitChannel(int shard, absl::Duration bound) const {
  grpc::Channel* channel = channels_[shard].get();
  const absl::Time end = absl::Now() + bound;
  for (;;) {
    const grpc_connectivity_state state =
        channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return;
    {
      absl::MutexLock lock(&cancel_mu_);
      if (cancelled_) return;
    }
    const absl::Time now = absl::Now();
    if (now >= end) return;
    channel->WaitForStateChange(
        state,
        absl::ToChronoTime(std::min(end, now + absl::Milliseconds(100))));
  }
}

absl::Status PsClient::WithRetries(
    int shard, bool push, const std::function<absl::Status()>& attempt) const {
  absl::Status status;
  absl::Duration backoff = absl::Milliseconds(50);
  for (int i = 0; i < std::max(options_.max_attempts, 1); ++i) {
    if (i > 0) {
      absl::SleepFor(backoff);
      backoff *= 2;
      // A refused or cut connect leaves the channel backing off (calls fail
      // at once): give it a bounded chance to connect first.
      if (absl::IsUnavailable(status)) AwaitChannel(shard, absl::Seconds(2));
    }
    status = attempt();
    {
      absl::MutexLock lock(&cancel_mu_);
      if (cancelled_) return absl::CancelledError("the worker is stopping");
    }
    const bool retryable = absl::IsUnavailable(status) ||
                           (push && (absl::IsDeadlineExceeded(status) ||
                                     absl::IsCancelled(status)));
    if (status.ok() || !retryable) {
      return status;
    }
  }
  return status;
}

absl::Duration PsClient::BarrierTimeout() const {
  if (started_.load(std::memory_order_relaxed)) return options_.barrier_timeout;
  return options_.barrier_timeout + options_.startup_timeout;
}

void PsClient::NoteMinClock(uint64_t min_clock) {
  if (started_.load(std::memory_order_relaxed)) return;
  uint64_t start = UINT64_MAX;
  if (start_min_clock_.compare_exchange_strong(start, min_clock)) return;
  if (min_clock > start) started_.store(true, std::memory_order_relaxed);
}

int PsClient::StreamParts(int shard, int streams, uint64_t min_bytes) const {
  int parts = std::max(
      1, std::min(streams, static_cast<int>(shard_chunks_[shard].size())));
  if (parts > 1 && min_bytes > 0) {
    uint64_t bytes = 0;
    for (int idx : shard_chunks_[shard]) bytes += map_.chunks(idx).length();
    bytes *= WireElementBytes(options_.wire_dtype);
    if (bytes < min_bytes) parts = 1;
  }
  return parts;
}

absl::Status PsClient::PullShard(int shard, uint32_t worker, uint64_t clock,
                                 MutableTensorViews* params, ShardRead* read,
                                 PsOp* op, TensorGate* gate) {
  const int parts = StreamParts(shard, options_.pull_streams, /*min_bytes=*/0);
  std::vector<absl::Status> statuses(parts);
  std::vector<ShardRead> reads(parts);
  auto run_part = [&](int p) {
    statuses[p] = WithRetries(shard, /*push=*/false, [&] {
      return PullShardOnce(shard, p, parts, worker, clock, params, &reads[p],
                           op, gate);
    });
  };
  {
    // As PushShard's parts: the others on threads started for them.
    TaskGroup others(/*pool=*/nullptr);
    for (int p = 1; p < parts; ++p) others.Run([&run_part, p] { run_part(p); });
    run_part(0);
  }  // waits for the other parts
  absl::Status st;
  for (int p = 0; p < parts && st.ok(); ++p) {
    if (!statuses[p].ok() && parts > 1) {
      st = absl::Status(
          statuses[p].code(),
          absl::StrCat("part ", p, " of ", parts, ": ", statuses[p].message()));
    } else {
      st = statuses[p];
    }
  }
  if (!st.ok()) return st;
  *read = reads[0];
  bool torn = false;
  for (int p = 1; p < parts; ++p) {
    torn = torn || reads[p].version != read->version ||
           reads[p].min_clock != read->min_clock;
  }
  if (torn) {
    // The weights changed between the parts' reads (a restore; in plain
    // sync no step can commit before this worker's push): the whole shard
    // again, as one stream, which reads one version.
    st = WithRetries(shard, /*push=*/false, [&] {
      return PullShardOnce(shard, 0, 1, worker, clock, params, read, op, gate);
    });
    if (!st.ok()) return st;
  }
  NoteMinClock(read->min_clock);
  return absl::OkStatus();
}

absl::Status PsClient::PushShard(int shard, uint32_t worker, uint64_t clock,
                                 uint64_t num_samples, const TensorViews& grads,
                                 const ShardRead& read, TensorGate* gate,
                                 uint64_t* version) {
  const int parts =
      StreamParts(shard, options_.push_streams, options_.split_min_bytes);
  std::vector<absl::Status> statuses(parts);
  std::vector<pstrain::v1::PushResponse> responses(parts);
  auto run_part = [&](int p) {
    statuses[p] = WithRetries(shard, /*push=*/true, [&] {
      return PushShardOnce(shard, p, parts, worker, clock, num_samples, grads,
                           read, gate, &responses[p]);
    });
  };
  {
    // The other parts on threads started for them, not op_threads_: the
    // parts run at once on two cores, and a started thread is placed on
    // the idler core where a woken pool thread tended to share the waker's
    // (real 16 MB jobs, one worker and one server, split over 2 streams:
    // pull + push 0.94 against pooled parts, faster in 8 of 8 rounds).
    TaskGroup others(/*pool=*/nullptr);
    for (int p = 1; p < parts; ++p) others.Run([&run_part, p] { run_part(p); });
    run_part(0);
  }  // waits for the other parts
  uint64_t missing = 0;
  for (int p = 0; p < parts; ++p) {
    if (!statuses[p].ok()) {
      if (parts == 1) return statuses[p];
      return absl::Status(
          statuses[p].code(),
          absl::StrCat("part ", p, " of ", parts, ": ", statuses[p].message()));
    }
    if (!responses[p].pending()) {
      *version = responses[p].version();
      return absl::OkStatus();
    }
    missing = std::max(missing, responses[p].missing_chunks());
  }
  // Every part was summed and none saw the push complete: the shard lost
  // the step's sums meanwhile (a restore), so nothing was applied.
  return absl::UnavailableError(absl::StrFormat(
      "every one of the push's %d parts was summed but none committed it (%u "
      "chunks missing; the shard restored meanwhile?); nothing applied",
      parts, missing));
}

absl::Status PsClient::AnnounceSession(uint32_t worker) {
  const int n = num_shards();
  std::vector<absl::Status> statuses(n);
  auto announce = [&](int shard) {
    statuses[shard] = WithRetries(shard, /*push=*/false, [&] {
      grpc::ClientContext context;
      SetTimeout(&context, options_.rpc_timeout);
      ActiveCall active(this, &context);
      pstrain::v1::PullRequest request;
      request.set_worker(worker);
      request.set_session_id(options_.session_id);
      request.set_generation(options_.generation);
      request.set_session_only(true);
      SyncGenericCall<pstrain::v1::PullRequest, grpc::ByteBuffer> call(
          pull_stubs_[shard].get(), &context, kPullMethod,
          SyncGenericCall<pstrain::v1::PullRequest,
                          grpc::ByteBuffer>::Open::kWithFirstMessage);
      grpc::ByteBuffer msg;
      int messages = 0;
      if (call.WriteLast(request)) {
        while (call.Read(&msg)) ++messages;
      }
      PS_RETURN_IF_ERROR(FromGrpcStatus(call.Finish()));
      if (messages != 0) {
        return absl::InternalError(
            absl::StrCat("a session-only pull was answered with ", messages,
                         " messages (a server without session_only?)"));
      }
      return absl::OkStatus();
    });
  };
  std::vector<std::thread> threads;
  for (int shard = 1; shard < n; ++shard) threads.emplace_back(announce, shard);
  announce(0);
  for (std::thread& t : threads) t.join();
  for (int shard = 0; shard < n; ++shard) {
    if (!statuses[shard].ok()) {
      return absl::Status(
          statuses[shard].code(),
          absl::StrCat("shard ", shard, ": ", statuses[shard].message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::PullShardOnce(int shard, int part, int parts,
                                     uint32_t worker, uint64_t clock,
                                     MutableTensorViews* params,
                                     ShardRead* read, PsOp* op,
                                     TensorGate* gate) {
  TimelineMark("pull.shard", shard);
  grpc::ClientContext context;
  SetTimeout(&context, BarrierTimeout());
  ActiveCall active(this, &context);
  pstrain::v1::PullRequest request;
  request.set_worker(worker);
  request.set_clock(clock);
  request.set_session_id(options_.session_id);
  request.set_generation(options_.generation);
  if (parts > 1) {
    request.set_part(part);
    request.set_parts(parts);
  }
  const bool own_channel =
      part > 0 && static_cast<size_t>(shard) < part_pull_stubs_.size() &&
      static_cast<size_t>(part - 1) < part_pull_stubs_[shard].size();
  PullStub* stub = own_channel ? part_pull_stubs_[shard][part - 1].get()
                               : pull_stubs_[shard].get();
  // Raw messages: each one is decoded straight from gRPC's receive buffers
  // into the destination (DecodePullMessage), with no protobuf copy.
  SyncGenericCall<pstrain::v1::PullRequest, grpc::ByteBuffer> call(
      stub, &context, kPullMethod,
      SyncGenericCall<pstrain::v1::PullRequest,
                      grpc::ByteBuffer>::Open::kWithFirstMessage);
  const bool sent = call.WriteLast(request);
  TimelineMark("pull.sent");
  grpc::ByteBuffer msg;
  bool head = true;
  size_t received = 0;
  uint64_t bytes = 0;
  std::string scratch;
  absl::Status status;
  while (sent && call.Read(&msg)) {
    TimelineMark("pull.read", msg.Length());
    bytes += msg.Length();
    if (status.ok()) {
      status = DecodePullMessage(shard, &msg, head, read, params, &received,
                                 &scratch, op, gate);
    }
    TimelineMark("pull.decoded");
    head = false;
    msg.Clear();
  }
  bytes_pulled_ += bytes;
  const grpc::Status finished = call.Finish();
  TimelineMark("pull.finished");
  PS_RETURN_IF_ERROR(FromGrpcStatus(finished));
  PS_RETURN_IF_ERROR(status);
  // This part's chunks: those at positions part, part + parts, ...
  const size_t expected =
      (shard_chunks_[shard].size() + parts - 1 - part) / parts;
  if (received != expected) {
    return absl::InternalError(
        absl::StrCat("pull returned ", received, " of ", expected, " chunks"));
  }
  return absl::OkStatus();
}

absl::Status PsClient::DecodePullMessage(int shard, grpc::ByteBuffer* buffer,
                                         bool head, ShardRead* read,
                                         MutableTensorViews* params,
                                         size_t* received, std::string* scratch,
                                         PsOp* op, TensorGate* gate) {
  grpc::ProtoBufferReader stream(buffer);
  google::protobuf::io::CodedInputStream in(&stream);
  const auto malformed = [] {
    return absl::InternalError("malformed PullResponse from the server");
  };
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    uint64_t v = 0;
    switch (tag) {
      case Tag(1, WireFormatLite::WIRETYPE_VARINT):
        if (!in.ReadVarint64(&v)) return malformed();
        if (head) read->version = v;
        break;
      case Tag(2, WireFormatLite::WIRETYPE_VARINT):
        if (!in.ReadVarint64(&v)) return malformed();
        if (head) read->min_clock = v;
        break;
      case Tag(3, WireFormatLite::WIRETYPE_LENGTH_DELIMITED): {
        uint32_t length = 0;
        if (!in.ReadVarint32(&length)) return malformed();
        const auto limit = in.PushLimit(static_cast<int>(length));
        int chunk = -1;
        PS_RETURN_IF_ERROR(
            DecodePulledChunk(shard, &in, params, scratch, &chunk));
        if (!in.ConsumedEntireMessage()) return malformed();
        in.PopLimit(limit);
        ++*received;
        // A retry decodes the same weights again; opening twice is harmless.
        if (gate != nullptr && chunk >= 0) gate->Open(chunk);
        break;
      }
      default:
        if (!WireFormatLite::SkipField(&in, tag)) return malformed();
    }
  }
  if (!in.ConsumedEntireMessage()) return malformed();
  return absl::OkStatus();
}

absl::Status PsClient::DecodePulledChunk(
    int shard, google::protobuf::io::CodedInputStream* in,
    MutableTensorViews* params, std::string* scratch, int* chunk) {
  // Fields arrive in field-number order (as protobuf and ChunkFrame write
  // them), so the payload comes after the chunk's name, dtype and shape and
  // can be read straight into its destination.
  std::string tensor;
  uint32_t index = 0, dtype = 0;
  std::vector<int64_t> shape;
  bool have_data = false;
  const ChunkInfo* info = nullptr;
  const auto where = [&] {
    return absl::StrCat("chunk ", index, " of '", tensor, "'");
  };
  const auto malformed = [&] {
    return absl::InternalError(absl::StrCat("malformed ", where()));
  };
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) break;
    if (have_data && tag != 0) {
      return absl::InternalError(
          absl::StrCat(where(), ": fields after the payload"));
    }
    uint32_t n = 0;
    uint64_t d = 0;
    switch (tag) {
      case Tag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        if (!in->ReadVarint32(&n) || !in->ReadString(&tensor, n)) {
          return malformed();
        }
        break;
      case Tag(2, WireFormatLite::WIRETYPE_VARINT):
        if (!in->ReadVarint32(&index)) return malformed();
        break;
      case Tag(3, WireFormatLite::WIRETYPE_VARINT):
        if (!in->ReadVarint32(&dtype)) return malformed();
        break;
      case Tag(4, WireFormatLite::WIRETYPE_LENGTH_DELIMITED): {
        if (!in->ReadVarint32(&n)) return malformed();
        const auto limit = in->PushLimit(static_cast<int>(n));
        while (in->BytesUntilLimit() > 0) {
          if (!in->ReadVarint64(&d)) return malformed();
          shape.push_back(static_cast<int64_t>(d));
        }
        in->PopLimit(limit);
        break;
      }
      case Tag(4, WireFormatLite::WIRETYPE_VARINT):
        if (!in->ReadVarint64(&d)) return malformed();
        shape.push_back(static_cast<int64_t>(d));
        break;
      case Tag(5, WireFormatLite::WIRETYPE_LENGTH_DELIMITED): {
        if (!in->ReadVarint32(&n)) return malformed();
        auto it = chunk_index_.find({tensor, index});
        if (it == chunk_index_.end() ||
            map_.chunks(it->second).shard() != shard) {
          return absl::InternalError(absl::StrCat("unexpected ", where()));
        }
        info = &map_.chunks(it->second);
        *chunk = it->second;
        if (dtype != static_cast<uint32_t>(options_.wire_dtype)) {
          return absl::InternalError(absl::StrCat(
              where(), ": dtype ",
              DtypeName(static_cast<pstrain::v1::DType>(dtype)),
              " is not the job's wire dtype ", DtypeName(options_.wire_dtype)));
        }
        const uint64_t element_bytes = WireElementBytes(options_.wire_dtype);
        if (shape.size() != 1 ||
            static_cast<uint64_t>(shape[0]) != info->length()) {
          return absl::InternalError(absl::StrCat(
              where(), ": shape does not match [", info->length(), "]"));
        }
        if (n != info->length() * element_bytes) {
          return absl::InternalError(absl::StrCat(
              where(), ": ", n, " bytes for ", info->length(), " elements"));
        }
        float* dst =
            (*params)[tensor_index_[info->tensor()]].data() + info->offset();
        if (options_.wire_dtype == pstrain::v1::DTYPE_F32) {
          // Little-endian fp32 on the wire and in memory.
          if (!in->ReadRaw(dst, static_cast<int>(n))) return malformed();
        } else {
          scratch->resize(n);
          if (!in->ReadRaw(scratch->data(), static_cast<int>(n))) {
            return malformed();
          }
          DecodeElements(options_.wire_dtype, scratch->data(), info->length(),
                         dst);
        }
        have_data = true;
        break;
      }
      default:
        if (!WireFormatLite::SkipField(in, tag)) return malformed();
    }
  }
  if (!have_data) {
    // An empty payload is not written at all; only an empty chunk may
    // have one.
    auto it = chunk_index_.find({tensor, index});
    if (it == chunk_index_.end() || map_.chunks(it->second).shard() != shard ||
        map_.chunks(it->second).length() != 0) {
      return absl::InternalError(absl::StrCat(where(), " without a payload"));
    }
    *chunk = it->second;
  }
  return absl::OkStatus();
}

absl::Status PsClient::PushShardOnce(int shard, int part, int parts,
                                     uint32_t worker, uint64_t clock,
                                     uint64_t num_samples,
                                     const TensorViews& grads,
                                     const ShardRead& read, TensorGate* gate,
                                     pstrain::v1::PushResponse* response) {
  TimelineMark("push.shard", shard);
  // fp32 payloads are sent from the gradients in place (ChunkFrame): gRPC
  // references them until `keepalive` says it is done, before we return.
  Keepalive keepalive;
  absl::Status status;
  {
    grpc::ClientContext context;
    SetTimeout(&context, options_.rpc_timeout);
    AddPushSession(&context, worker, options_.session_id, options_.generation);
    const absl::Time deadline = absl::Now() + options_.rpc_timeout;
    // With a gate, the last layer's chunks go first (each tensor's in
    // offset order): backward produces them in that order. The shard
    // accepts chunks in any order.
    std::vector<int> order = shard_chunks_[shard];
    if (gate != nullptr) {
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const int ta = tensor_index_.at(map_.chunks(a).tensor());
        const int tb = tensor_index_.at(map_.chunks(b).tensor());
        return ta != tb ? ta > tb
                        : map_.chunks(a).offset() < map_.chunks(b).offset();
      });
    }
    if (parts > 1) {  // this part's share, in the same order
      std::vector<int> mine;
      for (size_t i = part; i < order.size(); i += parts) {
        mine.push_back(order[i]);
      }
      order = std::move(mine);
    }
    const bool own_channel = part > 0 && !part_channels_.empty();
    PushStub* stub = own_channel ? part_stubs_[shard][part - 1].get()
                                 : push_stubs_[shard].get();
    ActiveCall active(this, &context);
    response->Clear();
    SyncGenericCall<grpc::ByteBuffer, pstrain::v1::PushResponse> call(
        stub, &context, kPushMethod,
        SyncGenericCall<grpc::ByteBuffer,
                        pstrain::v1::PushResponse>::Open::kNow);
    TimelineMark("push.opened");
    pstrain::v1::PushRequest fields;
    auto* h = fields.mutable_header();
    h->set_worker(worker);
    h->set_session_id(options_.session_id);
    h->set_generation(options_.generation);
    h->set_clock(clock);
    h->set_read_version(read.version);
    h->set_read_min_clock(read.min_clock);
    h->set_num_samples(num_samples);
    if (parts > 1) h->set_parts(parts);
    ChunkFrame frame(/*chunk_field=*/2);
    frame.AddFields(fields);
    uint64_t bytes = 0;
    bool stream_ok = true;
    absl::Status gate_status;
    const uint64_t element_bytes = WireElementBytes(options_.wire_dtype);
    auto write = [&] {
      grpc::ByteBuffer buffer = frame.Release();
      bytes += buffer.Length();
      const bool written = call.Write(buffer);
      TimelineMark("push.written", buffer.Length());
      return written;
    };
    bool header_sent = false;
    for (int idx : order) {
      const ChunkInfo& c = map_.chunks(idx);
      const bool wait = gate != nullptr && !gate->IsOpen(idx);
      if ((frame.payload_bytes() > 0 || (wait && !header_sent)) &&
          (wait || frame.payload_bytes() + c.length() * element_bytes >
                       options_.push_message_bytes)) {
        if (!(stream_ok = write())) break;
        header_sent = true;
      }
      if (wait) {
        gate_status = gate->Wait(idx, deadline);
        if (!gate_status.ok()) {
          gate_status = absl::Status(
              gate_status.code(),
              absl::StrCat("tensor '", c.tensor(), "' chunk ", c.index(), ": ",
                           gate_status.message()));
          context.TryCancel();  // nothing is applied without a clean half-close
          break;
        }
      }
      const float* src = grads[tensor_index_[c.tensor()]].data() + c.offset();
      frame.AddChunk(c.tensor(), c.index(), src, c.length(),
                     options_.wire_dtype, &keepalive);
    }
    if (gate_status.ok() && stream_ok && !frame.empty()) stream_ok = write();
    frame.Release();  // drops what a broken stream left unsent
    if (gate_status.ok() && stream_ok) call.WritesDone();
    TimelineMark("push.half_closed");
    bytes_pushed_ += bytes;
    status = FromGrpcStatus(call.FinishWithResponse(response));
    TimelineMark("push.answered");
    if (!gate_status.ok()) {
      // Not retried: the gradient will not become ready by trying again.
      status = absl::AbortedError(absl::StrCat(
          "push stopped waiting for the gradient: ", gate_status.ToString()));
    }
  }
  if (!keepalive.WaitUnused(absl::Now() + kReleaseWait)) {
    // Never seen; returning now would let the caller reuse memory gRPC
    // may still read, so say so loudly.
    return absl::InternalError(
        "gRPC still references the pushed gradients after the call ended");
  }
  return status;
}

// ---- Row-sparse tensors ----------------------------------------------------

absl::StatusOr<int64_t> PsClient::RowDim(const std::string& tensor) const {
  auto it = row_dims_.find(tensor);
  if (it == row_dims_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "' is not a row-sparse tensor of the job"));
  }
  return it->second;
}

std::unique_ptr<PsOp> PsClient::StartPullRows(
    uint32_t worker, uint64_t clock, const std::vector<RowSet>& requests,
    std::vector<RowSet>* out) {
  std::unique_ptr<PsOp> op(new PsOp(OpPool()));
  const int n = num_shards();
  op->statuses_.resize(n);
  op->reads_.resize(n);
  out->assign(requests.size(), RowSet{});
  auto shares = std::make_shared<std::vector<std::vector<RowShare>>>(n);
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<int64_t> dim = RowDim(requests[i].tensor);
    if (!dim.ok()) {
      op->statuses_.assign(n, dim.status());
      return op;
    }
    RowSet& o = (*out)[i];
    o.tensor = requests[i].tensor;
    absl::flat_hash_set<int64_t> seen;
    for (int64_t id : requests[i].ids) {
      if (seen.insert(id).second) o.ids.push_back(id);
    }
    o.values.assign(o.ids.size() * *dim, 0.0f);
    for (int s = 0; s < n; ++s) (*shares)[s].push_back(RowShare{i, {}});
    for (size_t r = 0; r < o.ids.size(); ++r) {
      // An id outside the table still goes to some shard, which names it.
      (*shares)[RowShard(o.ids[r], n)][i].rows.push_back(r);
    }
  }
  for (int s = 0; s < n; ++s) {
    op->tasks_.Run([this, s, worker, clock, shares, out, op = op.get()] {
      op->statuses_[s] =
          PullRowsShard(s, worker, clock, (*shares)[s], out, &op->reads_[s]);
    });
  }
  return op;
}

absl::Status PsClient::PullRowsShard(int shard, uint32_t worker, uint64_t clock,
                                     const std::vector<RowShare>& share,
                                     std::vector<RowSet>* out,
                                     ShardRead* read) {
  const pstrain::v1::DType dtype = options_.wire_dtype;
  const uint64_t element_bytes = WireElementBytes(dtype);
  // Calls of at most one message's worth of ids each (usually one call).
  const uint64_t max_ids = kMaxMessagePayloadBytes / sizeof(int64_t);
  struct CallSpan {
    size_t share;  // index into `share`
    size_t begin, end;
  };
  std::vector<std::vector<CallSpan>> calls(1);
  uint64_t in_call = 0;
  for (size_t k = 0; k < share.size(); ++k) {
    const size_t rows = share[k].rows.size();
    for (size_t b = 0; b < rows;) {
      if (in_call == max_ids) {
        calls.emplace_back();
        in_call = 0;
      }
      const size_t e = std::min<size_t>(rows, b + (max_ids - in_call));
      calls.back().push_back(CallSpan{k, b, e});
      in_call += e - b;
      b = e;
    }
  }
  bool first_call = true;
  for (const std::vector<CallSpan>& call : calls) {
    PS_RETURN_IF_ERROR(
        WithRetries(shard, /*push=*/false, [&]() -> absl::Status {
          grpc::ClientContext context;
          SetTimeout(&context, BarrierTimeout());
          ActiveCall active(this, &context);
          pstrain::v1::PullRowsRequest request;
          request.set_worker(worker);
          request.set_clock(clock);
          request.set_session_id(options_.session_id);
          request.set_generation(options_.generation);
          for (const CallSpan& sp : call) {
            const RowSet& o = (*out)[share[sp.share].set];
            pstrain::v1::SparseRows* piece = request.add_rows();
            piece->set_tensor(o.tensor);
            piece->set_dim(static_cast<uint32_t>(row_dims_.at(o.tensor)));
            std::vector<int64_t> ids;
            for (size_t r = sp.begin; r < sp.end; ++r) {
              ids.push_back(o.ids[share[sp.share].rows[r]]);
            }
            AppendRowIds(ids, piece->mutable_ids());
          }
          std::unique_ptr<grpc::ClientReader<pstrain::v1::PullRowsResponse>>
              reader(row_stubs_[shard]->PullRows(&context, request));
          pstrain::v1::PullRowsResponse msg;
          bool head = true;
          size_t at = 0;      // span in `call`
          size_t offset = 0;  // rows of that span received
          absl::Status bad;
          uint64_t bytes = 0;
          while (bad.ok() && reader->Read(&msg)) {
            bytes += msg.ByteSizeLong();
            if (head) {
              if (first_call) {
                read->version = msg.version();
                read->min_clock = msg.min_clock();
                NoteMinClock(msg.min_clock());
              }
              head = false;
            }
            for (const pstrain::v1::SparseRows& piece : msg.rows()) {
              if (at >= call.size()) {
                bad = absl::InternalError(
                    "row pull answered more rows than asked");
                break;
              }
              const CallSpan& sp = call[at];
              RowSet& o = (*out)[share[sp.share].set];
              const int64_t dim = row_dims_.at(o.tensor);
              absl::StatusOr<std::vector<int64_t>> ids =
                  DecodeRowIds(piece.ids(), piece.tensor());
              if (!ids.ok()) {
                bad = ids.status();
                break;
              }
              if (piece.tensor() != o.tensor || piece.dtype() != dtype ||
                  piece.dim() != static_cast<uint64_t>(dim) ||
                  offset + ids->size() > sp.end - sp.begin ||
                  piece.values().size() != ids->size() * dim * element_bytes) {
                bad = absl::InternalError(absl::StrCat(
                    "row pull of tensor '", o.tensor,
                    "' answered rows that do not match the request"));
                break;
              }
              for (size_t r = 0; r < ids->size(); ++r) {
                const size_t pos = share[sp.share].rows[sp.begin + offset + r];
                if ((*ids)[r] != o.ids[pos]) {
                  bad = absl::InternalError(absl::StrCat(
                      "row pull of tensor '", o.tensor, "' answered row ",
                      (*ids)[r], " for row ", o.ids[pos]));
                  break;
                }
                DecodeElements(dtype,
                               piece.values().data() + r * dim * element_bytes,
                               dim, &o.values[pos * dim]);
              }
              offset += ids->size();
              if (offset == sp.end - sp.begin) {
                ++at;
                offset = 0;
              }
            }
          }
          if (!bad.ok()) {
            context.TryCancel();
            reader->Finish().ok();
            return bad;
          }
          PS_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
          bytes_pulled_ += bytes;
          if (head || at != call.size()) {
            return absl::InternalError(
                "row pull ended before every row arrived");
          }
          return absl::OkStatus();
        }));
    first_call = false;
  }
  return absl::OkStatus();
}

std::unique_ptr<PsOp> PsClient::StartPushRows(
    uint32_t worker, uint64_t clock, uint64_t num_samples,
    const std::vector<RowSet>& grads, const std::vector<ShardRead>& reads) {
  std::unique_ptr<PsOp> op(new PsOp(OpPool()));
  const int n = num_shards();
  op->statuses_.resize(n);
  if (reads.size() != static_cast<size_t>(n)) {
    op->statuses_.assign(n, absl::InvalidArgumentError(
                                "row push reads do not match the shards"));
    return op;
  }
  auto copy = std::make_shared<std::vector<RowSet>>(grads);
  auto shares = std::make_shared<std::vector<std::vector<RowShare>>>(n);
  for (size_t i = 0; i < grads.size(); ++i) {
    absl::StatusOr<int64_t> dim = RowDim(grads[i].tensor);
    absl::Status st = dim.status();
    if (st.ok() && grads[i].values.size() != grads[i].ids.size() * *dim) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "tensor '", grads[i].tensor, "': ", grads[i].values.size(),
          " values for ", grads[i].ids.size(), " rows of width ", *dim));
    }
    if (!st.ok()) {
      op->statuses_.assign(n, st);
      return op;
    }
    for (int s = 0; s < n; ++s) (*shares)[s].push_back(RowShare{i, {}});
    for (size_t r = 0; r < grads[i].ids.size(); ++r) {
      (*shares)[RowShard(grads[i].ids[r], n)][i].rows.push_back(r);
    }
  }
  for (int s = 0; s < n; ++s) {
    op->tasks_.Run([this, s, worker, clock, num_samples, copy, shares,
                    read = reads[s], op = op.get()] {
      op->statuses_[s] = PushRowsShard(s, worker, clock, num_samples, *copy,
                                       (*shares)[s], read);
    });
  }
  return op;
}

absl::Status PsClient::PushRowsShard(int shard, uint32_t worker, uint64_t clock,
                                     uint64_t num_samples,
                                     const std::vector<RowSet>& grads,
                                     const std::vector<RowShare>& share,
                                     const ShardRead& read) {
  const pstrain::v1::DType dtype = options_.wire_dtype;
  // The messages once, reused by every attempt (a retry sends the same
  // bytes, so the shard recognises it).
  std::vector<pstrain::v1::PushRowsRequest> messages(1);
  pstrain::v1::PushHeader* h = messages[0].mutable_header();
  h->set_worker(worker);
  h->set_clock(clock);
  h->set_read_version(read.version);
  h->set_read_min_clock(read.min_clock);
  h->set_num_samples(num_samples);
  h->set_session_id(options_.session_id);
  h->set_generation(options_.generation);
  uint64_t payload = 0;
  std::vector<float> values;
  for (const RowShare& sh : share) {
    const RowSet& g = grads[sh.set];
    const int64_t dim = row_dims_.at(g.tensor);
    const uint64_t step = RowsPerMessage(dim, dtype, /*with_values=*/true);
    const uint64_t per_row = sizeof(int64_t) + dim * WireElementBytes(dtype);
    for (size_t b = 0; b < sh.rows.size(); b += step) {
      const size_t e = std::min<size_t>(sh.rows.size(), b + step);
      if (payload > 0 &&
          payload + (e - b) * per_row > kMaxMessagePayloadBytes) {
        messages.emplace_back();
        payload = 0;
      }
      pstrain::v1::SparseRows* piece = messages.back().add_rows();
      piece->set_tensor(g.tensor);
      piece->set_dtype(dtype);
      piece->set_dim(static_cast<uint32_t>(dim));
      std::vector<int64_t> ids;
      values.clear();
      for (size_t r = b; r < e; ++r) {
        const size_t pos = sh.rows[r];
        ids.push_back(g.ids[pos]);
        values.insert(values.end(), g.values.begin() + pos * dim,
                      g.values.begin() + (pos + 1) * dim);
      }
      AppendRowIds(ids, piece->mutable_ids());
      AppendRowValues(values.data(), values.size(), dtype, g.tensor,
                      piece->mutable_values());
      payload += (e - b) * per_row;
    }
  }
  return WithRetries(shard, /*push=*/true, [&]() -> absl::Status {
    grpc::ClientContext context;
    SetTimeout(&context, options_.rpc_timeout);
    AddPushSession(&context, worker, options_.session_id, options_.generation);
    ActiveCall active(this, &context);
    pstrain::v1::PushRowsResponse response;
    std::unique_ptr<grpc::ClientWriter<pstrain::v1::PushRowsRequest>> writer(
        row_stubs_[shard]->PushRows(&context, &response));
    uint64_t bytes = 0;
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;  // Finish says why
      bytes += m.ByteSizeLong();
    }
    writer->WritesDone();
    PS_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
    bytes_pushed_ += bytes;
    return absl::OkStatus();
  });
}

}  // namespace pstrain
