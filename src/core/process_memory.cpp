#include "core/process_memory.h"

#include <cstdio>
#include <cstdlib>

#include <malloc.h>

#include <nlohmann/json.hpp>

#include "core/allocator.h"

namespace remat {

namespace {
size_t g_resident_at_start = 0;
}

void note_process_start() { g_resident_at_start = resident_bytes(); }

void fix_malloc_thresholds() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("GLIBC_TUNABLES")) return;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

size_t resident_at_start() { return g_resident_at_start; }

ProcessFixed process_fixed(size_t mapped) {
  ProcessFixed f;
  f.resident = g_resident_at_start ? g_resident_at_start : resident_bytes();
  f.mapped = mapped;
  return f;
}

size_t rounding_allowance(size_t step_bytes) { return (size_t(1) << 20) + step_bytes / 200; }

size_t step_budget_within(size_t budget, const ProcessFixed& f) {
  if (budget <= f.total()) return 0;
  if (predicted_process(f, 0) > budget) return 0;
  size_t step = (budget - predicted_process(f, 0)) / 201 * 200;  // step + step / 200 fits what is left
  while (predicted_process(f, step + 1) <= budget) ++step;         // the last few bytes the division left
  return step;
}

std::string fixed_description(const ProcessFixed& f) {
  std::string s = "resident " + format_bytes(f.resident) + " (binary, libraries)";
  if (f.mapped) s += " + token files " + format_bytes(f.mapped);
  return s + " + runtime allowance " + format_bytes(f.runtime) + " (OpenMP, oneDNN, heap outside the allocator) + " +
         "rounding 1 MiB + 0.5% of the step";
}

ProcessMemory measure_process(size_t accounted, size_t predicted, size_t budget) {
  ProcessMemory m;
  m.peak_rss = peak_resident_bytes();
  m.allocator_high = Allocator::global().live_high_water();
  m.accounted = accounted;
  m.predicted = predicted;
  m.budget = budget;
  return m;
}

std::string process_line(const ProcessMemory& m, const std::string& budget_flag, const std::string& accounted) {
  if (m.peak_rss == 0) return "process peak: not readable here (/proc/self/status has no VmHWM)";
  std::string s = "process peak " + format_bytes(m.peak_rss) + " (VmHWM) = " + accounted + " " + format_bytes(m.accounted) +
                  " + allocator reserve " + format_bytes(m.reserve()) + " + runtime " + format_bytes(m.runtime());
  if (m.predicted) s += "; predicted " + format_bytes(m.predicted);
  if (m.budget) {
    if (m.peak_rss <= m.budget)
      s += "; fits " + budget_flag + " " + format_bytes(m.budget) + ", " + format_bytes(m.budget - m.peak_rss) + " spare";
    else
      s += "; over " + budget_flag + " " + format_bytes(m.budget) + " by " + format_bytes(m.peak_rss - m.budget);
  }
  return s;
}

std::string command_process_line(size_t predicted) {
  const size_t accounted = Allocator::global().peak_total_ever();
  return process_line(measure_process(accounted, predicted), "--budget", "accounted");
}

nlohmann::json process_json(const ProcessMemory& m) {
  nlohmann::json j;
  j["peak_rss_bytes"] = m.peak_rss;
  j["accounted_step_bytes"] = m.accounted;
  j["allocator_reserve_bytes"] = m.reserve();
  j["runtime_bytes"] = m.runtime();
  j["allocator_high_bytes"] = m.allocator_high;
  j["predicted_bytes"] = m.predicted ? nlohmann::json(m.predicted) : nlohmann::json(nullptr);
  j["budget_bytes"] = m.budget ? nlohmann::json(m.budget) : nlohmann::json(nullptr);
  j["headroom_bytes"] = m.budget ? nlohmann::json(double(m.budget) - double(m.peak_rss)) : nlohmann::json(nullptr);
  return j;
}

}  // namespace remat
