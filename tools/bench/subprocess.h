// Child processes of the benchmark (iperf3, mpirun, shard servers, the real
// binaries): started with fork/exec, every wait bounded by a deadline, and
// their peak resident memory sampled from /proc/PID/status (VmHWM). Not
// wait4's ru_maxrss: exec records the forked copy of the parent's memory in
// it, so a child of a large parent would look large.
#ifndef PSTRAIN_TOOLS_BENCH_SUBPROCESS_H_
#define PSTRAIN_TOOLS_BENCH_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain::bench {

struct Finished {
  int exit_code = -1;  // -1 when killed by a signal
  // Peak resident set: the largest VmHWM sampled while the child ran (every
  // 10 ms in Wait, and at each SampleMemory call).
  int64_t max_rss_bytes = 0;
  std::string output;  // stdout (when captured)
};

// A running child. Not thread-safe. The destructor kills (SIGKILL) and reaps
// a child that is still running.
class Child {
 public:
  // Starts argv[0] (searched in PATH) with argv. With `pipe_stdio`, the
  // child's stdin and stdout are pipes to us (ReadLine, CloseStdin);
  // otherwise stdin is /dev/null and stdout goes to `stdout_file` ("" =
  // /dev/null). stderr goes to `stderr_file` ("" = /dev/null). Non-empty
  // `cpus`: the child runs on those CPUs only (sched_setaffinity before its
  // exec; it runs unpinned if that fails). Non-null `env`: the child's whole
  // environment ("NAME=VALUE" items); null: ours.
  static absl::StatusOr<Child> Start(
      const std::vector<std::string>& argv, bool pipe_stdio,
      const std::string& stdout_file = "", const std::string& stderr_file = "",
      const std::vector<int>& cpus = {},
      const std::vector<std::string>* env = nullptr);
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // One line of stdout (without '\n'); DEADLINE_EXCEEDED at `deadline`,
  // UNAVAILABLE at end of file.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline);
  // The port N of a "port N" line (ReadLine), N in 1..65535; UNAVAILABLE
  // saying what came instead ("printed no port: ...").
  absl::StatusOr<int> ReadPort(absl::Time deadline);
  // The rest of stdout until end of file or `deadline`.
  absl::StatusOr<std::string> ReadAll(absl::Time deadline);
  void CloseStdin();
  // Reads the child's VmHWM now (kept for Finished::max_rss_bytes).
  void SampleMemory();
  // Sends `signal` (if still running).
  void Signal(int signal);
  // Reaps the child; SIGKILLs it first when it is still running at
  // `deadline` (then DEADLINE_EXCEEDED).
  absl::StatusOr<Finished> Wait(absl::Time deadline);

 private:
  Child() = default;
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1;
  std::string buffer_;  // stdout read but not yet returned
  int64_t peak_hwm_ = 0;
};

// Runs argv to completion within `timeout`, capturing stdout (stderr to
// `stderr_file`, "" = /dev/null). Non-zero exit is not an error here.
absl::StatusOr<Finished> RunCapture(const std::vector<std::string>& argv,
                                    absl::Duration timeout,
                                    const std::string& stderr_file = "");

// A currently free TCP port on 127.0.0.1 (bound and released; for tools such
// as iperf3 that cannot report the port they chose).
absl::StatusOr<int> FreeLoopbackPort();

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_SUBPROCESS_H_
