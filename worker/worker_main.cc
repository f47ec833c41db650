// ps_worker: registers with the coordinator, gets its rank and the job, then
// trains: pull, compute, push, report. Exit 0 when its share of the job is
// done, 1 on failure (after telling the coordinator why).
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "worker/data.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, coordinator, "",
          "coordinator address host:port (required)");
ABSL_FLAG(int, rank, -1, "rank to claim; -1 lets the coordinator assign one");
ABSL_FLAG(double, rpc_timeout_s, 30, "deadline of each unary call and push");
ABSL_FLAG(double, startup_timeout_s, 120,
          "how long to wait for the coordinator and the servers");
ABSL_FLAG(double, report_interval_s, 0.5, "seconds between metric reports");

namespace pstrain {
namespace {

// Sends step records to the coordinator in batches.
class Reporter {
 public:
  Reporter(pstrain::v1::Coordinator::Stub* stub, absl::Duration timeout,
           absl::Duration interval)
      : stub_(stub), timeout_(timeout), interval_(interval) {}

  // Byte counters come from `client` once it exists (may stay null).
  void set_client(const PsClient* client) { client_ = client; }

  absl::Status Add(const pstrain::v1::StepMetrics& m) {
    *pending_.add_steps() = m;
    if (absl::Now() - last_ < interval_) return absl::OkStatus();
    return Flush(false, "");
  }

  absl::Status Flush(bool done, const std::string& error) {
    pending_.set_done(done);
    pending_.set_error(error);
    pending_.set_bytes_pushed(client_ ? client_->bytes_pushed() : 0);
    pending_.set_bytes_pulled(client_ ? client_->bytes_pulled() : 0);
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout_);
    pstrain::v1::ReportResponse resp;
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Report(&ctx, pending_, &resp)));
    pending_.Clear();
    last_ = absl::Now();
    stop_ = stop_ || resp.stop();
    return absl::OkStatus();
  }

  bool stop() const { return stop_; }

 private:
  pstrain::v1::Coordinator::Stub* const stub_;
  const absl::Duration timeout_, interval_;
  const PsClient* client_ = nullptr;
  pstrain::v1::ReportRequest pending_;
  absl::Time last_ = absl::Now();
  bool stop_ = false;
};

int Main() {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::fprintf(stderr, "ps_worker: --coordinator is required (host:port)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_rpc_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_startup_timeout_s) <= 0) {
    std::fprintf(
        stderr,
        "ps_worker: --rpc_timeout_s and --startup_timeout_s must be > 0\n");
    return 2;
  }
  SetLogRole("worker");
  InstallStopSignalHandlers();
  const absl::Duration rpc_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  auto coord = pstrain::v1::Coordinator::NewStub(MakeChannel(coordinator));

  pstrain::v1::RegisterWorkerResponse reg;
  absl::Status st = RetryUntil(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s)),
      "coordinator and servers at " + coordinator, [&] {
        grpc::ClientContext ctx;
        SetTimeout(&ctx, rpc_timeout);
        pstrain::v1::RegisterWorkerRequest req;
        req.set_requested_rank(absl::GetFlag(FLAGS_rank));
        return FromGrpcStatus(coord->RegisterWorker(&ctx, req, &reg));
      });
  if (!st.ok()) {
    PS_LOG_ERROR("registration failed: %s", st.message());
    return 1;
  }
  const uint32_t rank = reg.rank();
  SetLogRole(absl::StrCat("worker/", rank));

  auto run = [&](Reporter* reporter,
                 std::unique_ptr<PsClient>* client) -> absl::Status {
    PS_ASSIGN_OR_RETURN(JobConfig config,
                        ParseJobConfig(reg.job().worker_config(), "job spec"));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config.model));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                        DataSource::Create(config.data));
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (const std::string& a : reg.job().shard_map().server_addresses()) {
      channels.push_back(MakeChannel(a));
    }
    PsClientOptions client_options;
    client_options.rpc_timeout = absl::Seconds(config.rpc_timeout_s);
    client_options.barrier_timeout = absl::Seconds(config.barrier_timeout_s);
    PS_ASSIGN_OR_RETURN(
        *client, PsClient::Create(reg.job().shard_map(), std::move(channels),
                                  client_options));
    reporter->set_client(client->get());
    PS_LOG_INFO("rank %d of %d: %s model, %d steps, local batch %d", rank,
                config.workers, config.model.type, config.steps,
                config.local_batch);
    TrainerOptions options;
    options.rank = rank;
    options.config = config;
    Trainer trainer(options, client->get(), model.get(), data.get());
    return trainer.Run(
        [&](const pstrain::v1::StepMetrics& m) { return reporter->Add(m); },
        [&] { return StopRequested() || reporter->stop(); });
  };
  Reporter reporter(coord.get(), rpc_timeout,
                    absl::Seconds(absl::GetFlag(FLAGS_report_interval_s)));
  std::unique_ptr<PsClient> client;
  st = run(&reporter, &client);
  if (!st.ok()) {
    PS_LOG_ERROR("training failed: %s", st.ToString());
    reporter.Flush(true, absl::StrCat("worker ", rank, ": ", st.ToString()))
        .IgnoreError();
    return 1;
  }
  st = reporter.Flush(true, "");
  if (!st.ok()) {
    PS_LOG_ERROR("final report failed: %s", st.message());
    return 1;
  }
  PS_LOG_INFO("done");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain worker: trains its share of the job against the parameter "
      "servers.\nUsage: ps_worker --coordinator HOST:PORT [--rank R]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
