#include "core/signal_point.h"

#include "core/error.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace remat {

namespace {

struct Injection {
  std::string phase;
  int sig = 0;
  long nth = 1;
  long seen = 0;
};

Injection* injection() {
  static Injection* inj = []() -> Injection* {
    const char* env = std::getenv("REMAT_TEST_SIGNAL");
    if (!env || !*env) return nullptr;
    static Injection i;
    std::string s = env;
    const size_t a = s.find(':');
    if (a == std::string::npos) return nullptr;
    i.phase = s.substr(0, a);
    const size_t b = s.find(':', a + 1);
    i.sig = std::atoi(s.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1).c_str());
    if (b != std::string::npos) i.nth = std::atol(s.substr(b + 1).c_str());
    return i.sig > 0 ? &i : nullptr;
  }();
  return inj;
}

std::atomic<const std::atomic<int>*> g_taken{nullptr};

// REMAT_TEST_FAIL=<phase>[:<n>]
Injection* failure() {
  static Injection* inj = []() -> Injection* {
    const char* env = std::getenv("REMAT_TEST_FAIL");
    if (!env || !*env) return nullptr;
    static Injection i;
    const std::string s = env;
    const size_t a = s.find(':');
    i.phase = s.substr(0, a);
    if (a != std::string::npos) i.nth = std::atol(s.substr(a + 1).c_str());
    return &i;
  }();
  return inj;
}

}  // namespace

void set_signal_taken(const std::atomic<int>* flag) { g_taken.store(flag); }

void signal_point(const char* phase) {
  if (Injection* f = failure(); f && f->phase == phase && ++f->seen == f->nth)
    throw Error("test", std::string("injected failure at ") + phase + " " + std::to_string(f->nth) + " (REMAT_TEST_FAIL)");
  Injection* inj = injection();
  if (!inj || inj->phase != phase || ++inj->seen != inj->nth) return;
  ::kill(::getpid(), inj->sig);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    const std::atomic<int>* f = g_taken.load();
    if (f && f->load() != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace remat
