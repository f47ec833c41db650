// ps_checkpoint's commands (its main only calls Main): look into a pstrain
// checkpoint and export its weights.
//
//   ps_checkpoint inspect DIR
//       DIR is one checkpoint (holding MANIFEST.json) or a checkpoint.dir
//       root (its checkpoints are listed, complete and torn, and the newest
//       complete one inspected). Prints job, step, mode, optimizer, shards,
//       tensors (a row-sparse table: its rows stored, their update counts
//       and row step) and every file's checksum verification.
//   ps_checkpoint export DIR --safetensors OUT [--with_slots]
//       Writes the weights (and optimizer slots as "NAME:slotK") to OUT in
//       the safetensors format (checkpoint/safetensors.h; a row-sparse table
//       as its stored rows: NAME, NAME.ids, NAME.updates).
//
// Exit status: 0 on success, 1 when the checkpoint is missing, torn or
// corrupted (the error names the file), 2 on bad usage (naming the flag).
#ifndef PSTRAIN_TOOLS_CHECKPOINT_COMMANDS_H_
#define PSTRAIN_TOOLS_CHECKPOINT_COMMANDS_H_

namespace pstrain {
namespace checkpoint_cli {

// Runs `ps_checkpoint ARGS...` (argv[0] is the program) and returns the exit
// status above.
int Main(int argc, char** argv);

}  // namespace checkpoint_cli
}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_CHECKPOINT_COMMANDS_H_
