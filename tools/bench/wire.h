// The two wire anchors: iperf3 -l 1M on loopback (Debian's iperf3, its own
// server on a free port) and a bare gRPC stream of 1 MiB messages.
#ifndef PSTRAIN_TOOLS_BENCH_WIRE_H_
#define PSTRAIN_TOOLS_BENCH_WIRE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/bench/bench.grpc.pb.h"
#include "tools/bench/stats.h"
#include "tools/bench/subprocess.h"

namespace pstrain::bench {

// An iperf3 server on 127.0.0.1:<free port>, stopped in the destructor.
class Iperf3 {
 public:
  static absl::StatusOr<std::unique_ptr<Iperf3>> Start(
      const std::string& binary);
  // One client run of `seconds` (whole seconds, at least 1: iperf3 reads -t
  // as an integer and -t 0 never ends) with 1 MiB writes; received bytes per
  // second (the receiver's figure). `congestion_control` (iperf3 -C), when
  // set, replaces the host's for the run's connection.
  absl::StatusOr<double> Measure(int seconds,
                                 const std::string& congestion_control = "");

 private:
  // One client run of `args` (-t or -n); the receiver's bytes per second.
  absl::StatusOr<double> Run(const std::vector<std::string>& args,
                             absl::Duration timeout);
  Iperf3(std::string binary, int port, Child server)
      : binary_(std::move(binary)), port_(port), server_(std::move(server)) {}
  const std::string binary_;
  const int port_;
  Child server_;
};

// Which of gRPC's server APIs serves a bare stream. The client is the same
// for all three (the synchronous generated stub).
enum class GrpcServerApi {
  // The bench's anchor: a generated synchronous handler, one gRPC thread per
  // call blocking in ServerReader::Read / ServerWriter::Write.
  kSync,
  // The callback API, as ps_server's push and pull (server/ps_service.h): a
  // reactor whose OnReadDone / OnWriteDone starts the next read or write,
  // run on gRPC's callback threads.
  kCallback,
  // The completion-queue (async) API: one thread of the stream's own polls
  // a ServerCompletionQueue and runs every call's next step where its event
  // arrives.
  kCompletionQueue,
};

// A bare stream's HTTP/2 settings, message size and server API. The
// defaults are the bench's anchor: gRPC's own settings, 1 MiB messages, the
// process's shared connection to the address (common/grpc_util.h
// MakeChannel), the synchronous API.
struct GrpcStreamOptions {
  std::vector<std::pair<std::string, int>> server_args;  // upload's receiver
  std::vector<std::pair<std::string, int>> client_args;  // download's receiver
  uint64_t message_bytes = 1 << 20;
  GrpcServerApi server_api = GrpcServerApi::kSync;
  // Every upload (download) on one call that outlives it (UploadSession,
  // DownloadSession in bench.proto) instead of a call of its own: what a
  // push or pull protocol whose call spans steps would save. Not with the
  // completion-queue API.
  bool session = false;
  // Non-empty: the stream's server runs elsewhere (host:port; e.g. a process
  // of its own started with GrpcStream::Serve), and Start starts none and
  // connects there; server_api and server_args are that server's.
  std::string server_address;
};

// A BlobStream service on 127.0.0.1:0 and a client channel to it (with
// client_args, a connection of its own).
class GrpcStream {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcStream>> Start(
      GrpcStreamOptions options = {});
  // The server alone (options' server side) on 127.0.0.1:port(), with no
  // client: a bare stream whose client is in another process.
  static absl::StatusOr<std::unique_ptr<GrpcStream>> Serve(
      GrpcStreamOptions options);
  int port() const { return port_; }
  ~GrpcStream();
  // Bytes per second of `bytes` sent client -> server (Upload) and
  // server -> client (Download), options.message_bytes per message; with
  // options.session, from the first message to the server's answer (the
  // last message) on the session's call.
  absl::StatusOr<double> Upload(uint64_t bytes);
  absl::StatusOr<double> Download(uint64_t bytes);
  // The steady state on the stream's one long-lived connection:
  // StepsTimed(`steps`) uploads (downloads) of `bytes` one after the other,
  // the first apart (cold the first time the stream is used, warm after),
  // then kSettleSteps in no figure, the median of the `steps` others
  // (SettledRateOf, stats.h). The first error ends it.
  absl::StatusOr<SteadyRate> UploadSteady(uint64_t bytes, int steps);
  absl::StatusOr<SteadyRate> DownloadSteady(uint64_t bytes, int steps);

 private:
  class Service;         // kSync
  class ReactorService;  // kCallback
  class QueueServer;     // kCompletionQueue: its service, queue and thread
  explicit GrpcStream(GrpcStreamOptions options);
  absl::Status StartServer();  // options_' server on 127.0.0.1:port_
  absl::Status StartQueueServer(int* port);
  // Upload and Download with options_.session: the session's call opened by
  // the first, a failure ends it (the next opens another).
  absl::StatusOr<double> UploadInSession(uint64_t bytes);
  absl::StatusOr<double> DownloadInSession(uint64_t bytes);
  const GrpcStreamOptions options_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<QueueServer> queue_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pstrain::bench::v1::BlobStream::Stub>
      stub_;      // null in Serve's
  int port_ = 0;  // the server's, when this process runs it
  std::unique_ptr<grpc::ClientContext> upload_context_;
  std::unique_ptr<grpc::ClientReaderWriter<pstrain::bench::v1::Blob,
                                           pstrain::bench::v1::UploadResponse>>
      upload_session_;
  std::unique_ptr<grpc::ClientContext> download_context_;
  std::unique_ptr<grpc::ClientReaderWriter<pstrain::bench::v1::DownloadRequest,
                                           pstrain::bench::v1::Blob>>
      download_session_;
};

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_WIRE_H_
