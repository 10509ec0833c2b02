// remat plan --ranks N: the model state per rank under ZeRO (Rajbhandari et al. 2020, Figure 1's
// accounting) beside remat's own.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/cmd_plan_textbook.h"
#include "planner/planner.h"
#include "planner/zero.h"
#include "core/allocator.h"

namespace remat::cli {

namespace {
std::string gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB", bytes / 1e9);
  return b;
}
}  // namespace

void print_model_state_per_rank(const ModelConfig& cfg, int ranks, int zero) {
  const double psi = double(planner::shape_only_model(cfg)->num_params());
  std::printf("model state per rank over %d ranks (Rajbhandari et al. 2020: mixed-precision Adam, K = 12; "
              "psi = %.3g parameters; GB = 1e9 bytes):\n", ranks, psi);
  std::printf("  %-22s %-24s %10s   %s\n", "stage", "ZeRO's count", "ZeRO", "remat (dry run of its trainer)");
  const char* names[] = {"0 baseline", "1 P_os", "2 P_os+g", "3 P_os+g+p"};
  const char* formulas[] = {"(2+2+K) psi", "(2+2) psi + K psi/N", "2 psi + (2+K) psi/N", "(2+2+K) psi/N"};
  for (int s = 0; s <= 3; ++s) {
    const std::optional<planner::RankModelState> r = planner::remat_model_state(cfg, ranks, s);
    std::string mine = "not supported yet";
    if (r)
      mine = gb(double(r->total())) + " (parameters " + gb(double(r->parameters)) + ", gradients " +
             gb(double(r->gradients)) + ", AdamW " + gb(double(r->optimizer)) + ")";
    std::printf("  %-22s %-24s %10s   %s%s\n", names[s], formulas[s], gb(planner::zero_paper_bytes(psi, ranks, s)).c_str(),
                mine.c_str(), s == zero ? "   <- --zero" : "");
  }
  std::printf("  why they differ: remat keeps fp32 master weights as the parameters (4 psi, plus a bf16 copy of each "
              "matrix in bf16) and fp32 gradients (4 psi), where ZeRO counts fp16 parameters and gradients (2 + 2) "
              "and the fp32 master copy among the K = 12 optimizer bytes; remat's stage 1 shards AdamW's two "
              "moments (8 psi / N), not the master weights.\n");
}

void print_zero3_gathers(const ModelConfig& cfg, int ranks) {
  const auto model = planner::shape_only_model(cfg);
  double block_bytes = 0;  // block 0's parameters as the matmuls read them (bf16 copies in bf16)
  for (const Param& p : model->params())
    if (const auto split = model->split_name(p.name); split && split->first == 0)
      block_bytes += double(p.value.numel()) * (p.lowp.defined() ? 2.0 : 4.0);
  const int L = int(cfg.L);
  std::printf("ZeRO-3 all-gathers per micro-batch, as the schedule implies them (remat does not run ZeRO-3 yet): a "
              "block's parameters are %s as gathered (each rank receives %d/%d of them); FSDP gathers each block once in "
              "the forward and once in the backward, twice with activation checkpointing (pytorch/pytorch#105635):\n",
              format_bytes(size_t(block_bytes)).c_str(), ranks - 1, ranks);
  std::printf("  %-8s %8s %9s %22s %10s %26s\n", "strategy", "forward", "backward", "backward, if held", "FSDP",
              "saved per rank per step");
  for (const char* name : {"none", "block", "sqrt"}) {
    const Schedule s = make_schedule(parse_strategy(name, L, false), L);
    const planner::GatherCount g = planner::zero3_gathers(s, false), h = planner::zero3_gathers(s, true);
    const bool ckpt = std::string(name) != "none";
    const int64_t fsdp = L + (ckpt ? 2 : 1) * int64_t(L);
    const double saved = double(fsdp - g.forward - g.backward) * block_bytes * (ranks - 1) / ranks;
    char held[48];
    std::snprintf(held, sizeof held, "%lld (%lld block%s held)", (long long)h.backward, (long long)h.held_peak,
                  h.held_peak == 1 ? "" : "s");
    std::printf("  %-8s %8lld %9lld %22s %10lld %26s\n", name, (long long)g.forward, (long long)g.backward, held,
                (long long)fsdp, format_bytes(size_t(std::max(0.0, saved))).c_str());
  }
}

}  // namespace remat::cli
