// The cross-entropy backward writes the logits' gradient over the saved logits when nothing else
// holds them: bit for bit the gradient of the zero-filled path (kept here as a reference twin), and
// the head's backward allocates no second (B, T, V) buffer. When the logits are still held (by the
// caller here), they are left intact and the gradient goes to a fresh buffer, written without a zero
// fill.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "autograd/ops.h"
#include "kernels/crossentropy.h"

using namespace remat;
namespace ag = remat::autograd;

namespace {

constexpr int64_t kB = 2, kT = 24, kC = 16, kV = 515, kN = kB * kT;
constexpr double kCount = 40.0;

std::vector<int32_t> targets() {
  std::vector<int32_t> t(kN);
  for (int64_t i = 0; i < kN; ++i) t[i] = i % 9 == 4 ? -1 : int32_t((i * 97 + 5) % kV);  // some ignored rows
  return t;
}

std::vector<float> random(int64_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

// The previous path, as a twin: lse from the forward kernel, then a zero-filled (N, V) buffer the
// backward kernel adds into, with dlosses = dloss / count.
std::vector<float> reference_dlogits(const std::vector<float>& logits, const std::vector<int32_t>& tgt, float dloss) {
  std::vector<float> losses(kN), lse(kN), dl(kN, float(double(dloss) / kCount)), d(size_t(kN * kV), 0.f);
  kernels::crossentropy_forward<float>(losses, lse, logits, tgt.data(), kN, kV);
  kernels::crossentropy_backward<float>(d, dl, logits, lse, tgt.data(), kN, kV);
  return d;
}

struct Result {
  std::vector<float> dlogits;
  bool reused = false;          // the gradient lives in the logits' buffer
  Category grad_category = Category::Debug;
  size_t backward_rise = 0;     // peak of the accounted total above its level when backward starts
};

// Head: logits = linear_nt(x, w) (the tied LM head), loss = cross_entropy(logits). `hold` keeps a
// handle on the logits through the backward, as a caller that still needs them would.
Result run_head(const std::vector<int32_t>& tgt, float dloss, bool hold, std::vector<float>* logits_out) {
  Tensor x = Tensor::empty({kB, kT, kC}, Category::Activation, "ce.x");
  Tensor w = Tensor::empty({kV, kC}, Category::Parameter, "ce.w");
  Tensor dw = Tensor::zeros({kV, kC}, Category::Gradient, "ce.dw");
  const auto xv = random(x.numel(), 1, 1.f), wv = random(w.numel(), 2, 2.f);
  std::memcpy(x.data(), xv.data(), xv.size() * 4);
  std::memcpy(w.data(), wv.data(), wv.size() * 4);
  // Two tapes, so that the logits' gradient can be read between the loss's backward and the head's.
  ag::Tape head_tape, loss_tape;
  ag::Recorder rec;
  ag::GradTable gt;
  gt.bind(w, dw);
  Tensor logits, loss;
  {
    rec.tape = &head_tape;
    ag::RecordScope s(rec);
    logits = ag::linear_nt(x, w, "ce.lm_head");
  }
  {
    rec.tape = &loss_tape;
    ag::RecordScope s(rec);
    loss = ag::cross_entropy(logits, tgt, kCount, "ce.loss");
  }
  logits_out->assign(logits.data(), logits.data() + logits.numel());
  const float* logits_data = logits.data();
  const uint64_t logits_id = logits.id();
  if (!hold) logits = Tensor();
  x = Tensor();
  Tensor dl = Tensor::empty({1}, Category::ActivationGrad, "ce.dloss");
  dl.data()[0] = dloss;
  gt.bind(loss, dl);
  loss = Tensor();
  Allocator& a = Allocator::global();
  const size_t base = a.active_total();
  a.reset_peak();
  Result r;
  {
    rec.tape = nullptr;
    ag::RecordScope s(rec);
    loss_tape.backward(gt);
    const Tensor* d = gt.find_id(logits_id);  // the logits' gradient, as the LM head's backward sees it
    EXPECT_NE(d, nullptr);
    if (d) {
      r.dlogits.assign(d->data(), d->data() + d->numel());
      r.reused = d->data() == logits_data;
      r.grad_category = d->category();
    }
    head_tape.backward(gt);
  }
  r.backward_rise = a.peak_total() - base;
  if (hold) {  // the held logits are intact
    EXPECT_EQ(std::memcmp(logits.data(), logits_out->data(), logits_out->size() * 4), 0);
  }
  return r;
}

}  // namespace

TEST(CrossEntropyInPlace, GradientBitIdenticalToTheZeroFilledPathAndWrittenOverTheLogits) {
  const auto tgt = targets();
  for (float dloss : {1.0f, -0.37f}) {
    std::vector<float> logits;
    const Result r = run_head(tgt, dloss, /*hold=*/false, &logits);
    const auto ref = reference_dlogits(logits, tgt, dloss);
    ASSERT_EQ(r.dlogits.size(), ref.size());
    EXPECT_EQ(std::memcmp(r.dlogits.data(), ref.data(), ref.size() * 4), 0) << "dloss " << dloss;
    EXPECT_TRUE(r.reused) << "the gradient must take over the logits' buffer";
    EXPECT_EQ(r.grad_category, Category::ActivationGrad);
  }
}

TEST(CrossEntropyInPlace, HeldLogitsStayIntactAndGetAFreshGradient) {
  const auto tgt = targets();
  std::vector<float> logits;
  const Result r = run_head(tgt, 1.0f, /*hold=*/true, &logits);
  const auto ref = reference_dlogits(logits, tgt, 1.0f);
  EXPECT_EQ(std::memcmp(r.dlogits.data(), ref.data(), ref.size() * 4), 0);
  EXPECT_FALSE(r.reused);
}

TEST(CrossEntropyInPlace, HeadBackwardPeakDropsByOneLogitsBuffer) {
  const auto tgt = targets();
  std::vector<float> logits;
  const size_t logits_bytes = size_t(kN * kV) * sizeof(float);
  const Result in_place = run_head(tgt, 1.0f, /*hold=*/false, &logits);
  const Result held = run_head(tgt, 1.0f, /*hold=*/true, &logits);
  // In place, the head's backward allocates only small things (dlosses, dx): no (B, T, V) buffer.
  EXPECT_LT(in_place.backward_rise, logits_bytes);
  // A second (B, T, V) buffer -- what every backward allocated before -- is exactly the difference.
  EXPECT_EQ(held.backward_rise, in_place.backward_rise + logits_bytes);
}
