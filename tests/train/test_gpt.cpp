// The whole GPT: finite-difference gradients, reproducibility, micro-batching, weights on disk,
// the activation table against the allocator, and learning on real text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/safetensors.h"
#include "model/weights.h"
#include "planner/planner.h"
#include "train/step.h"
#include "train/trainer.h"

using namespace remat;

namespace {

struct Batch {
  std::vector<int32_t> in, tg;
  Batch(int64_t n, int64_t V, uint32_t seed) : in(size_t(n)), tg(size_t(n)) {
    std::mt19937 g(seed);
    for (auto& t : in) t = int32_t(g() % V);
    for (auto& t : tg) t = int32_t(g() % V);
  }
};

GPTConfig small_cfg(float dropout = 0) {
  GPTConfig c;
  c.L = 2; c.C = 16; c.NH = 2; c.T = 8; c.V = 32; c.dropout = dropout;
  return c;
}

StepOptions none_opts(int L) {
  StepOptions so;
  so.schedule = make_schedule(parse_strategy("none", L, false), L);
  return so;
}

}  // namespace

class GPTGradcheck : public ::testing::TestWithParam<std::tuple<float, bool>> {};

TEST_P(GPTGradcheck, FiniteDifferencesMatchBackwardForEveryParameter) {
  GPTConfig cfg = small_cfg(std::get<0>(GetParam()));
  if (std::get<1>(GetParam())) cfg.attention = autograd::AttentionKind::Flash;
  GPT model(cfg);
  model.init(3);
  const int64_t B = 2, T = cfg.T;
  Batch b(B * T, cfg.V, 5);
  MicroBatch mb{b.in, b.tg, B, T};
  const StepRng rng = step_rng(1, 2, 0);
  const StepOptions so = none_opts(int(cfg.L));
  model.zero_grad();
  forward_backward(model, mb, double(B * T), rng, so, nullptr);
  std::vector<std::vector<float>> analytic;
  for (auto& p : model.params()) analytic.emplace_back(p.grad.data(), p.grad.data() + p.grad.numel());
  auto loss_at = [&]() {
    model.zero_grad();
    return double(forward_backward(model, mb, double(B * T), rng, so, nullptr));
  };
  std::mt19937 g(7);
  int checked = 0;
  for (size_t k = 0; k < model.params().size(); ++k) {
    Param& p = model.params()[k];
    for (int rep = 0; rep < 4; ++rep) {
      const int64_t i = int64_t(g() % uint32_t(p.value.numel()));
      float& w = p.value.data()[i];
      const float w0 = w, eps = 1e-2f;
      w = w0 + eps;
      const double lp = loss_at();
      w = w0 - eps;
      const double lm = loss_at();
      w = w0;
      const double fd = (lp - lm) / (2.0 * eps);
      const double an = analytic[k][size_t(i)];
      EXPECT_NEAR(an, fd, 2e-3 + 0.05 * std::abs(fd)) << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(4 * model.params().size()));
}

INSTANTIATE_TEST_SUITE_P(DropoutAndFlash, GPTGradcheck, ::testing::Combine(::testing::Values(0.0f, 0.1f),
                                                                          ::testing::Bool()));

TEST(GPT, SameSeedSameLossesBitForBit) {
  auto losses = [] {
    TrainOptions o;
    o.model = small_cfg(0.1f);
    o.model.L = 3;
    o.steps = 6;
    o.batch = 4;
    o.micro_batch = 2;
    o.random_tokens = 5000;
    o.eval_every = 3;
    o.sample_tokens = 0;
    o.quiet = true;
    Trainer t(o);
    TrainSummary s = t.run();
    std::vector<float> all = s.losses;
    all.insert(all.end(), s.val_losses.begin(), s.val_losses.end());
    return all;
  };
  const std::vector<float> a = losses(), b = losses();
  ASSERT_EQ(a.size(), 6u + 3u);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_LT(a[5], a[0]);  // and it learns
}

TEST(GPT, MicroBatchesMatchOneBatchToFp32Rounding) {
  // K micro-batches of B/K against one batch of B: the same mean loss, gradients summed in another
  // order. Tolerance: |a - b| <= 1e-5 * max|a| per tensor (fp32 has 24 bits; ~6e-8 per rounding).
  const GPTConfig cfg = small_cfg(0);
  const int64_t B = 4, T = cfg.T, K = 2;
  Batch b(B * T, cfg.V, 9);
  auto grads = [&](int64_t micro) {
    GPT model(cfg);
    model.init(4);
    model.zero_grad();
    for (int64_t k = 0; k < B / micro; ++k) {
      MicroBatch mb{std::span<const int32_t>(b.in).subspan(size_t(k * micro * T), size_t(micro * T)),
                    std::span<const int32_t>(b.tg).subspan(size_t(k * micro * T), size_t(micro * T)), micro, T};
      forward_backward(model, mb, double(B * T), step_rng(1, 0, 0), none_opts(int(cfg.L)), nullptr);
    }
    std::vector<std::vector<float>> r;
    for (auto& p : model.params()) r.emplace_back(p.grad.data(), p.grad.data() + p.grad.numel());
    return r;
  };
  auto one = grads(B), many = grads(B / K);
  for (size_t k = 0; k < one.size(); ++k) {
    float mx = 0;
    for (float v : one[k]) mx = std::max(mx, std::abs(v));
    for (size_t i = 0; i < one[k].size(); ++i) ASSERT_NEAR(one[k][i], many[k][i], 1e-5f * mx) << "param " << k;
  }
}

TEST(GPT, SaveThenLoadGivesIdenticalWeightsAndNextLoss) {
  const GPTConfig cfg = small_cfg(0.1f);
  GPT a(cfg);
  a.init(12);
  const std::string path = testing::TempDir() + "/remat_gpt_roundtrip.safetensors";
  save_weights(a, path);
  GPTConfig read = read_config(path);
  EXPECT_EQ(read.describe(), cfg.describe());
  read.dropout = cfg.dropout;  // a training setting, not part of the weights
  GPT b(read);
  b.init(99);
  load_weights(b, path);
  for (size_t k = 0; k < a.params().size(); ++k)
    ASSERT_EQ(std::memcmp(a.params()[k].value.data(), b.params()[k].value.data(), a.params()[k].value.bytes()), 0);
  Batch bt(2 * cfg.T, cfg.V, 1);
  MicroBatch mb{bt.in, bt.tg, 2, cfg.T};
  const float la = forward_backward(a, mb, 2.0 * cfg.T, step_rng(1, 0, 0), none_opts(2), nullptr);
  const float lb = forward_backward(b, mb, 2.0 * cfg.T, step_rng(1, 0, 0), none_opts(2), nullptr);
  EXPECT_EQ(std::memcmp(&la, &lb, 4), 0);
  std::filesystem::remove(path);
}

TEST(GPT, LoadsAHuggingFaceLayoutFileAsItIs) {
  // A file in the exact layout of a Hugging Face GPT-2 model.safetensors: Conv1D weights as
  // (in, out), the causal-mask buffers h.N.attn.bias / masked_bias, "format": "pt".
  const GPTConfig cfg = small_cfg();
  GPT src(cfg);
  src.init(5);
  std::vector<std::pair<std::string, const Tensor*>> ts;
  std::vector<Tensor> extra;
  extra.reserve(8);
  for (auto& p : src.params()) {
    ts.emplace_back(p.name, &p.value);
    if (p.name.find("ln_1.weight") != std::string::npos) {
      const std::string h = p.name.substr(0, p.name.find("ln_1"));
      extra.push_back(Tensor::zeros({1, 1, cfg.T, cfg.T}, Category::Workspace, "mask"));
      ts.emplace_back(h + "attn.bias", &extra.back());
      extra.push_back(Tensor::zeros({}, Category::Workspace, "masked_bias"));
      ts.emplace_back(h + "attn.masked_bias", &extra.back());
    }
  }
  const std::string path = testing::TempDir() + "/remat_hf_layout.safetensors";
  save_safetensors(path, ts, {{"format", "pt"}});
  SafetensorsReader r(path);
  ASSERT_NE(r.find("h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(r.find("h.0.attn.c_attn.weight")->shape, (Shape{cfg.C, 3 * cfg.C}));
  GPTConfig inferred = read_config(path);
  EXPECT_EQ(inferred.L, cfg.L);
  EXPECT_EQ(inferred.C, cfg.C);
  EXPECT_EQ(inferred.V, cfg.V);
  EXPECT_EQ(inferred.T, cfg.T);
  GPT dst(cfg);
  dst.init(77);
  load_weights(dst, path);
  for (size_t k = 0; k < src.params().size(); ++k)
    ASSERT_EQ(std::memcmp(src.params()[k].value.data(), dst.params()[k].value.data(), src.params()[k].value.bytes()), 0)
        << src.params()[k].name;
  std::filesystem::remove(path);
}

TEST(GPT, SavedActivationBytesEqualTheAnalyticTableForSeveralConfigs) {
  struct Case { int64_t L, C, NH, T, V, B; float p; };
  for (const Case c : {Case{1, 16, 2, 8, 32, 1, 0}, Case{3, 24, 3, 12, 50, 2, 0.1f}, Case{2, 64, 4, 33, 300, 3, 0},
                       Case{4, 32, 8, 16, 256, 2, 0.2f}}) {
    GPTConfig cfg;
    cfg.L = c.L; cfg.C = c.C; cfg.NH = c.NH; cfg.T = c.T; cfg.V = c.V; cfg.dropout = c.p;
    GPT model(cfg);
    Batch b(c.B * c.T, c.V, 2);
    StepMeasure m;
    Allocator::global().reset_peak();
    forward_backward(model, MicroBatch{b.in, b.tg, c.B, c.T}, double(c.B * c.T), step_rng(1, 0, 0),
                     none_opts(int(c.L)), &m);
    size_t analytic = planner::total_bytes(planner::head_table(cfg, c.B, c.T));
    for (int i = 0; i < c.L; ++i) analytic += planner::total_bytes(planner::block_table(cfg, c.B, c.T, i));
    analytic -= size_t(c.B * c.T * c.C) * 4 * 0;  // x_i appears once per block table; x_L in the head
    EXPECT_EQ(m.peak_activation, analytic) << cfg.describe();
    // Per name: every tensor of the table was saved at exactly its size.
    auto names = Allocator::global().by_name();
    for (int i = 0; i < c.L; ++i)
      for (auto& t : planner::block_table(cfg, c.B, c.T, i)) EXPECT_EQ(names[t.name].act_peak, t.bytes) << t.name;
  }
}

TEST(GPT, LearnsTinyShakespeareBelow2p5NatsPerByte) {
  const std::string path = std::string(REMAT_SHARED_DIR) + "/data/tinyshakespeare.txt";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "needs " << path << " (the ../shared folder is absent)";
  TrainOptions o;
  o.model.L = 4; o.model.C = 128; o.model.NH = 4; o.model.T = 64; o.model.V = 256;
  o.data = path;
  o.steps = 300;
  o.batch = 16;
  o.lr = 3e-3f;
  o.warmup = 20;
  o.eval_every = 0;
  o.eval_batches = 16;
  o.sample_tokens = 0;
  o.quiet = true;
  Trainer t(o);
  TrainSummary s = t.run();
  EXPECT_NEAR(s.first_val, std::log(256.0), 0.2);
  EXPECT_LT(s.last_val, 2.5f) << "val loss went " << s.first_val << " -> " << s.last_val;
}
