#include "worker/reporter.h"

#include <algorithm>

#include "common/grpc_util.h"
#include "common/process.h"
#include "common/status_macros.h"

namespace pstrain {

void Reporter::set_generation(uint64_t generation) {
  if (generation != generation_) pending_.clear_steps();
  generation_ = generation;
}

void Reporter::set_client(const PsClient* client) {
  if (client_ != nullptr) {
    base_pushed_ += client_->bytes_pushed();
    base_pulled_ += client_->bytes_pulled();
  }
  client_ = client;
}

void Reporter::set_reducer(const AllReducer* reducer) {
  if (reducer_ != nullptr) {
    base_pushed_ += reducer_->bytes_sent();
    base_pulled_ += reducer_->bytes_received();
  }
  reducer_ = reducer;
}

absl::Status Reporter::Add(const pstrain::v1::StepMetrics& m) {
  *pending_.add_steps() = m;
  if (absl::Now() - last_ < interval_) return absl::OkStatus();
  return Flush(false, "");
}

absl::Status Reporter::Flush(bool done, const std::string& error,
                             absl::Duration timeout) {
  pending_.set_worker(worker_);
  pending_.set_session_id(session_id_);
  pending_.set_generation(generation_);
  pending_.set_done(done);
  pending_.set_error(error);
  pending_.set_bytes_pushed(base_pushed_ + (client_    ? client_->bytes_pushed()
                                            : reducer_ ? reducer_->bytes_sent()
                                                       : 0));
  pending_.set_bytes_pulled(base_pulled_ + (client_ ? client_->bytes_pulled()
                                            : reducer_
                                                ? reducer_->bytes_received()
                                                : 0));
  grpc::ClientContext ctx;
  SetTimeout(&ctx, std::min(timeout_, timeout));
  CancelOnStop cancel(&ctx, cancel_);
  pstrain::v1::ReportResponse resp;
  PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Report(&ctx, pending_, &resp)));
  pending_.Clear();
  last_ = absl::Now();
  stop_ = stop_ || resp.stop();
  return absl::OkStatus();
}

absl::Status Reporter::FlushStopped(const std::string& error,
                                    absl::Duration timeout) {
  pending_.set_stopped(true);
  return Flush(true, error, timeout);
}

}  // namespace pstrain
