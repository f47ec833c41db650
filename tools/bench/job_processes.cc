#include "tools/bench/job_processes.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tools/bench/subprocess.h"

namespace pstrain::bench {

absl::StatusOr<int64_t> WorkerPeakRss(const std::string& bin_dir,
                                      const std::string& config,
                                      const std::string& work_dir, int steps) {
  const std::string port_file = work_dir + "/coordinator.port";
  std::remove(port_file.c_str());
  absl::StatusOr<Child> coordinator = Child::Start(
      {bin_dir + "/coordinator/ps_coordinator", "--config=" + config,
       "--port=0", "--port_file=" + port_file, "--out=" + work_dir,
       "--workers=1", "--servers=1", absl::StrCat("--steps=", steps),
       "--quiet"},
      false, "", work_dir + "/coordinator.log");
  if (!coordinator.ok()) return coordinator.status();
  std::string port;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (port.empty() && absl::Now() < deadline) {
    std::ifstream in(port_file);
    std::getline(in, port);
    if (port.empty()) absl::SleepFor(absl::Milliseconds(50));
  }
  if (port.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the coordinator wrote no port (see ", work_dir, "/coordinator.log)"));
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<Child> server =
      Child::Start({bin_dir + "/server/ps_server", "--config=" + config,
                    "--coordinator=" + address, "--port=0", "--shard=0"},
                   false, "", work_dir + "/server.log");
  if (!server.ok()) return server.status();
  absl::StatusOr<Child> worker =
      Child::Start({bin_dir + "/worker/ps_worker", "--config=" + config,
                    "--coordinator=" + address, "--rank=0", "--device=cpu"},
                   false, "", work_dir + "/worker.log");
  if (!worker.ok()) return worker.status();
  const absl::Time end = absl::Now() + absl::Seconds(120);
  absl::StatusOr<Finished> w = worker->Wait(end);
  absl::StatusOr<Finished> c = coordinator->Wait(end);
  absl::StatusOr<Finished> s = server->Wait(absl::Now() + absl::Seconds(20));
  if (!w.ok()) return w.status();
  if (w->exit_code != 0 || !c.ok() || c->exit_code != 0) {
    return absl::InternalError(absl::StrCat("the job failed (worker exit ",
                                            w->exit_code, "; logs in ",
                                            work_dir, ")"));
  }
  return w->max_rss_bytes;
}

}  // namespace pstrain::bench
