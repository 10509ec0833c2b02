// remat plan --ranks N: the model state per rank under ZeRO (Rajbhandari et al. 2020, Figure 1's
// accounting) beside remat's own.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>
#include <cstdio>
#include <string>

#include "cli/cmd_plan_textbook.h"
#include "planner/planner.h"
#include "planner/zero.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "kernels/gemm.h"
#include "planner/comm.h"
#include "planner/pricing.h"

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
    std::string mine = "not supported";
    if (r)
      mine = gb(double(r->total())) + " (parameters " + gb(double(r->parameters)) + ", gradients " +
             gb(double(r->gradients)) + ", AdamW " + gb(double(r->optimizer)) + ")";
    std::printf("  %-22s %-24s %10s   %s%s\n", names[s], formulas[s], gb(planner::zero_paper_bytes(psi, ranks, s)).c_str(),
                mine.c_str(), s == zero ? "   <- --zero" : "");
  }
  std::printf("  why they differ: remat keeps fp32 master weights as the parameters (4 psi, plus a bf16 copy of each "
              "matrix in bf16) and fp32 gradients (4 psi), where ZeRO counts fp16 parameters and gradients (2 + 2) "
              "and the fp32 master copy among the K = 12 optimizer bytes; remat's stage 1 shards AdamW's two "
              "moments (8 psi / N), not the master weights; its stage 3 holds a chunk of all of them (16 psi / N, and "
              "the bf16 copies' chunks) between steps, and the blocks it gathers while a step runs on top (the whole-step "
              "plan prices those).\n");
}

void print_zero3_gathers(const ModelConfig& cfg, int ranks) {
  const auto model = planner::shape_only_model(cfg);
  const double block_bytes = planner::gathered_params(*model).block_bytes;
  const int L = int(cfg.L);
  std::printf("ZeRO-3 all-gathers per micro-batch, as the schedule implies them and remat's --zero 3 makes them: a "
              "block's parameters are %s as gathered (each rank receives %d/%d of them); FSDP gathers each block once in "
              "the forward and once in the backward, twice with activation checkpointing (pytorch/pytorch#105635):\n",
              format_bytes(size_t(block_bytes)).c_str(), ranks - 1, ranks);
  std::printf("  %-8s %8s %9s %22s %10s %26s\n", "strategy", "forward", "backward", "backward, --gather hold", "FSDP",
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

double sgemm_rate() {  // 2 * 1024^3 FLOPs a product
  constexpr int64_t n = 1024;
  Tensor a = Tensor::zeros({n, n}, Category::Workspace, "plan.rate.a"), b = Tensor::zeros({n, n}, Category::Workspace, "plan.rate.b"),
         c = Tensor::empty({n, n}, Category::Workspace, "plan.rate.c");
  for (int64_t i = 0; i < n * n; ++i) a.data()[i] = b.data()[i] = float(i % 7) * 0.1f;
  std::vector<double> s;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (r > 0) s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return 2.0 * double(n * n * n) / s[s.size() / 2];
}

namespace {
std::string secs(double s) {
  char b[32];
  if (s >= 1) std::snprintf(b, sizeof b, "%.2f s", s);
  else std::snprintf(b, sizeof b, "%.1f ms", s * 1e3);
  return b;
}
}  // namespace

void print_step_time_per_rank(const ModelConfig& cfg, int ranks, int zero, int64_t micro, int64_t T, int64_t accum,
                              const planner::Link& link, const std::string& bandwidth, const std::string& latency) {
  const auto model = planner::shape_only_model(cfg);
  const planner::StepTrace tr = planner::trace_step(*model, micro, T);
  const double rate = sgemm_rate();
  const int L = int(cfg.L);
  std::printf("step time per rank (%lld micro-batch%s of %lld x T %lld on each rank), --zero %d, --bandwidth %s (%s/s), "
              "--latency %s:\n", (long long)accum, accum == 1 ? "" : "es", (long long)micro, (long long)T, zero,
              bandwidth.c_str(), format_bytes(size_t(link.bytes_per_s)).c_str(), latency.c_str());
  std::printf("  model: compute = FLOPs / this machine's sgemm rate (%.1f GFLOP/s at %d thread%s); communication by the "
              "latency-bandwidth model (Hockney 1994) of ring collectives (Thakur, Rabenseifner and Gropp 2005), one per "
              "tensor: (N-1) x latency + (N-1)/N x bytes / bandwidth; the step between all of it hidden behind compute, "
              "max(compute, communication), and none, their sum%s\n",
              rate / 1e9, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s",
              zero == 3 ? "; ZeRO-3's gathers as the schedule makes them (--gather regather)" : "");
  std::printf("  %-8s %16s %12s %18s %12s %12s %24s\n", "strategy", "compute GFLOP", "compute", "collectives", "received",
              "comm", "step");
  for (const char* name : {"none", "block", "sqrt"}) {
    const Schedule s = make_schedule(parse_strategy(name, L, false), L);
    const planner::ComputePrediction p = planner::predict_compute(tr, s);
    const double flops = step_flops(p, accum);
    const planner::CommStep c = planner::comm_per_step(cfg, zero, s, accum);
    const double compute = flops / rate, comm = c.seconds(ranks, link);
    char step[64];
    std::snprintf(step, sizeof step, "%s .. %s", secs(std::max(compute, comm)).c_str(), secs(compute + comm).c_str());
    std::printf(flops >= 1e10 ? "  %-8s %16.1f %12s %18lld %12s %12s %24s\n" : "  %-8s %16.4g %12s %18lld %12s %12s %24s\n",
                name, flops / 1e9, secs(compute).c_str(),
                (long long)c.collectives, format_bytes(size_t(c.received_bytes(ranks))).c_str(), secs(comm).c_str(), step);
  }
}

}  // namespace remat::cli
