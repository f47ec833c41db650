#include "tools/bench/ring.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "tools/bench/subprocess.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/ring_allreduce.h"

namespace pstrain::bench {

absl::StatusOr<std::map<uint64_t, double>> RingSeconds(
    int ranks, const std::vector<uint64_t>& bytes, int iters,
    const RingBenchOptions& bench_options) {
  std::vector<std::unique_ptr<RingPeerService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (int r = 0; r < ranks; ++r) {
    services.push_back(std::make_unique<RingPeerService>());
    absl::StatusOr<StartedServer> started =
        StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                        {services.back().get()}, RingLinkArgs());
    if (!started.ok()) return started.status();
    servers.push_back(std::move(started->server));
    addresses.push_back(absl::StrCat("127.0.0.1:", started->port));
  }
  std::vector<std::unique_ptr<GrpcTransport>> transports;
  for (int r = 0; r < ranks; ++r) {
    absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Create(
        r, ranks, MakeRingChannel(addresses[(r + 1) % ranks]),
        services[r].get(),
        /*session_id=*/r + 1, /*left_session_id=*/(r + ranks - 1) % ranks + 1);
    if (!t.ok()) return t.status();
    transports.push_back(std::move(*t));
  }
  const RingOptions& options = bench_options.ring;
  std::map<uint64_t, double> result;
  uint64_t step = 0;
  absl::Status failed;
  for (uint64_t b : bytes) {
    const size_t n = b / sizeof(float);
    std::vector<std::vector<float>> data(ranks);
    for (int r = 0; r < ranks; ++r) data[r].assign(n, 1.0f + r);
    std::vector<double> times;
    for (int it = 0; it <= iters && failed.ok(); ++it, ++step) {
      std::vector<absl::Status> status(ranks);
      std::vector<std::thread> threads;
      const absl::Time start = absl::Now();
      for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
          status[r] = RingAllReduce(transports[r].get(), step,
                                    absl::MakeSpan(data[r]), options);
        });
      }
      for (auto& t : threads) t.join();
      const double s = absl::ToDoubleSeconds(absl::Now() - start);
      for (const absl::Status& st : status) {
        if (!st.ok() && failed.ok()) failed = st;
      }
      if (it > 0) times.push_back(s);
    }
    if (!failed.ok()) break;
    std::sort(times.begin(), times.end());
    result[b] = times[times.size() / 2];
  }
  for (auto& t : transports) {
    absl::Status s = t->Close(WaitBound(absl::Now() + absl::Seconds(10)));
    if (!s.ok() && failed.ok()) failed = s;
  }
  transports.clear();
  for (auto& s : servers) {
    s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  if (!failed.ok()) return failed;
  return result;
}

absl::StatusOr<std::map<uint64_t, double>> MpiSeconds(
    const std::string& mpirun, const std::string& mpi_program, int ranks,
    const std::vector<uint64_t>& bytes, int iters) {
  std::vector<std::string> argv = {mpirun,
                                   "--allow-run-as-root",
                                   "--oversubscribe",
                                   "--mca",
                                   "btl",
                                   "tcp,self",
                                   "--mca",
                                   "btl_tcp_if_include",
                                   "lo",
                                   "--mca",
                                   "oob_tcp_if_include",
                                   "lo",
                                   "-np",
                                   absl::StrCat(ranks),
                                   mpi_program,
                                   absl::StrCat(iters)};
  for (uint64_t b : bytes) argv.push_back(absl::StrCat(b));
  absl::StatusOr<Finished> f = RunCapture(argv, absl::Seconds(300));
  if (!f.ok()) return f.status();
  std::map<uint64_t, double> result;
  std::istringstream in(f->output);
  uint64_t b;
  double s;
  while (in >> b >> s) result[b] = s;
  if (f->exit_code != 0 || result.size() != bytes.size()) {
    return absl::UnavailableError(absl::StrCat(
        "mpirun exited ", f->exit_code, " with ", result.size(), " of ",
        bytes.size(), " results: ", f->output.substr(0, 300)));
  }
  return result;
}

}  // namespace pstrain::bench
