// The published figures remat plan prints beside its own (cmd_plan_textbook.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/cmd_plan_textbook.h"
#include "core/allocator.h"
#include "planner/budget.h"
#include "planner/planner.h"

namespace remat::cli {

// One block's activation bytes, term by term, from the dry run (store-everything, no policy), beside
// Korthikanti et al.'s per-layer count sbh(34 + 5as/h) and, for the presets the usual figures are quoted for
// through, its figures. remat counts fp32 tensors as its ops save them; each difference is named.
void print_terms(const planner::StepTrace& tr, const Model& model, const std::string& preset) {
  if (tr.blocks.empty()) return;
  const ModelConfig& c = tr.cfg;
  const double s = double(tr.T), b = double(tr.B), h = double(c.C), a = double(c.NH);
  const double sbh = s * b * h;
  const auto& blk = tr.blocks[0];
  const bool bf = c.precision == DType::BF16;
  const char* prec = dtype_name(c.precision);
  std::printf("per-layer activation bytes (dry run of %s, store-everything, %s%s, dropout %s):\n", blk.name.c_str(),
              bf ? "bf16 with fp32 norm statistics" : "fp32", bf && c.fp32_residual ? " and an fp32 residual stream" : "",
              c.dropout > 0 ? "on" : "off");
  std::printf("  %-40s %-22s %12s %10s\n", "tensor (saved by its op)", "shape", "bytes", "x sbh");
  double total = 0, quadratic = 0;
  for (const auto& t : blk.kept) {
    const auto local = model.split_name(t.name);
    const std::string name = t.input ? t.name + " (block input)" : (local ? local->second : t.name);
    std::printf("  %-40s %-22s %12s %10.3f\n", name.c_str(), shape_str(t.shape).c_str(), format_bytes(t.bytes).c_str(),
                double(t.bytes) / sbh);
    total += double(t.bytes);
    if (t.shape.size() == 4 && t.shape[2] == tr.T && t.shape[3] == tr.T) quadratic += double(t.bytes);
  }
  const double korth = sbh * (34.0 + 5.0 * a * s / h);
  std::printf("  %-40s %-22s %12s %10.3f\n", "total per layer", "", format_bytes(size_t(total)).c_str(), total / sbh);
  std::printf("  Korthikanti et al. (2022), sbh(34 + 5as/h) = %.3f sbh = %s per layer, x%lld layers = %s\n",
              34.0 + 5.0 * a * s / h, format_bytes(size_t(korth)).c_str(), (long long)c.L,
              format_bytes(size_t(korth * double(c.L))).c_str());
  std::printf("  remat: %.3f sbh linear + %.3f sbh in T x T terms (%s) = %s per layer, x%lld = %s%s%s\n",
              (total - quadratic) / sbh, quadratic / sbh, prec, format_bytes(size_t(total)).c_str(), (long long)c.L,
              format_bytes(size_t(total * double(c.L))).c_str(), bf ? "" : "; in bf16 (--precision bf16) about ",
              bf ? "" : (format_bytes(size_t(total / 2)) + " per layer").c_str());
  std::printf("  the differences: %s; it keeps no dropout masks (Philox "
              "regenerates them: Korthikanti counts 1 byte per element, sbh + as^2b + sbh + sbh per layer); it keeps "
              "the softmax output once, pre-dropout (Korthikanti: softmax output and dropout output, 2as^2b + 2as^2b); "
              "the MLP is the model's own (%s: hidden %lld = %.3fh%s, Korthikanti assumes 4h with GELU); norms keep "
              "their statistics (%s)\n",
              bf ? "remat stores bf16 as Korthikanti counts (2 bytes), its norm statistics fp32"
                 : "remat stores fp32 (4 bytes, Korthikanti counts 2: --precision bf16 does too)",
              arch_name(c.arch), (long long)c.mlp_hidden(), double(c.mlp_hidden()) / h,
              c.arch == Arch::Llama ? ", three projections and SwiGLU keeping gate, up and their product" : "",
              c.arch == Arch::Llama ? "rstd, s*b floats each" : "mean and rstd, s*b floats each");
  // |x| in elements, whatever the residual stream's dtype, and its size in each.
  const double x_elems = double(tr.boundary_bytes) / double(dtype_size(c.residual_dtype()));
  const double x_fp32 = 4 * x_elems, x16 = 2 * x_elems;
  if (preset == "gpt2") {
    std::printf("usual figures (GPT-2 small):\n");
    std::printf("  the usual figure, |x| at B=8, T=1024: 6.3 M elements, 12 MiB in bf16. remat: |x| = B*T*C = %.2f M "
                "elements at B=%lld, T=%lld: %s in bf16, %s in fp32%s\n",
                x_elems / 1e6, (long long)tr.B, (long long)tr.T, format_bytes(size_t(x16)).c_str(),
                format_bytes(size_t(x_fp32)).c_str(), bf ? "" : " (this run is fp32: --precision bf16 stores the 16-bit size)");
  }
  if (preset == "llama-7b") {
    std::printf("usual figures (LLaMA-7B):\n");
    std::printf("  the usual figure, |x| at B=8, T=4096: 0.5 GB. remat: |x| = B*T*C = %.0f M elements at B=%lld, T=%lld: %s "
                "fp32, %s bf16; at B=8, T=4096 it is 134 M elements, 512 MiB fp32 -- the usual 0.5 GB is the fp32 "
                "size, 256 MiB in bf16. L|x| at B=8: 16 GiB fp32 (the usual ~16 GB)\n",
                b * s * h / 1e6, (long long)tr.B, (long long)tr.T, format_bytes(size_t(x_fp32)).c_str(),
                format_bytes(size_t(x16)).c_str());
    std::printf("  attention scores per block hT^2 = 32 x 4096^2 = 5.4e8 entries (~1 GB bf16) per sequence, x32 "
                "blocks ~ 32 GB: remat at B=%lld, T=%lld keeps %s of T x T terms per block (%s), %s in all\n",
                (long long)tr.B, (long long)tr.T, format_bytes(size_t(quadratic)).c_str(), prec,
                format_bytes(size_t(quadratic * double(c.L))).c_str());
    std::printf("  Korthikanti et al. (2022): selective ~16 GB -> ~4 GB (~5%%); Chen et al. (2016): block ~1 GB (~33%%): see the frontier and "
                "--policy selective / --recompute block below; remat's figures are %s and whole-block\n", prec);
  }
}


// Self-test (a): for L = 96 (GPT-3's depth), the memory ratio of store-everything to sqrt checkpointing
// (Chen et al., 2016), and the compute overhead. The formulas and their usual round numbers first, then
// remat's figures for the same model: the boundaries the formulas count, then every saved tensor by dry run.
void print_self_test_a(const Candidates& c, const PlanTarget& t) {
  const planner::StepTrace& tr = c.problem.traces[0];
  const int L = int(c.cfg.L);
  const double l = double(L), r = std::sqrt(l);
  std::printf("self-test (a), L=%d: store everything against sqrt(L) checkpointing\n", L);
  std::printf("  Chen et al. (2016): M_naive = L|x| = %d|x|; M_checkpoint = 2 sqrt(L)|x| = %.2f|x| (sqrt(L) checkpoints and one "
              "segment of sqrt(L) in flight); ratio L / (2 sqrt(L)) = sqrt(L)/2 = %.2f, the usual \"roughly 5x\". The "
              "often quoted \"reduces activation memory by sqrt(L)\", \"memory / ~10\" for L = 96, is sqrt(L) = %.2f: the "
              "checkpoints alone, the segment in flight left out. Compute: backward = 2 forwards, and one extra "
              "forward of every block, (1 + 2 + 1) / (1 + 2) = %.3f, the usual \"x1.33\"\n",
              L, 2 * r, r / 2, r, 4.0 / 3.0);
  const StrategySpec sq = parse_strategy("sqrt", L, true, true);
  const int K = int(sq.segments.size()), longest = *std::max_element(sq.segments.begin(), sq.segments.end());
  std::printf("  remat, boundaries as the formulas count them: sqrt = ceil(sqrt(%d)) = %d segments of at most %d blocks, "
              "%d checkpoints + %d in flight = %d|x| against %d|x|: ratio %.2f (|x| = %s at micro-batch %lld, T=%lld)\n",
              L, K, longest, K, longest, K + longest, L, l / double(K + longest),
              format_bytes(tr.boundary_bytes).c_str(), (long long)t.micro, (long long)t.T);
  const StepPlan none = price_strategy(c, parse_strategy("none", L, false), "none", t);
  const StepPlan text = price_strategy(c, sq, "none", t);
  const StepPlan dflt = price_strategy(c, parse_strategy("sqrt", L, false), "none", t);
  const double fwd = tr.blocks[0].fwd_flops(), bwd = tr.blocks[0].bwd_flops();
  // What sqrt holds above the formulas' count: its peak minus the K checkpoints and the segment in
  // flight, each as |x| (the figures printed above), so the sentence is arithmetic on printed figures.
  const size_t counted = size_t(K + longest) * tr.boundary_bytes;
  std::printf("  remat, every saved tensor (dry run, %s): none %s; sqrt as Chen et al. run it (every segment "
              "recomputed, one replay keeping internals) %s: ratio %.2f, overhead %.3f; sqrt as remat runs it by "
              "default (last segment stored, replay keeping block inputs) %s: ratio %.2f, overhead %.3f. "
              "The ratio is not the formulas': store-everything keeps each block's internals (%s, not |x|), and "
              "sqrt as Chen et al. run it peaks at %s, %s above the %d|x| = %s the formulas count\n",
              c.cfg.precision == DType::BF16 ? "bf16" : "fp32", format_bytes(none.activation_peak).c_str(), format_bytes(text.activation_peak).c_str(),
              double(none.activation_peak) / double(text.activation_peak), text.compute.overhead(),
              format_bytes(dflt.activation_peak).c_str(), double(none.activation_peak) / double(dflt.activation_peak),
              dflt.compute.overhead(), format_bytes(tr.blocks[0].kept_bytes()).c_str(),
              format_bytes(text.activation_peak).c_str(),
              text.activation_peak > counted ? format_bytes(text.activation_peak - counted).c_str() : "0 B", K + longest,
              format_bytes(counted).c_str());
  std::printf("  the overhead in FLOPs: a block's backward is %.3f forwards (the formulas' 2); the embedding and the head "
              "are never recomputed. The whole step (parameters, gradients, AdamW moments and data included): none %s, "
              "sqrt %s\n",
              bwd / fwd, format_bytes(none.step.peak_total).c_str(), format_bytes(text.step.peak_total).c_str());
}

}  // namespace remat::cli
