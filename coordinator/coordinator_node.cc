#include "coordinator/coordinator_node.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/job_token.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "coordinator/job_spec.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

std::string ModeName(pstrain::v1::ConsistencyMode mode) {
  return mode == pstrain::v1::MODE_SYNC    ? "sync"
         : mode == pstrain::v1::MODE_ASYNC ? "async"
                                           : "allreduce";
}

std::vector<pstrain::v1::ShardStats> CollectStatsAndShutdown(
    const std::vector<std::string>& addresses,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const std::string& coordinator_key, absl::Duration timeout,
    const std::string& reason, bool job_failed) {
  std::vector<pstrain::v1::ShardStats> stats;
  // A fresh connection to each shard: on a loaded machine its first
  // attempt may fail ("tcp handshaker shutdown"); after a successful job
  // wait_for_ready retries it within the call's deadline instead of failing
  // at once, which left the servers without their Shutdown (they then
  // exited 1 once the coordinator was gone). Bounded: a launcher counts a
  // process still running seconds after the job as hung. After a failed job
  // the servers may be gone already: fail fast.
  const bool wait_for_ready = !job_failed;
  if (wait_for_ready) timeout = std::min(timeout, absl::Seconds(5));
  for (const std::string& address : addresses) {
    if (address.empty()) continue;
    auto stub = pstrain::v1::ParameterServer::NewStub(
        MakeChannel(address, credentials));
    {
      grpc::ClientContext ctx;
      SetTimeout(&ctx, timeout);
      ctx.set_wait_for_ready(wait_for_ready);
      pstrain::v1::ShardStats s;
      grpc::Status st = stub->GetStats(&ctx, {}, &s);
      if (st.ok()) {
        stats.push_back(s);
      } else {
        PS_LOG_WARN("no statistics from %s: %s", address, st.error_message());
      }
    }
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    ctx.set_wait_for_ready(wait_for_ready);
    AddCoordinatorKey(&ctx, coordinator_key);
    pstrain::v1::ShutdownRequest req;
    req.set_reason(reason);
    req.set_job_failed(job_failed);
    pstrain::v1::ShutdownResponse resp;
    grpc::Status st = stub->Shutdown(&ctx, req, &resp);
    if (!st.ok())
      PS_LOG_WARN("shutdown of %s: %s", address, st.error_message());
  }
  return stats;
}

}  // namespace

RunSummary MakeRunSummary(const JobConfig& config, const JobOutcome& o,
                          const std::vector<pstrain::v1::ShardStats>& stats) {
  RunSummary s;
  uint64_t pushes = 0;
  double st_sum = 0;
  for (const auto& shard : stats) {
    s.staleness_max = std::max(s.staleness_max, shard.staleness_max());
    st_sum += shard.staleness_mean() * shard.pushes();
    pushes += shard.pushes();
    s.barrier_wait_s += shard.barrier_wait_s();
    if (s.staleness_histogram.size() <
        static_cast<size_t>(shard.staleness_histogram_size())) {
      s.staleness_histogram.resize(shard.staleness_histogram_size());
    }
    for (int i = 0; i < shard.staleness_histogram_size(); ++i)
      s.staleness_histogram[i] += shard.staleness_histogram(i);
    for (const pstrain::v1::SparseTableStats& t : shard.sparse_tables()) {
      s.rows_stored[t.tensor()] += t.rows_stored();
      s.rows_evicted[t.tensor()] += t.rows_evicted();
    }
  }
  const bool allreduce =
      config.training().mode() == pstrain::v1::MODE_ALLREDUCE;
  s.job = config.job().name();
  s.mode = ModeName(config.training().mode());
  s.staleness = config.training().mode() != pstrain::v1::MODE_ASYNC ? "0"
                : config.training().staleness() < 0
                    ? "inf"
                    : absl::StrCat(config.training().staleness());
  s.workers = config.job().workers();
  s.servers = allreduce ? 0 : config.job().servers();
  s.steps = static_cast<int64_t>(o.steps);
  s.local_batch = config.training().local_batch();
  s.global_batch = config.training().local_batch() * config.job().workers() *
                   config.training().grad_accum_steps();
  s.wall_s = o.wall_s;
  s.samples = o.samples;
  s.samples_per_s = o.wall_s > 0 ? o.samples / o.wall_s : 0.0;
  s.final_loss = o.final_loss;
  // No final evaluation (a failed job, or no test set): null, like
  // final_accuracy, not a loss of 0.
  s.final_eval_loss = o.has_final_eval ? o.final_eval_loss : std::nan("");
  if (o.has_accuracy) s.final_accuracy = o.final_accuracy;
  s.bytes_pushed = o.bytes_pushed;
  s.bytes_pulled = o.bytes_pulled;
  s.staleness_mean = pushes ? st_sum / pushes : 0.0;
  s.diverged = o.diverged;
  s.failed = o.failed;
  s.message = o.message;
  s.failure = o.failure;
  return s;
}

