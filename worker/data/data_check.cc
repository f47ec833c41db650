#include "worker/data/data_check.h"

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tcp_congestion.h"
#include "worker/data/tabular_loaders.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<DataSource>> LoadJobData(
    const JobConfig& config) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                      DataSource::Create(config.data()));
  // An external model's input is its workers' business (docs/python.md).
  if (config.model().type() != ModelConfig::SCALAR &&
      config.model().type() != ModelConfig::EXTERNAL &&
      (data->num_features() != config.model().input_dim() ||
       data->num_classes() != config.model().num_classes())) {
    const std::string file = DataFilePath(config.data());
    return absl::InvalidArgumentError(absl::StrCat(
        "the data", file.empty() ? "" : absl::StrCat(" ('", file, "')"),
        " has ", data->num_features(), " features and ", data->num_classes(),
        " classes but model.input_dim is ", config.model().input_dim(),
        " and model.num_classes is ", config.model().num_classes()));
  }
  return data;
}

absl::Status CheckJobFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(JobConfig config, LoadJobConfig(path));
  PS_RETURN_IF_ERROR(ValidateJobConfig(config));
  // What the servers will set on their listeners, tried on this host.
  PS_RETURN_IF_ERROR(
      CheckCongestionControl("network.tcp_congestion_control",
                             config.network().tcp_congestion_control()));
  return LoadJobData(config).status();
}

int CheckJobFileMain(const std::string& path) {
  const absl::Status st = CheckJobFile(path);
  std::fprintf(st.ok() ? stdout : stderr, "ps_worker: --check_config %s: %s\n",
               path.c_str(),
               st.ok() ? "ok" : std::string(st.message()).c_str());
  return st.ok() ? 0 : 2;
}

}  // namespace pstrain
