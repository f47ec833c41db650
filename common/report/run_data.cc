#include "common/report/run_data.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace pstrain {

absl::StatusOr<std::string> ReadFileText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::vector<MetricsRow>> ParseMetricsCsv(
    const std::string& text, const std::string& source) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no header"));
  }
  std::map<std::string, size_t> col;
  std::vector<std::string> header =
      absl::StrSplit(absl::StripSuffix(lines[0], "\r"), ',');
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* need : {"step", "wall_s", "loss"}) {
    if (!col.count(need)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":1: no column '", need, "'"));
    }
  }
  std::vector<MetricsRow> rows;
  for (size_t n = 1; n < lines.size(); ++n) {
    const absl::string_view line = absl::StripSuffix(lines[n], "\r");
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, ',');
    absl::Status bad;
    // The number in column `name`; nullopt when the column or cell is empty.
    auto cell = [&](const char* name) -> std::optional<double> {
      auto it = col.find(name);
      if (it == col.end() || it->second >= f.size() || f[it->second].empty())
        return std::nullopt;
      double v;
      if (!absl::SimpleAtod(f[it->second], &v)) {
        bad = absl::InvalidArgumentError(
            absl::StrCat(source, ":", n + 1, ": column '", name,
                         "': expected a number, got '", f[it->second], "'"));
        return std::nullopt;
      }
      return v;
    };
    MetricsRow r;
    std::optional<double> step = cell("step"), wall = cell("wall_s");
    r.loss = cell("loss");
    r.samples = static_cast<int64_t>(cell("samples").value_or(0));
    r.samples_per_s = cell("samples_per_s").value_or(0);
    r.compute_s = cell("compute_s").value_or(0);
    r.pull_s = cell("pull_s").value_or(0);
    r.push_s = cell("push_s").value_or(0);
    r.eval_accuracy = cell("eval_accuracy");
    r.eval_loss = cell("eval_loss");
    if (!bad.ok()) return bad;
    if (!step || !wall) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", n + 1, ": step and wall_s are required"));
    }
    r.step = static_cast<int64_t>(*step);
    r.wall_s = *wall;
    rows.push_back(r);
  }
  return rows;
}

absl::StatusOr<RunSummary> ParseSummaryJson(const std::string& text,
                                            const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object"));
  }
  RunSummary s;
  try {
    auto get = [&](const char* key, auto* out) {
      auto it = j.find(key);
      if (it != j.end() && !it->is_null())
        *out = it->get<std::decay_t<decltype(*out)>>();
    };
    get("mode", &s.mode);
    auto st = j.find("staleness");
    if (st != j.end()) {
      s.staleness = st->is_string() ? st->get<std::string>() : st->dump();
    }
    get("workers", &s.workers);
    get("servers", &s.servers);
    get("steps", &s.steps);
    get("global_batch", &s.global_batch);
    get("wall_s", &s.wall_s);
    get("samples_per_s", &s.samples_per_s);
    get("final_loss", &s.final_loss);
    get("final_eval_loss", &s.final_eval_loss);
    auto acc = j.find("final_accuracy");
    if (acc != j.end() && acc->is_number())
      s.final_accuracy = acc->get<double>();
    get("bytes_pushed", &s.bytes_pushed);
    get("bytes_pulled", &s.bytes_pulled);
    get("staleness_max", &s.staleness_max);
    get("staleness_histogram", &s.staleness_histogram);
    get("barrier_wait_s", &s.barrier_wait_s);
    get("failed", &s.failed);
    get("message", &s.message);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  return s;
}

}  // namespace pstrain
