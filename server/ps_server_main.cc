// ps_server: one parameter-server shard. Registers with the coordinator,
// builds its shard from the job's shard map, serves Push/Pull until the
// coordinator ends the job (exit 0) or disappears (exit 1).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/signals.h"
#include "server/ps_service.h"
#include "server/shard.h"

ABSL_FLAG(std::string, coordinator, "",
          "coordinator address host:port (required)");
ABSL_FLAG(std::string, bind, "127.0.0.1", "address to listen on");
ABSL_FLAG(int, port, 0, "port to listen on; 0 picks a free one");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host name workers use to reach this server");
ABSL_FLAG(int, shard, -1, "shard id to claim; -1 lets the coordinator assign");
ABSL_FLAG(double, rpc_timeout_s, 30,
          "deadline of each call to the coordinator");
ABSL_FLAG(double, startup_timeout_s, 120,
          "how long to wait for the coordinator and the other servers");
ABSL_FLAG(double, barrier_timeout_s, 300,
          "longest a pull may block on a barrier");

namespace pstrain {
namespace {

int Main() {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::fprintf(stderr, "ps_server: --coordinator is required (host:port)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_rpc_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_startup_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_barrier_timeout_s) <= 0) {
    std::fprintf(stderr,
                 "ps_server: --rpc_timeout_s, --startup_timeout_s and "
                 "--barrier_timeout_s must be > 0\n");
    return 2;
  }
  SetLogRole("server");
  InstallStopSignalHandlers();
  const absl::Duration rpc_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  const absl::Time startup_deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));

  PsServiceOptions service_options;
  service_options.barrier_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_barrier_timeout_s));
  ParameterServerService service(service_options);
  absl::Notification shutdown;
  service.SetShutdownCallback([&](const std::string& reason) {
    PS_LOG_INFO("shutdown requested: %s", reason);
    shutdown.Notify();
  });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      absl::StrCat(absl::GetFlag(FLAGS_bind), ":", absl::GetFlag(FLAGS_port)),
      grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    PS_LOG_ERROR("cannot listen on %s:%d", absl::GetFlag(FLAGS_bind),
                 absl::GetFlag(FLAGS_port));
    return 1;
  }
  // NOT_SERVING until the shard holds its weights.
  server->GetHealthCheckService()->SetServingStatus(false);
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_advertise_host), ":", port);

  auto coord = pstrain::v1::Coordinator::NewStub(MakeChannel(coordinator));
  pstrain::v1::RegisterServerResponse reg;
  absl::Status st =
      RetryUntil(startup_deadline, "coordinator at " + coordinator, [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        pstrain::v1::RegisterServerRequest req;
        req.set_address(address);
        req.set_requested_shard(absl::GetFlag(FLAGS_shard));
        return FromGrpcStatus(coord->RegisterServer(&ctx, req, &reg));
      });
  if (!st.ok()) {
    PS_LOG_ERROR("registration failed: %s", st.message());
    return 1;
  }
  SetLogRole(absl::StrCat("server/", reg.shard()));
  pstrain::v1::JobSpec job;
  st = RetryUntil(startup_deadline, "all server shards to register", [&] {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, rpc_timeout);
    pstrain::v1::GetJobRequest req;
    req.set_wait_for_servers(true);
    return FromGrpcStatus(coord->GetJob(&ctx, req, &job));
  });
  if (!st.ok()) {
    PS_LOG_ERROR("no job: %s", st.message());
    return 1;
  }
  ShardOptions shard_options;
  shard_options.shard_id = reg.shard();
  shard_options.job = job;
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(shard_options);
  if (!shard.ok()) {
    PS_LOG_ERROR("cannot build shard: %s", shard.status().message());
    return 1;
  }
  PS_LOG_INFO("serving %d chunks (%d elements) at %s",
              (*shard)->chunks().size(), (*shard)->num_elements(), address);
  service.SetShard(std::shared_ptr<Shard>(std::move(*shard)));
  server->GetHealthCheckService()->SetServingStatus(true);
  st = RetryUntil(startup_deadline, "coordinator", [&] {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, rpc_timeout);
    pstrain::v1::ServerReadyRequest req;
    req.set_shard(reg.shard());
    pstrain::v1::ServerReadyResponse resp;
    return FromGrpcStatus(coord->ServerReady(&ctx, req, &resp));
  });
  if (!st.ok()) {
    PS_LOG_ERROR("cannot report ready: %s", st.message());
    return 1;
  }

  // Serve until the coordinator says the job is over. If the coordinator
  // vanishes for longer than the start-up timeout, give up (exit 1).
  int exit_code = 0;
  absl::Time last_contact = absl::Now();
  while (!shutdown.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    if (StopRequested()) {
      PS_LOG_INFO("stopping on signal");
      break;
    }
    grpc::ClientContext ctx;
    SetTimeout(&ctx, absl::Seconds(5));
    pstrain::v1::JobStatusResponse status;
    grpc::Status s = coord->JobStatus(&ctx, {}, &status);
    if (s.ok()) {
      last_contact = absl::Now();
      if (status.finished()) break;
    } else if (absl::Now() - last_contact >
               absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s))) {
      PS_LOG_ERROR("coordinator unreachable since %s; exiting",
                   absl::FormatTime(last_contact));
      exit_code = 1;
      break;
    }
  }
  server->GetHealthCheckService()->SetServingStatus(false);
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  PS_LOG_INFO("exiting");
  return exit_code;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain parameter-server shard.\nUsage: ps_server --coordinator "
      "HOST:PORT [--port N] [--bind ADDR] [--advertise_host HOST] [--shard K]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
