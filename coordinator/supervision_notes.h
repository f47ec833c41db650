// The coordinator's notes for its supervisor (psctl run's launcher,
// tools/launch/supervisor.h; docs/failures-and-recovery.md, "Supervision by
// psctl run") and for anyone reading a job's outcome (tests, scripts): one
// line appended to a file as each thing happens, written where the
// coordinator decides it, so a process's state and the recovery events are
// learned from the coordinator, never from a log. The grammar of every line
// (fields separated by one space; RANK, ID, GENERATION and STEP are decimal
// integers):
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
//   dead server|worker ID              the process's lease expired (it was
//                                      silent for network.lease_s); written
//                                      under every on_failure, before the
//                                      policy's response ("lost", "dropped",
//                                      "failed", a takeover)
//   taken over worker RANK from step STEP by worker BY
//                                      elastic (sync, async): the live worker
//                                      of rank BY took the departed rank
//                                      over (`adopt`) and does its
//                                      micro-batches from STEP (" by worker
//                                      BY" is absent when the stand-in did
//                                      not name itself: RegisterWorkerRequest
//                                      .adopter)
//   hosted worker RANK by worker BY    elastic, mode allreduce: the live
//                                      worker of rank BY hosts the departed
//                                      rank as a second ring member (" by
//                                      worker BY" as above)
//   done worker RANK [weights FP]      the rank's final report came: it
//                                      trained and evaluated to the job's
//                                      end (its own process, a stand-in or a
//                                      hosted ring member). In mode
//                                      allreduce, FP is the fingerprint of
//                                      its final weights (16 lowercase hex
//                                      digits, FNV-1a: equal on every rank
//                                      of a consistent ring)
//   dropped worker RANK from step STEP elastic, mode async: nobody takes the
//                                      departed rank over; the job goes on
//                                      without its micro-batches from STEP
//   released worker RANK before step STEP
//                                      elastic, mode sync: the rank's
//                                      stand-in released it for a new worker
//                                      (it pushed every step before STEP)
//   rejoined worker RANK from step STEP
//                                      elastic: a new worker process took
//                                      the departed rank again (beside its
//                                      "registered worker RANK" line)
//   rolled back generation GENERATION to step STEP
//                                      every shard rolled back for
//                                      GENERATION; training resumes at STEP
//   resumed worker RANK in generation GENERATION at step STEP
//                                      the rank's process survived the
//                                      failure and rolled back in-process
//                                      (its first report of GENERATION said
//                                      so; a resent report may repeat it)
//   resumed from step STEP in PATH     --resume: the job starts from the
//                                      complete checkpoint PATH, of STEP
//   saved checkpoint of step STEP in PATH
//                                      the checkpoint of STEP is complete
//                                      (its MANIFEST.json written; in mode
//                                      allreduce, rank 0 reported it)
//
// PATH is the rest of the line, as absl::Utf8SafeCEscape writes it (a path
// without control characters, quotes or backslashes is unchanged), so a
// path never breaks a line.
//
// Readers must ignore lines they do not know (psctl's supervisor reads only
// "lost", "registered" and "failed"; keep both sides in step).
//
// Thread-safe: each line is one write(2) to the file opened with O_APPEND,
// so notes appended from several threads or objects (the service, the
// checkpoint orderer) never interleave within a line.
//
#ifndef PSTRAIN_COORDINATOR_SUPERVISION_NOTES_H_
#define PSTRAIN_COORDINATOR_SUPERVISION_NOTES_H_

#include <cstdint>
#include <optional>
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
  void Dead(bool server, int id);
  // `by`: the adopting worker's own rank, when it named itself.
  void TakenOver(int rank, uint64_t step, std::optional<int> by);
  void Hosted(int rank, std::optional<int> by);
  void Done(int rank, std::optional<uint64_t> weights_fingerprint);
  void Dropped(int rank, uint64_t step);
  void Released(int rank, uint64_t before_step);
  void Rejoined(int rank, uint64_t step);
  void RolledBack(uint64_t generation, uint64_t step);
  void WorkerResumed(int rank, uint64_t generation, uint64_t step);
  void Resumed(uint64_t step, const std::string& path);
  void CheckpointSaved(uint64_t step, const std::string& path);

 private:
  void Append(const std::string& line);

  const std::string path_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_SUPERVISION_NOTES_H_
