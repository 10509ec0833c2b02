// Selective recomputation of the naive attention's probabilities (--policy selective): the rebuild
// in backward redoes Q K^T, the mask and the softmax only -- not P V -- and the gradients are bit
// for bit those of keeping the probabilities, multi-head and grouped-query, with dropout. The FLOPs
// the op declares for the rebuild are what the counters see (and what the planner reads from the
// Dropped record), and the rebuild allocates the probabilities and the packed keys, no output.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "kernels/attention.h"

using namespace remat;
namespace ag = remat::autograd;

namespace {

struct DropProbs : ag::Policy {
  bool keep(const std::string& name) const override { return !name.ends_with(".probs"); }
};

struct Dims {
  int64_t B, T, NH, KVH, HS;
};

struct AttnRun {
  std::vector<float> dqkv;
  ag::Counters counters;
  std::vector<ag::Dropped> dropped;
  double fwd_flops = 0, bwd_flops = 0;
  size_t recompute_peak = 0, workspace_peak = 0;  // during the backward
};

AttnRun run(const Dims& d, float p, const ag::Policy* policy, const std::string& name) {
  Tensor qkv = Tensor::empty({d.B, d.T, (d.NH + 2 * d.KVH) * d.HS}, Category::Activation, name + ".c_attn");
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < qkv.numel(); ++i) qkv.data()[i] = nd(g);
  AttnRun r;
  ag::Tape tape;
  ag::Recorder rec;
  rec.tape = &tape;
  rec.policy = policy;
  rec.counters = &r.counters;
  ag::GradTable gt;
  Tensor out;
  {
    ag::RecordScope s(rec);
    out = ag::attention(qkv, d.NH, d.KVH, p, {42, 1000}, ag::AttentionKind::Naive, name);
    ag::clear_recipes();
  }
  EXPECT_EQ(tape.size(), 1u);
  r.dropped = tape.nodes()[0]->dropped;
  r.fwd_flops = tape.nodes()[0]->flops_fwd;
  r.bwd_flops = tape.nodes()[0]->flops_bwd;
  Tensor dout = Tensor::empty(out.shape(), Category::ActivationGrad, "dout");
  for (int64_t i = 0; i < dout.numel(); ++i) dout.data()[i] = nd(g);
  gt.bind(out, dout);
  out = Tensor();
  Allocator& a = Allocator::global();
  a.reset_peak();
  {
    ag::RecordScope s(rec);
    tape.backward(gt);
  }
  r.recompute_peak = a.peak(Category::Recompute);
  r.workspace_peak = a.peak(Category::Workspace);
  const Tensor* dq = gt.find(qkv);
  EXPECT_NE(dq, nullptr);
  if (dq) r.dqkv.assign(dq->data(), dq->data() + dq->numel());
  return r;
}

class AttentionRebuild : public ::testing::TestWithParam<Dims> {};

}  // namespace

TEST_P(AttentionRebuild, GradientsBitIdenticalAndTheRebuildRunsOnlyQKtAndSoftmax) {
  const Dims d = GetParam();
  const DropProbs drop;
  const double pairs = double(d.B) * double(d.NH) * double(d.T) * double(d.T + 1) / 2.0;
  const double qk = 2.0 * d.HS * pairs, softmax = 5.0 * pairs;
  const size_t probs_bytes = size_t(d.B * d.NH * d.T * d.T) * sizeof(float);
  const int threads = omp_get_max_threads();
  for (float p : {0.f, 0.1f}) {
    const std::string what = "NH=" + std::to_string(d.NH) + " KVH=" + std::to_string(d.KVH) + " p=" + std::to_string(p);
    const AttnRun kept = run(d, p, nullptr, "kept.attn");
    const AttnRun sel = run(d, p, &drop, "sel.attn");
    ASSERT_EQ(kept.dqkv.size(), sel.dqkv.size());
    EXPECT_EQ(std::memcmp(kept.dqkv.data(), sel.dqkv.data(), kept.dqkv.size() * sizeof(float)), 0) << what;

    // Keeping everything rebuilds nothing.
    EXPECT_TRUE(kept.dropped.empty());
    EXPECT_EQ(kept.counters.recompute_flops, 0.0);
    EXPECT_EQ(kept.recompute_peak, 0u);
    // The policy dropped the probabilities, to be rebuilt from qkv at the cost of Q K^T + softmax: the
    // op's declared count, recorded once for the planner and counted once when the rebuild runs.
    ASSERT_EQ(sel.dropped.size(), 1u) << what;
    EXPECT_EQ(sel.dropped[0].name, "sel.attn.probs");
    EXPECT_EQ(sel.dropped[0].bytes, probs_bytes);
    EXPECT_EQ(sel.dropped[0].from, std::vector<std::string>{"sel.attn.c_attn"});
    EXPECT_DOUBLE_EQ(sel.dropped[0].flops, qk + softmax) << what;
    EXPECT_DOUBLE_EQ(sel.counters.recompute_flops, qk + softmax) << what;
    // The forward's products are QK^T and PV: the rebuild is the forward minus PV (and dropout).
    EXPECT_DOUBLE_EQ(sel.fwd_flops, 2 * qk + softmax + (p > 0 ? pairs : 0.0)) << what;
    EXPECT_DOUBLE_EQ(sel.fwd_flops, kept.fwd_flops);
    EXPECT_DOUBLE_EQ(sel.bwd_flops, kept.bwd_flops);
    EXPECT_LT(sel.dropped[0].flops, 0.51 * sel.fwd_flops + softmax);
    // What the rebuild allocates: the probabilities (Recompute) and the packed keys (Workspace) beside
    // the backward's own workspace. No (B, T, C) output, no V or dropped-probability rows.
    EXPECT_EQ(sel.recompute_peak, probs_bytes) << what;
    const size_t bwd_ws = size_t(kernels::attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, threads)) * 4;
    const size_t rebuild_ws = size_t(kernels::attention_probs_workspace_floats(d.T, d.HS, threads)) * 4;
    EXPECT_EQ(kept.workspace_peak, bwd_ws) << what;
    EXPECT_EQ(sel.workspace_peak, bwd_ws + rebuild_ws) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, AttentionRebuild,
                         ::testing::Values(Dims{2, 96, 4, 4, 16},     // multi-head (GPT-2)
                                           Dims{2, 70, 6, 2, 8},      // grouped-query (LLaMA)
                                           Dims{1, 130, 4, 1, 32}));  // multi-query, T past two tiles
