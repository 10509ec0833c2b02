// Fault injection for the signal tests: a run must end cleanly whatever it is doing when a signal
// arrives, and a test cannot hit "during validation" or "during a save" by timing. With
// REMAT_TEST_SIGNAL=<phase>:<signal number>[:<n>] in the environment, the n-th time (default the
// first) the process passes signal_point(<phase>), it sends itself the signal (to the process, as
// kill(1) does) and waits until the handler has taken it (at most 5 s), so the signal lands inside
// that phase. Without the variable, signal_point costs one branch on a cached flag.
// Phases: "scan" (reading the data), "step", "validation", "sample", "save".
// With REMAT_TEST_FAIL=<phase>[:<n>], the n-th pass throws remat::Error("test", "injected failure
// ...") instead: an error in the middle of a run, as a failing disk or a bad input would raise
// (tests of how every rank of an MPI job stops on one rank's error).
#pragma once
#include <atomic>

namespace remat {

void signal_point(const char* phase);
// The flag a taken signal sets (cmd_train's stop flag), for signal_point to wait on.
void set_signal_taken(const std::atomic<int>* flag);

}  // namespace remat
