#include "coordinator/coordinator.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/model_spec.h"
#include "common/sharding.h"
#include "common/status_macros.h"

namespace pstrain {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

absl::StatusOr<pstrain::v1::JobSpec> MakeJobSpec(const JobConfig& c) {
  PS_RETURN_IF_ERROR(ValidateJobConfig(c));
  PS_ASSIGN_OR_RETURN(std::vector<pstrain::v1::TensorSpec> tensors,
                      ModelParamSpecs(c.model));
  // All-reduce jobs have no servers (job.servers is ignored): the shard map
  // only lists the tensors.
  const bool allreduce = c.mode == pstrain::v1::MODE_ALLREDUCE;
  const int servers = allreduce ? 0 : c.servers;
  pstrain::v1::JobSpec job;
  job.set_job_name(c.name);
  job.set_mode(c.mode);
  job.set_staleness(c.staleness);
  job.set_num_workers(c.workers);
  job.set_num_servers(servers);
  job.set_steps(c.steps);
  job.set_backup_workers(c.backup_workers);
  job.set_staleness_aware_lr(c.staleness_aware_lr);
  job.set_dc_lambda(c.dc_lambda);
  *job.mutable_optimizer() = c.optimizer;
  if (allreduce) {
    for (auto& t : tensors) *job.mutable_shard_map()->add_tensors() = t;
  } else {
    const uint64_t chunk_elems = c.chunk_bytes > 0
                                     ? c.chunk_bytes / sizeof(float)
                                     : AutoChunkElems(tensors, servers);
    PS_ASSIGN_OR_RETURN(*job.mutable_shard_map(),
                        BuildShardMap(tensors, servers, chunk_elems));
  }
  job.set_worker_config(JobConfigToYaml(c));
  return job;
}

absl::StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Create(
    CoordinatorOptions options) {
  PS_ASSIGN_OR_RETURN(pstrain::v1::JobSpec job, MakeJobSpec(options.config));
  std::unique_ptr<CoordinatorService> svc(
      new CoordinatorService(std::move(options), std::move(job)));
  absl::MutexLock lock(&svc->mu_);
  if (!svc->options_.metrics_csv.empty()) {
    svc->csv_ = std::fopen(svc->options_.metrics_csv.c_str(), "w");
    if (svc->csv_ == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot write metrics file ", svc->options_.metrics_csv));
    }
    std::fprintf(svc->csv_,
                 "step,wall_s,loss,samples,samples_per_s,compute_s,pull_s,"
                 "push_s,eval_accuracy,eval_loss\n");
  }
  return svc;
}

CoordinatorService::CoordinatorService(CoordinatorOptions options,
                                       pstrain::v1::JobSpec job)
    : options_(std::move(options)),
      num_workers_(options_.config.workers),
      job_(std::move(job)) {
  server_addresses_.resize(job_.num_servers());
  server_ready_.assign(job_.num_servers(), false);
  peer_addresses_.resize(num_workers_);
  rank_taken_.assign(num_workers_, false);
  worker_done_.assign(num_workers_, false);
  bytes_pushed_.assign(num_workers_, 0);
  bytes_pulled_.assign(num_workers_, 0);
  if (MetricsRegistry* r = options_.metrics) {
    metrics_ = std::make_unique<Metrics>(Metrics{
        r->AddGauge("pstrain_coordinator_steps",
                    "Training steps completed by every worker."),
        r->AddGauge("pstrain_coordinator_loss",
                    "Training loss of the last complete step."),
        r->AddGauge("pstrain_coordinator_samples_per_second",
                    "Training throughput since the start."),
        r->AddGauge("pstrain_coordinator_eval_accuracy",
                    "Last evaluation accuracy (summed counts / total)."),
        r->AddGauge("pstrain_coordinator_live_workers",
                    "Workers registered and not yet finished."),
        r->AddGauge("pstrain_coordinator_registered_servers",
                    "Server shards registered."),
        r->AddCounter("pstrain_coordinator_samples_total",
                      "Training examples processed by all workers."),
    });
  }
}

void CoordinatorService::UpdateLiveWorkersLocked() {
  if (metrics_ == nullptr) return;
  int live = 0;
  for (uint32_t r = 0; r < num_workers_; ++r) {
    live += rank_taken_[r] && !worker_done_[r];
  }
  metrics_->live_workers->Set(live);
}

CoordinatorService::~CoordinatorService() {
  absl::MutexLock lock(&mu_);
  if (csv_ != nullptr) std::fclose(csv_);
}

bool CoordinatorService::AllServersRegisteredLocked() const {
  for (const auto& a : server_addresses_) {
    if (a.empty()) return false;
  }
  return true;
}

bool CoordinatorService::AllServersReadyLocked() const {
  for (bool r : server_ready_) {
    if (!r) return false;
  }
  return true;
}

Status CoordinatorService::RegisterServer(
    ServerContext* context, const pstrain::v1::RegisterServerRequest* request,
    pstrain::v1::RegisterServerResponse* response) {
  if (request->address().empty()) {
    return Status(StatusCode::INVALID_ARGUMENT, "server address is empty");
  }
  absl::MutexLock lock(&mu_);
  if (ended_) {
    return Status(
        StatusCode::FAILED_PRECONDITION,
        absl::StrCat("job '", options_.config.name, "' has already finished"));
  }
  const int k = static_cast<int>(server_addresses_.size());
  // A retry from the same address gets the same shard back.
  for (int s = 0; s < k; ++s) {
    if (server_addresses_[s] == request->address()) {
      response->set_shard(s);
      return Status::OK;
    }
  }
  int shard = request->requested_shard();
  if (shard >= k) {
    return Status(StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("requested shard ", shard, " but the job has ",
                               k, " servers"));
  }
  if (shard < 0) {
    for (shard = 0; shard < k && !server_addresses_[shard].empty(); ++shard) {
    }
    if (shard == k) {
      return Status(StatusCode::RESOURCE_EXHAUSTED,
                    absl::StrCat("all ", k, " server shards are taken"));
    }
  } else if (!server_addresses_[shard].empty()) {
    return Status(StatusCode::ALREADY_EXISTS,
                  absl::StrCat("shard ", shard, " is already held by ",
                               server_addresses_[shard]));
  }
  server_addresses_[shard] = request->address();
  if (metrics_ != nullptr) {
    metrics_->registered_servers->Set(
        static_cast<double>(k - std::count(server_addresses_.begin(),
                                           server_addresses_.end(), "")));
  }
  job_.mutable_shard_map()->clear_server_addresses();
  for (const auto& a : server_addresses_)
    job_.mutable_shard_map()->add_server_addresses(a);
  PS_LOG_INFO("server shard %d registered at %s", shard, request->address());
  response->set_shard(shard);
  return Status::OK;
}

Status CoordinatorService::GetJob(ServerContext* context,
                                  const pstrain::v1::GetJobRequest* request,
                                  pstrain::v1::JobSpec* response) {
  absl::MutexLock lock(&mu_);
  if (request->wait_for_servers() &&
      !mu_.AwaitWithDeadline(
          absl::Condition(this,
                          &CoordinatorService::AllServersRegisteredLocked),
          ServerDeadline(*context, options_.wait_cap))) {
    return Status(StatusCode::DEADLINE_EXCEEDED,
                  "not every server shard has registered yet");
  }
  *response = job_;
  return Status::OK;
}

Status CoordinatorService::ServerReady(
    ServerContext* context, const pstrain::v1::ServerReadyRequest* request,
    pstrain::v1::ServerReadyResponse* response) {
  absl::MutexLock lock(&mu_);
  if (request->shard() >= server_ready_.size()) {
    return Status(StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("unknown shard ", request->shard()));
  }
  server_ready_[request->shard()] = true;
  if (AllServersReadyLocked())
    PS_LOG_INFO("all %d server shards ready", server_ready_.size());
  return Status::OK;
}

Status CoordinatorService::RegisterWorker(
    ServerContext* context, const pstrain::v1::RegisterWorkerRequest* request,
    pstrain::v1::RegisterWorkerResponse* response) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(
          absl::Condition(this, &CoordinatorService::AllServersReadyLocked),
          ServerDeadline(*context, options_.wait_cap))) {
    return Status(StatusCode::DEADLINE_EXCEEDED,
                  "server shards are not ready yet");
  }
  if (ended_) {
    return Status(
        StatusCode::FAILED_PRECONDITION,
        absl::StrCat("job '", options_.config.name, "' has already finished"));
  }
  int rank = request->requested_rank();
  if (rank >= static_cast<int>(num_workers_)) {
    return Status(StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("requested rank ", rank, " but the job has ",
                               num_workers_, " workers"));
  }
  if (rank < 0) {
    for (rank = 0; rank < static_cast<int>(num_workers_) && rank_taken_[rank];
         ++rank) {
    }
    if (rank == static_cast<int>(num_workers_)) {
      return Status(
          StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("all ", num_workers_, " worker ranks are taken"));
    }
  } else if (rank_taken_[rank]) {
    return Status(StatusCode::ALREADY_EXISTS,
                  absl::StrCat("worker rank ", rank, " is already registered"));
  }
  if (job_.mode() == pstrain::v1::MODE_ALLREDUCE) {
    if (request->peer_address().empty()) {
      return Status(StatusCode::INVALID_ARGUMENT,
                    "mode allreduce: the worker must register its ring peer "
                    "address (RegisterWorkerRequest.peer_address)");
    }
    peer_addresses_[rank] = request->peer_address();
    PS_LOG_INFO("worker %d's ring peer at %s", rank, request->peer_address());
  }
  rank_taken_[rank] = true;
  UpdateLiveWorkersLocked();
  if (std::count(rank_taken_.begin(), rank_taken_.end(), true) ==
      static_cast<long>(num_workers_)) {
    train_start_ = absl::Now();
    PS_LOG_INFO("all %d workers registered; training starts", num_workers_);
  }
  response->set_rank(rank);
  *response->mutable_job() = job_;
  return Status::OK;
}

