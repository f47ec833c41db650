#include "coordinator/supervision_notes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
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

namespace {
std::string By(std::optional<int> by) {
  return by.has_value() ? absl::StrCat(" by worker ", *by) : "";
}
}  // namespace

void SupervisionNotes::TakenOver(int rank, uint64_t step,
                                 std::optional<int> by) {
  Append(absl::StrCat("taken over worker ", rank, " from step ", step, By(by)));
}

void SupervisionNotes::Hosted(int rank, std::optional<int> by) {
  Append(absl::StrCat("hosted worker ", rank, By(by)));
}

void SupervisionNotes::Done(int rank,
                            std::optional<uint64_t> weights_fingerprint) {
  Append(absl::StrCat(
      "done worker ", rank,
      weights_fingerprint.has_value()
          ? absl::StrCat(" weights ",
                         absl::Hex(*weights_fingerprint, absl::kZeroPad16))
          : ""));
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

void SupervisionNotes::WorkerResumed(int rank, uint64_t generation,
                                     uint64_t step) {
  Append(absl::StrCat("resumed worker ", rank, " in generation ", generation,
                      " at step ", step));
}

void SupervisionNotes::Resumed(uint64_t step, const std::string& path) {
  Append(absl::StrCat("resumed from step ", step, " in ",
                      absl::Utf8SafeCEscape(path)));
}

void SupervisionNotes::CheckpointSaved(uint64_t step, const std::string& path) {
  Append(absl::StrCat("saved checkpoint of step ", step, " in ",
                      absl::Utf8SafeCEscape(path)));
}

void SupervisionNotes::Append(const std::string& line) {
  if (path_.empty()) return;
  const std::string text = line + "\n";
  const int fd =
      ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  // One write: O_APPEND places it whole at the end (see the header).
  const ssize_t n = fd < 0 ? -1 : ::write(fd, text.data(), text.size());
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    PS_LOG_WARN("cannot append to %s: %s", path_,
                n < 0 ? std::strerror(error) : "short write");
  }
}

}  // namespace pstrain
