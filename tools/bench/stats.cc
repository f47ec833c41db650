#include "tools/bench/stats.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"

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

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

}  // namespace pstrain::bench
