#include "tools/bench/ps_path.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cpu_placement.h"
#include "common/grpc_util.h"
#include "common/job_config.h"
#include "common/sharding.h"
#include "common/signals.h"
#include "common/sparse_rows.h"
#include "common/tensor_codec.h"
#include "server/process_memory.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "tools/bench/stats.h"
#include "tools/bench/subprocess.h"
#include "worker/ps/ps_client.h"

namespace pstrain::bench {

namespace {

using pstrain::v1::JobSpec;

// Shards behind gRPC servers on loopback; everything stops in the destructor.
class Cluster {
 public:
  // Every shard of `job`, or only shard `only_shard` (>= 0; the cluster's
  // job then has that shard's address alone).
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(
      JobSpec job,
      const std::vector<std::pair<std::string, int>>& int_args =
          PsServerChannelArgs(),
      const PsServiceOptions& options = {}, const PsPathSetting& setting = {},
      int only_shard = -1) {
    std::unique_ptr<Cluster> c(new Cluster);
    job.mutable_shard_map()->clear_server_addresses();
    std::vector<uint32_t> served;
    for (uint32_t i = 0; i < job.num_servers(); ++i) {
      if (only_shard < 0 || i == static_cast<uint32_t>(only_shard)) {
        served.push_back(i);
      }
    }
    if (served.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard ", only_shard, " of a job of ", job.num_servers()));
    }
    for (size_t k = 0; k < served.size(); ++k) {
      c->services_.push_back(std::make_unique<ParameterServerService>(options));
      absl::StatusOr<StartedServer> started =
          StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                          {c->services_.back().get()}, int_args);
      if (!started.ok()) return started.status();
      job.mutable_shard_map()->add_server_addresses(
          absl::StrCat("127.0.0.1:", started->port));
      c->servers_.push_back(std::move(started->server));
    }
    for (size_t k = 0; k < served.size(); ++k) {
      const uint32_t i = served[k];
      ShardOptions shard_options = ShardOptionsFromJob(job, i);
      shard_options.early_apply = setting.early_apply;
      shard_options.hold_first_term = setting.hold_first_term;
      shard_options.apply_terms_on_arrival = setting.apply_terms_on_arrival;
      shard_options.apply_held_in_one_pass = setting.apply_held_in_one_pass;
      if (!setting.apply_in_blocks) shard_options.apply_block = 0;
      absl::StatusOr<std::unique_ptr<Shard>> shard =
          Shard::Create(std::move(shard_options));
      if (!shard.ok()) return shard.status();
      c->shards_.push_back(std::shared_ptr<Shard>(std::move(*shard)));
      // Worker w's session id is w + 1 (NewClient below).
      std::vector<uint64_t> sessions;
      for (uint32_t w = 0;
           w < static_cast<uint32_t>(job.config().job().workers()); ++w)
        sessions.push_back(w + 1);
      c->services_[k]->SetShard(c->shards_[k],
                                WorkerSessions::Fixed(std::move(sessions)));
    }
    c->job_ = std::move(job);
    return c;
  }
  ~Cluster() {
    for (auto& s : shards_) s->Close();
    for (auto& s : servers_) {
      s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
  }
  const JobSpec& job() const { return job_; }
  // ShardStats.chunks_copied_on_write, summed over the shards.
  uint64_t ChunksCopiedOnWrite() const {
    uint64_t n = 0;
    for (const auto& s : shards_) n += s->Stats().chunks_copied_on_write();
    return n;
  }

 private:
  Cluster() = default;
  JobSpec job_;
  std::vector<std::shared_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ParameterServerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
};

// A client over its own connections (a local subchannel pool), like a
// separate worker process of `config`: its wire dtype and its push and pull
// streams as a worker picks them (worker/stand_ins.cc), except where
// `setting` names its own (setting.push_streams, pull_streams: at any
// size); the rest as `setting` says.
absl::StatusOr<std::unique_ptr<PsClient>> NewClient(
    const pstrain::v1::ShardMap& map, uint32_t rank, const JobConfig& config,
    const PsPathSetting& setting = {}) {
  PsClientOptions options;
  options.rpc_timeout = absl::Seconds(300);
  options.session_id = rank + 1;
  options.wire_dtype = config.network().wire_dtype();
  options.push_streams = PushStreams(config);
  if (setting.push_streams > 0) options.push_streams = setting.push_streams;
  options.pull_streams = PullStreams(config);
  if (setting.pull_streams > 0) options.pull_streams = setting.pull_streams;
  if (setting.push_message_bytes > 0) {
    options.push_message_bytes = setting.push_message_bytes;
  }
  options.reuse_op_threads = setting.reuse_op_threads;
  // Every channel has a local subchannel pool: a connection of its own.
  const bool bdp_probe = setting.worker_bdp_probe;
  return PsClient::Connect(
      map,
      [bdp_probe](const std::string& address, int) {
        grpc::ChannelArguments args = DefaultChannelArgs();
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        if (!bdp_probe) args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
        return grpc::CreateCustomChannel(
            address, grpc::InsecureChannelCredentials(), args);
      },
      options);
}

// What Workers::Step reads before and after each phase: the CPU time and
// the minor page faults of the processes that take part (this one alone by
// default).
struct Probes {
  std::function<CpuTimes()> cpu = ReadCpuTimes;
  std::function<uint64_t()> faults = ReadMinorFaults;
};

// `workers` clients driving sync steps together; Step() times each phase.
class Workers {
 public:
  // The workers' side of `setting` (NewClient).
  static absl::StatusOr<Workers> Create(const pstrain::v1::JobSpec& job,
                                        int workers, uint64_t elems,
                                        const PsPathSetting& setting = {}) {
    Workers w;
    for (int i = 0; i < workers; ++i) {
      absl::StatusOr<std::unique_ptr<PsClient>> c =
          NewClient(job.shard_map(), i, job.config(), setting);
      if (!c.ok()) return c.status();
      w.clients_.push_back(std::move(*c));
    }
    w.params_.resize(workers);
    w.reads_.resize(workers);
    // One gradient shared by every worker (pushes only read it); small and
    // finite so every optimizer accepts it.
    w.grad_.assign(1, std::vector<float>(elems, 1e-3f));
    return w;
  }

