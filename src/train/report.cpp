#include "train/report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "planner/planner.h"

namespace remat {

double spec_overhead(const StrategySpec& s, int L) {
  if (s.name == "none") return 1.0;
  if (s.name == "all") return (3.0 * L + L * (L + 1) / 2.0) / (3.0 * L);
  return 4.0 / 3.0;
}

namespace {

std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(b) / (1024.0 * 1024.0));
  return buf;
}

// The predictions of a run, from dry runs of its model with and without the policy.
struct Predicted {
  planner::StepTrace trace, store_all;
  Schedule schedule;
  planner::MemoryPrediction mem;
  planner::ComputePrediction comp;
};
Predicted predict(const ReportInput& in) {
  Predicted p;
  p.trace = planner::trace_step(*in.model, in.micro_batch, in.T, in.policy);
  p.store_all = in.policy ? planner::trace_step(*in.model, in.micro_batch, in.T, nullptr) : p.trace;
  p.schedule = make_schedule(in.strategy, in.model->num_layers());
  p.mem = planner::simulate_memory(p.trace, p.schedule);
  p.comp = planner::predict_compute(p.trace, p.schedule);
  return p;
}

// The part of the model a tensor belongs to: the block's name for a block's, "head" for what the
// head's ops make (an op's output and its ".suffix" statistics), "embedding" for the rest.
std::string layer_of(const Model& m, const planner::StepTrace& tr, const std::string& name) {
  if (auto s = m.split_name(name)) return tr.blocks.at(size_t(s->first)).name;
  for (const auto& op : tr.head.ops)
    if (name == op.name || name.rfind(op.name + ".", 0) == 0) return "head";
  return "embedding";
}

}  // namespace

nlohmann::json report_json(const ReportInput& in) {
  const Predicted pr = predict(in);
  const auto& mem = pr.mem;
  const auto& comp = pr.comp;
  const ModelConfig& cfg = in.model->config();
  const auto& c = in.measure.counters;
  const double measured_overhead = (c.fwd_flops + c.bwd_flops + c.recompute_flops) / (c.fwd_flops + c.bwd_flops);
  nlohmann::json j;
  j["arch"] = arch_name(cfg.arch);
  j["strategy"] = in.strategy.label();
  j["recompute_last"] = in.strategy.recompute_last;
  j["policy"] = in.policy_label;
  j["attention"] = autograd::attention_kind_name(cfg.attention);
  j["segments"] = in.strategy.segments;
  j["peak_activation_bytes"] = in.measure.peak_activation;
  j["predicted_activation_bytes"] = mem.peak_activation;
  j["forward_end_activation_bytes"] = in.measure.forward_end;
  j["predicted_forward_end_bytes"] = mem.forward_end;
  j["peak_boundary_bytes"] = in.measure.peak_checkpoint;
  j["predicted_boundary_bytes"] = mem.peak_checkpoint;
  j["peak_recompute_bytes"] = in.measure.peak_recompute;
  j["predicted_recompute_bytes"] = mem.peak_recompute;
  j["peak_saved_bytes"] = in.measure.peak_saved;
  j["predicted_saved_bytes"] = mem.peak_saved;
  j["boundary_activation_bytes"] = mem.boundary_bytes;
  j["block_internal_bytes"] = mem.block_bytes;
  j["block_forwards"] = c.block_forwards;
  j["block_recomputes"] = c.block_recomputes;
  j["block_backwards"] = c.block_backwards;
  j["fwd_flops"] = c.fwd_flops;
  j["recompute_flops"] = c.recompute_flops;
  j["bwd_flops"] = c.bwd_flops;
  j["overhead_flops_measured"] = measured_overhead;
  j["overhead_predicted"] = comp.overhead();
  j["overhead_textbook"] = spec_overhead(in.strategy, int(cfg.L));
  j["forward_equivalents"] = comp.forward_equivalents();
  return j;
}

