// On a fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) the flight recorder's record is
// written to a file named on stderr before the signal goes on to whoever handled it before
// (Python's faulthandler, or the default action: the process still dies as it would have).
#pragma once

namespace torch_tpu::flight {

// Installs the handlers once; no-op when the flight recorder is off.
void install_fatal_signal_dump();

}  // namespace torch_tpu::flight
