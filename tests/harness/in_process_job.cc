#include "tests/harness/in_process_job.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/node_flags.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_node.h"
#include "server/server_node.h"
#include "worker/worker_node.h"

namespace pstrain {

absl::StatusOr<InProcessJob> RunInProcessJob(const JobConfig& config,
                                             const std::string& resume) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "pstrain-job-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", dir));
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};

  CoordinatorNodeOptions coordinator_options;
  coordinator_options.config = config;
  coordinator_options.out = dir;
  coordinator_options.progress = false;
  coordinator_options.wait_cap = absl::Seconds(5);
  coordinator_options.resume = resume;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorNode> coordinator,
                      CoordinatorNode::Create(coordinator_options));

  NodeOptions node;
  node.file_config = config;
  node.coordinator = absl::StrCat("127.0.0.1:", coordinator->port());
  node.rpc_timeout = absl::Seconds(config.network().rpc_timeout_s());
  node.startup_timeout = absl::Seconds(config.network().startup_timeout_s());
  const int servers = config.training().mode() == pstrain::v1::MODE_ALLREDUCE
                          ? 0
                          : config.job().servers();
  const int workers = config.job().workers();

  // Nodes are created up front, so a bad option fails before any thread.
  std::vector<std::unique_ptr<ServerNode>> server_nodes;
  for (int k = 0; k < servers; ++k) {
    ServerNodeOptions o;
    o.node = node;
    o.requested_shard = k;
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
  // results: [0] the coordinator, then servers, then workers.
  std::atomic<bool> stop{false};
  auto stopped = [&stop] { return stop.load(); };
  std::vector<absl::Status> results(1 + servers + workers);
  auto run = [&](size_t i, const std::function<absl::Status()>& body) {
    return std::thread([&, i, body] {
      results[i] = body();
      if (!results[i].ok()) stop = true;
    });
  };
  std::vector<std::thread> threads;
  threads.push_back(run(0, [&] { return coordinator->Run(stopped); }));
  for (int k = 0; k < servers; ++k) {
    threads.push_back(
        run(1 + k, [&, k] { return server_nodes[k]->Run(stopped); }));
  }
  for (int r = 0; r < workers; ++r) {
    threads.push_back(
        run(1 + servers + r, [&, r] { return worker_nodes[r]->Run(stopped); }));
  }
  // The coordinator ends with the job (shutting the servers down) or at its
  // start-up timeout; then nothing may linger.
  threads[0].join();
  stop = true;
  for (size_t i = 1; i < threads.size(); ++i) threads[i].join();

  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    const std::string who = i == 0 ? "coordinator"
                            : static_cast<int>(i) <= servers
                                ? absl::StrCat("server ", i - 1)
                                : absl::StrCat("worker ", i - 1 - servers);
    return absl::Status(results[i].code(),
                        absl::StrCat(who, ": ", results[i].message()));
  }
  const std::string path = dir + "/summary.json";
  PS_ASSIGN_OR_RETURN(std::string text, ReadFileText(path));
  InProcessJob job;
  PS_ASSIGN_OR_RETURN(job.summary, ParseSummaryJson(text, path));
  for (const auto& w : worker_nodes) job.finals.push_back(w->final_params());
  return job;
}

}  // namespace pstrain