absl::StatusOr<std::unique_ptr<CoordinatorNode>> CoordinatorNode::Create(
    CoordinatorNodeOptions options) {
  PS_RETURN_IF_ERROR(ValidateJobConfig(options.config));
  std::unique_ptr<CoordinatorNode> node(new CoordinatorNode());
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> server_creds,
                      MakeServerCredentials(options.tls));
  PS_ASSIGN_OR_RETURN(
      node->client_credentials_,
      MakeChannelCredentials(options.tls, CallerRole::kCoordinator));
  if (!options.out.empty()) {
    // A finished job's results are never touched again (a coordinator
    // restarted after the end, e.g. by Kubernetes): "job already over".
    const std::string summary = options.out + "/summary.json";
    std::error_code exists_error;
    if (std::filesystem::exists(summary, exists_error)) {
      absl::StatusOr<std::string> text = ReadFileText(summary);
      absl::StatusOr<RunSummary> old =
          text.ok() ? ParseSummaryJson(*text, summary)
                    : absl::StatusOr<RunSummary>(text.status());
      if (!old.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--out: ", old.status().message(),
                         "; not starting over it (nothing was changed)"));
      }
      if (!old->failed) {
        return JobOverError(absl::StrCat(
            "--out: ", summary, " records a finished job ('", old->job, "', ",
            old->steps, " steps); its results are kept and nothing is done"));
      }
      PS_LOG_INFO("%s records a failed run; it is kept until this one ends",
                  summary);
      // A resumed job's summary counts the earlier parts' time too.
      if (!options.resume.empty()) node->earlier_wall_s_ = old->wall_s;
    }
    std::error_code error;
    std::filesystem::create_directories(options.out, error);
    if (error) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--out: cannot create '", options.out, "': ", error.message()));
    }
  }
  CoordinatorOptions service_options;
  service_options.config = options.config;
  const std::string coordinator_key = NewCoordinatorKey();
  service_options.coordinator_key = coordinator_key;
  PS_ASSIGN_OR_RETURN(node->checkpoint_root_,
                      CheckpointRoot(options.config, options.out));
  PS_ASSIGN_OR_RETURN(pstrain::v1::JobSpec job, MakeJobSpec(options.config));
  node->job_spec_ = job;
  if (!options.resume.empty()) {
    PS_ASSIGN_OR_RETURN(ResumePoint resume,
                        ResolveResume(CheckpointEnv::Default(), options.resume,
                                      node->checkpoint_root_, job));
    PS_LOG_INFO("resuming from %s at step %d", resume.dir, resume.step);
    service_options.resume_from = resume.dir;
    service_options.start_step = resume.step;
  }
  // The coordinator's notes (supervision_notes.h): its service's and, for
  // the checkpoints it orders, the orderer's.
  const std::string supervision_file =
      options.out.empty() ? "" : options.out + "/supervision.txt";
  const pstrain::v1::CheckpointConfig& ckpt = options.config.checkpoint();
  if (options.config.training().mode() == pstrain::v1::MODE_ALLREDUCE) {
    // No shards to order: rank 0 writes whole checkpoints itself
    // (worker/allreduce/checkpointing.h) under the root published here, and
    // names each in its step records (the service logs them).
    if (ckpt.every_steps() > 0 || ckpt.every_seconds() > 0) {
      service_options.checkpoint_dir = node->checkpoint_root_;
    }
  } else if (ckpt.every_steps() > 0 || ckpt.every_seconds() > 0) {
    CheckpointOrdererOptions o;
    o.root = node->checkpoint_root_;
    o.every_steps = static_cast<uint64_t>(ckpt.every_steps());
    o.every_seconds = ckpt.every_seconds();
    o.keep = static_cast<uint32_t>(ckpt.keep());
    o.start_step = service_options.start_step;
    o.job = job;
    o.credentials = node->client_credentials_;
    o.coordinator_key = coordinator_key;
    o.supervision_file = supervision_file;
    node->orderer_ = std::make_unique<CheckpointOrderer>(std::move(o));
    service_options.checkpoint_dir = node->checkpoint_root_;
  }
  service_options.progress = options.progress;
  service_options.wait_cap = options.wait_cap;
  service_options.metrics = &node->metrics_;
  if (!options.out.empty())
    service_options.metrics_csv = options.out + "/metrics.csv";
  service_options.supervision_file = supervision_file;
  PS_ASSIGN_OR_RETURN(node->service_,
                      CoordinatorService::Create(std::move(service_options)));
  PS_ASSIGN_OR_RETURN(
      node->metrics_server_,
      MaybeServeMetrics(&node->metrics_, options.bind, options.metrics_port));
  PS_ASSIGN_OR_RETURN(
      StartedServer started,
      StartGrpcServer(options.bind, options.port, server_creds,
                      {node->service_.get()}, {}, kMaxCoordinatorRequestBytes));
  node->server_ = std::move(started.server);
  node->port_ = started.port;
  if (!options.port_file.empty()) {
    const std::string tmp = options.port_file + ".tmp";
    std::ofstream(tmp) << node->port_ << "\n";
    if (std::rename(tmp.c_str(), options.port_file.c_str()) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--port_file: cannot write '", options.port_file, "'"));
    }
  }
  node->options_ = std::move(options);
  const JobConfig& c = node->options_.config;
  const int servers = c.training().mode() == pstrain::v1::MODE_ALLREDUCE
                          ? 0
                          : c.job().servers();
  PS_LOG_INFO(
      "job '%s': %s, %d workers, %d servers, %d steps; listening on %s:%d",
      c.job().name(),
      c.training().mode() == pstrain::v1::MODE_SYNC ? "sync"
      : c.training().mode() == pstrain::v1::MODE_ALLREDUCE
          ? absl::StrCat("allreduce (", ConfigName(c.allreduce().backend()),
                         ")")
      : c.training().staleness() < 0
          ? std::string("async staleness inf")
          : absl::StrCat("async staleness ", c.training().staleness()),
      c.job().workers(), servers, c.training().steps(), node->options_.bind,
      node->port_);
  PS_LOG_INFO(
      "global batch %d = local batch %d x %d workers x %d accumulation steps",
      c.training().local_batch() * c.job().workers() *
          c.training().grad_accum_steps(),
      c.training().local_batch(), c.job().workers(),
      c.training().grad_accum_steps());
  return node;
}

