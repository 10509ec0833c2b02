#include "planner/comm.h"

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "planner/planner.h"
#include "planner/zero.h"

namespace remat::planner {

CommStep comm_per_step(const ModelConfig& cfg, int zero, const Schedule& schedule, int64_t micro_batches) {
  REMAT_ASSERT(zero >= 0 && zero <= 3 && micro_batches >= 1, "comm_per_step: zero 0..3, micro_batches >= 1");
  const auto model = shape_only_model(cfg);
  CommStep c;
  double block0 = 0, rest = 0;  // bytes as the matmuls read them: block 0's, and outside the blocks
  for (const Param& p : model->params()) {
    const double fp32 = double(p.value.numel()) * 4;
    const double read = p.lowp.defined() ? double(p.value.numel()) * 2 : fp32;
    const auto split = model->split_name(p.name);
    if (split && split->first == 0) block0 += read;
    if (!split) rest += read;
    if (zero < 3) {  // reduce-scatter the gradient, all-gather the gradient or the parameter
      c.collectives += 2;
      c.tensor_bytes += 2 * fp32;
    } else {  // reduce-scatter the gradient
      c.collectives += 1;
      c.tensor_bytes += fp32;
    }
  }
  if (zero == 3) {
    int64_t block_tensors = 0, rest_tensors = 0;
    for (const Param& p : model->params()) {
      const auto split = model->split_name(p.name);
      if (split && split->first == 0) ++block_tensors;
      if (!split) ++rest_tensors;
    }
    const GatherCount g = zero3_gathers(schedule, false);
    const double gathers = double(g.forward + g.backward) * double(micro_batches);
    c.collectives += int64_t(gathers) * block_tensors + 2 * micro_batches * rest_tensors;
    c.tensor_bytes += gathers * block0 + 2.0 * double(micro_batches) * rest;
  }
  return c;
}

namespace {
// A positive number followed by one of `units` (name, factor); the factor applied.
double number_with_unit(const std::string& text, const std::string& flag,
                        std::initializer_list<std::pair<const char*, double>> units, const std::string& example) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  std::string unit(end ? end : "");
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (const auto& [name, factor] : units)
    if (unit == name && end != s && std::isfinite(v) && v > 0) return v * factor;
  std::string names;
  for (const auto& [name, factor] : units) names += (names.empty() ? "" : ", ") + std::string(name);
  throw Error("cli", flag + " '" + text + "' is not a positive number with a unit (" + names + ")", "e.g. " + flag + " " + example);
}
}  // namespace

double parse_bandwidth(const std::string& text, const std::string& flag) {
  return number_with_unit(text, flag,
                          {{"bit", 1.0 / 8}, {"Kbit", 1e3 / 8}, {"Mbit", 1e6 / 8}, {"Gbit", 1e9 / 8}, {"Tbit", 1e12 / 8},
                           {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                           {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}},
                          "25Gbit");
}

double parse_latency(const std::string& text, const std::string& flag) {
  return number_with_unit(text, flag, {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}}, "5us");
}

}  // namespace remat::planner