void CoordinatorService::EmitCompleteStepsLocked() {
  const double start = absl::ToUnixNanos(train_start_) * 1e-9;
  const uint64_t total_steps = options_.config.steps;
  for (auto it = steps_.find(next_row_);
       it != steps_.end() && it->second.reports == num_workers_;
       it = steps_.find(++next_row_)) {
    const StepAgg& a = it->second;
    // Record `total_steps` is the final evaluation, not a training step.
    const bool final_eval = it->first == total_steps;
    const double wall = std::max(0.0, a.end_unix_s - start);
    const double loss = a.samples ? a.loss_sum / a.samples : 0.0;
    if (!final_eval) {
      outcome_.steps = it->first + 1;
      outcome_.samples += a.samples;
      outcome_.final_loss = loss;
      outcome_.wall_s = wall;
      if (metrics_ != nullptr) {
        metrics_->steps->Set(static_cast<double>(outcome_.steps));
        metrics_->loss->Set(loss);
        metrics_->samples->Inc(static_cast<double>(a.samples));
        metrics_->samples_per_second->Set(wall > 0 ? outcome_.samples / wall
                                                   : 0);
      }
    }
    if (metrics_ != nullptr && a.eval_total > 0) {
      metrics_->eval_accuracy->Set(static_cast<double>(a.eval_correct) /
                                   a.eval_total);
    }
    std::string acc, eval_loss;
    if (a.eval_total > 0) {
      eval_loss = absl::StrFormat("%.6g", a.eval_loss_sum / a.eval_total);
      if (IsClassifier(options_.config.model)) {
        acc = absl::StrFormat(
            "%.6f", static_cast<double>(a.eval_correct) / a.eval_total);
      }
    }
    if (csv_ != nullptr) {
      absl::FPrintF(
          csv_, "%d,%.6f,%s,%d,%.2f,%.6f,%.6f,%.6f,%s,%s\n", it->first, wall,
          final_eval ? "" : absl::StrFormat("%.8g", loss), a.samples,
          wall > 0 ? outcome_.samples / wall : 0.0, a.compute_s / num_workers_,
          a.pull_s / num_workers_, a.push_s / num_workers_, acc, eval_loss);
    }
    const absl::Time now = absl::Now();
    if (options_.progress && !final_eval &&
        (now - last_progress_ > absl::Seconds(1) ||
         it->first + 1 == total_steps)) {
      last_progress_ = now;
      PS_LOG_INFO("step %d/%d  loss %.5f  %.0f samples/s  %.1fs%s",
                  it->first + 1, options_.config.steps, loss,
                  wall > 0 ? outcome_.samples / wall : 0.0, wall,
                  acc.empty() ? "" : absl::StrCat("  eval acc ", acc));
    }
    steps_.erase(it);
  }
  if (csv_ != nullptr) std::fflush(csv_);
}

