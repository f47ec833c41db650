// ps_bench: the data path's goals measured side by side (tools/bench/bench.h
// says what and how): flags -> BenchOptions -> RunBench -> exit status.
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/mutex_mode.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_heap.h"
#include "tools/bench/grpc_args.h"
#include "tools/bench/ps_path.h"
#include "tools/bench/raw_tcp.h"
#include "tools/bench/serve_shard_flags.h"

ABSL_FLAG(bool, quick, false, "small sizes (CI): a minute or two");
ABSL_FLAG(int, rounds, 3, "interleaved rounds (medians over rounds)");
ABSL_FLAG(std::string, out, "bench.json", "where to write the JSON results");
ABSL_FLAG(std::string, iperf3, "iperf3", "iperf3 binary (the wire anchor)");
ABSL_FLAG(std::string, mpirun, "mpirun", "OpenMPI's mpirun");
ABSL_FLAG(std::string, mpi_program, "",
          "the MPI_Allreduce program (tools/bench/mpi_allreduce.cc built "
          "with mpicxx); empty: the MPI reference is skipped, saying why");
ABSL_FLAG(
    std::string, bin_dir, "",
    "built binaries (coordinator/ps_coordinator ...) for the worker memory "
    "run; empty: skipped, saying why");
ABSL_FLAG(std::string, job_config, "configs/default.yaml",
          "the small job whose worker memory is measured");
ABSL_FLAG(std::string, work_dir, "/tmp",
          "scratch directory for the worker memory run's logs");
ABSL_FLAG(std::string, serve, "",
          "internal: serve one bare gRPC stream as this spec says (the "
          "anchor across processes), print its port, serve until stdin "
          "closes");
ABSL_FLAG(std::string, serve_raw_tcp, "",
          "internal: serve the raw-TCP PS of this many values (the transport "
          "floor in a process of its own), print its port, serve one client "
          "until it closes");
// Child role (--serve_shard ...): tools/bench/serve_shard_flags.h.

int main(int argc, char** argv) {
  pstrain::SetMutexChecksForThisBuild();  // first: before any thread
  absl::ParseCommandLine(argc, argv);
  if (pstrain::bench::ServeShardRequested()) {
    return pstrain::bench::ServeShardFromFlags();
  }
  if (!absl::GetFlag(FLAGS_serve_raw_tcp).empty()) {
    return pstrain::bench::ServeRawTcpPs(absl::GetFlag(FLAGS_serve_raw_tcp));
  }
  if (!absl::GetFlag(FLAGS_serve).empty()) {
    return pstrain::bench::ServeBareStream(absl::GetFlag(FLAGS_serve));
  }
  pstrain::bench::KeepBenchHeapForReuse("ps_bench");
  pstrain::bench::BenchOptions o;
  o.quick = absl::GetFlag(FLAGS_quick);
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.out = absl::GetFlag(FLAGS_out);
  o.iperf3 = absl::GetFlag(FLAGS_iperf3);
  o.mpirun = absl::GetFlag(FLAGS_mpirun);
  o.mpi_program = absl::GetFlag(FLAGS_mpi_program);
  o.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  o.job_config = absl::GetFlag(FLAGS_job_config);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.self_path = argv[0];
  return pstrain::bench::RunBench(o);
}
