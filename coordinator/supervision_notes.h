// The coordinator's notes for its supervisor (psctl run's launcher,
// tools/launch/supervisor.h; docs/failures-and-recovery.md, "Supervision by
// psctl run"): one line appended to a file as each thing happens, so the
// supervisor learns a process's state from the coordinator, never from a
// log. The lines (the supervisor parses them; keep both sides in step):
//
//   lost GENERATION server|worker ID   a process declared lost under
//                                      training.on_failure restart (or an
//                                      elastic ring's rank): its
//                                      replacement is awaited
//   registered worker RANK             a worker process registered for its
//                                      own rank (first time or rejoining;
//                                      not a live worker taking a departed
//                                      rank over with `adopt`)
//   failed                             the job failed; written before any
//                                      process can learn it
//
// Not thread-safe: the coordinator service calls it under its mutex. A
// write error is logged, not fatal (the job goes on without its notes).
#ifndef PSTRAIN_COORDINATOR_SUPERVISION_NOTES_H_
#define PSTRAIN_COORDINATOR_SUPERVISION_NOTES_H_

#include <cstdint>
#include <string>
#include <utility>

namespace pstrain {

class SupervisionNotes {
 public:
  // Appends to `path` (created when missing); "" = no notes.
  explicit SupervisionNotes(std::string path) : path_(std::move(path)) {}

  void Lost(uint64_t generation, bool server, int id);
  void Registered(int rank);
  void Failed();

 private:
  void Append(const std::string& line);

  const std::string path_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_SUPERVISION_NOTES_H_
