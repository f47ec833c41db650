// In-process parameter-server cluster for tests: K real shards behind real
// gRPC servers on ephemeral loopback ports, plus helpers to make clients.
// Everything stops in the destructor.
#ifndef PSTRAIN_TESTS_TEST_CLUSTER_H_
#define PSTRAIN_TESTS_TEST_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "worker/ps_client.h"

namespace pstrain {

class TestCluster {
 public:
  // Starts job.num_servers() shards; fills job.shard_map.server_addresses.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(
      pstrain::v1::JobSpec job);
  // MakeJobSpec(config) then Start.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(
      const JobConfig& config);
  ~TestCluster();

  const pstrain::v1::JobSpec& job() const { return job_; }
  int num_shards() const { return static_cast<int>(shards_.size()); }
  Shard* shard(int i) { return shards_[i].get(); }
  const std::string& address(int i) const {
    return job_.shard_map().server_addresses(i);
  }
  std::shared_ptr<grpc::Channel> Channel(int i) const;
  std::unique_ptr<pstrain::v1::ParameterServer::Stub> Stub(int i) const;
  // A new client over fresh channels to every shard.
  absl::StatusOr<std::unique_ptr<PsClient>> NewClient(
      PsClientOptions options = {}) const;

 private:
  TestCluster() = default;
  pstrain::v1::JobSpec job_;
  std::vector<std::shared_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ParameterServerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
};

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_TEST_CLUSTER_H_