Status CoordinatorService::Report(ServerContext* context,
                                  const pstrain::v1::ReportRequest* request,
                                  pstrain::v1::ReportResponse* response) {
  absl::MutexLock lock(&mu_);
  if (request->worker() >= num_workers_ || !rank_taken_[request->worker()]) {
    return Status(StatusCode::NOT_FOUND,
                  absl::StrCat("unknown worker ", request->worker()));
  }
  for (const auto& m : request->steps()) {
    if (m.worker() != request->worker()) {
      return Status(StatusCode::INVALID_ARGUMENT,
                    absl::StrCat("worker ", request->worker(),
                                 " reported a step of worker ", m.worker()));
    }
    if (m.worker() >= num_workers_ || !rank_taken_[m.worker()]) {
      return Status(StatusCode::NOT_FOUND,
                    absl::StrCat("unknown worker ", m.worker()));
    }
  }
  for (const auto& m : request->steps()) {
    StepAgg& a = steps_[m.step()];
    ++a.reports;
    a.loss_sum += m.loss() * m.samples();
    a.samples += m.samples();
    a.compute_s += m.compute_s();
    a.pull_s += m.pull_s();
    a.push_s += m.push_s();
    a.end_unix_s = std::max(a.end_unix_s, m.end_unix_s());
    a.eval_correct += m.eval_correct();
    a.eval_total += m.eval_total();
    a.eval_loss_sum += m.eval_loss_sum();
    // The final evaluation comes as a step == steps record.
    if (m.step() == static_cast<uint64_t>(options_.config.steps) &&
        m.eval_total() > 0) {
      outcome_.has_accuracy = IsClassifier(options_.config.model);
    }
    bytes_pushed_[m.worker()] = request->bytes_pushed();
    bytes_pulled_[m.worker()] = request->bytes_pulled();
  }
  // The final evaluation record (step == steps) is not a training row.
  auto fin = steps_.find(options_.config.steps);
  if (fin != steps_.end() && fin->second.reports == num_workers_) {
    const StepAgg& a = fin->second;
    outcome_.final_accuracy =
        a.eval_total ? static_cast<double>(a.eval_correct) / a.eval_total : 0;
    outcome_.final_eval_loss =
        a.eval_total ? a.eval_loss_sum / a.eval_total : 0;
  }
  EmitCompleteStepsLocked();
  if (!request->error().empty()) {
    outcome_.failed = true;
    outcome_.message = request->error();
    ended_ = true;
    PS_LOG_ERROR("a worker failed: %s", request->error());
  }
  // A final report may carry no step records (they went out in the batch
  // before), so the sender is named by `worker`, not by its records.
  if (request->done()) {
    worker_done_[request->worker()] = true;
    UpdateLiveWorkersLocked();
    if (std::count(worker_done_.begin(), worker_done_.end(), true) ==
        static_cast<long>(num_workers_)) {
      ended_ = true;
      PS_LOG_INFO("all %d workers finished", num_workers_);
    }
  }
  response->set_stop(ended_);
  return Status::OK;
}

