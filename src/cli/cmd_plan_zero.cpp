// remat plan --ranks N: the model state per rank under ZeRO (Rajbhandari et al. 2020, Figure 1's
// accounting) beside remat's own.
#include <cstdio>
#include <string>

#include "cli/cmd_plan_textbook.h"
#include "planner/planner.h"
#include "planner/zero.h"

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

}  // namespace remat::cli
