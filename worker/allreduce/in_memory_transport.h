// Transport for ranks that are threads of one process (tests): a send puts
// the segment straight into the right neighbour's mailbox.
#ifndef PSTRAIN_WORKER_ALLREDUCE_IN_MEMORY_TRANSPORT_H_
#define PSTRAIN_WORKER_ALLREDUCE_IN_MEMORY_TRANSPORT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/allreduce/transport.h"

namespace pstrain {

// One transport per rank of a ring of `size` ranks (index = rank); they
// share the mailboxes, so any of them may be destroyed first. A rank that
// never runs leaves its neighbours' operations to time out.
// INVALID_ARGUMENT unless size >= 1.
absl::StatusOr<std::vector<std::unique_ptr<Transport>>> CreateInMemoryRing(
    int size);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ALLREDUCE_IN_MEMORY_TRANSPORT_H_