std::string memory_report(const ReportInput& in) {
  const Predicted pr = predict(in);
  const auto& mem = pr.mem;
  const auto& comp = pr.comp;
  const Model& model = *in.model;
  const ModelConfig& cfg = model.config();
  const auto& c = in.measure.counters;
  const Allocator& a = Allocator::global();
  std::string r;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    r += line;
  };
  add("== memory report: %s, micro-batch %lld x T %lld, %lld micro-step(s), strategy %s%s, policy %s, %s attention ==\n",
      cfg.describe().c_str(), (long long)in.micro_batch, (long long)in.T, (long long)in.accum,
      in.strategy.label().c_str(), in.strategy.recompute_last ? " (recompute-last)" : "", in.policy_label.c_str(),
      autograd::attention_kind_name(cfg.attention));
  add("bytes per category (peak over the run, accounting allocator):\n");
  for (int i = 0; i < kNumCategories; ++i) {
    const Category cat = Category(i);
    if (a.peak(cat) == 0 && a.active(cat) == 0) continue;
    add("  %-22s %12s MiB\n", category_name(cat), mib(std::max(a.peak(cat), a.active(cat))).c_str());
  }
  add("activation peak of one step      measured %10s MiB   predicted %10s MiB   %s\n",
      mib(in.measure.peak_activation).c_str(), mib(mem.peak_activation).c_str(),
      in.measure.peak_activation == mem.peak_activation ? "(equal to the byte)" : "(MISMATCH)");
  add("  held at the end of the forward  measured %10s MiB   predicted %10s MiB\n",
      mib(in.measure.forward_end).c_str(), mib(mem.forward_end).c_str());
  add("  boundaries (checkpoints)        measured %10s MiB   predicted %10s MiB\n",
      mib(in.measure.peak_checkpoint).c_str(), mib(mem.peak_checkpoint).c_str());
  add("  in-flight recompute             measured %10s MiB   predicted %10s MiB\n",
      mib(in.measure.peak_recompute).c_str(), mib(mem.peak_recompute).c_str());
  add("  the rest (saved by the forward) measured %10s MiB   predicted %10s MiB\n",
      mib(in.measure.peak_saved).c_str(), mib(mem.peak_saved).c_str());
  add("  |x| (one boundary) %s MiB; one block's internals %s MiB; store-everything would hold %s MiB\n",
      mib(mem.boundary_bytes).c_str(), mib(mem.block_bytes).c_str(),
      mib(planner::simulate_memory(pr.store_all, make_schedule(parse_strategy("none", int(cfg.L), false), int(cfg.L)))
              .peak_activation)
          .c_str());

  // Per layer: measured (the allocator's per-name activation peaks) beside the dry run's table.
  std::map<std::string, size_t> analytic, measured, table_bytes;
  auto table = [&](const planner::PartTrace& p) {
    for (const auto& t : p.kept) table_bytes[t.name] = t.bytes;
  };
  table(pr.store_all.embed);
  for (const auto& b : pr.store_all.blocks) table(b);
  table(pr.store_all.head);
  for (auto& [n, b] : table_bytes) analytic[layer_of(model, pr.store_all, n)] += b;
  std::vector<std::pair<size_t, std::string>> largest;
  for (auto& [n, s] : a.by_name()) {
    if (s.act_peak == 0) continue;
    measured[layer_of(model, pr.store_all, n)] += s.act_peak;
    largest.emplace_back(s.act_peak, n);
  }
  add("activation bytes per layer (each tensor at its own peak)   measured MiB   analytic MiB\n");
  auto row = [&](const std::string& k) {
    add("  %-18s %36s %14s%s\n", k.c_str(), mib(measured[k]).c_str(), mib(analytic[k]).c_str(),
        measured[k] == analytic[k] ? "" : "  (differs)");
  };
  if (analytic.count("embedding") || measured.count("embedding")) row("embedding");
  for (const auto& b : pr.store_all.blocks) row(b.name);
  row("head");
  // One block's named tensors, with and without the policy.
  if (!pr.store_all.blocks.empty()) {
    const auto& all = pr.store_all.blocks[0];
    const auto& pol = pr.trace.blocks[0];
    add("block %s saved tensors%*s shape                 store-all MiB   policy %s MiB\n", all.name.c_str(),
        int(std::max<size_t>(1, 24 - std::min<size_t>(24, all.name.size()))), "", in.policy_label.c_str());
    size_t total = 0, kept = 0;
    for (const auto& t : all.kept) {
      bool dropped = false;
      for (const auto& d : pol.dropped) dropped = dropped || d.name == t.name;
      total += t.bytes;
      kept += dropped ? 0 : t.bytes;
      add("  %-40s %-20s %12s %12s%s\n", t.name.c_str(), shape_str(t.shape).c_str(), mib(t.bytes).c_str(),
          dropped ? "0" : mib(t.bytes).c_str(), dropped ? "   (rebuilt in backward)" : "");
    }
    add("  %-40s %-20s %12s %12s\n", "total", "", mib(total).c_str(), mib(kept).c_str());
    if (in.policy && pol.dropped.empty())
      add("  policy %s drops nothing in this block (flash attention, for one, never materialises the scores)\n",
          in.policy_label.c_str());
  }
  std::sort(largest.rbegin(), largest.rend());
  add("largest named activations:\n");
  for (size_t k = 0; k < std::min<size_t>(6, largest.size()); ++k)
    add("  %-40s %10s MiB\n", largest[k].second.c_str(), mib(largest[k].first).c_str());

  const double measured_overhead = (c.fwd_flops + c.bwd_flops + c.recompute_flops) / (c.fwd_flops + c.bwd_flops);
  add("== compute ==\n");
  add("  block forwards %lld, recomputes %lld, backwards %lld (schedule: %d, %d per micro-step)\n",
      (long long)c.block_forwards, (long long)c.block_recomputes, (long long)c.block_backwards,
      comp.block_forwards, comp.block_recomputes);
  add("  GFLOP: forward %.3f, recompute %.3f, backward %.3f\n", c.fwd_flops / 1e9, c.recompute_flops / 1e9,
      c.bwd_flops / 1e9);
  add("  overhead (fwd+bwd+recompute)/(fwd+bwd): measured %.3fx, predicted %.3fx, textbook %.3fx%s\n",
      measured_overhead, comp.overhead(), spec_overhead(in.strategy, int(cfg.L)),
      in.strategy.recompute_last || in.strategy.name == "none" ? "" : " (the textbook recomputes the last segment too)");
  return r;
}

}  // namespace remat
