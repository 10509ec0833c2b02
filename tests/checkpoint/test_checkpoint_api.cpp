// checkpoint(fn, inputs) on a user's own function: gradients bit-identical to running fn plainly,
// parameters inside the region get their gradients, regions nest, only the inputs are kept, and
// dropout replays exactly with no RNG stash.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "autograd/ops.h"
#include "checkpoint/checkpoint.h"
#include "core/error.h"

using namespace remat;
namespace ag = remat::autograd;

namespace {

Tensor randn(Shape s, Category c, const std::string& name, uint32_t seed) {
  Tensor t = Tensor::empty(std::move(s), c, name);
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 0.5f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = d(g);
  return t;
}

struct Net {
  int64_t N = 6, C = 8;
  Tensor w1 = randn({C, 4 * C}, Category::Parameter, "w1", 1), b1 = randn({4 * C}, Category::Parameter, "b1", 2);
  Tensor w2 = randn({4 * C, C}, Category::Parameter, "w2", 3), b2 = randn({C}, Category::Parameter, "b2", 4);
  Tensor g = randn({C}, Category::Parameter, "g", 5), b = randn({C}, Category::Parameter, "b", 6);
  // The user's function: an MLP with dropout, as a region.
  Tensor mlp(const Tensor& x) const {
    Tensor h = ag::layernorm(x, g, b, "mlp.ln");
    h = ag::linear(h, w1, b1, "mlp.fc");
    h = ag::gelu(h, "mlp.gelu");
    h = ag::dropout(h, 0.2f, {42, 1000}, "mlp.drop");
    return ag::linear(h, w2, b2, "mlp.proj");
  }
  Tensors params() const { return {w1, b1, w2, b2, g, b}; }
};

enum class Mode { Plain, Checkpoint, Nested };

// loss = sum(y * r) for a fixed random r; returns d/dx and d/dparams.
std::vector<std::vector<float>> grads(const Net& net, Mode mode, size_t* saved_after_forward = nullptr) {
  ag::Tape tape;
  ag::Recorder rec;
  rec.tape = &tape;
  ag::GradTable gt;
  std::vector<Tensor> pg;
  for (const Tensor& p : net.params()) {
    pg.push_back(Tensor::zeros(p.shape(), Category::Gradient, "d" + p.name()));
    gt.bind(p, pg.back());
  }
  Tensor x = randn({net.N, net.C}, Category::Activation, "x", 9);
  Tensor y;
  // Declared outside the recording scope: the nested region's lambda captures `fn` by reference and
  // is replayed by tape.backward() below, so `fn` must outlive the backward (see checkpoint.h).
  auto fn = [&net](const Tensor& in) { return net.mlp(in); };
  {
    ag::RecordScope s(rec);
    if (mode == Mode::Plain) y = fn(x);
    if (mode == Mode::Checkpoint) y = checkpoint(fn, x);
    if (mode == Mode::Nested)
      y = checkpoint([&](const Tensor& in) { return ag::add(checkpoint(fn, in), in, "res"); }, x);
    if (mode != Mode::Nested) y = ag::add(y, x, "res");
  }
  if (saved_after_forward) *saved_after_forward = tape.saved_bytes();
  Tensor dy = randn(y.shape(), Category::ActivationGrad, "dy", 11);
  gt.bind(y, dy);
  tape.backward(gt);
  std::vector<std::vector<float>> out;
  Tensor* dx = gt.find(x);
  EXPECT_NE(dx, nullptr);
  out.emplace_back(dx->data(), dx->data() + dx->numel());
  for (Tensor& g : pg) out.emplace_back(g.data(), g.data() + g.numel());
  return out;
}

}  // namespace

TEST(CheckpointApi, BitIdenticalToPlainForUsersFunctionWithDropout) {
  Net net;
  auto a = grads(net, Mode::Plain), b = grads(net, Mode::Checkpoint), c = grads(net, Mode::Nested);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4), 0) << "gradient #" << i << " (checkpoint)";
    EXPECT_EQ(std::memcmp(a[i].data(), c[i].data(), a[i].size() * 4), 0) << "gradient #" << i << " (nested)";
  }
  // Parameters inside the region got non-zero gradients.
  for (size_t i = 1; i < b.size(); ++i) {
    double s = 0;
    for (float v : b[i]) s += std::abs(v);
    EXPECT_GT(s, 0.0) << "parameter #" << i - 1;
  }
}

