// Fuzzes the push/pull stream framing through real (in-process) gRPC calls:
//   even variant: the frames that parse as PushRequest are sent as one push
//     stream to the parameter-server service (ps_service) holding a fresh
//     one-shard shard; a rejected push must leave the shard untouched;
//   odd variant: the frames that parse as PullResponse are what a scripted
//     server streams back to the worker's PsClient pulling from it; the
//     client must fail cleanly or fill every tensor.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job_token.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "tests/fuzz/fuzz_input.h"
#include "worker/ps/ps_client.h"

namespace pstrain {
namespace fuzz {
namespace {

class ScriptedPullService : public v1::ParameterServer::Service {
 public:
  void SetScript(std::vector<v1::PullResponse> script) {
    absl::MutexLock lock(&mu_);
    script_ = std::move(script);
  }
  grpc::Status Pull(grpc::ServerContext* /*context*/,
                    const v1::PullRequest* /*request*/,
                    grpc::ServerWriter<v1::PullResponse>* writer) override {
    std::vector<v1::PullResponse> script;
    {
      absl::MutexLock lock(&mu_);
      script = script_;
    }
    for (const auto& m : script) {
      if (!writer->Write(m)) break;
    }
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::PullResponse> script_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<grpc::Server> StartInProcess(grpc::Service* service) {
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

struct Env {
  Env() : push_service(PsServiceOptions{}) {
    push_server = StartInProcess(&push_service);
    push_stub = v1::ParameterServer::NewStub(
        push_server->InProcessChannel(DefaultChannelArgs()));
    pull_server = StartInProcess(&pull_service);
    PsClientOptions options;
    options.rpc_timeout = absl::Seconds(5);
    options.barrier_timeout = absl::Seconds(1);
    auto c = PsClient::Create(
        SmallJob(1, 0).shard_map(),
        {pull_server->InProcessChannel(DefaultChannelArgs())}, options);
    PS_FUZZ_CHECK(c.ok(), "client for the fuzz job");
    client = std::move(*c);
  }
  ParameterServerService push_service;
  std::unique_ptr<grpc::Server> push_server;
  std::unique_ptr<v1::ParameterServer::Stub> push_stub;
  ScriptedPullService pull_service;
  std::unique_ptr<grpc::Server> pull_server;
  std::unique_ptr<PsClient> client;
};

Env& GetEnv() {
  static Env* env = new Env();  // lives for the whole fuzzing run
  return *env;
}

std::string Observe(Shard* shard) {
  std::string state = shard->Stats().SerializeAsString();
  absl::StatusOr<PullResult> pull = shard->Pull(0, 0, absl::Now());
  if (pull.ok()) {
    state.append(reinterpret_cast<const char*>(pull->values.data()),
                 pull->values.size() * sizeof(float));
  } else {
    state += pull.status().ToString();
  }
  return state;
}

void FuzzPush(Env& env, const FramedInput& in) {
  auto created =
      Shard::Create(ShardOptionsFromJob(SmallJob(1, in.variant / 2), 0));
  PS_FUZZ_CHECK(created.ok(), "the fuzz job is valid");
  std::shared_ptr<Shard> shard = std::move(*created);
  // Every worker's session id is its rank + 1 here; the fuzzer's pushes get
  // the right one (below) so that they reach the decode path behind the
  // session check (server/worker_sessions_test covers the check itself).
  std::vector<uint64_t> sessions;
  for (uint32_t w = 0; w < shard->num_workers(); ++w) sessions.push_back(w + 1);
  env.push_service.SetShard(shard, WorkerSessions::Fixed(sessions));
  const std::string before = Observe(shard.get());
  grpc::ClientContext context;
  SetTimeout(&context, absl::Seconds(5));
  // The stream opens as the first header's worker and generation (checked
  // before admission), so that the frames reach the decode path.
  for (const std::string& frame : in.frames) {
    v1::PushRequest msg;
    if (!msg.ParseFromString(frame) || !msg.has_header()) continue;
    AddPushSession(&context, msg.header().worker(), msg.header().worker() + 1,
                   msg.header().generation());
    break;
  }
  v1::PushResponse response;
  auto writer = env.push_stub->Push(&context, &response);
  for (const std::string& frame : in.frames) {
    v1::PushRequest msg;
    if (!msg.ParseFromString(frame)) continue;
    if (msg.has_header()) {
      msg.mutable_header()->set_session_id(msg.header().worker() + 1);
    }
    if (!writer->Write(msg)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) {
    PS_FUZZ_CHECK(Observe(shard.get()) == before,
                  "a rejected push stream must leave the shard untouched");
  }
  shard->Close();
}

void FuzzPull(Env& env, const FramedInput& in) {
  std::vector<v1::PullResponse> script;
  for (const std::string& frame : in.frames) {
    v1::PullResponse msg;
    if (msg.ParseFromString(frame)) script.push_back(std::move(msg));
  }
  env.pull_service.SetScript(std::move(script));
  TensorList params;
  const absl::Status st = env.client->StartPull(0, 0, &params)->Wait();
  if (st.ok()) {
    PS_FUZZ_CHECK(
        params.size() == 2 && params[0].size() == 10 && params[1].size() == 4,
        "a successful pull fills every tensor");
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain::fuzz;
  const FramedInput in = SplitFrames(data, size, /*max_frames=*/16);
  Env& env = GetEnv();
  if (in.variant % 2 == 0) {
    FuzzPush(env, in);
  } else {
    FuzzPull(env, in);
  }
  return 0;
}