  // One sync step at `clock`: all pulls, then all pushes. Seconds of each.
  // One step; adds each phase's CPU time to *pull_cpu and *push_cpu and its
  // minor page faults to *pull_faults and *push_faults, as `probes` reads
  // them.
  absl::Status Step(uint64_t clock, double* pull_s, double* push_s,
                    CpuTimes* pull_cpu, CpuTimes* push_cpu,
                    uint64_t* pull_faults, uint64_t* push_faults,
                    const Probes& probes = {}) {
    const int n = static_cast<int>(clients_.size());
    std::vector<std::unique_ptr<PsOp>> ops(n);
    uint64_t faults = probes.faults();
    CpuTimes cpu = probes.cpu();
    absl::Time start = absl::Now();
    for (int i = 0; i < n; ++i) {
      ops[i] = clients_[i]->StartPull(i, clock, &params_[i]);
    }
    for (int i = 0; i < n; ++i) {
      absl::Status s = ops[i]->Wait();
      if (!s.ok()) return s;
      reads_[i] = ops[i]->reads();
    }
    *pull_s = absl::ToDoubleSeconds(absl::Now() - start);
    CpuTimes now = probes.cpu();
    *pull_cpu = AddCpuDelta(*pull_cpu, cpu, now);
    cpu = now;
    const uint64_t faults_now = probes.faults();
    // (A count that went back: a process gone, the step fails anyway.)
    *pull_faults += faults_now >= faults ? faults_now - faults : 0;
    faults = faults_now;
    start = absl::Now();
    for (int i = 0; i < n; ++i) {
      ops[i] = clients_[i]->StartPush(i, clock, 1, grad_, reads_[i]);
    }
    for (int i = 0; i < n; ++i) {
      absl::Status s = ops[i]->Wait();
      if (!s.ok()) return s;
    }
    *push_s = absl::ToDoubleSeconds(absl::Now() - start);
    *push_cpu = AddCpuDelta(*push_cpu, cpu, probes.cpu());
    const uint64_t faults_end = probes.faults();
    *push_faults += faults_end >= faults ? faults_end - faults : 0;
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PsClient>> clients_;
  std::vector<TensorList> params_;
  std::vector<std::vector<ShardRead>> reads_;
  TensorList grad_;
};

}  // namespace

absl::StatusOr<JobSpec> OneTensorJob(uint64_t elems, int servers, int workers,
                                     pstrain::v1::OptimizerConfig::Kind kind,
                                     pstrain::v1::DType wire_dtype,
                                     uint64_t chunk_bytes) {
  JobSpec job;
  job.mutable_config()->mutable_job()->set_name("bench");
  job.mutable_config()->mutable_training()->set_mode(pstrain::v1::MODE_SYNC);
  job.mutable_config()->mutable_job()->set_workers(workers);
  job.mutable_config()->mutable_job()->set_servers(servers);
  job.mutable_config()->mutable_network()->set_wire_dtype(wire_dtype);
  job.set_num_servers(servers);
  job.mutable_config()->mutable_training()->set_steps(1000);
  job.mutable_config()->mutable_training()->mutable_optimizer()->set_kind(kind);
  job.mutable_config()->mutable_training()->mutable_optimizer()->set_base_lr(
      0.01);
  if (kind == pstrain::v1::OptimizerConfig::MOMENTUM) {
    job.mutable_config()->mutable_training()->mutable_optimizer()->set_momentum(
        0.9);
  }
  pstrain::v1::TensorSpec t;
  t.set_name("w");
  t.add_shape(static_cast<int64_t>(elems));
  t.set_dtype(pstrain::v1::DTYPE_F32);
  t.mutable_init()->set_kind(pstrain::v1::InitRule::ZEROS);
  // By default the chunks a real job of this tensor gets (coordinator/
  // job_spec.cc: AutoChunkElems).
  absl::StatusOr<pstrain::v1::ShardMap> map =
      BuildShardMap({t}, servers,
                    chunk_bytes > 0 ? chunk_bytes / sizeof(float)
                                    : AutoChunkElems({t}, servers));
  if (!map.ok()) return map.status();
  *job.mutable_shard_map() = std::move(*map);
  return job;
}

namespace {

// The shards of a job, each served by a --serve_shard child of its own
// (ServeShardMain) placed on the CPUs psctl run gives ps_server
// (ServerCpus, common/cpu_placement.h); the children stop in the
// destructor.
class ApartShards {
 public:
  // Starts shard 0..servers-1 of `spec` (spec.shard is set per child) and
  // puts their addresses into *job's shard map.
  static absl::StatusOr<ApartShards> Start(const std::string& binary,
                                           ServeShardSpec spec, JobSpec* job) {
    ApartShards a;
    job->mutable_shard_map()->clear_server_addresses();
    const std::vector<int> allowed = AllowedCpus();
    for (int i = 0; i < spec.servers; ++i) {
      spec.shard = i;
      absl::StatusOr<Child> child = Child::Start(
          ServeShardArgv(binary, spec), /*pipe_stdio=*/true,
          /*stdout_file=*/"", /*stderr_file=*/"", ServerCpus(allowed, i));
      if (!child.ok()) return child.status();
      a.children_.push_back(std::move(*child));
    }
    for (Child& child : a.children_) {
      absl::StatusOr<std::string> port =
          child.ReadLine(absl::Now() + absl::Seconds(60));
      if (!port.ok()) {
        return absl::UnavailableError(absl::StrCat(
            "shard server child ", child.pid(), ": ", port.status().message()));
      }
      job->mutable_shard_map()->add_server_addresses(
          absl::StrCat("127.0.0.1:", *port));
    }
    return a;
  }
  ApartShards(ApartShards&&) = default;
  ~ApartShards() {
    for (Child& child : children_) child.CloseStdin();
    for (Child& child : children_) {
      absl::StatusOr<Finished> f = child.Wait(absl::Now() + absl::Seconds(30));
      if (!f.ok()) child.Signal(SIGKILL);
    }
  }
  std::vector<pid_t> pids() const {
    std::vector<pid_t> p;
    for (const Child& child : children_) p.push_back(child.pid());
    return p;
  }
  // Every child's minor page faults so far.
  uint64_t MinorFaults() const {
    uint64_t n = 0;
    for (const Child& child : children_) n += ReadMinorFaultsOf(child.pid());
    return n;
  }

