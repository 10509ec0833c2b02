#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "core/error.h"
#include "planner/budget.h"
#include "planner/optimal.h"
#include "planner/planner.h"

namespace remat {

double flop_overhead(const autograd::Counters& c) {
  return (c.fwd_flops + c.bwd_flops + c.recompute_flops) / (c.fwd_flops + c.bwd_flops);
}

double textbook_overhead(const StrategySpec& s, int L) {
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
  const auto& kernels = in.block_attention;  // a plan's per block, or empty
  p.trace = planner::trace_step(*in.model, in.micro_batch, in.T, in.policy, kernels);
  p.store_all = in.policy ? planner::trace_step(*in.model, in.micro_batch, in.T, nullptr, kernels) : p.trace;
  if (!in.block_policy.empty()) {  // a plan's policy per block: its blocks spliced from one dry run per policy
    std::vector<const autograd::Policy*> distinct{in.policy};
    std::vector<int> index;
    for (const autograd::Policy* q : in.block_policy) {
      auto it = std::find(distinct.begin(), distinct.end(), q);
      if (it == distinct.end()) it = distinct.insert(distinct.end(), q);
      index.push_back(int(it - distinct.begin()));
    }
    std::vector<planner::StepTrace> traces{p.trace};
    for (size_t k = 1; k < distinct.size(); ++k)
      traces.push_back(planner::trace_step(*in.model, in.micro_batch, in.T, distinct[k], kernels));
    p.trace = planner::splice(traces, index);
  }
  p.schedule = in.schedule ? *in.schedule : make_schedule(in.strategy, in.model->num_layers());
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

// Store-everything's activation peak: the dry run of the model without policy, strategy none.
size_t store_all_peak(const Predicted& p, int L) {
  return planner::simulate_memory(p.store_all, make_schedule(parse_strategy("none", L, false), L)).peak_activation;
}

std::string seconds_text(double s) {
  char b[32];
  if (s < 1.0)
    std::snprintf(b, sizeof b, "%.1f ms", s * 1e3);
  else
    std::snprintf(b, sizeof b, "%.3f s", s);
  return b;
}


std::string headline(const ReportInput& in, const Predicted& pr) {
  const int L = in.model->num_layers();
  const size_t have = in.measure.peak_activation, all = store_all_peak(pr, L);
  const bool is_none = in.strategy.name == "none" && !in.policy;
  char b[768];
  if (is_none)  // the baseline itself: no "X instead of X (+0.0%)"
    std::snprintf(b, sizeof b, "activations %s MiB, store-everything itself (nothing dropped or recomputed), ",
                  mib(have).c_str());
  else
    std::snprintf(b, sizeof b, "activations %s MiB instead of %s MiB (%+.1f%%), ", mib(have).c_str(), mib(all).c_str(),
                  all ? 100.0 * (double(have) / double(all) - 1.0) : 0.0);
  std::string r = b;
  std::string sources = "activations: measured peak vs the dry run's prediction for store-everything";
  if (in.store_all_step_s && in.step_s && *in.store_all_step_s > 0) {
    std::snprintf(b, sizeof b, "step time %+.1f%% against store-everything", 100.0 * (*in.step_s / *in.store_all_step_s - 1.0));
    r += b;
    std::snprintf(b, sizeof b, "; step time: measured, median of %d step(s) each on the same batches, %s against %s",
                  in.timed_steps, seconds_text(*in.step_s).c_str(), seconds_text(*in.store_all_step_s).c_str());
    sources += b;
  } else if (!in.compare_note.empty()) {
    r += "step time against store-everything not measured: --compare-none failed (" + in.compare_note + ")";
  } else {
    std::snprintf(b, sizeof b, "step time against store-everything not measured: rerun with --compare-none (the FLOP "
                  "count alone says %+.1f%%)", 100.0 * (flop_overhead(in.measure.counters) - 1.0));
    r += b;
  }
  if (is_none) sources += "; this run is store-everything itself";
  return r + " [" + sources + "]";
}

}  // namespace

std::string whole_step_agreement(const StepMemory& predicted, const StepMeasure& measured) {
  std::string diff;
  auto part = [&](const char* what, size_t p, size_t m) {
    if (p == m) return;
    char b[96];
    std::snprintf(b, sizeof b, "%s%s %+lld B", diff.empty() ? "" : ", ", what, (long long)p - (long long)m);
    diff += b;
  };
  for (int i = 0; i < kNumCategories; ++i) {
    part(category_name(Category(i)), predicted.peak[size_t(i)], measured.peak_category[size_t(i)]);
    for (int d = 0; d < kNumDTypes; ++d)
      part((std::string(category_name(Category(i))) + " " + dtype_name(DType(d))).c_str(),
           predicted.peak_by_dtype[size_t(i)][size_t(d)], measured.peak_category_by_dtype[size_t(i)][size_t(d)]);
  }
  part("total", predicted.peak_total, measured.peak_total);
  for (int d = 0; d < kNumDTypes; ++d)
    part((std::string("activation peak ") + dtype_name(DType(d))).c_str(), predicted.peak_activation_by_dtype[size_t(d)],
         measured.peak_activation_by_dtype[size_t(d)]);
  return diff.empty() ? "predicted = measured, to the byte" : "predicted - measured: " + diff;
}

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
  j["precision"] = dtype_name(cfg.precision);
  j["fp32_residual"] = cfg.fp32_residual;
  j["peak_activation_bytes"] = in.measure.peak_activation;
  for (int d = 0; d < kNumDTypes; ++d)
    j["peak_activation_bytes_by_dtype"][dtype_name(DType(d))] = in.measure.peak_activation_by_dtype[size_t(d)];
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
  j["overhead_textbook"] = textbook_overhead(in.strategy, int(cfg.L));
  j["forward_equivalents"] = comp.forward_equivalents();
  // The headline and its figures. Bytes per category: each category's own peak in the step; their
  // joint peak is peak_total_bytes.
  j["headline"] = headline(in, pr);
  const size_t all = store_all_peak(pr, int(cfg.L));
  j["store_all_activation_bytes_predicted"] = all;
  j["activation_saving_fraction"] = all ? 1.0 - double(in.measure.peak_activation) / double(all) : 0.0;
  j["store_all_activation_bytes_measured"] =
      in.store_all_peak_measured ? nlohmann::json(*in.store_all_peak_measured) : nlohmann::json(nullptr);
  const bool timed = in.store_all_step_s && in.step_s && *in.store_all_step_s > 0;
  j["step_time_s_measured"] = timed ? nlohmann::json(*in.step_s) : nlohmann::json(nullptr);
  j["store_all_step_time_s_measured"] = timed ? nlohmann::json(*in.store_all_step_s) : nlohmann::json(nullptr);
  j["step_time_overhead_measured"] = timed ? nlohmann::json(*in.step_s / *in.store_all_step_s) : nlohmann::json(nullptr);
  j["timed_steps"] = timed ? in.timed_steps : 0;
  if (!in.compare_note.empty()) j["compare_none_note"] = in.compare_note;
  nlohmann::json cats = nlohmann::json::object();
  for (int i = 0; i < kNumCategories; ++i)
    if (in.measure.peak_category[size_t(i)] > 0) cats[category_name(Category(i))] = in.measure.peak_category[size_t(i)];
  j["category_peak_bytes"] = cats;
  j["peak_total_bytes"] = in.measure.peak_total;
  if (const auto& ws = in.measure.whole_step) {
    nlohmann::json pc = nlohmann::json::object();
    for (int i = 0; i < kNumCategories; ++i)
      if (ws->peak[size_t(i)] > 0) pc[category_name(Category(i))] = ws->peak[size_t(i)];
    j["category_peak_bytes_predicted"] = pc;
    j["peak_total_bytes_predicted"] = ws->peak_total;
    j["whole_step"] = whole_step_agreement(*ws, in.measure);
  }
  if (in.measure.untracked_heap) j["untracked_heap_bytes"] = *in.measure.untracked_heap;
  return j;
}

