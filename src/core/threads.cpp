#include "core/threads.h"

#include <dirent.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace remat::threads {
namespace {

struct State {
  bool on = false;
  int max_threads = 1;
  int current = 1;
  std::FILE* log = nullptr;
  bool told = false;
  std::array<int, kWindow> seen{};  // the last kWindow readings of the others' runnable tasks, a ring
  int n_seen = 0;
  std::chrono::steady_clock::time_point last{};
  std::vector<int> scripted;  // REMAT_TEST_OTHERS
  size_t next_scripted = 0;
};
State& state() {
  static State s;
  return s;
}

// The whole of a small /proc file, or "" when it cannot be read.
std::string read_small(const char* path) {
  std::FILE* f = std::fopen(path, "re");
  if (!f) return {};
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  return std::string(buf, n);
}

// Runnable tasks on the machine: /proc/loadavg's fourth field is "running/total".
int machine_runnable() {
  std::string s = read_small("/proc/loadavg");
  int running = 0, total = 0;
  if (s.empty() || std::sscanf(s.c_str(), "%*s %*s %*s %d/%d", &running, &total) != 2) return -1;
  return running;
}

// This process's threads in state R (running or waiting for a core): spinning OpenMP workers included.
int own_runnable() {
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string s = read_small(("/proc/self/task/" + std::string(e->d_name) + "/stat").c_str());
    size_t paren = s.rfind(')');  // the name may hold spaces and parentheses; the state follows the last ')'
    if (paren != std::string::npos && paren + 2 < s.size() && s[paren + 2] == 'R') ++n;
  }
  ::closedir(d);
  return std::max(n, 1);  // the caller itself is running
}

std::vector<int> parse_scripted(const char* text) {
  std::vector<int> v;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    long x = std::strtol(p, &end, 10);
    if (end == p) break;
    v.push_back(int(std::max(0L, x)));
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

}  // namespace

int others_runnable() {
  // Our own first: an idle OpenMP worker may stop spinning and sleep between the two reads, and counted
  // in this order that can only hide another task, never invent one (which would shrink the team).
  int own = own_runnable();
  int all = machine_runnable();
  if (all < 0 || own < 0) return -1;
  return std::max(0, all - own);
}

void enable_adaptive(int max_threads, std::FILE* log) {
  State& s = state();
  s.on = max_threads > 1;
  s.max_threads = std::max(1, max_threads);
  s.current = s.max_threads;
  s.log = log;
  if (const char* t = std::getenv("REMAT_TEST_OTHERS")) s.scripted = parse_scripted(t);
}

bool adaptive() { return state().on; }

namespace {
bool g_default_wait_policy = false;
}
void set_default_wait_policy(bool is_default) { g_default_wait_policy = is_default; }

void enable_unless_fixed(bool count_given, std::FILE* log) {
  if (!g_default_wait_policy || count_given || std::getenv("OMP_NUM_THREADS")) return;
  enable_adaptive(omp_get_max_threads(), log);
}

void adapt() {
  State& s = state();
  if (!s.on) return;
  int others;
  if (!s.scripted.empty()) {
    others = s.scripted[std::min(s.next_scripted++, s.scripted.size() - 1)];
  } else {
    auto now = std::chrono::steady_clock::now();
    if (s.n_seen > 0 && now - s.last < std::chrono::milliseconds(kPeriodMs)) return;
    s.last = now;
    others = others_runnable();
    if (others < 0) return;  // no /proc: keep the count
  }
  s.seen[size_t(s.n_seen % kWindow)] = others;
  ++s.n_seen;
  // Shrink to the cores the others kept busy at every one of the last kWindow readings; grow back to
  // what the last kGrowWindow readings all leave free. A process that runs for moments (a shell
  // command, another tenant's burst) moves neither.
  auto last = [&](int n) {
    int lo = INT32_MAX, hi = 0;
    for (int k = 0; k < n; ++k) {
      const int v = s.seen[size_t((s.n_seen - 1 - k) % kWindow)];
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    return std::pair{lo, hi};
  };
  int want = s.current;
  if (s.n_seen >= kWindow) want = std::min(want, std::clamp(s.max_threads - last(kWindow).first, 1, s.max_threads));
  if (s.n_seen >= kGrowWindow && want == s.current)
    want = std::max(want, std::clamp(s.max_threads - last(kGrowWindow).second, 1, s.max_threads));
  if (want == s.current) return;
  if (want < s.current && !s.told && s.log) {
    const int busy = last(kWindow).first;
    std::fprintf(s.log,
                 "remat: %d other busy task%s on this machine's %d cores: running on %d thread%s while %s, "
                 "%d again after (--threads N or OMP_NUM_THREADS=N fixes the count%s)\n",
                 busy, busy == 1 ? "" : "s", s.max_threads, want, want == 1 ? "" : "s",
                 busy == 1 ? "it runs" : "they run", s.max_threads,
                 busy >= s.max_threads ? "; with more busy tasks than cores, OMP_WAIT_POLICY=passive on all cores "
                                         "can be faster: bench/bench_contention.sh measures it"
                                       : "");
    s.told = true;
  }
  s.current = want;
  omp_set_num_threads(want);
}

}  // namespace remat::threads
