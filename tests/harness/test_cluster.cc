#include "tests/harness/test_cluster.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "coordinator/job_spec.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(
    const JobConfig& config) {
  PS_ASSIGN_OR_RETURN(pstrain::v1::JobSpec job, MakeJobSpec(config));
  return Start(std::move(job));
}

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(
    pstrain::v1::JobSpec job) {
  std::unique_ptr<TestCluster> c(new TestCluster);
  job.mutable_shard_map()->clear_server_addresses();
  const int k = std::max<int>(job.num_servers(), 1);
  std::vector<std::string> addresses;
  for (int i = 0; i < k; ++i) {
    auto service = std::make_unique<ParameterServerService>(PsServiceOptions{});
    PS_ASSIGN_OR_RETURN(
        StartedServer started,
        StartGrpcServer("127.0.0.1", 0, grpc::InsecureServerCredentials(),
                        {service.get()}));
    addresses.push_back(absl::StrCat("127.0.0.1:", started.port));
    c->services_.push_back(std::move(service));
    c->servers_.push_back(std::move(started.server));
  }
  for (const auto& a : addresses)
    job.mutable_shard_map()->add_server_addresses(a);
  std::mt19937_64 rng(std::random_device{}());
  for (uint32_t r = 0; r < static_cast<uint32_t>(job.config().job().workers());
       ++r) {
    uint64_t id = 0;
    while (id == 0) id = rng();
    c->session_ids_.push_back(id);
  }
  auto sessions = WorkerSessions::Fixed(c->session_ids_);
  for (int i = 0; i < k; ++i) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard,
                        Shard::Create(ShardOptionsFromJob(job, i)));
    c->shards_.push_back(std::shared_ptr<Shard>(std::move(shard)));
    c->services_[i]->SetShard(c->shards_[i], sessions);
  }
  c->job_ = std::move(job);
  return c;
}

TestCluster::~TestCluster() {
  for (auto& s : shards_) s->Close();
  for (auto& s : servers_)
    s->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

std::shared_ptr<grpc::Channel> TestCluster::Channel(int i) const {
  return MakeChannel(address(i));
}

std::unique_ptr<pstrain::v1::ParameterServer::Stub> TestCluster::Stub(
    int i) const {
  return pstrain::v1::ParameterServer::NewStub(Channel(i));
}

absl::StatusOr<std::unique_ptr<PsClient>> TestCluster::NewClient(
    PsClientOptions options, uint32_t rank) const {
  if (options.session_id == 0) options.session_id = session_id(rank);
  return PsClient::Connect(
      job_.shard_map(),
      [](const std::string& address, int connection) {
        return MakeChannel(address, nullptr, connection);
      },
      options);
}

}  // namespace pstrain