std::string report_headline(const ReportInput& in) { return headline(in, predict(in)); }

std::string memory_report(const ReportInput& in) {
  const Predicted pr = predict(in);
  const auto& mem = pr.mem;
  const auto& comp = pr.comp;
  const Model& model = *in.model;
  const ModelConfig& cfg = model.config();
  const auto& c = in.measure.counters;
  std::string r;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    r += line;
  };
  r += headline(in, pr) + "\n";
  add("== memory report: %s, micro-batch %lld x T %lld, %lld micro-step(s), strategy %s%s, policy %s, %s attention ==\n",
      cfg.describe().c_str(), (long long)in.micro_batch, (long long)in.T, (long long)in.accum,
      in.strategy.label().c_str(), in.strategy.recompute_last ? " (recompute-last)" : "", in.policy_label.c_str(),
      attention_label(cfg.attention, in.block_attention).c_str());
  // The whole step: every accounted byte, measured beside the trainer's dry run of the same step.
  const std::optional<StepMemory>& ws = in.measure.whole_step;
  if (ws)
    add("bytes per category (each at its own peak during the step): measured by the accounting allocator, "
        "predicted by a dry run of the whole step\n");
  else
    add("bytes per category (each at its own peak during the step, accounting allocator):\n");
  size_t sum_of_peaks = 0;
  for (int i = 0; i < kNumCategories; ++i) {
    const size_t b = in.measure.peak_category[size_t(i)];
    if (b == 0 && !(ws && ws->peak[size_t(i)] > 0)) continue;
    sum_of_peaks += b;
    // A category holding bf16 (--precision bf16) shows each dtype's own peak beside it.
    const auto& bd = in.measure.peak_category_by_dtype[size_t(i)];
    std::string by_dtype;
    if (bd[size_t(DType::BF16)] > 0) {
      by_dtype = "   (";
      for (int d = 0; d < kNumDTypes; ++d) {
        by_dtype += std::string(d ? ", " : "") + dtype_name(DType(d)) + " " + mib(bd[size_t(d)]);
        if (ws && ws->peak_by_dtype[size_t(i)][size_t(d)] != bd[size_t(d)])
          by_dtype += " predicted " + mib(ws->peak_by_dtype[size_t(i)][size_t(d)]);
      }
      by_dtype += ")";
    }
    if (ws)
      add("  %-22s %12s MiB   predicted %12s MiB%s\n", category_name(Category(i)), mib(b).c_str(),
          mib(ws->peak[size_t(i)]).c_str(), by_dtype.c_str());
    else
      add("  %-22s %12s MiB%s\n", category_name(Category(i)), mib(b).c_str(), by_dtype.c_str());
  }
  std::string predicted_total;
  if (ws) {
    char b[64];
    std::snprintf(b, sizeof b, "predicted %12s MiB   ", mib(ws->peak_total).c_str());
    predicted_total = b;
  }
  add("  %-22s %12s MiB   %s(all categories at once, at the step's peak; their own peaks, at different moments, "
      "sum to %s MiB)\n",
      "total", mib(in.measure.peak_total).c_str(), predicted_total.c_str(), mib(sum_of_peaks).c_str());
  if (ws) add("  whole step: %s\n", whole_step_agreement(*ws, in.measure).c_str());
  if (in.measure.untracked_heap)
    add("  outside the allocator: %s MiB (oneDNN primitive cache and scratchpad, runtime)\n",
        mib(*in.measure.untracked_heap).c_str());
  add("activation peak of one step      measured %10s MiB   predicted %10s MiB   %s\n",
      mib(in.measure.peak_activation).c_str(), mib(mem.peak_activation).c_str(),
      in.measure.peak_activation == mem.peak_activation ? "(equal to the byte)" : "(MISMATCH)");
  if (in.measure.peak_activation_by_dtype[size_t(DType::BF16)] > 0) {
    std::string parts;
    for (int d = 0; d < kNumDTypes; ++d) {
      parts += std::string(d ? ", " : "") + dtype_name(DType(d)) + " " + mib(in.measure.peak_activation_by_dtype[size_t(d)]) + " MiB";
      if (ws) parts += " (predicted " + mib(ws->peak_activation_by_dtype[size_t(d)]) + ")";
    }
    add("  by dtype at that peak: %s; the fp32 part is norm statistics and log-sum-exp%s\n", parts.c_str(),
        cfg.fp32_residual ? ", and the fp32 residual stream" : "");
  }
  auto split = [&](const char* label, size_t measured, size_t predicted) {
    add("  %-32smeasured %10s MiB   predicted %10s MiB\n", label, mib(measured).c_str(), mib(predicted).c_str());
  };
  split("held at the end of the forward", in.measure.forward_end, mem.forward_end);
  add("  its parts, each at its own peak (separate peaks, at different moments: they need not add up to the "
      "activation peak):\n");
  split("  boundaries (checkpoints)", in.measure.peak_checkpoint, mem.peak_checkpoint);
  split("  in-flight recompute", in.measure.peak_recompute, mem.peak_recompute);
  split("  saved by the first forward", in.measure.peak_saved, mem.peak_saved);
  add("  |x| (one boundary) %s MiB; one block's internals %s MiB; store-everything would hold %s MiB (dry run)\n",
      mib(mem.boundary_bytes).c_str(), mib(mem.block_bytes).c_str(), mib(store_all_peak(pr, int(cfg.L))).c_str());
  if (in.store_all_peak_measured)
    add("  store-everything measured %s MiB in the --compare-none steps\n", mib(*in.store_all_peak_measured).c_str());

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
  const std::map<std::string, NameStats> names = in.names ? *in.names : Allocator::global().by_name();
  for (auto& [n, s] : names) {
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

  const double measured_overhead = flop_overhead(c);
  add("== compute ==\n");
  add("  block forwards %lld, recomputes %lld, backwards %lld (schedule: %d, %d per micro-step)\n",
      (long long)c.block_forwards, (long long)c.block_recomputes, (long long)c.block_backwards,
      comp.block_forwards, comp.block_recomputes);
  add("  GFLOP: forward %.3f, recompute %.3f, backward %.3f\n", c.fwd_flops / 1e9, c.recompute_flops / 1e9,
      c.bwd_flops / 1e9);
  add("  FLOP overhead (fwd+bwd+recompute)/(fwd+bwd): counted %.3fx, predicted %.3fx, textbook %.3fx%s\n",
      measured_overhead, comp.overhead(), textbook_overhead(in.strategy, int(cfg.L)),
      in.strategy.recompute_last || in.strategy.name == "none" ? "" : " (the textbook recomputes the last segment too)");
  if (in.store_all_step_s && in.step_s && *in.store_all_step_s > 0)
    add("  step time, measured (median of %d step(s) each, same batches, fresh trainers): %s, store-everything %s: "
        "%.3fx\n",
        in.timed_steps, seconds_text(*in.step_s).c_str(), seconds_text(*in.store_all_step_s).c_str(),
        *in.step_s / *in.store_all_step_s);
  else
    add("  step time against store-everything: not measured (%s)\n",
        in.compare_note.empty() ? "rerun with --compare-none" : in.compare_note.c_str());
  return r;
}

ReportInput report_input(const Trainer& t, const TrainSummary& s) {
  ReportInput in{&t.model(), t.micro_batch(), t.seq(), t.accum(), t.strategy(), s.measure,
                 t.policy().keeps_all() ? nullptr : &t.policy(), t.policy().label()};
  const StepOptions so = t.step_options();
  in.schedule = so.schedule;
  in.block_policy = so.block_policy;
  in.block_attention = so.block_attention;
  if (!t.block_policies().empty()) {
    in.policy_label = "per block:";
    for (const NamePolicy& p : t.block_policies()) in.policy_label += " " + p.label();
  }
  return in;
}

}  // namespace remat
