// ps_checkpoint: inspect a pstrain checkpoint and export its weights to
// safetensors; the commands and their usage are in
// tools/checkpoint/commands.h.
#include "tools/checkpoint/commands.h"

int main(int argc, char** argv) {
  return pstrain::checkpoint_cli::Main(argc, argv);
}