TEST(CheckpointApi, KeepsOnlyTheRegionInputs) {
  Net net;
  size_t plain = 0, ck = 0;
  grads(net, Mode::Plain, &plain);
  grads(net, Mode::Checkpoint, &ck);
  const size_t x_bytes = size_t(net.N * net.C) * 4;
  EXPECT_EQ(ck, x_bytes);  // the input x only
  // Plain keeps x, mean, rstd, the normalised x, the fc output (gelu's input) and the dropout output
  // (proj's input). Dropout keeps no mask and gelu's output is nobody's saved input.
  EXPECT_EQ(plain, x_bytes * 2 + size_t(net.N) * 8 + 2 * size_t(net.N * 4 * net.C) * 4);
}

// A recorded checkpoint region under --determinism-check, with its gradient table bound.
struct CheckedRegion {
  Net net;
  ag::Tape tape;
  ag::Recorder rec;
  ag::GradTable gt;
  Tensor x, y;
  CheckedRegion() {
    rec.tape = &tape;
    rec.check_determinism = true;
    for (const Tensor& p : net.params()) gt.bind(p, Tensor::zeros(p.shape(), Category::Gradient, "d"));
    x = randn({net.N, net.C}, Category::Activation, "x", 9);
  }
};

TEST(CheckpointApi, DeterminismCheckPassesOnAnExactReplay) {
  CheckedRegion c;
  auto& [net, tape, rec, gt, x, y] = c;
  {
    ag::RecordScope s(rec);
    y = checkpoint([&](const Tensor& in) { return net.mlp(in); }, x);
  }
  gt.bind(y, Tensor::zeros(y.shape(), Category::ActivationGrad, "dy"));
  EXPECT_NO_THROW(tape.backward(gt));
}

TEST(CheckpointApi, DeterminismCheckNamesTheTensorOnABrokenReplay) {
  CheckedRegion c;
  auto& [net, tape, rec, gt, x, y] = c;
  int calls = 0;
  {
    ag::RecordScope s(rec);
    // A region whose replay differs from its first run (as with an RNG that is not replayed).
    y = checkpoint(
        [&](const Tensor& in) {
          Tensor h = ag::dropout(in, 0.5f, {7, uint64_t(calls++) * 4096}, "drop");
          return ag::gelu(h, "g");
        },
        x);
  }
  gt.bind(y, Tensor::zeros(y.shape(), Category::ActivationGrad, "dy"));
  try {
    tape.backward(gt);
    FAIL() << "a replay with another dropout mask must fail the determinism check";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[determinism]"), std::string::npos) << m;
    EXPECT_NE(m.find("'drop'"), std::string::npos) << m;
    EXPECT_NE(m.find("index"), std::string::npos) << m;
  }
}

// --debug-break-replay reaches checkpoint() regions as it reaches the chain's blocks (one run_pass for
// both): the replay draws other dropout masks, so the gradients change, and the determinism check,
// when on, names the tensor instead.
TEST(CheckpointApi, BreakReplayReachesRegionsAndTheCheckCatchesIt) {
  auto run = [](bool broken, bool check) {
    CheckedRegion c;
    auto& [net, tape, rec, gt, x, y] = c;
    rec.check_determinism = check;
    rec.break_replay = broken;
    Tensor dw1 = Tensor::zeros(net.w1.shape(), Category::Gradient, "dw1");
    gt.bind(net.w1, dw1);
    {
      ag::RecordScope s(rec);
      y = checkpoint([&net](const Tensor& in) { return net.mlp(in); }, x);
    }
    gt.bind(y, randn(y.shape(), Category::ActivationGrad, "dy", 11));
    tape.backward(gt);
    return std::vector<float>(dw1.data(), dw1.data() + dw1.numel());
  };
  const auto good = run(false, false), again = run(false, true), broken = run(true, false);
  EXPECT_EQ(std::memcmp(good.data(), again.data(), good.size() * 4), 0);
  EXPECT_NE(std::memcmp(good.data(), broken.data(), good.size() * 4), 0) << "the broken replay changed nothing";
  try {
    run(true, true);
    FAIL() << "a broken replay must fail the determinism check";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[determinism]"), std::string::npos) << m;
    EXPECT_NE(m.find("'mlp.drop'"), std::string::npos) << m;
  }
}
