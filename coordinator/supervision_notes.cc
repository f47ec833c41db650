#include "coordinator/supervision_notes.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace pstrain {

void SupervisionNotes::Lost(uint64_t generation, bool server, int id) {
  Append(absl::StrCat("lost ", generation, " ", server ? "server " : "worker ",
                      id));
}

void SupervisionNotes::Registered(int rank) {
  Append(absl::StrCat("registered worker ", rank));
}

void SupervisionNotes::Failed() { Append("failed"); }

void SupervisionNotes::Append(const std::string& line) {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << line << "\n";
  out.flush();
  if (!out) PS_LOG_WARN("cannot append to %s", path_);
}

}  // namespace pstrain
