// ps_server: one parameter-server shard. Registers with the coordinator,
// builds its shard from the job's shard map, serves Push/Pull until the
// coordinator ends the job (exit 0) or disappears (exit 1).
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/host_name.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/retry.h"
#include "common/signals.h"
#include "server/ps_service.h"
#include "server/shard.h"

ABSL_FLAG(std::string, config, "",
          "job YAML file; its network section gives TLS files (optional)");
ABSL_FLAG(std::string, coordinator, "",
          "coordinator address, host:port or DNS-name:port (required)");
ABSL_FLAG(std::string, bind, "127.0.0.1", "address to listen on");
ABSL_FLAG(int, port, 0, "port to listen on; 0 picks a free one");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host name workers use to reach this server (e.g. ps-0.ps)");
ABSL_FLAG(int, shard, -1, "shard id to claim; -1 lets the coordinator assign");
ABSL_FLAG(bool, shard_from_hostname, false,
          "claim the shard named by the host name's -<ordinal> suffix "
          "(StatefulSet pod ps-3 -> shard 3)");
ABSL_FLAG(int, metrics_port, -1,
          "serve Prometheus metrics at http://BIND:PORT/metrics; 0 picks a "
          "free port, -1 disables");
ABSL_FLAG(std::string, token_file, "",
          "job token file: every call carries it and every service requires "
          "it (overrides network.token_file)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (overrides network.tls_cert)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key (overrides network.tls_key)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA: verifies the coordinator and requires client certificates "
          "(overrides network.tls_ca)");
ABSL_FLAG(double, rpc_timeout_s, 30,
          "deadline of each call to the coordinator");
ABSL_FLAG(double, startup_timeout_s, 120,
          "how long to wait for the coordinator and the other servers");
ABSL_FLAG(double, barrier_timeout_s, 300,
          "longest a pull may block on a barrier");

namespace pstrain {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_server: %s\n", message.c_str());
  return 2;
}

int Main() {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) return Fail("--coordinator is required (host:port)");
  if (absl::GetFlag(FLAGS_rpc_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_startup_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_barrier_timeout_s) <= 0) {
    return Fail(
        "--rpc_timeout_s, --startup_timeout_s and --barrier_timeout_s must be "
        "> 0");
  }
  absl::StatusOr<JobConfig> file_config =
      LoadConfigFlag(absl::GetFlag(FLAGS_config));
  if (!file_config.ok())
    return Fail(std::string(file_config.status().message()));
  const TlsFiles tls = ResolveTls(
      *file_config, absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_token_file));
  auto server_creds = MakeServerCredentials(tls);
  if (!server_creds.ok())
    return Fail(std::string(server_creds.status().message()));
  auto client_creds = MakeChannelCredentials(tls);
  if (!client_creds.ok())
    return Fail(std::string(client_creds.status().message()));
  absl::Status host =
      ValidateHostName("--advertise_host", absl::GetFlag(FLAGS_advertise_host));
  if (!host.ok()) return Fail(std::string(host.message()));
  int requested_shard = absl::GetFlag(FLAGS_shard);
  if (absl::GetFlag(FLAGS_shard_from_hostname)) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    absl::StatusOr<int> ordinal = OrdinalFromHostname(host);
    if (!ordinal.ok()) return Fail(std::string(ordinal.status().message()));
    requested_shard = *ordinal;
  }

  SetLogRole("server");
  InstallStopSignalHandlers();
  MetricsRegistry metrics;
  auto metrics_server = MaybeServeMetrics(&metrics, absl::GetFlag(FLAGS_bind),
                                          absl::GetFlag(FLAGS_metrics_port));
  if (!metrics_server.ok()) {
    PS_LOG_ERROR("%s", metrics_server.status().message());
    return 1;
  }
  const absl::Duration rpc_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  const absl::Time startup_deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));

  PsServiceOptions service_options;
  service_options.barrier_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_barrier_timeout_s));
  service_options.metrics = &metrics;
  ParameterServerService service(service_options);
  absl::Notification shutdown;
  service.SetShutdownCallback([&](const std::string& reason) {
    PS_LOG_INFO("shutdown requested: %s", reason);
    shutdown.Notify();
  });

  absl::StatusOr<StartedServer> started =
      StartGrpcServer(absl::GetFlag(FLAGS_bind), absl::GetFlag(FLAGS_port),
                      *server_creds, {&service});
  if (!started.ok()) {
    PS_LOG_ERROR("%s", started.status().message());
    return 2;
  }
  grpc::Server* server = started->server.get();
  const int port = started->port;
  // NOT_SERVING until the shard holds its weights.
  server->GetHealthCheckService()->SetServingStatus(false);
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_advertise_host), ":", port);

  auto coord = pstrain::v1::Coordinator::NewStub(
      MakeChannel(coordinator, *client_creds));
  pstrain::v1::RegisterServerResponse reg;
  absl::Status st =
      RetryUntil(startup_deadline, "coordinator at " + coordinator, [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        pstrain::v1::RegisterServerRequest req;
        req.set_address(address);
        req.set_requested_shard(requested_shard);
        return FromGrpcStatus(coord->RegisterServer(&ctx, req, &reg));
      });
  if (st.code() == absl::StatusCode::kFailedPrecondition) {
    // The job is over (e.g. a StatefulSet restarted this pod after the end):
    // idle instead of crash-looping, until terminated.
    PS_LOG_INFO("%s; idling until terminated", st.message());
    while (!StopRequested()) absl::SleepFor(absl::Milliseconds(200));
    return 0;
  }
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
      "HOST:PORT [--config job.yaml] [--port N] [--bind ADDR] "
      "[--advertise_host HOST] [--shard K | --shard_from_hostname] "
      "[--metrics_port P] [--tls_cert F --tls_key F] [--tls_ca F]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
