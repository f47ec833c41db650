// Test helper: trains the checkpoint test model (server/checkpoint_testing.h)
// for 3 sync steps on 3 shards with 4-element chunks and Adam, saves the
// checkpoint under ROOT, and writes the expected weights and slots, gathered
// from the shards themselves (not from the checkpoint), to EXPECTED (JSON).
//   make_test_checkpoint ROOT EXPECTED
#include <cstdio>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint_testing.h"

int main(int argc, char** argv) {
  using pstrain::CheckpointEnv;
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_test_checkpoint ROOT EXPECTED\n");
    return 2;
  }
  auto job = pstrain::MakeTestJob(pstrain::v1::OptimizerConfig::ADAM,
                                  /*sync=*/true, 2, 3, 4);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 1;
  }
  absl::Status s = pstrain::RunSteps(*job, 0, 3);
  auto states = pstrain::SnapshotAll(*job);
  auto full = pstrain::Gather(*job);
  if (!s.ok() || !states.ok() || !full.ok()) {
    std::fprintf(stderr, "training failed\n");
    return 1;
  }
  auto dir = pstrain::SaveCheckpoint(CheckpointEnv::Default(), argv[1],
                                     pstrain::TestManifest(*job, 3), *states,
                                     /*keep=*/0);
  if (!dir.ok()) {
    std::fprintf(stderr, "%s\n", dir.status().ToString().c_str());
    return 1;
  }
  nlohmann::json expected;
  expected["dir"] = *dir;
  expected["step"] = 3;
  for (const auto& t : job->map.tensors()) {
    nlohmann::json& e = expected["tensors"][t.name()];
    e["shape"] = std::vector<int64_t>(t.shape().begin(), t.shape().end());
    // float -> double is exact, and JSON doubles round-trip.
    e["weights"] = std::vector<double>(full->weights.at(t.name()).begin(),
                                       full->weights.at(t.name()).end());
    e["slots"] = std::vector<double>(full->slots.at(t.name()).begin(),
                                     full->slots.at(t.name()).end());
  }
  std::ofstream(argv[2]) << expected.dump(1) << "\n";
  return 0;
}
