#include "tests/in_process_job.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/node_flags.h"
#include "common/status_macros.h"
#include "server/server_node.h"
#include "worker/worker_node.h"

namespace pstrain {

absl::StatusOr<InProcessJob> RunInProcessJob(const JobConfig& config) {
  CoordinatorOptions coordinator_options;
  coordinator_options.config = config;
  coordinator_options.progress = false;
  coordinator_options.wait_cap = absl::Seconds(5);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorService> coordinator,
                      CoordinatorService::Create(coordinator_options));
  PS_ASSIGN_OR_RETURN(
      StartedServer coordinator_server,
      StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                      {coordinator.get()}));

  NodeOptions node;
  node.file_config = config;
  node.coordinator = absl::StrCat("127.0.0.1:", coordinator_server.port);
  node.rpc_timeout = absl::Seconds(config.rpc_timeout_s);
  node.startup_timeout = absl::Seconds(config.startup_timeout_s);
  const int servers =
      config.mode == pstrain::v1::MODE_ALLREDUCE ? 0 : config.servers;
  const int workers = config.workers;

  // Nodes are created up front, so a bad option fails before any thread.
  std::vector<std::unique_ptr<ServerNode>> server_nodes;
  for (int k = 0; k < servers; ++k) {
    ServerNodeOptions o;
    o.node = node;
    o.requested_shard = k;
    o.barrier_timeout = absl::Seconds(config.barrier_timeout_s);
    o.set_log_role = false;
    PS_ASSIGN_OR_RETURN(std::unique_ptr<ServerNode> s, ServerNode::Create(o));
    server_nodes.push_back(std::move(s));
  }
  std::vector<std::unique_ptr<WorkerNode>> worker_nodes;
  for (int r = 0; r < workers; ++r) {
    WorkerNodeOptions o;
    o.node = node;
    o.requested_rank = r;
    o.device = "cpu";
    o.report_interval = absl::Milliseconds(50);
    o.set_log_role = false;
    PS_ASSIGN_OR_RETURN(std::unique_ptr<WorkerNode> w, WorkerNode::Create(o));
    worker_nodes.push_back(std::move(w));
  }

  // A failed node stops the others, as psctl stops the job's processes.
  std::atomic<bool> stop{false};
  auto stopped = [&stop] { return stop.load(); };
  std::vector<absl::Status> results(servers + workers);
  std::vector<std::thread> threads;
  for (int k = 0; k < servers; ++k) {
    threads.emplace_back([&, k] {
      results[k] = server_nodes[k]->Run(stopped);
      if (!results[k].ok()) stop = true;
    });
  }
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      results[servers + r] = worker_nodes[r]->Run(stopped);
      if (!results[servers + r].ok()) stop = true;
    });
  }
  // Workers end with their share of the job; servers when the coordinator
  // says the job is over (they poll every second).
  for (int r = 0; r < workers; ++r) threads[servers + r].join();
  const bool ended =
      coordinator->WaitForEnd(absl::Now() + node.startup_timeout);
  if (!ended) {
    coordinator->Fail("the in-process job did not end in time");
    stop = true;
  }
  for (int k = 0; k < servers; ++k) threads[k].join();
  InProcessJob job;
  job.outcome = coordinator->Outcome();
  coordinator_server.server->Shutdown(
      absl::ToChronoTime(absl::Now() + absl::Seconds(1)));

  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    const bool server = static_cast<int>(i) < servers;
    return absl::Status(
        results[i].code(),
        absl::StrCat(server ? "server " : "worker ", server ? i : i - servers,
                     ": ", results[i].message()));
  }
  if (!ended) return absl::DeadlineExceededError("the job did not end");
  for (const auto& w : worker_nodes) job.finals.push_back(w->final_params());
  return job;
}

}  // namespace pstrain
