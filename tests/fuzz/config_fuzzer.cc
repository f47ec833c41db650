// Fuzzes the YAML job config parser: ParseJobConfig, then ValidateJobConfig.
// Property: a config that parses and validates survives a round trip through
// JobConfigToYaml (the coordinator hands workers that text).
#include <cstdint>
#include <string>

#include "common/job_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<JobConfig> config = ParseJobConfig(text, "fuzz.yaml");
  if (!config.ok()) return 0;
  if (!ValidateJobConfig(*config).ok()) return 0;
  const std::string yaml = JobConfigToYaml(*config);
  absl::StatusOr<JobConfig> again = ParseJobConfig(yaml, "roundtrip.yaml");
  PS_FUZZ_CHECK(again.ok(), std::string(again.status().message()).c_str());
  PS_FUZZ_CHECK(ValidateJobConfig(*again).ok(), "round trip stays valid");
  PS_FUZZ_CHECK(JobConfigToYaml(*again) == yaml, "round trip is stable");
  return 0;
}
