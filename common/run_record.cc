#include "common/run_record.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace pstrain {

using Json = nlohmann::ordered_json;

absl::StatusOr<std::string> ReadFileText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// metrics.csv ----------------------------------------------------------------

std::string MetricsCsvHeader() {
  return "step,wall_s,loss,samples,samples_per_s,compute_s,pull_s,push_s,"
         "eval_accuracy,eval_loss,comm_s\n";
}

std::string FormatMetricsRow(const MetricsRow& r) {
  return absl::StrFormat(
      "%d,%.6f,%s,%d,%.2f,%.6f,%.6f,%.6f,%s,%s,%.6f\n", r.step, r.wall_s,
      r.loss ? absl::StrFormat("%.8g", *r.loss) : "", r.samples,
      r.samples_per_s, r.compute_s, r.pull_s, r.push_s,
      r.eval_accuracy ? absl::StrFormat("%.6f", *r.eval_accuracy) : "",
      r.eval_loss ? absl::StrFormat("%.6g", *r.eval_loss) : "", r.comm_s);
}

absl::StatusOr<std::unique_ptr<MetricsCsvWriter>> MetricsCsvWriter::Create(
    const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write metrics file ", path));
  }
  std::unique_ptr<MetricsCsvWriter> w(new MetricsCsvWriter(path, f));
  if (std::fseek(f, 0, SEEK_END) == 0 && std::ftell(f) > 0) return w;
  const std::string header = MetricsCsvHeader();
  if (std::fputs(header.c_str(), f) < 0 || std::fflush(f) != 0) {
    return absl::DataLossError(absl::StrCat("cannot write ", path));
  }
  return w;
}

MetricsCsvWriter::MetricsCsvWriter(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file) {}

MetricsCsvWriter::~MetricsCsvWriter() { std::fclose(file_); }

absl::Status MetricsCsvWriter::Append(const std::vector<MetricsRow>& rows) {
  for (const MetricsRow& r : rows) {
    if (std::fputs(FormatMetricsRow(r).c_str(), file_) < 0) {
      return absl::DataLossError(absl::StrCat("cannot write ", path_));
    }
  }
  if (std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrCat("cannot write ", path_));
  }
  return absl::OkStatus();
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
    // Files from before the comm_s column: the same sum.
    r.comm_s = cell("comm_s").value_or(r.pull_s + r.push_s);
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

// summary.json ---------------------------------------------------------------

namespace {

Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace

std::string SummaryToJson(const RunSummary& s) {
  Json j;
  j["job"] = s.job;
  j["mode"] = s.mode;
  int64_t staleness;
  if (absl::SimpleAtoi(s.staleness, &staleness)) {
    j["staleness"] = staleness;
  } else {
    j["staleness"] = s.staleness;
  }
  j["workers"] = s.workers;
  j["servers"] = s.servers;
  j["steps"] = s.steps;
  j["local_batch"] = s.local_batch;
  j["global_batch"] = s.global_batch;
  j["wall_s"] = Number(s.wall_s);
  j["samples"] = s.samples;
  j["samples_per_s"] = Number(s.samples_per_s);
  j["final_loss"] = Number(s.final_loss);
  j["final_eval_loss"] = Number(s.final_eval_loss);
  j["final_accuracy"] =
      s.final_accuracy ? Number(*s.final_accuracy) : Json(nullptr);
  j["bytes_pushed"] = s.bytes_pushed;
  j["bytes_pulled"] = s.bytes_pulled;
  j["bytes_sent"] = s.bytes_pushed;
  j["bytes_received"] = s.bytes_pulled;
  j["staleness_max"] = s.staleness_max;
  j["staleness_mean"] = Number(s.staleness_mean);
  j["staleness_histogram"] = s.staleness_histogram;
  j["barrier_wait_s"] = Number(s.barrier_wait_s);
  if (!s.rows_stored.empty() || !s.rows_evicted.empty()) {
    j["rows_stored"] = s.rows_stored;
    j["rows_evicted"] = s.rows_evicted;
  }
  j["diverged"] = s.diverged;
  j["failed"] = s.failed;
  j["message"] = s.message;
  if (s.failure) {
    Json f;
    f["process"] = s.failure->process;
    if (s.failure->rank >= 0) f["rank"] = s.failure->rank;
    if (s.failure->shard >= 0) f["shard"] = s.failure->shard;
    f["message"] = s.failure->message;
    j["failure"] = f;
  } else {
    j["failure"] = nullptr;
  }
  // Invalid UTF-8 in a message (it may quote a client) is replaced, not
  // thrown.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

absl::Status WriteSummaryJson(const std::string& path,
                              const RunSummary& summary) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out)
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
    out << SummaryToJson(summary);
    out.close();
    if (!out) return absl::DataLossError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<Json> ParseObject(const std::string& text,
                                 const std::string& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object"));
  }
  return j;
}

}  // namespace