 private:
  ApartShards() = default;
  std::vector<Child> children_;
};

}  // namespace

absl::StatusOr<PsPathResult> MeasurePsPath(uint64_t elems, int servers,
                                           int workers, int steps,
                                           const PsPathSetting& setting) {
  absl::StatusOr<JobSpec> job =
      OneTensorJob(elems, servers, workers, pstrain::v1::OptimizerConfig::SGD,
                   setting.wire_dtype, setting.chunk_bytes);
  if (!job.ok()) return job.status();
  std::unique_ptr<Cluster> cluster;  // the shards in this process, or
  std::optional<ApartShards> apart;  // each in a child process of its own
  Probes probes;
  if (setting.server_binary.empty()) {
    std::vector<std::pair<std::string, int>> server_args =
        PsServerChannelArgs();
    if (setting.server_lookahead > 0) {
      server_args.push_back(
          {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, setting.server_lookahead});
    }
    PsServiceOptions service_options;
    service_options.parse_pushes_in_place = setting.parse_in_place;
    if (setting.pull_message_bytes > 0) {
      service_options.pull_message_bytes = setting.pull_message_bytes;
    }
    absl::StatusOr<std::unique_ptr<Cluster>> started =
        Cluster::Start(*job, server_args, service_options, setting);
    if (!started.ok()) return started.status();
    cluster = std::move(*started);
    *job = cluster->job();
  } else {
    ServeShardSpec spec;
    spec.elems = elems;
    spec.workers = workers;
    spec.servers = servers;
    spec.optimizer = pstrain::v1::OptimizerConfig::SGD;
    spec.setting = setting;
    spec.variant = ServerVariants()[0];  // ps_server's process settings
    absl::StatusOr<ApartShards> started =
        ApartShards::Start(setting.server_binary, spec, &*job);
    if (!started.ok()) return started.status();
    apart.emplace(std::move(*started));
    const std::vector<pid_t> pids = apart->pids();
    probes.cpu = [pids] { return ReadCpuTimesWith(pids); };
    probes.faults = [&apart] {
      return ReadMinorFaults() + apart->MinorFaults();
    };
  }
  // ShardStats.chunks_copied_on_write of the shards in this process.
  auto copies = [&cluster]() -> double {
    return cluster != nullptr
               ? static_cast<double>(cluster->ChunksCopiedOnWrite())
               : __builtin_nan("");
  };
  absl::StatusOr<Workers> w = Workers::Create(*job, workers, elems, setting);
  if (!w.ok()) return w.status();
  std::vector<double> pull_steps, push_steps;
  CpuTimes pull_cpu, push_cpu;
  uint64_t pull_faults = 0, push_faults = 0;
  double copies_before = 0;
  for (int step = 0; step < StepsTimed(steps); ++step) {
    // The cold and settling steps' CPU time and faults (connections,
    // first-touch pages, a growing heap) are dropped.
    if (step == 1 + kSettleSteps) {
      pull_cpu = push_cpu = CpuTimes{};
      pull_faults = push_faults = 0;
      copies_before = copies();
    }
    double pull_s = 0, push_s = 0;
    absl::Status s = w->Step(step, &pull_s, &push_s, &pull_cpu, &push_cpu,
                             &pull_faults, &push_faults, probes);
    if (!s.ok()) return s;
    pull_steps.push_back(pull_s);
    push_steps.push_back(push_s);
  }
  const double bytes = static_cast<double>(elems) * sizeof(float) * workers;
  const SteadyRate push = SettledRateOf(bytes, push_steps);
  const SteadyRate pull = SettledRateOf(bytes, pull_steps);
  PsPathResult result;
  result.push_bytes_per_s = push.warm_bytes_per_s;
  result.pull_bytes_per_s = pull.warm_bytes_per_s;
  result.cold_push_bytes_per_s = push.cold_bytes_per_s;
  result.cold_pull_bytes_per_s = pull.cold_bytes_per_s;
  result.warm_steps = push.warm_steps;
  result.push_cpu_busy = BusyShare(push_cpu);
  result.pull_cpu_busy = BusyShare(pull_cpu);
  if (steps > 0) {
    result.push_faults_per_step = static_cast<double>(push_faults) / steps;
    result.pull_faults_per_step = static_cast<double>(pull_faults) / steps;
    result.copies_per_step = (copies() - copies_before) / steps;
  }
  return result;
}

namespace {

// `n` distinct ids of a table of `rows` rows, drawn from a Zipf law of
// exponent s = 1.1 (P(rank r) ~ r^-s, by inverting the continuous law's
// distribution function) and scattered over the table (rank -> id by
// SplitMix64, as hashed categorical values are).
std::vector<int64_t> ZipfIds(uint64_t n, uint64_t rows, std::mt19937_64* rng) {
  constexpr double kS = 1.1;
  const double tail = 1.0 - std::pow(static_cast<double>(rows), 1.0 - kS);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  absl::flat_hash_set<int64_t> seen;
  std::vector<int64_t> ids;
  ids.reserve(n);
  while (ids.size() < n) {
    const double x = std::pow(1.0 - uniform(*rng) * tail, 1.0 / (1.0 - kS));
    const uint64_t rank = static_cast<uint64_t>(x) - 1;
    const int64_t id = static_cast<int64_t>(SplitMix64(rank) % rows);
    if (seen.insert(id).second) ids.push_back(id);
  }
  return ids;
}

}  // namespace

absl::StatusOr<SparsePathResult> MeasureSparsePath(uint64_t unique_rows,
                                                   int dim, int servers,
                                                   int workers, int steps,
                                                   uint64_t table_rows) {
  if (unique_rows == 0 || unique_rows > table_rows / 2 || dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse path: ", unique_rows, " rows of a ", table_rows,
                     "-row table of width ", dim));
  }
  absl::StatusOr<JobSpec> job =
      OneTensorJob(1, servers, workers, pstrain::v1::OptimizerConfig::SGD);
  if (!job.ok()) return job.status();
  pstrain::v1::TensorSpec emb;
  emb.set_name("emb");
  emb.add_shape(static_cast<int64_t>(table_rows));
  emb.add_shape(dim);
  emb.set_dtype(pstrain::v1::DTYPE_F32);
  emb.set_row_sparse(true);
  emb.mutable_init()->set_kind(pstrain::v1::InitRule::NORMAL);
  emb.mutable_init()->set_scale(0.01f);
  emb.mutable_init()->set_seed(5);
  std::vector<pstrain::v1::TensorSpec> tensors(
      job->shard_map().tensors().begin(), job->shard_map().tensors().end());
  tensors.push_back(emb);
  absl::StatusOr<pstrain::v1::ShardMap> map =
      BuildShardMap(tensors, servers, kMaxChunkBytes / sizeof(float));
  if (!map.ok()) return map.status();
  *job->mutable_shard_map() = std::move(*map);
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(*job);
  if (!cluster.ok()) return cluster.status();
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int i = 0; i < workers; ++i) {
    absl::StatusOr<std::unique_ptr<PsClient>> c =
        NewClient((*cluster)->job().shard_map(), i, job->config());
    if (!c.ok()) return c.status();
    clients.push_back(std::move(*c));
  }
  // Every step's ids, drawn before anything is timed.
  std::mt19937_64 rng(17);
  std::vector<std::vector<std::vector<int64_t>>> ids(StepsTimed(steps));
  for (auto& step : ids) {
    for (int i = 0; i < workers; ++i) {
      step.push_back(ZipfIds(unique_rows, table_rows, &rng));
    }
  }
  const std::vector<float> grad(unique_rows * dim, 1e-3f);
  std::vector<double> pull_steps, push_steps;
  std::vector<std::unique_ptr<PsOp>> ops(workers);
  std::vector<std::vector<RowSet>> pulled(workers);
  std::vector<std::vector<ShardRead>> reads(workers);
  for (int step = 0; step < StepsTimed(steps); ++step) {
    absl::Time start = absl::Now();
    for (int i = 0; i < workers; ++i) {
      ops[i] = clients[i]->StartPullRows(
          i, step, {RowSet{"emb", ids[step][i], {}}}, &pulled[i]);
    }
    for (int i = 0; i < workers; ++i) {
      if (absl::Status s = ops[i]->Wait(); !s.ok()) return s;
      reads[i] = ops[i]->reads();
    }
    pull_steps.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    for (int i = 0; i < workers; ++i) {
      if (pulled[i].size() != 1 || pulled[i][0].values.size() != grad.size()) {
        return absl::InternalError("sparse path: a pull returned other rows");
      }
    }
    start = absl::Now();
    for (int i = 0; i < workers; ++i) {
      ops[i] = clients[i]->StartPushRows(
          i, step, 1, {RowSet{"emb", ids[step][i], grad}}, reads[i]);
    }
    for (int i = 0; i < workers; ++i) {
      if (absl::Status s = ops[i]->Wait(); !s.ok()) return s;
    }
    push_steps.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  const double rows = static_cast<double>(unique_rows) * workers;
  const SteadyRate push = SettledRateOf(rows, push_steps);
  const SteadyRate pull = SettledRateOf(rows, pull_steps);
  SparsePathResult result;
  result.push_rows_per_s = push.warm_bytes_per_s;
  result.pull_rows_per_s = pull.warm_bytes_per_s;
  result.push_bytes_per_s = result.push_rows_per_s * dim * sizeof(float);
  result.pull_bytes_per_s = result.pull_rows_per_s * dim * sizeof(float);
  result.warm_steps = push.warm_steps;
  return result;
}

