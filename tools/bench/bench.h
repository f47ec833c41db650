// ps_bench: the goals of issues 9 and 26 measured side by side. In each
// round, in this order: iperf3 -l 1M on loopback (the wire anchor), the
// raw-TCP PS of the same bytes (raw_tcp.h, the transport floor), a warm bare
// gRPC stream of the same bytes, pstrain push and pull (sizes x servers x
// workers; medians of kSteadySteps warm steps on one cluster, the cold first
// step apart, the settling steps in no figure: stats.h), the optimizer against
// a STREAM triad, the ring all-reduce against MPI_Allreduce, then the real
// one-worker jobs and the whole jobs (whole_job.h: ps_worker/ps_server
// processes, needs --bin_dir); /proc/loadavg is read at the start of every
// round. Ratios are taken within a round and reported as medians over rounds.
// The server's and the worker's peak memory are measured once, after the
// rounds. Prints one table (every goal: measured value, ratio, goal, met or NOT
// MET) and the per-round values, and writes the same as JSON (--out).
//
//   ps_bench [--quick] [--rounds R] [--out bench.json] [--iperf3 iperf3]
//            [--mpirun mpirun --mpi_program PATH] [--bin_dir DIR
//            --job_config FILE] [--work_dir DIR]
//
// A measurement that cannot run (a missing tool, an error) is reported with
// its reason and its goals are printed as not measured; exit status 0 when
// every measurement ran, 1 otherwise, 2 on bad flags.
#ifndef PSTRAIN_TOOLS_BENCH_BENCH_H_
#define PSTRAIN_TOOLS_BENCH_BENCH_H_

#include <string>

namespace pstrain::bench {

// ps_bench's flags, parsed in its main.
struct BenchOptions {
  bool quick = false;
  int rounds = 3;                  // 1..50
  std::string out = "bench.json";  // the JSON results
  std::string iperf3 = "iperf3";   // the wire anchor
  std::string mpirun = "mpirun";   // OpenMPI's
  std::string mpi_program;         // empty: the MPI reference is skipped
  std::string bin_dir;             // empty: worker memory skipped
  std::string job_config = "configs/default.yaml";
  std::string work_dir = "/tmp";
  // This binary, run as the shard-server child and the bare stream's server
  // across processes.
  std::string self_path;
};

// Runs the benchmark as described above; returns the exit status (0, 1 when
// a measurement could not run, 2 on bad options or an unwritable --out).
int RunBench(const BenchOptions& options);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_BENCH_H_
