#include "common/huge_pages.h"

#include <stdlib.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/glibc_malloc.h"

namespace pstrain {

namespace {

// glibc.malloc.hugetlb's value in `tunables` (the last one named); nullopt
// when no NAME=VALUE item names it (glibc ignores items without '=').
std::optional<std::string> HugetlbItem(absl::string_view tunables) {
  std::optional<std::string> value;
  for (absl::string_view item : absl::StrSplit(tunables, ':')) {
    const size_t eq = item.find('=');
    if (eq != absl::string_view::npos &&
        item.substr(0, eq) == kMallocHugetlbTunable) {
      value = std::string(item.substr(eq + 1));
    }
  }
  return value;
}

}  // namespace

std::string MallocHugetlbValue(absl::string_view tunables) {
  return HugetlbItem(tunables).value_or("");
}

std::string WorkerGlibcTunables(const char* current) {
  const std::string given = current == nullptr ? "" : current;
  // Named at all (even with an empty value): the environment's choice.
  if (HugetlbItem(given).has_value()) return given;
  const std::string ours = absl::StrCat(kMallocHugetlbTunable, "=1");
  return given.empty() ? ours : absl::StrCat(given, ":", ours);
}

std::vector<std::string> WorkerEnvironment(const char* const* environ) {
  std::vector<std::string> env;
  const std::string prefix = absl::StrCat(kGlibcTunablesVariable, "=");
  const char* tunables = nullptr;
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) {
    if (absl::StartsWith(*e, prefix)) {
      // The first one, as getenv reads it; every one is replaced.
      if (tunables == nullptr) tunables = *e + prefix.size();
    } else {
      env.push_back(*e);
    }
  }
  env.push_back(prefix + WorkerGlibcTunables(tunables));
  return env;
}

std::string KernelThpMode(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

std::string HeapPagesText(const char* tunables, absl::string_view kernel_mode,
                          bool glibc_malloc) {
  if (!glibc_malloc) {
    return "the sanitizer's allocator (GLIBC_TUNABLES does not apply)";
  }
  const std::string value =
      MallocHugetlbValue(tunables == nullptr ? "" : tunables);
  const std::string kernel =
      kernel_mode.empty()
          ? std::string("kernel's transparent huge pages: ?")
          : absl::StrCat("kernel's transparent huge pages: ", kernel_mode);
  if (value.empty()) {
    return absl::StrCat(
        "4 KiB pages (GLIBC_TUNABLES does not name glibc.malloc.hugetlb; "
        "psctl run and deploy/k8s set it to 1 for workers; ",
        kernel, ")");
  }
  if (value != "1") {
    return absl::StrCat("glibc.malloc.hugetlb=", value,
                        " from GLIBC_TUNABLES (", kernel, ")");
  }
  if (kernel_mode == "never") {
    return absl::StrCat(
        "4 KiB pages: glibc.malloc.hugetlb=1 from GLIBC_TUNABLES, but the ",
        kernel);
  }
  return absl::StrCat(
      "transparent huge pages (glibc.malloc.hugetlb=1 from GLIBC_TUNABLES; ",
      kernel, ")");
}

std::string HeapPagesText() {
  return HeapPagesText(getenv(kGlibcTunablesVariable), KernelThpMode(),
                       kGlibcMalloc);
}

}  // namespace pstrain
