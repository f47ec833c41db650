#include "common/signals.h"

#include <csignal>

namespace pstrain {
namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void OnStopSignal(int) { g_stop = 1; }
}  // namespace

void InstallStopSignalHandlers() {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
}

bool StopRequested() { return g_stop != 0; }

}  // namespace pstrain
