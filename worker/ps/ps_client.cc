#include "worker/ps/ps_client.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/status_macros.h"
#include "common/tensor_codec.h"

namespace pstrain {

using pstrain::v1::ChunkInfo;

PsOp::~PsOp() { Wait().IgnoreError(); }

absl::Status PsOp::Wait() {
  if (!joined_) {
    for (std::thread& t : threads_) t.join();
    joined_ = true;
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
    PsClientOptions options) {
  if (channels.empty()) {
    return absl::InvalidArgumentError("no parameter-server shards");
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
  for (auto& ch : channels) {
    client->stubs_.push_back(pstrain::v1::ParameterServer::NewStub(ch));
  }
  return client;
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
  std::unique_ptr<PsOp> op(new PsOp);
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
  for (int s = 0; s < n; ++s) {
    op->threads_.emplace_back([this, s, worker, clock, params, op = op.get()] {
      op->statuses_[s] = PullShard(s, worker, clock, params, &op->reads_[s]);
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
  std::unique_ptr<PsOp> op(new PsOp);
  op->views_ = std::move(views);
  const TensorViews& grads = op->views_;
  const int n = num_shards();
  op->statuses_.resize(n);
  bool shapes_ok = grads.size() == tensor_sizes_.size();
  for (size_t i = 0; shapes_ok && i < grads.size(); ++i) {
    shapes_ok = grads[i].size() == tensor_sizes_[i];
  }
  if (!shapes_ok || reads.size() != static_cast<size_t>(n)) {
    op->statuses_.assign(n, absl::InvalidArgumentError(
                                "gradients or reads do not match the model"));
    return op;
  }
  for (int s = 0; s < n; ++s) {
    op->threads_.emplace_back([this, s, worker, clock, num_samples, &grads,
                               read = reads[s], op = op.get()] {
      op->statuses_[s] = PushShard(s, worker, clock, num_samples, grads, read);
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

absl::Status PsClient::WithRetries(
    bool push, const std::function<absl::Status()>& attempt) const {
  absl::Status status;
  absl::Duration backoff = absl::Milliseconds(50);
  for (int i = 0; i < std::max(options_.max_attempts, 1); ++i) {
    if (i > 0) {
      absl::SleepFor(backoff);
      backoff *= 2;
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

absl::Status PsClient::PullShard(int shard, uint32_t worker, uint64_t clock,
                                 MutableTensorViews* params, ShardRead* read) {
  return WithRetries(
      /*push=*/false,
      [&] { return PullShardOnce(shard, worker, clock, params, read); });
}

absl::Status PsClient::PushShard(int shard, uint32_t worker, uint64_t clock,
                                 uint64_t num_samples, const TensorViews& grads,
                                 const ShardRead& read) {
  return WithRetries(/*push=*/true, [&] {
    return PushShardOnce(shard, worker, clock, num_samples, grads, read);
  });
}

absl::Status PsClient::PullShardOnce(int shard, uint32_t worker, uint64_t clock,
                                     MutableTensorViews* params,
                                     ShardRead* read) {
  grpc::ClientContext context;
  SetTimeout(&context, options_.barrier_timeout);
  ActiveCall active(this, &context);
  pstrain::v1::PullRequest request;
  request.set_worker(worker);
  request.set_clock(clock);
  request.set_session_id(options_.session_id);
  auto reader = stubs_[shard]->Pull(&context, request);
  pstrain::v1::PullResponse msg;
  bool head = true;
  size_t received = 0;
  uint64_t bytes = 0;
  absl::Status status;
  while (reader->Read(&msg)) {
    bytes += msg.ByteSizeLong();
    if (head) {
      read->version = msg.version();
      read->min_clock = msg.min_clock();
      head = false;
    }
    for (const auto& c : msg.chunks()) {
      if (!status.ok()) break;
      auto it = chunk_index_.find({c.tensor(), c.index()});
      if (it == chunk_index_.end() ||
          map_.chunks(it->second).shard() != shard) {
        status = absl::InternalError(absl::StrCat(
            "unexpected chunk ", c.index(), " of '", c.tensor(), "'"));
        break;
      }
      const ChunkInfo& info = map_.chunks(it->second);
      float* dst =
          (*params)[tensor_index_[info.tensor()]].data() + info.offset();
      status = DecodeChunk(c, info.length(), /*require_finite=*/false, dst,
                           options_.wire_dtype);
      ++received;
    }
  }
  bytes_pulled_ += bytes;
  PS_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  PS_RETURN_IF_ERROR(status);
  if (received != shard_chunks_[shard].size()) {
    return absl::InternalError(absl::StrCat("pull returned ", received, " of ",
                                            shard_chunks_[shard].size(),
                                            " chunks"));
  }
  return absl::OkStatus();
}

absl::Status PsClient::PushShardOnce(int shard, uint32_t worker, uint64_t clock,
                                     uint64_t num_samples,
                                     const TensorViews& grads,
                                     const ShardRead& read) {
  grpc::ClientContext context;
  SetTimeout(&context, options_.rpc_timeout);
  ActiveCall active(this, &context);
  pstrain::v1::PushResponse response;
  auto writer = stubs_[shard]->Push(&context, &response);
  pstrain::v1::PushRequest msg;
  auto* h = msg.mutable_header();
  h->set_worker(worker);
  h->set_session_id(options_.session_id);
  h->set_clock(clock);
  h->set_read_version(read.version);
  h->set_read_min_clock(read.min_clock);
  h->set_num_samples(num_samples);
  uint64_t payload = 0, bytes = 0;
  bool stream_ok = true;
  const uint64_t element_bytes = WireElementBytes(options_.wire_dtype);
  for (int idx : shard_chunks_[shard]) {
    const ChunkInfo& c = map_.chunks(idx);
    if (payload > 0 &&
        payload + c.length() * element_bytes > kMaxMessagePayloadBytes) {
      bytes += msg.ByteSizeLong();
      if (!(stream_ok = writer->Write(msg))) break;
      msg.Clear();
      payload = 0;
    }
    const float* src = grads[tensor_index_[c.tensor()]].data() + c.offset();
    EncodeChunk(c.tensor(), c.index(), src, c.length(), msg.add_chunks(),
                options_.wire_dtype);
    payload += c.length() * element_bytes;
  }
  if (stream_ok && (msg.has_header() || msg.chunks_size() > 0)) {
    bytes += msg.ByteSizeLong();
    stream_ok = writer->Write(msg);
  }
  if (stream_ok) writer->WritesDone();
  bytes_pushed_ += bytes;
  return FromGrpcStatus(writer->Finish());
}

}  // namespace pstrain
