#include "tools/bench/stats.h"

#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pstrain::bench {

double Median(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(),
                              [](double x) { return x != x; }),
               values.end());
  if (values.empty()) return __builtin_nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

RoundRatios RatiosWithinRounds(const std::vector<double>& a,
                               const std::vector<double>& b, bool invert) {
  RoundRatios r;
  const size_t n = std::min(a.size(), b.size());
  r.rounds.assign(n, __builtin_nan(""));
  for (size_t k = 0; k < n; ++k) {
    // NaN compares false, so a round missing either figure stays NaN.
    if (a[k] > 0 && b[k] > 0) r.rounds[k] = invert ? b[k] / a[k] : a[k] / b[k];
  }
  r.median = Median(r.rounds);
  return r;
}

RoundsMet CountRoundsMet(const RoundRatios& ratios, absl::string_view op,
                         double goal) {
  RoundsMet m;
  for (double x : ratios.rounds) {
    if (x != x) continue;
    ++m.measured;
    if ((op == ">=" && x >= goal) || (op == "<=" && x <= goal)) ++m.met;
  }
  return m;
}

SteadyRate SteadyRateOf(double bytes, const std::vector<double>& seconds,
                        int cold, int settle) {
  std::vector<double> c, w;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const double rate = seconds[i] > 0 ? bytes / seconds[i] : __builtin_nan("");
    const int step = static_cast<int>(i);
    if (step < cold) {
      c.push_back(rate);
    } else if (step >= cold + settle) {
      w.push_back(rate);
    }
  }
  SteadyRate r;
  r.cold_bytes_per_s = Median(c);
  r.warm_bytes_per_s = Median(w);
  r.warm_steps = static_cast<int>(w.size());
  return r;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

namespace {

uint64_t Nanos(const timespec& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u +
         static_cast<uint64_t>(t.tv_nsec);
}

uint64_t Nanos(const timeval& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u +
         static_cast<uint64_t>(t.tv_usec) * 1000u;
}

// The CPUs of the affinity mask; 0 when it cannot be read.
int AffinityCpus() {
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
}

// `busy` with the CPUs' time now (monotonic wall time x the CPUs this
// process may run on); zeros where the clocks cannot be read.
CpuTimes WithCpusTime(uint64_t busy) {
  timespec wall;
  const int cpus = AffinityCpus();
  if (clock_gettime(CLOCK_MONOTONIC, &wall) != 0 || cpus == 0) return {};
  return CpuTimes{busy, Nanos(wall) * static_cast<uint64_t>(cpus)};
}

}  // namespace

int HostCores() { return std::max(1, AffinityCpus()); }

CpuTimes ReadCpuTimes() {
  timespec cpu;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) != 0) return {};
  return WithCpusTime(Nanos(cpu));
}

CpuTimes ReadCpuTimesWith(pid_t other) {
  return ReadCpuTimesWith(std::vector<pid_t>{other});
}

CpuTimes ReadCpuTimesWith(const std::vector<pid_t>& others) {
  CpuTimes sum = ReadCpuTimes();
  for (pid_t other : others) {
    clockid_t clock;
    timespec cpu;
    if (sum.total == 0 || clock_getcpuclockid(other, &clock) != 0 ||
        clock_gettime(clock, &cpu) != 0) {
      return {};
    }
    sum.busy += Nanos(cpu);
  }
  return sum;
}

CpuTimes ReadChildrenCpuTimes() {
  rusage usage;
  if (getrusage(RUSAGE_CHILDREN, &usage) != 0) return {};
  return WithCpusTime(Nanos(usage.ru_utime) + Nanos(usage.ru_stime));
}

uint64_t ReadMinorFaults() {
  rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<uint64_t>(usage.ru_minflt);
}

uint64_t ReadMinorFaultsOf(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return 0;
  absl::StatusOr<ProcStat> st = ParseProcStat(line, path);
  return st.ok() ? st->minor_faults : 0;
}

CpuTimes AddCpuDelta(const CpuTimes& sum, const CpuTimes& a,
                     const CpuTimes& b) {
  if (b.total < a.total || b.busy < a.busy) return sum;
  return CpuTimes{sum.busy + (b.busy - a.busy),
                  sum.total + (b.total - a.total)};
}

double BusyShare(const CpuTimes& t) {
  if (t.total == 0) return __builtin_nan("");
  return static_cast<double>(t.busy) / static_cast<double>(t.total);
}

absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text,
                                       absl::string_view source) {
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no ')' after the command name"));
  }
  // After the name: state (field 3), ..., minflt (10), ..., utime (14),
  // stime (15).
  const std::vector<absl::string_view> f =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0, minflt = 0;
  if (f.size() < 13 || f[0].size() != 1 || !absl::SimpleAtoi(f[7], &minflt) ||
      !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": expected the state and 12 more fields after the name"));
  }
  return ProcStat{f[0][0], utime + stime, minflt};
}

int CsvDataRows(absl::string_view text) {
  const int lines =
      static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  return std::max(0, lines - 1);
}

absl::StatusOr<std::vector<int>> ParsePositiveList(absl::string_view flag,
                                                   absl::string_view text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": expected positive integers, got '", text, "'"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace pstrain::bench
