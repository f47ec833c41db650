// The ring all-reduce (worker/allreduce: RingAllReduce over GrpcTransport,
// ranks as threads of this process, each with its RingPeer server on
// 127.0.0.1 port 0) against OpenMPI's MPI_Allreduce over TCP (mpirun, ranks
// as processes on 127.0.0.1).
#ifndef PSTRAIN_TOOLS_BENCH_RING_H_
#define PSTRAIN_TOOLS_BENCH_RING_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/ring_allreduce.h"

namespace pstrain::bench {

struct RingBenchOptions {
  RingOptions ring;  // the defaults of allreduce.* unless set
  // Channel arguments of both ends of every link (the worker's:
  // RingLinkArgs()).
  std::vector<std::pair<std::string, int>> link_args = RingLinkArgs();
};

// Median seconds of one all-reduce of each size in `bytes` with `ranks`
// ranks, over `iters` iterations after one warm-up; key = bytes. Each rank
// is one thread for the whole run; every iteration starts on all ranks at a
// barrier and counts the slowest rank's own time, as mpi_allreduce.cc times
// MPI_Allreduce (so thread start-up, which a worker does not pay per step,
// is not timed).
absl::StatusOr<std::map<uint64_t, double>> RingSeconds(
    int ranks, const std::vector<uint64_t>& bytes, int iters,
    const RingBenchOptions& options = {});

// The same through `mpirun --allow-run-as-root --oversubscribe --mca btl
// tcp,self -np ranks mpi_program iters bytes...` (loopback only).
absl::StatusOr<std::map<uint64_t, double>> MpiSeconds(
    const std::string& mpirun, const std::string& mpi_program, int ranks,
    const std::vector<uint64_t>& bytes, int iters);

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_RING_H_
