// Whole models, GPT-2 and LLaMA: finite-difference gradients, reproducibility, micro-batching,
// weights on disk, the dry run's activation table against the allocator, and learning on real text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "test_util.h"
#include "core/safetensors.h"
#include "model/gpt.h"
#include "model/weights.h"
#include "planner/planner.h"
#include "step/step.h"
#include "train/trainer.h"
#include "learning.h"

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

ModelConfig small_cfg(float dropout = 0, Arch arch = Arch::GPT2) {
  ModelConfig c;
  c.arch = arch;
  c.L = 2; c.C = 16; c.NH = 2; c.T = 8; c.V = 32; c.dropout = dropout;
  if (arch == Arch::Llama) { c.NH = 4; c.KVH = 2; }  // HS = 4, grouped-query attention
  return c;
}

std::string arch_label(Arch a) { return a == Arch::Llama ? "llama" : "gpt2"; }

StepOptions none_opts(int L) {
  StepOptions so;
  so.schedule = make_schedule(parse_strategy("none", L, false), L);
  return so;
}

}  // namespace

class Gradcheck : public ::testing::TestWithParam<std::tuple<Arch, float, bool>> {};

TEST_P(Gradcheck, FiniteDifferencesMatchBackwardForEveryParameter) {
  ModelConfig cfg = small_cfg(std::get<1>(GetParam()), std::get<0>(GetParam()));
  if (std::get<2>(GetParam())) cfg.attention = autograd::AttentionKind::Flash;
  const auto mp = make_model(cfg);
  Model& model = *mp;
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
    // Two random entries and the two largest analytic ones: a zero or negated gradient cannot pass
    // on the entries where the loss really moves (non-vacuity is asserted below).
    std::vector<int64_t> idx{int64_t(g() % uint32_t(p.value.numel())), int64_t(g() % uint32_t(p.value.numel()))};
    std::vector<int64_t> order(size_t(p.value.numel()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    std::partial_sort(order.begin(), order.begin() + std::min<size_t>(2, order.size()), order.end(),
                      [&](int64_t a, int64_t b) { return std::abs(analytic[k][size_t(a)]) > std::abs(analytic[k][size_t(b)]); });
    for (size_t j = 0; j < std::min<size_t>(2, order.size()); ++j) idx.push_back(order[j]);
    double max_fd = 0, max_an = 0;
    for (float v : analytic[k]) max_an = std::max(max_an, double(std::abs(v)));
    for (const int64_t i : idx) {
      float& w = p.value.data()[i];
      const float w0 = w, eps = 1e-2f;
      w = w0 + eps;
      const double lp = loss_at();
      w = w0 - eps;
      const double lm = loss_at();
      w = w0;
      const double fd = (lp - lm) / (2.0 * eps);
      const double an = analytic[k][size_t(i)];
      // Tolerance: float32 finite-difference noise (about 2e-5 here) plus 2% of the tensor's
      // largest gradient, plus 5% of this one. A zero gradient fails on the largest entries.
      EXPECT_NEAR(an, fd, 1e-4 + 0.02 * max_an + 0.05 * std::abs(fd)) << p.name << "[" << i << "]";
      max_fd = std::max(max_fd, std::abs(fd));
      ++checked;
    }
    EXPECT_GT(max_fd, 2e-4) << p.name << ": the loss must move with this parameter, or the check proves nothing";
  }
  EXPECT_EQ(checked, int(4 * model.params().size()));
}

INSTANTIATE_TEST_SUITE_P(DropoutAndFlash, Gradcheck,
                         ::testing::Combine(::testing::Values(Arch::GPT2, Arch::Llama), ::testing::Values(0.0f, 0.1f),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return arch_label(std::get<0>(info.param)) + (std::get<1>(info.param) > 0 ? "_dropout" : "") +
                                  (std::get<2>(info.param) ? "_flash" : "_naive");
                         });

class Models : public ::testing::TestWithParam<Arch> {};
INSTANTIATE_TEST_SUITE_P(Archs, Models, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return arch_label(info.param); });

TEST_P(Models, NamesBlockTensorsThroughOneStem) {
  const auto m = planner::shape_only_model(small_cfg(0, GetParam()));
  const std::string p = m->layer_prefix(1);
  EXPECT_EQ(m->split_name(p + "x.y"), (std::pair<int, std::string>{1, "x.y"}));
  EXPECT_FALSE(m->split_name("loss.lse"));
  EXPECT_FALSE(m->split_name(m->layer_stem() + "x.y")) << "only <stem><digits>. is a block prefix";
  // Every parameter of a block carries its prefix; the rest (embedding, head) carries none.
  int in_blocks = 0;
  for (const Param& q : m->params()) in_blocks += m->split_name(q.name) ? 1 : 0;
  EXPECT_GT(in_blocks, 0);
  EXPECT_LT(in_blocks, int(m->params().size()));
}

