// SIGINT/SIGTERM handling for the binaries' main(): the handler only sets a
// flag; main loops poll StopRequested() and shut down cleanly.
#ifndef PSTRAIN_COMMON_SIGNALS_H_
#define PSTRAIN_COMMON_SIGNALS_H_

namespace pstrain {

void InstallStopSignalHandlers();
bool StopRequested();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SIGNALS_H_