bool CoordinatorService::PeersKnownLocked() const {
  if (ended_) return true;
  for (const auto& a : peer_addresses_) {
    if (a.empty()) return false;
  }
  return options_.config.allreduce.backend != "nccl" ||
         !nccl_unique_id_.empty();
}

Status CoordinatorService::GetPeers(ServerContext* context,
                                    const pstrain::v1::GetPeersRequest* request,
                                    pstrain::v1::GetPeersResponse* response) {
  absl::MutexLock lock(&mu_);
  if (job_.mode() != pstrain::v1::MODE_ALLREDUCE) {
    return Status(StatusCode::FAILED_PRECONDITION,
                  "GetPeers: the job is not in mode allreduce");
  }
  if (request->rank() >= num_workers_ || !rank_taken_[request->rank()]) {
    return Status(StatusCode::NOT_FOUND,
                  absl::StrCat("GetPeers: worker rank ", request->rank(),
                               " has not registered"));
  }
  if (request->rank() == 0 && !request->nccl_unique_id().empty()) {
    nccl_unique_id_ = request->nccl_unique_id();
  }
  if (!mu_.AwaitWithDeadline(
          absl::Condition(this, &CoordinatorService::PeersKnownLocked),
          ServerDeadline(*context, options_.wait_cap))) {
    std::vector<std::string> missing;
    for (uint32_t r = 0; r < num_workers_; ++r) {
      if (peer_addresses_[r].empty()) missing.push_back(absl::StrCat(r));
    }
    return Status(
        StatusCode::DEADLINE_EXCEEDED,
        missing.empty()
            ? "rank 0 has not published its NCCL unique id yet"
            : absl::StrCat("worker ranks ", absl::StrJoin(missing, ", "),
                           " have not registered yet"));
  }
  if (ended_) {
    return Status(
        StatusCode::FAILED_PRECONDITION,
        absl::StrCat("job '", options_.config.name, "' has already ended"));
  }
  for (const auto& a : peer_addresses_) response->add_peer_addresses(a);
  response->set_nccl_unique_id(nccl_unique_id_);
  return Status::OK;
}