TEST_P(Models, SameSeedSameLossesBitForBit) {
  auto losses = [arch = GetParam()] {
    TrainOptions o;
    o.model = small_cfg(0.1f, arch);
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
  EXPECT_NE(a[5], a[0]);  // the weights moved (uniform random tokens: nothing to learn beyond ln V)
  for (float l : a) EXPECT_TRUE(std::isfinite(l));
}

TEST_P(Models, MicroBatchesMatchOneBatchToFp32Rounding) {
  // K micro-batches of B/K against one batch of B: the same mean loss, gradients summed in another
  // order. Tolerance: |a - b| <= 1e-5 * max|a| per tensor (fp32 has 24 bits; ~6e-8 per rounding).
  const ModelConfig cfg = small_cfg(0, GetParam());
  const int64_t B = 4, T = cfg.T, K = 2;
  Batch b(B * T, cfg.V, 9);
  auto grads = [&](int64_t micro) {
    const auto mp = make_model(cfg);
    Model& model = *mp;
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

TEST_P(Models, SaveThenLoadGivesIdenticalWeightsAndNextLoss) {
  const ModelConfig cfg = small_cfg(0.1f, GetParam());
  const auto ap = make_model(cfg);
  Model& a = *ap;
  a.init(12);
  const std::string path = testing::TempDir() + "/remat_roundtrip_" + arch_label(GetParam()) + ".safetensors";
  save_weights(a, path);
  ModelConfig read = read_config(path);
  EXPECT_EQ(read.describe(), cfg.describe());
  read.dropout = cfg.dropout;  // a training setting, not part of the weights
  const auto bp = make_model(read);
  Model& b = *bp;
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
  const ModelConfig cfg = small_cfg();
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
  ModelConfig inferred = read_config(path, cfg.NH);  // no config.json: the head count is given (--heads)
  EXPECT_EQ(inferred.NH, cfg.NH);
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

TEST_P(Models, SavedActivationBytesEqualTheDryRunsTableForSeveralConfigs) {
  struct Case { int64_t L, C, NH, KVH, T, V, B; float p; };
  for (const Case c : {Case{1, 16, 2, 1, 8, 32, 1, 0}, Case{3, 24, 3, 3, 12, 50, 2, 0.1f}, Case{2, 64, 4, 2, 33, 300, 3, 0},
                       Case{4, 32, 8, 4, 16, 256, 2, 0.2f}}) {
    ModelConfig cfg;
    cfg.arch = GetParam();
    cfg.L = c.L; cfg.C = c.C; cfg.NH = c.NH; cfg.T = c.T; cfg.V = c.V; cfg.dropout = c.p;
    if (cfg.arch == Arch::Llama) cfg.KVH = c.KVH;
    if (cfg.arch == Arch::Llama && cfg.head_size() % 2) continue;  // RoPE needs an even head size
    const auto mp = make_model(cfg);
    Batch b(c.B * c.T, c.V, 2);
    StepMeasure m;
    Allocator::global().reset_peak();
    forward_backward(*mp, MicroBatch{b.in, b.tg, c.B, c.T}, double(c.B * c.T), step_rng(1, 0, 0),
                     none_opts(int(c.L)), &m);
    const planner::StepTrace tr = planner::trace_step(*mp, c.B, c.T);
    size_t table = tr.embed.kept_bytes() + tr.head.kept_bytes();
    for (const auto& blk : tr.blocks) table += blk.kept_bytes();  // x_i in block i's, x_L in the head's
    EXPECT_EQ(m.peak_activation, table) << cfg.describe();
    // Per name: every tensor of the dry run was saved at exactly its size.
    auto names = Allocator::global().by_name();
    for (const auto& blk : tr.blocks)
      for (const auto& t : blk.kept) {
        EXPECT_EQ(names[t.name].act_peak, t.bytes) << t.name;
        EXPECT_EQ(t.category, Category::SavedActivation) << t.name;
        EXPECT_FALSE(t.holders.empty()) << t.name << ": a saved tensor has an op that needs it";
      }
    for (const auto& t : tr.head.kept) EXPECT_EQ(names[t.name].act_peak, t.bytes) << t.name;
  }
}

TEST_P(Models, LearnsTinyShakespeareBelow2p5NatsPerByte) {
  const std::string path = std::string(REMAT_SHARED_DIR) + "/data/tinyshakespeare.txt";
  if (!std::filesystem::exists(path)) REMAT_SKIP_WITHOUT("needs " << path << " (the ../shared folder is absent)");
  Trainer t(learning_test::options(GetParam(), path, 300));
  TrainSummary s = t.run();
  EXPECT_NEAR(s.first_val, std::log(256.0), 0.2);
  EXPECT_LT(s.last_val, 2.5f) << "val loss went " << s.first_val << " -> " << s.last_val;
}
