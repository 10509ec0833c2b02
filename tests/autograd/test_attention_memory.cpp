// Flash attention never materialises (T, T): through the op, forward and backward, the allocator's
// peak stays within a bound linear in T, while the naive op's peak holds the B*NH*T^2 scores.
#include <gtest/gtest.h>

#include <random>

#include "autograd/ops.h"

using namespace remat;
namespace ag = remat::autograd;

namespace {

// Peak bytes allocated above the baseline during one forward + backward of the attention op.
size_t attention_peak(ag::AttentionKind kind, int64_t B, int64_t T, int64_t C, int64_t NH, size_t* workspace_peak) {
  Tensor qkv = Tensor::empty({B, T, 3 * C}, Category::Activation, "qkv");
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < qkv.numel(); ++i) qkv.data()[i] = d(g);
  Allocator& a = Allocator::global();
  const size_t base = a.active_total();
  a.reset_peak();
  {
    ag::Tape tape;
    ag::Recorder r;
    r.tape = &tape;
    ag::GradTable gt;
    Tensor out;
    {
      ag::RecordScope s(r);
      out = ag::attention(qkv, NH, NH, 0.1f, {3, 0}, kind, "h.0.attn");
    }
    Tensor dout = Tensor::zeros(out.shape(), Category::ActivationGrad, "dout");
    dout.fill(1e-3f);
    gt.bind(out, dout);
    out = Tensor();
    tape.backward(gt);
  }
  *workspace_peak = a.peak(Category::Workspace);
  return a.peak_total() - base;
}

}  // namespace

TEST(AttentionMemory, FlashPeakIsLinearInTNaiveHoldsTheScores) {
  const int64_t B = 1, C = 64, NH = 2;
  size_t ws1 = 0, ws4 = 0, wsn = 0;
  const size_t flash_1k = attention_peak(ag::AttentionKind::Flash, B, 1024, C, NH, &ws1);
  const size_t flash_4k = attention_peak(ag::AttentionKind::Flash, B, 4096, C, NH, &ws4);
  const size_t naive_1k = attention_peak(ag::AttentionKind::Naive, B, 1024, C, NH, &wsn);
  // Linear in T: everything the op allocates is a few (B, T, C)-sized tensors (out, its gradient,
  // dqkv) plus O(B*NH*T) log-sum-exp, plus a workspace independent of T.
  auto bound = [&](int64_t T) { return size_t(B * T * C * 4) * 8 + size_t(B * NH * T * 4) * 2 + ws1 + 4096; };
  EXPECT_LE(flash_1k, bound(1024));
  EXPECT_LE(flash_4k, bound(4096));
  EXPECT_EQ(ws1, ws4) << "the flash workspace must not grow with T";
  EXPECT_LT(double(flash_4k) / double(flash_1k), 4.5) << "quadrupling T must not grow the peak 16x";
  // The naive twin holds B*NH*T*T probabilities (saved): the test can fail.
  EXPECT_GE(naive_1k, size_t(B * NH * 1024 * 1024 * 4));
  EXPECT_GT(naive_1k, 4 * flash_1k);
}
