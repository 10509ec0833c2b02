// remat bench: facts of the machine and of the step beside the rows -- where each op's time goes
// (--profile), the GEMM rate the step is compared with, which bf16 code ran, and the load.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <vector>

#include "cli/bench.h"
#include "core/stats.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

namespace remat::cli {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Per-op wall time of one step, as the median over the timed steps (one slow step on a busy machine
// must not inflate the table), slowest first.
nlohmann::json profile_json(const std::vector<autograd::OpProfile>& steps) {
  std::map<std::string, std::vector<autograd::OpProfile::Entry>> per_op;
  for (const auto& p : steps)
    for (const auto& [key, e] : p.ops) per_op[key].push_back(e);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, es] : per_op) {
    auto med = [&](auto field) {
      std::vector<double> v;
      for (const auto& e : es) v.push_back(double(field(e)));
      return median(v);
    };
    const double fwd = med([](const auto& e) { return e.fwd_s; }), rec = med([](const auto& e) { return e.rec_s; }),
                 bwd = med([](const auto& e) { return e.bwd_s; });
    const double fwd_flops = med([](const auto& e) { return e.fwd_flops; });
    const double bwd_flops = med([](const auto& e) { return e.bwd_flops; });
    nlohmann::json r;
    r["op"] = key;
    r["calls_per_step"] = med([](const auto& e) { return e.calls; });
    r["forward_ms"] = fwd * 1e3;
    r["recompute_ms"] = rec * 1e3;
    r["backward_ms"] = bwd * 1e3;
    r["total_ms"] = (fwd + rec + bwd) * 1e3;
    r["forward_gflops"] = fwd > 0 ? fwd_flops / fwd / 1e9 : 0.0;
    r["backward_gflops"] = bwd > 0 ? bwd_flops / bwd / 1e9 : 0.0;
    rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["total_ms"].get<double>() > b["total_ms"].get<double>();
  });
  return rows;
}

void print_profile(const nlohmann::json& rows, double step_ms) {
  std::printf("  %-32s %6s %9s %9s %9s %9s %6s %9s %9s\n", "op (per step)", "calls", "fwd ms", "recomp ms",
              "bwd ms", "total ms", "share", "fwd GF/s", "bwd GF/s");
  double sum = 0;
  for (const auto& r : rows) {
    const double tot = r["total_ms"].get<double>();
    sum += tot;
    std::printf("  %-32s %6.0f %9.2f %9.2f %9.2f %9.2f %5.1f%% %9.1f %9.1f\n", r["op"].get<std::string>().c_str(),
                r["calls_per_step"].get<double>(), r["forward_ms"].get<double>(), r["recompute_ms"].get<double>(),
                r["backward_ms"].get<double>(), tot, 100.0 * tot / step_ms, r["forward_gflops"].get<double>(),
                r["backward_gflops"].get<double>());
  }
  std::printf("  %-32s %6s %9s %9s %9s %9.2f %5.1f%%  (sum of per-op medians; the rest of the step is bookkeeping)\n", "all ops", "", "",
              "", "", sum, 100.0 * sum / step_ms);
}

// fp32 sgemm, or oneDNN's bf16 matmul (bf16 in and out, fp32 accumulation) as the bf16 layers run it;
// the median of a dozen runs.
double measure_gemm_peak(DType precision) {
  const int64_t M = 2048, K = 768, N = 3072;
  Tensor a = Tensor::zeros({M, K}, Category::Workspace, "bench.gemm.a", precision);
  Tensor b = Tensor::zeros({K, N}, Category::Workspace, "bench.gemm.b", precision);
  Tensor c = Tensor::zeros({M, N}, Category::Workspace, "bench.gemm.c", precision);
  a.fill(0.5f);
  b.fill(0.25f);
  std::vector<double> t;
  for (int r = 0; r < 12; ++r) {
    double t0 = now();
    if (precision == DType::BF16)
      kernels::gemm_bf16(false, false, M, N, K, a.data_bf16(), K, b.data_bf16(), N, 0.0f, c.data_bf16(), N);
    else
      kernels::sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    t.push_back(now() - t0);
  }
  return 2.0 * M * N * K / median(t) / 1e9;
}

// A CPU without AVX512_BF16 runs a slower path, and says so: oneDNN's implementation of the layers'
// matmul, the conversions' path and the attention products' path.
nlohmann::json bf16_paths() {
  return {{"matmul", kernels::gemm_bf16_impl(false, false, 2048, 3072, 768, true)},
          {"conversions", kernels::bf16_isa_name(kernels::bf16_isa())},
          {"attention", kernels::dot_bf16_rows_path()}};
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return f ? l : -1.0;
}

}  // namespace remat::cli