CoordinatorNode::~CoordinatorNode() {
  if (server_ != nullptr) {
    ShutdownGrpcServer(server_.get(), absl::Seconds(2));
  }
}

absl::Status CoordinatorNode::Run(const std::function<bool()>& stop) {
  const JobConfig& config = options_.config;
  const absl::Time startup_deadline =
      absl::Now() + absl::Seconds(config.network().startup_timeout_s());
  service_->SetStopRequested(stop);
  // Checkpoints are ordered on their own thread once every worker is in
  // (the servers' addresses are known and their shards are built).
  absl::Notification orderer_done;
  std::thread orderer_thread;
  if (orderer_ != nullptr) {
    orderer_thread = std::thread([this, &orderer_done] {
      // Until training starts or the job ends (the main loop ends it at the
      // start-up timeout or on a signal).
      service_->WaitForTrainingStart(absl::InfiniteFuture());
      absl::Status st;
      // Interrupted for a rollback (training.on_failure: restart): again
      // once it is done, with the shards' new addresses.
      while (service_->TrainingStarted()) {
        st = orderer_->Run(service_->ServerAddresses());
        if (!st.ok() || !orderer_->interrupted() || !orderer_->WaitResumed())
          break;
      }
      if (!st.ok()) {
        service_->Fail({"coordinator", -1, -1,
                        absl::StrCat("checkpoint: ", st.message())});
      }
      orderer_done.Notify();
    });
  }
  const absl::Duration lease = absl::Seconds(config.network().lease_s());
  for (;;) {
    const absl::Time waited_from = absl::Now();
    if (service_->WaitForEnd(waited_from + absl::Milliseconds(100))) break;
    // A wait of 100 ms that took longer than a lease: this process was not
    // running (SIGSTOP, a debugger, a starved machine). The servers and
    // workers have taken it for gone meanwhile; their leases expiring now
    // would blame them.
    const absl::Duration stalled = absl::Now() - waited_from;
    if (stalled > lease) {
      service_->Fail(
          {"coordinator", -1, -1,
           absl::StrFormat("the coordinator was not running for %.1f s "
                           "(stopped, e.g. SIGSTOP, or starved), longer than "
                           "network.lease_s = %g: the servers and workers "
                           "took it for gone",
                           absl::ToDoubleSeconds(stalled),
                           config.network().lease_s())});
      break;
    }
    if (service_->CheckLeases(absl::Now())) break;
    MaybeRollBack(stop);
    if (stop()) {
      service_->Fail({"coordinator", -1, -1, std::string(kCoordinatorStopped)});
      break;
    }
    if (absl::Now() > startup_deadline && !service_->TrainingStarted()) {
      service_->Fail(
          {"coordinator", -1, -1,
           absl::StrCat("not every server and worker registered within ",
                        config.network().startup_timeout_s(), "s")});
      break;
    }
  }
  if (service_->FailedOnAStopReport()) {
    // The same Ctrl-C may not have shown here yet (signal_stop_grace).
    const absl::Time until = absl::Now() + options_.signal_stop_grace;
    while (!stop() && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (stop()) service_->CoordinatorStoppedToo();
  }
  if (orderer_ != nullptr) {
    // After a successful job the final checkpoint (cut training.steps) is
    // reached already; let the orderer write it (bounded).
    if (!service_->Outcome().failed &&
        !orderer_done.WaitForNotificationWithTimeout(
            absl::Seconds(config.network().rpc_timeout_s()))) {
      service_->Fail({"coordinator", -1, -1,
                      absl::StrCat("checkpoint: the final checkpoint was not "
                                   "written within ",
                                   config.network().rpc_timeout_s(), "s")});
    }
    orderer_->Stop();
    orderer_thread.join();
  }
  JobOutcome outcome = service_->Outcome();
  if (!options_.resume.empty()) {
    // The whole job (docs/checkpoints.md): the steps before the
    // resume point processed the global batch each; the earlier parts' wall
    // time is what their summary.json in --out recorded.
    const JobConfig& c = options_.config;
    const uint64_t global_batch =
        static_cast<uint64_t>(c.training().local_batch() * c.job().workers() *
                              c.training().grad_accum_steps());
    outcome.samples += service_->start_step() * global_batch;
    outcome.wall_s += earlier_wall_s_;
  }
  auto write_summary = [&](const std::vector<pstrain::v1::ShardStats>& stats) {
    const RunSummary summary = MakeRunSummary(config, outcome, stats);
    if (!options_.termination_log.empty()) {
      absl::Status st = WriteTerminationMessage(options_.termination_log,
                                                TerminationMessage(summary));
      if (!st.ok()) PS_LOG_ERROR("%s", st.message());
    }
    if (options_.out.empty()) return;
    absl::Status st = WriteSummaryJson(options_.out + "/summary.json", summary);
    if (!st.ok()) PS_LOG_ERROR("%s", st.message());
  };
  // A failed job's record first: collecting statistics from servers that
  // are being stopped may outlast a launcher's patience.
  if (outcome.failed) write_summary({});
  std::vector<std::string> addresses = service_->ServerAddresses();
  absl::Duration timeout = absl::Seconds(config.network().rpc_timeout_s());
  if (outcome.failed) {
    // A shard declared dead may be hung, not gone: do not wait on it; and
    // a failed job's statistics are not worth a long wait on the others.
    const std::optional<RunFailure>& f = outcome.failure;
    if (f.has_value() && f->process == "server" && f->shard >= 0 &&
        f->shard < static_cast<int64_t>(addresses.size())) {
      addresses[f->shard].clear();
    }
    timeout = std::min(timeout, absl::Seconds(2));
  }
  write_summary(CollectStatsAndShutdown(
      addresses, client_credentials_, service_->coordinator_key(), timeout,
      outcome.failed ? "job failed" : "job finished", outcome.failed));
  if (outcome.failed) {
    // A worker learns a failed job's end from its next heartbeat (every
    // min(1 s, lease / 4)); one that had not asked yet would otherwise wait
    // out its lease on a gone coordinator. Bounded, and polled for a stop
    // (SIGTERM ends the coordinator within a second).
    const absl::Time until = absl::Now() +
                             std::min(absl::Seconds(1), lease / 4) +
                             absl::Milliseconds(500);
    while (!stop() && absl::Now() < until &&
           !service_->AwaitWorkersSawEnd(
               std::min(until, absl::Now() + absl::Milliseconds(100)))) {
    }
  }
  if (options_.keep_serving_after_job && !stop()) {
    PS_LOG_INFO("job over; serving status and metrics until terminated");
    while (!stop()) absl::SleepFor(absl::Milliseconds(200));
  }
  // Calls in flight (workers' final reports) get their answers; new ones
  // are refused at once. A call from a stopped process never completes:
  // cancelled after 0.5 s, so the coordinator exits promptly.
  ShutdownGrpcServer(server_.get(), absl::Milliseconds(500));
  if (outcome.failed) return absl::AbortedError(outcome.message);
  PS_LOG_INFO("job finished: %d steps in %.2fs, final loss %.5f%s%s",
              outcome.steps, outcome.wall_s, outcome.final_loss,
              outcome.has_accuracy ? absl::StrFormat(", test accuracy %.4f",
                                                     outcome.final_accuracy)
                                   : "",
              outcome.diverged ? " (diverged)" : "");
  return absl::OkStatus();
}

void CoordinatorNode::MaybeRollBack(const std::function<bool()>& stop) {
  const std::optional<CoordinatorService::RollbackOrder> order =
      service_->RollbackDue();
  if (!order.has_value()) return;
  // No manifest may be written while the rollback point is chosen.
  if (orderer_ != nullptr) {
    orderer_->Interrupt();
    // At most one short Checkpoint round (1 s); else again next round, so
    // that `stop` is still polled.
    if (!orderer_->WaitIdle(absl::Now() + absl::Seconds(1))) return;
  }
  std::string checkpoint = service_->start_checkpoint();
  uint64_t step = service_->start_step();
  if (!checkpoint_root_.empty()) {
    absl::StatusOr<ResumePoint> latest = ResolveResume(
        CheckpointEnv::Default(), "latest", checkpoint_root_, job_spec_);
    if (latest.ok()) {
      checkpoint = latest->dir;
      step = latest->step;
    } else if (latest.status().code() != absl::StatusCode::kNotFound) {
      PS_LOG_WARN("rollback: %s; using the job's start (step %d)",
                  latest.status().message(), step);
    }
  }
  PS_LOG_INFO("rolling every shard back to step %d (generation %d)", step,
              order->generation);
  // Bounded well below the RPC timeout: a hung shard must not keep the
  // loop (leases, the restart deadline) waiting; it is retried.
  const absl::Duration timeout = std::min(
      absl::Seconds(options_.config.network().rpc_timeout_s()),
      std::max(absl::Seconds(5),
               2 * absl::Seconds(options_.config.network().lease_s())));
  for (size_t k = 0; k < order->addresses.size(); ++k) {
    auto stub = pstrain::v1::ParameterServer::NewStub(
        MakeChannel(order->addresses[k], client_credentials_));
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    CancelOnStop cancel(&ctx, stop);
    AddCoordinatorKey(&ctx, service_->coordinator_key());
    pstrain::v1::RollbackRequest req;
    req.set_generation(order->generation);
    req.set_checkpoint(checkpoint);
    req.set_step(step);
    pstrain::v1::RollbackResponse resp;
    const grpc::Status st = stub->Rollback(&ctx, req, &resp);
    if (!st.ok()) {
      // Retried on the next round; a dead shard is caught by its lease.
      PS_LOG_WARN("rollback of shard %d at %s: %s", k, order->addresses[k],
                  st.error_message());
      return;
    }
  }
  if (service_->FinishRollback(order->generation, checkpoint, step) &&
      orderer_ != nullptr) {
    orderer_->Resume(step);
  }
}

std::string TerminationMessage(const RunSummary& summary) {
  RunSummary s = summary;
  // SummaryToJson pretty-prints: one line for the termination message.
  auto compact = [](const std::string& json) {
    return nlohmann::json::parse(json).dump();
  };
  std::string text = compact(SummaryToJson(s));
  if (text.size() <= kMaxTerminationMessage) return text;
  s.staleness_histogram.clear();
  text = compact(SummaryToJson(s));
  // Shorten the free-text messages until it fits (each step halves them).
  for (size_t keep = 1024; text.size() > kMaxTerminationMessage && keep > 0;
       keep /= 2) {
    auto shorten = [keep](std::string* m) {
      if (m->size() > keep) *m = m->substr(0, keep) + "...";
    };
    shorten(&s.message);
    if (s.failure.has_value()) shorten(&s.failure->message);
    text = compact(SummaryToJson(s));
  }
  return text;
}

absl::Status WriteTerminationMessage(const std::string& path,
                                     const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text << "\n";
  if (!f.flush()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--termination_log: cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
