// In-process parameter-server cluster for tests: K real shards behind real
// gRPC servers on ephemeral loopback ports, plus helpers to make clients.
// Everything stops in the destructor. There is no coordinator: the cluster
// plays it for session ids, drawing one random id per rank that the shards
// accept (session_id(rank)); NewClient(options, rank) carries rank's id.
#ifndef PSTRAIN_TESTS_HARNESS_TEST_CLUSTER_H_
#define PSTRAIN_TESTS_HARNESS_TEST_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "proto/pstrain.grpc.pb.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "worker/ps/ps_client.h"

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
  // A new client over fresh channels to every shard, for worker `rank`: it
  // carries that rank's session id unless options.session_id is set. Each
  // part of a push (options.push_streams) has a connection of its own.
  absl::StatusOr<std::unique_ptr<PsClient>> NewClient(
      PsClientOptions options = {}, uint32_t rank = 0) const;
  // The session id the shards accept from worker `rank` (0 outside the job).
  uint64_t session_id(uint32_t rank) const {
    return rank < session_ids_.size() ? session_ids_[rank] : 0;
  }

 private:
  TestCluster() = default;
  pstrain::v1::JobSpec job_;
  std::vector<uint64_t> session_ids_;  // by rank
  std::vector<std::shared_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ParameterServerService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
};

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_HARNESS_TEST_CLUSTER_H_