absl::StatusOr<double> ShardApplySeconds(
    uint64_t elems, pstrain::v1::OptimizerConfig::Kind kind, int threads,
    int repeats, bool in_blocks) {
  absl::StatusOr<JobSpec> job = OneTensorJob(elems, 1, 1, kind);
  if (!job.ok()) return job.status();
  ShardOptions options = ShardOptionsFromJob(*job, 0);
  options.apply_threads = threads;
  if (!in_blocks) options.apply_block = 0;
  // The whole step at the commit, where PushResult.apply_seconds sees it.
  options.early_apply = false;
  absl::StatusOr<std::unique_ptr<Shard>> shard =
      Shard::Create(std::move(options));
  if (!shard.ok()) return shard.status();
  const std::vector<float> grad(elems, 1e-3f);
  std::vector<pstrain::v1::ChunkData> data((*shard)->chunks().size());
  std::vector<const pstrain::v1::ChunkData*> chunks;
  for (size_t k = 0; k < data.size(); ++k) {
    const LocalChunk& c = (*shard)->chunks()[k];
    EncodeChunk(c.tensor, c.index, grad.data() + c.tensor_offset, c.length,
                &data[k]);
    chunks.push_back(&data[k]);
  }
  double best = 0;
  for (int step = 0; step <= repeats; ++step) {
    pstrain::v1::PushHeader header;
    header.set_worker(0);
    header.set_clock(step);
    header.set_read_version(step);
    header.set_read_min_clock(step);
    header.set_num_samples(1);
    absl::StatusOr<PushResult> r = (*shard)->Push(header, chunks);
    if (!r.ok()) return r.status();
    if (!r->applied) return absl::InternalError("the step was not applied");
    if (step == 0) continue;  // warm-up: first-touch pages
    if (best == 0 || r->apply_seconds < best) best = r->apply_seconds;
  }
  return best;
}

