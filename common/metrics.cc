#include "common/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pstrain {

void Counter::Inc(double v) {
  double old = value_.load();
  while (!value_.compare_exchange_weak(old, old + v)) {
  }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)) {
  absl::MutexLock lock(&mu_);
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  const size_t i =
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Snapshot(std::vector<uint64_t>* cumulative, double* sum,
                         uint64_t* count) const {
  absl::MutexLock lock(&mu_);
  cumulative->clear();
  uint64_t running = 0;
  for (uint64_t c : counts_) cumulative->push_back(running += c);
  *sum = sum_;
  *count = count_;
}

std::vector<double> ExponentialBuckets(double start, double factor, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> LinearBuckets(double start, double width, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i) b.push_back(start + i * width);
  return b;
}

MetricsRegistry::Series* MetricsRegistry::NewSeries(const std::string& name,
                                                    const std::string& help,
                                                    const std::string& type,
                                                    const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Family& f = families_[name];
  if (f.type.empty()) {
    f.help = help;
    f.type = type;
  }
  f.series.push_back(std::make_unique<Series>());
  f.series.back()->labels = labels;
  return f.series.back().get();
}

Counter* MetricsRegistry::AddCounter(const std::string& name,
                                     const std::string& help,
                                     const Labels& labels) {
  Series* s = NewSeries(name, help, "counter", labels);
  s->counter = std::make_unique<Counter>();
  return s->counter.get();
}

Gauge* MetricsRegistry::AddGauge(const std::string& name,
                                 const std::string& help,
                                 const Labels& labels) {
  Series* s = NewSeries(name, help, "gauge", labels);
  s->gauge = std::make_unique<Gauge>();
  return s->gauge.get();
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name,
                                         const std::string& help,
                                         std::vector<double> bounds,
                                         const Labels& labels) {
  Series* s = NewSeries(name, help, "histogram", labels);
  s->histogram = std::make_unique<Histogram>(std::move(bounds));
  return s->histogram.get();
}

void MetricsRegistry::AddCallback(const std::string& name,
                                  const std::string& help, bool is_counter,
                                  std::function<double()> fn,
                                  const Labels& labels) {
  Series* s = NewSeries(name, help, is_counter ? "counter" : "gauge", labels);
  s->fn = std::move(fn);
}

namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string LabelText(const Labels& labels, const std::string& extra = "") {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) {
    parts.push_back(absl::StrCat(k, "=\"", Escape(v), "\""));
  }
  if (!extra.empty()) parts.push_back(extra);
  return parts.empty() ? "" : absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return absl::StrFormat("%.17g", v);
}

}  // namespace

std::string MetricsRegistry::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ",
                    f.type, "\n");
    for (const auto& s : f.series) {
      if (s->histogram != nullptr) {
        std::vector<uint64_t> cum;
        double sum;
        uint64_t count;
        s->histogram->Snapshot(&cum, &sum, &count);
        const auto& bounds = s->histogram->bounds();
        for (size_t i = 0; i <= bounds.size(); ++i) {
          const std::string le = absl::StrCat(
              "le=\"", i < bounds.size() ? Number(bounds[i]) : "+Inf", "\"");
          absl::StrAppend(&out, name, "_bucket", LabelText(s->labels, le), " ",
                          cum[i], "\n");
        }
        absl::StrAppend(&out, name, "_sum", LabelText(s->labels), " ",
                        Number(sum), "\n", name, "_count", LabelText(s->labels),
                        " ", count, "\n");
        continue;
      }
      const double v = s->counter ? s->counter->value()
                       : s->gauge ? s->gauge->value()
                                  : s->fn();
      absl::StrAppend(&out, name, LabelText(s->labels), " ", Number(v), "\n");
    }
  }
  return out;
}

}  // namespace pstrain
