// The step loop the transport floors of ps_bench share (the raw-TCP PS and
// the ZMQ PS): each step a pull then a push of one tensor, each timed.
#ifndef PSTRAIN_TOOLS_BENCH_PULL_PUSH_STEPS_H_
#define PSTRAIN_TOOLS_BENCH_PULL_PUSH_STEPS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {

// Seconds of one pull and one push per step; index: step.
struct PullPushSeconds {
  std::vector<double> pull_s, push_s;
};

// StepsTimed(`steps`) steps on `ps` (anything with
// `absl::Status Pull(std::vector<float>*)` and
// `absl::Status Push(const std::vector<float>&)`), pushing `grad` each time:
// step 0 the cold one, then kSettleSteps (SettledRateOf, stats.h). Errors
// name the step. `grad` must outlive `ps` (a floor may send from it).
template <typename Ps>
absl::StatusOr<PullPushSeconds> TimePullPushSteps(
    Ps& ps, const std::vector<float>& grad, int steps) {
  std::vector<float> weights;
  PullPushSeconds out;
  for (int step = 0; step < StepsTimed(steps); ++step) {
    absl::Time start = absl::Now();
    absl::Status s = ps.Pull(&weights);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("step ", step, " pull: ", s.message()));
    }
    out.pull_s.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    start = absl::Now();
    s = ps.Push(grad);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("step ", step, " push: ", s.message()));
    }
    out.push_s.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return out;
}

}  // namespace pstrain::bench

#endif  // PSTRAIN_TOOLS_BENCH_PULL_PUSH_STEPS_H_
