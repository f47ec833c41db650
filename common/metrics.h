// Prometheus metrics: counters, gauges and histograms with fixed label sets,
// rendered in the text exposition format (version 0.0.4).
//
// A MetricsRegistry is created in main and passed down (no global registry);
// the objects it returns live as long as the registry. All methods are
// thread-safe; Inc/Set/Observe are lock-free or take only the metric's lock.
#ifndef PSTRAIN_COMMON_METRICS_H_
#define PSTRAIN_COMMON_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// Label name -> value, e.g. {{"role", "server"}, {"shard", "0"}}.
using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  void Inc(double v = 1);
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v); }
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  // Cumulative counts per bound (then +Inf), sum and count, consistently.
  void Snapshot(std::vector<uint64_t>* cumulative, double* sum,
                uint64_t* count) const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket + overflow
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Exponential bucket bounds: start, start*factor, ... (n bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int n);
// Linear bucket bounds: start, start+width, ... (n bounds).
std::vector<double> LinearBuckets(double start, double width, int n);

class MetricsRegistry {
 public:
  // Every call registers a new series; a name keeps one help text and type.
  // Names follow Prometheus conventions (pstrain_..._seconds, _bytes_total).
  Counter* AddCounter(const std::string& name, const std::string& help,
                      const Labels& labels = {});
  Gauge* AddGauge(const std::string& name, const std::string& help,
                  const Labels& labels = {});
  Histogram* AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> bounds,
                          const Labels& labels = {});
  // A counter or gauge whose value is read at render time (e.g. bytes a
  // client has counted itself). `fn` must be thread-safe and outlive us.
  void AddCallback(const std::string& name, const std::string& help,
                   bool is_counter, std::function<double()> fn,
                   const Labels& labels = {});

  // Text exposition format, series grouped by name.
  std::string Render() const;

 private:
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> fn;
  };
  struct Family {
    std::string help;
    std::string type;  // counter | gauge | histogram
    std::vector<std::unique_ptr<Series>> series;
  };
  Series* NewSeries(const std::string& name, const std::string& help,
                    const std::string& type, const Labels& labels);

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_H_
