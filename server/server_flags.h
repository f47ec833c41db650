// ps_server's flags and their parsed form. Only ps_server_main.cc calls
// these (the flags are part of the binary, not of any library).
#ifndef PSTRAIN_SERVER_SERVER_FLAGS_H_
#define PSTRAIN_SERVER_SERVER_FLAGS_H_

#include "absl/status/statusor.h"
#include "server/server_node.h"

namespace pstrain {

// Every flag but --tune_memory: the shared node flags
// (common/node_flags.h), the listen address and port, the advertised host
// and the shard to claim (--shard, or with --shard_from_hostname the
// ordinal of this host's name). `metrics` is left null. Errors start with
// the offending flag.
absl::StatusOr<ServerNodeOptions> ServerOptionsFromFlags();

// --tune_memory: configure the process's memory (server/process_memory.h)
// before any thread starts.
bool TuneMemoryRequested();

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SERVER_FLAGS_H_