std::vector<ServerVariant> ServerVariants() {
  bool shipped_bdp = true;
  for (const auto& [key, value] : PsServerChannelArgs()) {
    if (key == GRPC_ARG_HTTP2_BDP_PROBE) shipped_bdp = value != 0;
  }
  const ProcessMemoryOptions process;  // what ps_server applies
  ServerVariant shipped;
  shipped.name = "as shipped";
  shipped.bdp_probe = shipped_bdp;
  shipped.mmap_threshold = process.mmap_threshold_bytes;
  shipped.trim_threshold = process.trim_threshold_bytes;
  shipped.malloc_arena_max = process.malloc_arena_max;
  shipped.grpc_tcp_read_chunks = process.grpc_tcp_read_chunks;
  std::vector<ServerVariant> v = {shipped};
  auto add = [&](const std::string& name, auto change) {
    ServerVariant x = shipped;
    x.name = name;
    change(x);
    v.push_back(x);
  };
  add(shipped_bdp ? "BDP probe off" : "BDP probe on (gRPC default)",
      [&](ServerVariant& x) { x.bdp_probe = !shipped_bdp; });
  add("glibc malloc defaults", [](ServerVariant& x) {
    x.mmap_threshold = 0;
    x.trim_threshold = 0;
    x.malloc_arena_max = 0;
  });
  add("glibc trim threshold (128 KiB)",
      [](ServerVariant& x) { x.trim_threshold = 0; });
  add("2 malloc arenas", [](ServerVariant& x) { x.malloc_arena_max = 2; });
  add(absl::StrCat("gRPC read buffers ",
                   process.grpc_tcp_read_chunks ? "bounded" : "unbounded",
                   " (tcp_read_chunks ",
                   process.grpc_tcp_read_chunks ? "off" : "on", ")"),
      [&](ServerVariant& x) {
        x.grpc_tcp_read_chunks = !process.grpc_tcp_read_chunks;
      });
  // Push streams summed at once: the other choice than the shipped one.
  const int shipped_pushes = PsServiceOptions{}.max_concurrent_pushes;
  const int other_pushes = shipped_pushes == 1 ? 2 : 1;
  add(absl::StrCat(other_pushes, " push stream(s) summed at once"),
      [&](ServerVariant& x) { x.max_concurrent_pushes = other_pushes; });
  // The server before process_memory.h: glibc's and gRPC's defaults.
  add("BDP probe off only (the server before)", [](ServerVariant& x) {
    x.bdp_probe = false;
    x.mmap_threshold = 0;
    x.trim_threshold = 0;
    x.malloc_arena_max = 0;
    x.grpc_tcp_read_chunks = true;
  });
  return v;
}

