// The process's memory as the operating system sees it (its peak resident set, VmHWM), split by what
// remat knows of it, and predicted before the first step. A user's budget is the process: the
// accounted step (what the dry run predicts to the byte), the allocator's blocks beyond it (rounding
// to pages), and the runtime -- the binary and its libraries, OpenMP's threads, oneDNN's generated code
// and caches, the heap outside the allocator, token files mapped from disk.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace remat {

// Fixes glibc's mmap threshold at 1 MiB (unless MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES set one):
// buffers of that size and more that the libraries malloc (oneDNN's packing buffers, one set per
// thread) are mapped and go back to the system when freed. glibc's default threshold rises with
// every such buffer freed, up to 32 MiB, after which they stay in its per-thread heaps: on a
// 12-layer, 256-channel run with 2 threads the process held 36 to 52 MiB beside the allocator's
// blocks, 19.7 MiB with the threshold at 1 MiB, as runs of 1 thread and of small models do. 128 KiB
// gave the same figure with 17% more page faults (each mapped buffer faults its pages afresh), 4 MiB
// gave 50 MiB. Called first in main.
void fix_malloc_thresholds();
// Notes the resident set as main() begins, after MPI's initialisation (its libraries and shared
// segments): the binary and its libraries, the same for every command, so that `remat plan --budget`
// and `remat train --budget` plan the step within the same share.
void note_process_start();
// What note_process_start() noted (0 before).
size_t resident_at_start();

// What the process needs besides the accounted step, measured before it runs: its resident set now
// (binary, libraries, what is loaded), token files mapped from disk (counted whole: the sampler may
// touch every page), and an allowance for what the runtime adds once the kernels run
// (kRuntimeAllowance) and for the allocator's rounding of the step's blocks to pages.
struct ProcessFixed {
  // Measured: oneDNN's generated kernels and primitive cache, OpenMP's worker threads and the heap
  // outside the allocator (the tape's and the report's own containers) add up to 12 MiB beyond
  // the resident set at planning time, in runs of 1 to 12 layers, GPT-2 and LLaMA, fp32 and bf16,
  // 1 and 2 threads (see core/process_memory.cpp).
  static constexpr size_t kRuntimeAllowance = size_t(12) << 20;
  size_t resident = 0;  // resident_at_start(), else resident_bytes() now
  size_t mapped = 0;    // token files mapped from disk
  size_t runtime = kRuntimeAllowance;
  size_t total() const { return resident + mapped + runtime; }
};
// With `mapped` bytes of token files the run will map.
ProcessFixed process_fixed(size_t mapped);
// The allowance for the allocator's rounding of a step of `step_bytes` to its blocks (64 bytes below
// 64 KiB, pages above): 1 MiB + 0.5% of the step. The rounding measured (the allocator's high-water
// mark less the accounted peak) was 3 KiB to 320 KiB in runs of 1 to 24 layers.
size_t rounding_allowance(size_t step_bytes);
// The largest accounted step whose predicted process peak fits `budget` (0 when none does).
size_t step_budget_within(size_t budget, const ProcessFixed& f);
// "resident 11.2 MiB (binary, libraries, loaded data) + runtime allowance 12.0 MiB (OpenMP, oneDNN,
// heap outside the allocator) = 23.2 MiB", with the mapped token files when there are any.
std::string fixed_description(const ProcessFixed& f);
// The process peak predicted for an accounted step of `step_bytes`.
inline size_t predicted_process(const ProcessFixed& f, size_t step_bytes) {
  return f.total() + step_bytes + rounding_allowance(step_bytes);
}

// The process's memory at its highest, as measured now.
struct ProcessMemory {
  size_t peak_rss = 0;        // VmHWM: the process's peak resident set
  size_t allocator_high = 0;  // the accounting allocator's blocks at their highest (live, rounded)
  size_t accounted = 0;       // the accounted step's peak (what the dry run predicts)
  size_t predicted = 0;       // the predicted process peak (0: none made)
  size_t budget = 0;          // --budget or --memory-limit (0: none)
  // Their split: the allocator's blocks beyond the accounted peak (rounding, and any peak outside the
  // step), and the rest of the process.
  size_t reserve() const { return allocator_high > accounted ? allocator_high - accounted : 0; }
  size_t runtime() const { return peak_rss > allocator_high ? peak_rss - allocator_high : 0; }
};
ProcessMemory measure_process(size_t accounted, size_t predicted = 0, size_t budget = 0);
// "process peak 211.4 MiB (VmHWM) = accounted step 188.2 MiB + allocator reserve 0.4 MiB + runtime
// 22.8 MiB; predicted 215.0 MiB; fits --budget 230 MiB, 18.6 MiB spare", or the same with "over
// --budget ... by ...".
// `accounted` names the accounted part ("accounted step" in training).
std::string process_line(const ProcessMemory& m, const std::string& budget_flag = "--budget",
                         const std::string& accounted = "accounted step");
// For a command that runs a model outside training (sample, grads, bench, calibrate): the process
// line after its work, the accounted part being the allocator's peak, and the prediction when given.
std::string command_process_line(size_t predicted = 0);
nlohmann::json process_json(const ProcessMemory& m);

}  // namespace remat
