#include "planner/comm.h"

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "planner/planner.h"
#include "planner/zero.h"

namespace remat::planner {

GatheredParams gathered_params(const Model& model) {
  GatheredParams g;
  for (const Param& p : model.params()) {
    const double n = double(p.value.numel());
    const auto split = model.split_name(p.name);
    // A block's matmul reads its bf16 copy; the embedding and the head gather the master too (the
    // embedding reads it), as dist::DataParallel does.
    if (split && split->first == 0) ++g.block_tensors, g.block_bytes += n * (p.lowp.defined() ? 2.0 : 4.0);
    if (!split) g.rest_tensors += p.lowp.defined() ? 2 : 1, g.rest_bytes += n * (p.lowp.defined() ? 6.0 : 4.0);
  }
  return g;
}

CommStep comm_per_step(const ModelConfig& cfg, int zero, const Schedule& schedule, int64_t micro_batches, bool hold) {
  REMAT_ASSERT(zero >= 0 && zero <= 3 && micro_batches >= 1, "comm_per_step: zero 0..3, micro_batches >= 1");
  const auto model = shape_only_model(cfg);
  // Every fp32 gradient is reduce-scattered; under stages 0-2 the gradient or the parameter is then
  // all-gathered too.
  const int64_t per_tensor = zero < 3 ? 2 : 1;
  CommStep c;
  for (const Param& p : model->params()) {
    c.collectives += per_tensor;
    c.tensor_bytes += double(per_tensor) * double(p.value.numel()) * 4;
  }
  if (zero == 3) {
    const GatheredParams g = gathered_params(*model);
    const GatherCount n = zero3_gathers(schedule, hold);
    const int64_t gathers = (n.forward + n.backward) * micro_batches;
    // The embedding and the head: gathered once a step, held through it.
    c.collectives += gathers * g.block_tensors + g.rest_tensors;
    c.tensor_bytes += double(gathers) * g.block_bytes + g.rest_bytes;
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