namespace {

std::string BoolFlag(const char* name, bool value) {
  return absl::StrCat("--", name, "=", value ? "true" : "false");
}

}  // namespace

std::vector<std::string> ServeShardArgv(const std::string& self,
                                        const ServeShardSpec& spec) {
  const ServerVariant& v = spec.variant;
  const PsPathSetting& p = spec.setting;
  return {self,
          "--serve_shard",
          absl::StrCat("--elems=", spec.elems),
          absl::StrCat("--workers=", spec.workers),
          absl::StrCat("--servers=", spec.servers),
          absl::StrCat("--shard=", spec.shard),
          absl::StrCat("--optimizer=", static_cast<int>(spec.optimizer)),
          BoolFlag("bdp_probe", v.bdp_probe),
          absl::StrCat("--mmap_threshold=", v.mmap_threshold),
          absl::StrCat("--trim_threshold=", v.trim_threshold),
          absl::StrCat("--max_concurrent_pushes=", v.max_concurrent_pushes),
          absl::StrCat("--malloc_arena_max=", v.malloc_arena_max),
          BoolFlag("grpc_tcp_read_chunks", v.grpc_tcp_read_chunks),
          absl::StrCat("--wire_dtype=", static_cast<int>(p.wire_dtype)),
          absl::StrCat("--chunk_bytes=", p.chunk_bytes),
          BoolFlag("early_apply", p.early_apply),
          BoolFlag("hold_first_term", p.hold_first_term),
          BoolFlag("apply_terms_on_arrival", p.apply_terms_on_arrival),
          BoolFlag("apply_held_in_one_pass", p.apply_held_in_one_pass),
          BoolFlag("apply_in_blocks", p.apply_in_blocks),
          absl::StrCat("--server_lookahead=", p.server_lookahead),
          absl::StrCat("--pull_message_bytes=", p.pull_message_bytes),
          BoolFlag("parse_in_place", p.parse_in_place)};
}

