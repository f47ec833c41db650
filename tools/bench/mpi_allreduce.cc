// The reference for the ring all-reduce: OpenMPI's MPI_Allreduce (sum of
// fp32, in place). Built by `psctl bench` with mpicxx (not by Bazel: the
// build stays free of MPI) and run under mpirun with the TCP transport:
//   mpi_allreduce ITERS BYTES...
// prints one line per size on rank 0: "BYTES MEDIAN_SECONDS" (each
// iteration's time is the slowest rank's, after a barrier).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "usage: mpi_allreduce ITERS BYTES...\n");
    MPI_Finalize();
    return 2;
  }
  const int iters = std::max(1, atoi(argv[1]));
  for (int a = 2; a < argc; ++a) {
    const long bytes = atol(argv[a]);
    const int n = static_cast<int>(bytes / sizeof(float));
    std::vector<float> data(n, 1.0f + rank);
    std::vector<double> times;
    for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      double t = MPI_Wtime() - start, slowest = 0;
      MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (it > 0) times.push_back(slowest);
    }
    if (rank == 0) {
      std::sort(times.begin(), times.end());
      printf("%ld %.9f\n", bytes, times[times.size() / 2]);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