Status CoordinatorService::JobStatus(
    ServerContext* context, const pstrain::v1::JobStatusRequest* request,
    pstrain::v1::JobStatusResponse* response) {
  absl::MutexLock lock(&mu_);
  response->set_finished(ended_);
  response->set_failed(outcome_.failed);
  response->set_message(outcome_.message);
  return Status::OK;
}

bool CoordinatorService::WaitForEnd(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&ended_), deadline);
}

void CoordinatorService::Fail(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!outcome_.failed) {
    outcome_.failed = true;
    outcome_.message = reason;
  }
  ended_ = true;
}

bool CoordinatorService::TrainingStarted() const {
  absl::MutexLock lock(&mu_);
  return train_start_ != absl::InfinitePast();
}

JobOutcome CoordinatorService::Outcome() const {
  absl::MutexLock lock(&mu_);
  JobOutcome o = outcome_;
  for (uint64_t b : bytes_pushed_) o.bytes_pushed += b;
  for (uint64_t b : bytes_pulled_) o.bytes_pulled += b;
  return o;
}

std::vector<std::string> CoordinatorService::ServerAddresses() const {
  absl::MutexLock lock(&mu_);
  return server_addresses_;
}

namespace {
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace

absl::Status WriteSummaryJson(
    const std::string& path, const JobConfig& config, const JobOutcome& o,
    const std::vector<pstrain::v1::ShardStats>& stats) {
  uint64_t st_max = 0, pushes = 0;
  double st_sum = 0, barrier = 0;
  std::vector<uint64_t> hist;
  for (const auto& s : stats) {
    st_max = std::max(st_max, s.staleness_max());
    st_sum += s.staleness_mean() * s.pushes();
    pushes += s.pushes();
    barrier += s.barrier_wait_s();
    if (hist.size() < static_cast<size_t>(s.staleness_histogram_size())) {
      hist.resize(s.staleness_histogram_size());
    }
    for (int i = 0; i < s.staleness_histogram_size(); ++i)
      hist[i] += s.staleness_histogram(i);
  }
  const bool sync = config.mode != pstrain::v1::MODE_ASYNC;
  std::string json = absl::StrCat(
      "{\n", "  \"job\": ", JsonString(config.name), ",\n",
      absl::StrFormat("  \"mode\": \"%s\",\n",
                      config.mode == pstrain::v1::MODE_SYNC    ? "sync"
                      : config.mode == pstrain::v1::MODE_ASYNC ? "async"
                                                               : "allreduce"),
      "  \"staleness\": ",
      sync
          ? "0"
          : (config.staleness < 0 ? "\"inf\"" : absl::StrCat(config.staleness)),
      ",\n", absl::StrFormat("  \"workers\": %d,\n", config.workers),
      absl::StrFormat(
          "  \"servers\": %d,\n",
          config.mode == pstrain::v1::MODE_ALLREDUCE ? 0 : config.servers),
      absl::StrFormat("  \"steps\": %d,\n", o.steps),
      absl::StrFormat("  \"local_batch\": %d,\n", config.local_batch),
      absl::StrFormat(
          "  \"global_batch\": %d,\n",
          config.local_batch * config.workers * config.grad_accum_steps),
      absl::StrFormat("  \"wall_s\": %.4f,\n", o.wall_s),
      absl::StrFormat("  \"samples\": %d,\n", o.samples),
      absl::StrFormat("  \"samples_per_s\": %.2f,\n",
                      o.wall_s > 0 ? o.samples / o.wall_s : 0.0),
      absl::StrFormat("  \"final_loss\": %.8g,\n", o.final_loss),
      absl::StrFormat("  \"final_eval_loss\": %.8g,\n", o.final_eval_loss),
      "  \"final_accuracy\": ",
      o.has_accuracy ? absl::StrFormat("%.6f", o.final_accuracy) : "null",
      ",\n", absl::StrFormat("  \"bytes_pushed\": %d,\n", o.bytes_pushed),
      absl::StrFormat("  \"bytes_pulled\": %d,\n", o.bytes_pulled),
      absl::StrFormat("  \"staleness_max\": %d,\n", st_max),
      absl::StrFormat("  \"staleness_mean\": %.4f,\n",
                      pushes ? st_sum / pushes : 0.0),
      "  \"staleness_histogram\": [", absl::StrJoin(hist, ", "), "],\n",
      absl::StrFormat("  \"barrier_wait_s\": %.4f,\n", barrier),
      absl::StrFormat("  \"failed\": %s,\n", o.failed ? "true" : "false"),
      "  \"message\": ", JsonString(o.message), "\n}\n");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  }
  std::fputs(json.c_str(), f);
  std::fclose(f);
  return absl::OkStatus();
}

}  // namespace pstrain