int ServeShardMain(const ServeShardSpec& spec) {
  const ServerVariant& variant = spec.variant;
  // First: before any thread and any gRPC call.
  ProcessMemoryOptions process;
  process.mmap_threshold_bytes = variant.mmap_threshold;
  process.trim_threshold_bytes = variant.trim_threshold;
  process.malloc_arena_max = variant.malloc_arena_max;
  process.grpc_tcp_read_chunks = variant.grpc_tcp_read_chunks;
  if (absl::Status st = ConfigureProcessMemory(process); !st.ok()) {
    fprintf(stderr, "ps_bench --serve_shard: %s\n", st.ToString().c_str());
    return 1;
  }
  InstallStopSignalHandlers();
  absl::StatusOr<JobSpec> job =
      OneTensorJob(spec.elems, spec.servers, spec.workers, spec.optimizer,
                   spec.setting.wire_dtype, spec.setting.chunk_bytes);
  PsServiceOptions options;
  if (variant.max_concurrent_pushes >= 0) {
    options.max_concurrent_pushes = variant.max_concurrent_pushes;
  }
  options.parse_pushes_in_place = spec.setting.parse_in_place;
  if (spec.setting.pull_message_bytes > 0) {
    options.pull_message_bytes = spec.setting.pull_message_bytes;
  }
  std::vector<std::pair<std::string, int>> args = PsServerChannelArgs();
  for (auto& [key, value] : args) {
    if (key == GRPC_ARG_HTTP2_BDP_PROBE) value = variant.bdp_probe ? 1 : 0;
  }
  if (spec.setting.server_lookahead > 0) {
    args.push_back(
        {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, spec.setting.server_lookahead});
  }
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      job.ok() ? Cluster::Start(*job, args, options, spec.setting, spec.shard)
               : absl::StatusOr<std::unique_ptr<Cluster>>(job.status());
  if (!cluster.ok()) {
    fprintf(stderr, "ps_bench --serve_shard: %s\n",
            cluster.status().ToString().c_str());
    return 1;
  }
  const std::string& address =
      (*cluster)->job().shard_map().server_addresses(0);
  printf("%s\n", address.substr(address.rfind(':') + 1).c_str());
  fflush(stdout);
  const absl::Time deadline = absl::Now() + absl::Minutes(30);
  char buf[256];
  while (!StopRequested() && absl::Now() < deadline) {
    pollfd p{0, POLLIN, 0};
    if (poll(&p, 1, 200) > 0 && read(0, buf, sizeof buf) <= 0) break;
  }
  return 0;
}

