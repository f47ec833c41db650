#include "server/ps_service.h"

#include <utility>
#include <vector>

#include "common/grpc_util.h"
#include "common/sharding.h"
#include "common/tensor_codec.h"

namespace pstrain {

using pstrain::v1::PullResponse;
using pstrain::v1::PushRequest;

void ParameterServerService::SetShard(std::shared_ptr<Shard> shard) {
  absl::MutexLock lock(&mu_);
  shard_ = std::move(shard);
}

void ParameterServerService::SetShutdownCallback(
    std::function<void(const std::string&)> callback) {
  absl::MutexLock lock(&mu_);
  on_shutdown_ = std::move(callback);
}

std::shared_ptr<Shard> ParameterServerService::shard() const {
  absl::MutexLock lock(&mu_);
  return shard_;
}

grpc::Status ParameterServerService::Push(
    grpc::ServerContext* context, grpc::ServerReader<PushRequest>* reader,
    pstrain::v1::PushResponse* response) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  // Keep every message: the chunk pointers below point into them.
  std::vector<PushRequest> messages;
  PushRequest msg;
  uint64_t bytes = 0;
  while (reader->Read(&msg)) {
    bytes += msg.ByteSizeLong();
    messages.push_back(std::move(msg));
    msg.Clear();
  }
  bytes_in_ += bytes;
  if (messages.empty() || !messages.front().has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first push message must carry a header");
  }
  std::vector<const pstrain::v1::ChunkData*> chunks;
  for (const PushRequest& m : messages) {
    for (const auto& c : m.chunks()) chunks.push_back(&c);
  }
  absl::StatusOr<PushResult> result =
      s->Push(messages.front().header(), chunks);
  if (!result.ok()) return ToGrpcStatus(result.status());
  response->set_version(result->version);
  response->set_staleness(result->staleness);
  response->set_applied(result->applied);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Pull(
    grpc::ServerContext* context, const pstrain::v1::PullRequest* request,
    grpc::ServerWriter<PullResponse>* writer) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  absl::StatusOr<PullResult> result =
      s->Pull(request->worker(), request->clock(),
              ServerDeadline(*context, options_.barrier_timeout));
  if (!result.ok()) return ToGrpcStatus(result.status());

  PullResponse head;
  head.set_version(result->version);
  head.set_min_clock(result->min_clock);
  uint64_t bytes = head.ByteSizeLong();
  if (!writer->Write(head)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  PullResponse msg;
  uint64_t payload = 0;
  for (const LocalChunk& c : s->chunks()) {
    if (payload > 0 &&
        payload + c.length * sizeof(float) > kMaxMessagePayloadBytes) {
      bytes += msg.ByteSizeLong();
      if (!writer->Write(msg)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      msg.Clear();
      payload = 0;
    }
    EncodeChunk(c.tensor, c.index, result->values.data() + c.local_offset,
                c.length, msg.add_chunks());
    payload += c.length * sizeof(float);
  }
  if (msg.chunks_size() > 0) {
    bytes += msg.ByteSizeLong();
    if (!writer->Write(msg)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
  }
  bytes_out_ += bytes;
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::GetStats(
    grpc::ServerContext* context, const pstrain::v1::ShardStatsRequest* request,
    pstrain::v1::ShardStats* response) {
  std::shared_ptr<Shard> s = shard();
  if (s == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard not initialised");
  }
  *response = s->Stats();
  response->set_bytes_in(bytes_in_.load());
  response->set_bytes_out(bytes_out_.load());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Shutdown(
    grpc::ServerContext* context, const pstrain::v1::ShutdownRequest* request,
    pstrain::v1::ShutdownResponse* response) {
  std::function<void(const std::string&)> callback;
  std::shared_ptr<Shard> s;
  {
    absl::MutexLock lock(&mu_);
    callback = std::exchange(on_shutdown_, nullptr);
    s = shard_;
  }
  if (s != nullptr) s->Close();
  if (callback) callback(request->reason());
  return grpc::Status::OK;
}

}  // namespace pstrain
