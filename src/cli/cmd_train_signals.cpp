// remat train's signals (cmd_train.h): how a signal ends a run cleanly.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include "cli/cmd_train.h"
#include "core/signal_point.h"

namespace remat::cli {

// Signals. Every signal a user or the system sends to end a run (SIGINT, SIGTERM, SIGHUP, SIGPIPE,
// SIGXCPU) ends it cleanly, with the conventional exit status 128 + the signal's number:
//  - before training begins (reading flags, data and checkpoints, building the model) nothing is
//    trained and nothing written: the process exits at once;
//  - from then on the first signal is recorded in g_stop_signal, which the trainer polls between
//    steps, between validation batches and between sampled tokens: it stops there, writes the
//    checkpoint and --save, and returns. A second SIGINT exits at once, except while a checkpoint
//    is being written (g_saving), which it lets finish.
// The signals are blocked in every thread (the OpenMP and oneDNN threads inherit the mask) and taken
// by one thread in sigwait(): no handler ever interrupts a kernel. An asynchronous handler corrupted
// the heap now and then, because its signal frame is written below the stack pointer of the
// interrupted code, where oneDNN's JIT gemm keeps data. The handler below only serves a thread that
// existed before the mask was set; it runs on an alternate stack for the same reason. A SIGPIPE a
// write raises is the writing thread's own and stays pending there; the write fails with EPIPE,
// which the output checks report.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_saving{0};
std::atomic<bool> g_training{false};
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXCPU};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    default: return "a signal";
  }
}

namespace {

void on_stop(int sig) {  // async-signal-safe: write() and _exit() only
  if (!g_training.load()) {
    const char* parts[] = {"remat: ", signal_name(sig), " before training began: nothing was trained or written\n"};
    for (const char* p : parts) (void)!::write(2, p, std::strlen(p));
    _exit(128 + sig);
  }
  if (g_stop_signal.load() != 0 && sig == SIGINT && g_saving.load() == 0) _exit(130);
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);  // the first signal gives the exit status
}

extern "C" void on_stop_signal(int sig) { on_stop(sig); }

}  // namespace

void install_signal_handlers() {
  // Past `ulimit -f`, a write fails with EFBIG (reported as an error) instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  static std::vector<char> alt(size_t(1) << 18);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : kStopSignals) {
    sigaction(sig, &sa, nullptr);
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  set_signal_taken(&g_stop_signal);
  std::thread([set]() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) on_stop(sig);
    }
  }).detach();
}

}  // namespace remat::cli