absl::StatusOr<ServerMemory> MeasureServerMemory(const std::string& self,
                                                 uint64_t elems, int workers,
                                                 int steps,
                                                 const ServerVariant& variant) {
  ServeShardSpec spec;
  spec.elems = elems;
  spec.workers = workers;
  spec.variant = variant;
  absl::StatusOr<Child> child =
      Child::Start(ServeShardArgv(self, spec), /*pipe_stdio=*/true);
  if (!child.ok()) return child.status();
  absl::StatusOr<std::string> port =
      child->ReadLine(absl::Now() + absl::Seconds(60));
  if (!port.ok()) {
    return absl::UnavailableError(
        absl::StrCat("shard server child: ", port.status().message()));
  }
  absl::StatusOr<JobSpec> job =
      OneTensorJob(elems, 1, workers, pstrain::v1::OptimizerConfig::MOMENTUM);
  if (!job.ok()) return job.status();
  job->mutable_shard_map()->add_server_addresses(
      absl::StrCat("127.0.0.1:", *port));
  double pull_total = 0, push_total = 0;
  {
    absl::StatusOr<Workers> w = Workers::Create(*job, workers, elems);
    if (!w.ok()) return w.status();
    double pull_s, push_s;
    CpuTimes unused_pull_cpu, unused_push_cpu;
    uint64_t unused_pull_faults = 0, unused_push_faults = 0;
    for (int step = 0; step < steps; ++step) {
      absl::Status s =
          w->Step(step, &pull_s, &push_s, &unused_pull_cpu, &unused_push_cpu,
                  &unused_pull_faults, &unused_push_faults);
      if (!s.ok()) return s;
      if (step == 0) continue;  // warm-up
      pull_total += pull_s;
      push_total += push_s;
    }
  }
  child->SampleMemory();
  child->CloseStdin();
  absl::StatusOr<Finished> f = child->Wait(absl::Now() + absl::Seconds(60));
  if (!f.ok()) return f.status();
  if (f->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("shard server child exited ", f->exit_code));
  }
  ServerMemory m;
  m.peak_rss_bytes = f->max_rss_bytes;
  // Momentum: weights + one slot (4 B each) + an 8 B accumulator + 64 MiB.
  m.bound_bytes = static_cast<int64_t>(elems) * (4 + 4 + 8) + (64 << 20);
  const double bytes =
      static_cast<double>(elems) * sizeof(float) * workers * (steps - 1);
  if (steps > 1) {
    m.push_bytes_per_s = bytes / push_total;
    m.pull_bytes_per_s = bytes / pull_total;
  }
  return m;
}

}  // namespace pstrain::bench
