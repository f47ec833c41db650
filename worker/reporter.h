// A worker's step records, sent to the coordinator in batches (Report), with
// the byte counters of its client or ring.
#ifndef PSTRAIN_WORKER_REPORTER_H_
#define PSTRAIN_WORKER_REPORTER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/allreduce/allreducer.h"
#include "worker/ps/ps_client.h"

namespace pstrain {

// Sends step records to the coordinator in batches. Not thread-safe.
class Reporter {
 public:
  Reporter(pstrain::v1::Coordinator::Stub* stub, absl::Duration timeout,
           absl::Duration interval)
      : stub_(stub), timeout_(timeout), interval_(interval) {}

  // The rank and the session id its registration got (every report
  // carries both).
  void set_worker(uint32_t rank, uint64_t session_id) {
    worker_ = rank;
    session_id_ = session_id;
  }
  // training.on_failure: restart: reports carry the generation; a rollback
  // drops the records of the old one (the steps are redone).
  void set_generation(uint64_t generation);
  // A report in flight is cancelled once `cancel()` turns true (a hung
  // coordinator must not hold the worker for rpc_timeout_s); null: never.
  void set_cancel(std::function<bool()> cancel) { cancel_ = std::move(cancel); }

  // Byte counters come from `client` (PS modes) or `reducer` (mode
  // allreduce: sent, received) once it exists (may stay null).
  // A new client or reducer (after a rollback) continues the old one's
  // counts.
  void set_client(const PsClient* client);
  void set_reducer(const AllReducer* reducer);

  // Mode allreduce: the fingerprint of the final weights, which the next
  // report carries (ReportRequest.weights_fingerprint); set it just before
  // the final Flush(true, "").
  void set_weights_fingerprint(uint64_t fingerprint) {
    pending_.set_weights_fingerprint(fingerprint);
  }

  // After an in-process rollback: the next report carries the step this
  // worker resumed at (ReportRequest.resumed_at_step); call it after
  // set_generation of the new generation or before, the report that
  // carries it is of the new one.
  void set_resumed_at_step(uint64_t step) {
    pending_.set_resumed_at_step(step);
  }

  // Adds a record; sends the batch once `interval` has passed since the
  // last report.
  absl::Status Add(const pstrain::v1::StepMetrics& m);

  // Sends what is pending, waiting at most `timeout` (and rpc_timeout_s)
  // for the coordinator.
  absl::Status Flush(bool done, const std::string& error,
                     absl::Duration timeout = absl::InfiniteDuration());

  // The last report of a worker that stops on a signal (ReportRequest.stopped).
  absl::Status FlushStopped(const std::string& error, absl::Duration timeout);

  // Whether an answer asked the worker to stop (ReportResponse.stop).
  bool stop() const { return stop_; }

 private:
  pstrain::v1::Coordinator::Stub* const stub_;
  const absl::Duration timeout_, interval_;
  const PsClient* client_ = nullptr;
  const AllReducer* reducer_ = nullptr;
  pstrain::v1::ReportRequest pending_;
  std::function<bool()> cancel_;
  uint32_t worker_ = 0;
  uint64_t session_id_ = 0;
  uint64_t generation_ = 0;
  uint64_t base_pushed_ = 0, base_pulled_ = 0;  // earlier clients' bytes
  absl::Time last_ = absl::Now();
  bool stop_ = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_REPORTER_H_
