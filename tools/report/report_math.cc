#include "tools/report/report_math.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"

namespace pstrain {

std::optional<int64_t> HistogramPercentile(const std::vector<uint64_t>& hist,
                                           double p) {
  uint64_t total = 0;
  for (uint64_t c : hist) total += c;
  if (total == 0) return std::nullopt;
  p = std::clamp(p, 0.0, 1.0);
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(p * static_cast<double>(total))));
  uint64_t seen = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    seen += hist[i];
    if (seen >= rank) return static_cast<int64_t>(i);
  }
  return HistogramMax(hist);  // not reached: rank <= total
}

std::optional<int64_t> HistogramMax(const std::vector<uint64_t>& hist) {
  for (size_t i = hist.size(); i > 0; --i) {
    if (hist[i - 1] > 0) return static_cast<int64_t>(i - 1);
  }
  return std::nullopt;
}

std::optional<TargetHit> TimeToTarget(const std::vector<MetricsRow>& rows,
                                      const Target& target) {
  for (const MetricsRow& r : rows) {
    const bool hit = (target.kind == Target::kAccuracy && r.eval_accuracy &&
                      *r.eval_accuracy >= target.value) ||
                     (target.kind == Target::kLoss && r.eval_loss &&
                      *r.eval_loss <= target.value);
    if (hit) return TargetHit{r.step, r.wall_s};
  }
  return std::nullopt;
}

std::optional<Spread> MedianSpread(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  Spread s;
  s.count = static_cast<int>(n);
  s.min = values.front();
  s.max = values.back();
  s.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return s;
}

double PerWorkerPerStep(uint64_t total_bytes, int workers, int64_t steps) {
  if (workers <= 0 || steps <= 0) return 0;
  return static_cast<double>(total_bytes) / workers /
         static_cast<double>(steps);
}

std::optional<double> BarrierWaitShare(double barrier_wait_s, int servers,
                                       int workers, double wall_s) {
  if (servers <= 0 || workers <= 0 || !(wall_s > 0)) return std::nullopt;
  return barrier_wait_s / (static_cast<double>(servers) * workers * wall_s);
}

std::optional<double> MeanCommPerStep(const std::vector<MetricsRow>& rows) {
  double sum = 0;
  int n = 0;
  for (const MetricsRow& r : rows) {
    if (!r.loss) continue;
    sum += r.pull_s + r.push_s;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::optional<double> WireShare(double bytes_per_worker_step,
                                std::optional<double> comm_s_per_step,
                                double wire_bytes_per_s) {
  if (!comm_s_per_step || !(*comm_s_per_step > 0) || !(wire_bytes_per_s > 0) ||
      !(bytes_per_worker_step > 0)) {
    return std::nullopt;
  }
  return bytes_per_worker_step / *comm_s_per_step / wire_bytes_per_s;
}

std::optional<double> SecondsPerStep(double wall_s, int64_t steps) {
  if (steps <= 0 || !(wall_s > 0)) return std::nullopt;
  return wall_s / static_cast<double>(steps);
}

std::optional<double> SteadySecondsPerStepMedian(
    const std::vector<MetricsRow>& rows, int64_t warmup) {
  std::map<int64_t, double> wall;  // training rows by step
  for (const MetricsRow& r : rows) {
    if (r.loss) wall[r.step] = r.wall_s;
  }
  std::vector<double> durations;
  for (auto it = wall.begin(); it != wall.end(); ++it) {
    auto next = std::next(it);
    if (next == wall.end()) break;
    if (it->first < warmup || next->first != it->first + 1) continue;
    durations.push_back(next->second - it->second);
  }
  std::optional<Spread> s = MedianSpread(std::move(durations));
  if (!s) return std::nullopt;
  return s->median;
}

int64_t SteadyWarmupSteps(int64_t steps) {
  return std::min<int64_t>(5, std::max<int64_t>(0, steps / 5));
}

int64_t UpdatesPerStep(const std::string& mode, int workers) {
  return mode == "async" ? workers : 1;
}

std::optional<EfficiencyRatio> CompareEfficiency(double s_per_step,
                                                 double steps_to_target,
                                                 double ref_s_per_step,
                                                 double ref_steps_to_target) {
  for (double v :
       {s_per_step, steps_to_target, ref_s_per_step, ref_steps_to_target}) {
    if (!std::isfinite(v) || !(v > 0)) return std::nullopt;
  }
  EfficiencyRatio r;
  r.hardware = s_per_step / ref_s_per_step;
  r.statistical = steps_to_target / ref_steps_to_target;
  r.time = r.hardware * r.statistical;
  return r;
}

absl::Status ForEachCompareRepeat(
    const std::string& text, const std::string& source,
    const std::function<absl::Status(const std::string& mode,
                                     const nlohmann::json& repeat)>& fn) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("modes") || !j["modes"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a compare.json (no modes array)"));
  }
  for (const nlohmann::json& mode : j["modes"]) {
    if (!mode.contains("mode") || !mode["mode"].is_string() ||
        !mode.contains("repeats") || !mode["repeats"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": a mode without its name or repeats"));
    }
    const std::string label = mode["mode"].get<std::string>();
    for (const nlohmann::json& r : mode["repeats"]) {
      if (absl::Status st = fn(label, r); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
