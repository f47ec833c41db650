#include "tools/bench/ring.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "tools/bench/subprocess.h"
#include "worker/allreduce/grpc_transport.h"
#include "worker/allreduce/ring_allreduce.h"

namespace pstrain::bench {
namespace {

// A reusable barrier for RingSeconds' rank threads: Arrive returns once all
// `n` have arrived, true when every one of them arrived with `ok` (false when
// one did not, or the wait passed `deadline`: then status() says so and every
// later Arrive returns false at once).
class RankBarrier {
 public:
  explicit RankBarrier(int n) : n_(n) {}

  bool Arrive(absl::Time deadline, bool ok) {
    absl::MutexLock lock(&mu_);
    if (!ok) all_ok_ = false;
    const uint64_t round = round_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++round_;
    } else {
      auto released = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return round_ != round || !timed_out_.ok();
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&released), deadline) &&
          timed_out_.ok()) {
        timed_out_ = absl::DeadlineExceededError(
            "ring_bench: a rank did not reach the next all-reduce in time");
      }
    }
    return all_ok_ && timed_out_.ok();
  }

  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return timed_out_;
  }

 private:
  const int n_;
  mutable absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  bool all_ok_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status timed_out_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

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
                        {services.back().get()}, bench_options.link_args);
    if (!started.ok()) return started.status();
    servers.push_back(std::move(started->server));
    addresses.push_back(absl::StrCat("127.0.0.1:", started->port));
  }
  std::vector<std::unique_ptr<GrpcTransport>> transports;
  for (int r = 0; r < ranks; ++r) {
    absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Create(
        r, ranks,
        MakeRingChannel(addresses[(r + 1) % ranks], nullptr,
                        bench_options.link_args),
        services[r].get(),
        /*session_id=*/r + 1, /*left_session_id=*/(r + ranks - 1) % ranks + 1);
    if (!t.ok()) return t.status();
    transports.push_back(std::move(*t));
  }
  const RingOptions& options = bench_options.ring;
  // One thread per rank for the whole run (as a worker's ring thread), each
  // iteration started together by a barrier and timed on every rank, the
  // slowest rank's time counting (as tools/bench/mpi_allreduce.cc times
  // MPI_Allreduce), so that starting threads is not part of the time.
  const int runs = iters + 1;  // run 0 warms up
  std::vector<std::vector<double>> seconds(
      ranks, std::vector<double>(bytes.size() * runs));
  std::vector<absl::Status> status(ranks);
  RankBarrier barrier(ranks);
  const absl::Duration barrier_wait = options.timeout + absl::Seconds(10);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      uint64_t step = 0;
      for (size_t i = 0; i < bytes.size(); ++i) {
        std::vector<float> data(bytes[i] / sizeof(float), 1.0f + r);
        for (int it = 0; it < runs; ++it, ++step) {
          // Every rank stops after the same iteration: the one where some
          // rank failed (or a barrier timed out).
          if (!barrier.Arrive(absl::Now() + barrier_wait, status[r].ok())) {
            return;
          }
          const absl::Time start = absl::Now();
          status[r] = RingAllReduce(transports[r].get(), step,
                                    absl::MakeSpan(data), options);
          seconds[r][i * runs + it] =
              absl::ToDoubleSeconds(absl::Now() - start);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  absl::Status failed = barrier.status();
  for (const absl::Status& st : status) {
    if (!st.ok()) failed = st;
  }
  std::map<uint64_t, double> result;
  for (size_t i = 0; failed.ok() && i < bytes.size(); ++i) {
    std::vector<double> times;
    for (int it = 1; it < runs; ++it) {
      double slowest = 0;
      for (int r = 0; r < ranks; ++r) {
        slowest = std::max(slowest, seconds[r][i * runs + it]);
      }
      times.push_back(slowest);
    }
    std::sort(times.begin(), times.end());
    result[bytes[i]] = times[times.size() / 2];
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