absl::StatusOr<RunSummary> ParseSummaryJson(const std::string& text,
                                            const std::string& source) {
  absl::StatusOr<Json> parsed = ParseObject(text, source);
  if (!parsed.ok()) return parsed.status();
  const Json& j = *parsed;
  RunSummary s;
  try {
    auto get = [&](const Json& obj, const char* key, auto* out) {
      auto it = obj.find(key);
      if (it != obj.end() && !it->is_null())
        *out = it->get<std::decay_t<decltype(*out)>>();
    };
    // Numbers that may be null (NaN or infinite when written).
    auto number = [&](const char* key, double* out) {
      auto it = j.find(key);
      if (it == j.end()) return;
      *out = it->is_null() ? std::nan("") : it->get<double>();
    };
    get(j, "job", &s.job);
    get(j, "mode", &s.mode);
    auto st = j.find("staleness");
    if (st != j.end()) {
      s.staleness = st->is_string() ? st->get<std::string>() : st->dump();
    }
    get(j, "workers", &s.workers);
    get(j, "servers", &s.servers);
    get(j, "steps", &s.steps);
    get(j, "local_batch", &s.local_batch);
    get(j, "global_batch", &s.global_batch);
    number("wall_s", &s.wall_s);
    get(j, "samples", &s.samples);
    number("samples_per_s", &s.samples_per_s);
    number("final_loss", &s.final_loss);
    number("final_eval_loss", &s.final_eval_loss);
    auto acc = j.find("final_accuracy");
    if (acc != j.end() && acc->is_number())
      s.final_accuracy = acc->get<double>();
    get(j, "bytes_pushed", &s.bytes_pushed);
    get(j, "bytes_pulled", &s.bytes_pulled);
    number("staleness_mean", &s.staleness_mean);
    get(j, "staleness_max", &s.staleness_max);
    get(j, "staleness_histogram", &s.staleness_histogram);
    number("barrier_wait_s", &s.barrier_wait_s);
    get(j, "rows_stored", &s.rows_stored);
    get(j, "rows_evicted", &s.rows_evicted);
    get(j, "diverged", &s.diverged);
    get(j, "failed", &s.failed);
    get(j, "message", &s.message);
    auto f = j.find("failure");
    if (f != j.end() && f->is_object()) {
      RunFailure failure;
      get(*f, "process", &failure.process);
      get(*f, "rank", &failure.rank);
      get(*f, "shard", &failure.shard);
      get(*f, "message", &failure.message);
      s.failure = failure;
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  return s;
}

absl::StatusOr<std::string> SummaryValue(const std::string& text,
                                         const std::string& key,
                                         const std::string& source) {
  absl::StatusOr<Json> parsed = ParseObject(text, source);
  if (!parsed.ok()) return parsed.status();
  const Json* node = &*parsed;
  for (absl::string_view part : absl::StrSplit(key, '.')) {
    if (!node->is_object()) {
      return absl::NotFoundError(absl::StrCat(source, ": no key '", key, "'"));
    }
    auto it = node->find(std::string(part));
    if (it == node->end()) {
      return absl::NotFoundError(absl::StrCat(source, ": no key '", key, "'"));
    }
    node = &*it;
  }
  if (node->is_string()) return node->get<std::string>();
  return node->dump();
}

std::string DescribeFailure(const RunFailure& f) {
  std::string who = f.process;
  if (f.rank >= 0) absl::StrAppend(&who, " ", f.rank);
  if (f.shard >= 0) absl::StrAppend(&who, " ", f.shard);
  return absl::StrCat(who, ": ", f.message);
}

}  // namespace pstrain
