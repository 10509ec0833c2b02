// OpenMP's thread count, adapted to the cores other processes leave free.
//
// remat's kernels run as many short parallel regions (a step of the default model has thousands).
// Alone on the machine, the fastest way to run them is with threads that spin briefly between
// regions (src/cli/main.cpp). Beside other busy processes, a team as wide as the machine is the
// slowest way: a region ends only when its last thread has run, and that thread waits for a core the
// other process holds, while its teammates spin on the cores they have. bench/bench_contention.sh
// measured, on 2 cores beside one busy process, a third of the tokens/s that one thread gets.
//
// So, unless the user fixed the thread count (--threads, OMP_NUM_THREADS) or the wait policy, remat
// runs on the cores the others leave: between parallel regions (the start of each training step,
// each sampled token), at most every kPeriodMs, it reads how many tasks the machine has runnable
// (/proc/loadavg's running count) and subtracts its own (/proc/self/task/*/stat in state R). When
// the others have kept at least one core busy at each of the last kWindow readings, the team shrinks
// to the cores left (at least one thread); it grows back when kGrowWindow readings in a row find
// them gone. Others that run only for moments (a shell command, a tenant's burst) move neither. Every
// kernel gives the same bits at any thread count (tests/kernels' thread checks, and
// Threads.AdaptingTheCountMidRunChangesNoBit), so this changes the speed of a run, never its numbers.
//
// Test hook: REMAT_TEST_OTHERS=n1,n2,... in the environment replaces the readings, one per adapt()
// call and without the period (the last repeats), so that a test can force the count to change.
#pragma once
#include <cstdio>

namespace remat::threads {

inline constexpr int kPeriodMs = 50;
inline constexpr int kWindow = 5;      // busy at each of the last 5 readings (a quarter second at least): shrink
inline constexpr int kGrowWindow = 3;  // free at each of the last 3: grow

// Set by main() when the OpenMP wait policy is remat's default (the user set neither OMP_WAIT_POLICY
// nor GOMP_SPINCOUNT).
void set_default_wait_policy(bool is_default);
// For the commands that train or sample with OpenMP's default thread count: enable_adaptive(all
// cores, log) unless the wait policy or the thread count was the user's (OMP_NUM_THREADS, or
// `count_given`: --threads).
void enable_unless_fixed(bool count_given, std::FILE* log);
// Turns adaptation on, with up to `max_threads` threads (OpenMP's default count). `log`: where the one
// line that says the team shrank goes (nullptr: nowhere).
void enable_adaptive(int max_threads, std::FILE* log);
bool adaptive();
// Between parallel regions, on the thread that starts them: may change omp_set_num_threads. Costs one
// clock read when adaptation is off or the period has not passed.
void adapt();
// Tasks runnable on the machine that are not this process's (one reading of /proc), or -1 where /proc
// cannot tell.
int others_runnable();

}  // namespace remat::threads
