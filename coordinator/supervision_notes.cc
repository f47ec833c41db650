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

void SupervisionNotes::Dead(bool server, int id) {
  Append(absl::StrCat("dead ", server ? "server " : "worker ", id));
}

void SupervisionNotes::TakenOver(int rank, uint64_t step) {
  Append(absl::StrCat("taken over worker ", rank, " from step ", step));
}

void SupervisionNotes::Hosted(int rank) {
  Append(absl::StrCat("hosted worker ", rank));
}

void SupervisionNotes::Dropped(int rank, uint64_t step) {
  Append(absl::StrCat("dropped worker ", rank, " from step ", step));
}

void SupervisionNotes::Released(int rank, uint64_t before_step) {
  Append(absl::StrCat("released worker ", rank, " before step ", before_step));
}

void SupervisionNotes::Rejoined(int rank, uint64_t step) {
  Append(absl::StrCat("rejoined worker ", rank, " from step ", step));
}

void SupervisionNotes::RolledBack(uint64_t generation, uint64_t step) {
  Append(
      absl::StrCat("rolled back generation ", generation, " to step ", step));
}

void SupervisionNotes::Append(const std::string& line) {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << line << "\n";
  out.flush();
  if (!out) PS_LOG_WARN("cannot append to %s", path_);
}

}  // namespace pstrain
