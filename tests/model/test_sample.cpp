// Generation (model/sample.h): greedy is the argmax of the model's own logits at every step, top-k 1
// is greedy, a seed fixes the output, temperature and top-k shape the distribution as stated, the
// context is cropped to the block size, bad options are one-line errors, and bytes print as valid text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "core/error.h"
#include "model/sample.h"
#include "test_util.h"

using namespace remat;
using remat::testing_util::error_of;

namespace {

ModelConfig small_cfg(Arch arch = Arch::GPT2) {
  ModelConfig c;
  c.arch = arch;
  c.L = 2; c.C = 16; c.NH = 2; c.T = 8; c.V = 32;
  if (arch == Arch::Llama) { c.NH = 4; c.KVH = 2; }
  return c;
}

// The logits of the last position, straight from the model's interface (not next_logits): the
// window's forward, and the head on its last position.
std::vector<float> reference_logits(const Model& m, const std::vector<int32_t>& ctx) {
  const int64_t T = m.config().T, V = m.config().V, C = m.config().C;
  const int64_t len = std::min<int64_t>(int64_t(ctx.size()), T);
  const std::vector<int32_t> window(ctx.end() - len, ctx.end());
  autograd::Recorder r;
  autograd::RecordScope scope(r);
  Tensor x = m.embed(window, 1, len, StepRng{0, false});
  for (int i = 0; i < m.num_layers(); ++i) x = m.block(i, x, StepRng{0, false});
  Tensor last = Tensor::empty({1, 1, C}, Category::Activation, "last");
  std::copy_n(x.data() + (len - 1) * C, C, last.data());
  const Tensor logits = m.logits(last);
  return std::vector<float>(logits.data(), logits.data() + V);
}

// Today's generation without a cache: every token from the window's whole forward.
std::vector<int32_t> generate_uncached(const Model& m, std::vector<int32_t> ctx, const SampleOptions& o) {
  std::mt19937_64 gen(o.seed);
  const size_t start = ctx.size();
  for (int64_t n = 0; n < o.tokens; ++n) ctx.push_back(pick_token(next_logits(m, ctx), o.temperature, o.top_k, gen));
  return std::vector<int32_t>(ctx.begin() + std::ptrdiff_t(start), ctx.end());
}

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// softmax(l / t) over the top k (0: all), as probabilities per id.
std::vector<double> expected_probs(const std::vector<float>& l, double t, size_t k) {
  std::vector<size_t> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  std::stable_sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  if (k > 0) ids.resize(k);
  std::vector<double> p(l.size(), 0.0);
  double z = 0;
  for (size_t i : ids) z += p[i] = std::exp(double(l[i]) / t);
  for (double& x : p) x /= z;
  return p;
}

std::vector<double> frequencies(const std::vector<float>& l, double t, int64_t k, int n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<double> f(l.size(), 0.0);
  for (int i = 0; i < n; ++i) f[size_t(pick_token(l, t, k, gen))] += 1.0 / n;
  return f;
}

}  // namespace

class SampleArch : public ::testing::TestWithParam<Arch> {};

TEST_P(SampleArch, GreedyIsTheArgmaxOfTheModelsLogitsStepByStep) {
  const auto m = make_model(small_cfg(GetParam()));
  m->init(11);
  const std::vector<int32_t> prompt{3, 1, 4};
  SampleOptions o;
  o.tokens = 14;  // past the block size 8: the window slides
  o.temperature = 0;
  std::vector<int32_t> streamed;
  const std::vector<int32_t> out = generate(*m, prompt, o, [&](int32_t t) { streamed.push_back(t); });
  ASSERT_EQ(out.size(), 14u);
  EXPECT_EQ(streamed, out);
  std::vector<int32_t> ctx = prompt;
  for (size_t n = 0; n < out.size(); ++n) {
    const std::vector<float> ref = reference_logits(*m, ctx);
    EXPECT_EQ(next_logits(*m, ctx), ref) << "step " << n;
    EXPECT_EQ(out[n], argmax(ref)) << "step " << n;
    ctx.push_back(out[n]);
  }
}

TEST_P(SampleArch, TopKOneIsGreedyAtAnyTemperatureAndSeed) {
  const auto m = make_model(small_cfg(GetParam()));
  m->init(5);
  const std::vector<int32_t> prompt{7};
  SampleOptions greedy;
  greedy.tokens = 10;
  greedy.temperature = 0;
  const auto g = generate(*m, prompt, greedy);
  for (uint64_t seed : {1u, 2u, 99u})
    for (double t : {0.5, 1.0, 3.0}) {
      SampleOptions o = greedy;
      o.temperature = t;
      o.top_k = 1;
      o.seed = seed;
      EXPECT_EQ(generate(*m, prompt, o), g) << "seed " << seed << " temperature " << t;
    }
}

// The key/value cache: a prompt, then one token at a time, gives the window's forward's logits to
// rounding (the attention sums in another order), in fp32 and bf16; and the same tokens for the
// same seeds, past the block size too (the window then slides and runs whole).
TEST_P(SampleArch, CachedLogitsAgreeWithTheWholeWindowsForward) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    ModelConfig c = small_cfg(GetParam());
    c.precision = dt;
    const auto m = make_model(c);
    m->init(3);
    const std::vector<int32_t> ctx{5, 9, 2, 7, 1, 30, 4, 8};  // the block size, 8
    KVCache kv = m->make_kv_cache(8);
    for (size_t len : {3u, 4u, 5u, 6u, 7u, 8u}) {
      const std::vector<int32_t> prefix(ctx.begin(), ctx.begin() + std::ptrdiff_t(len));
      const std::vector<float> got =
          cached_logits(*m, kv, std::span<const int32_t>(prefix).subspan(size_t(kv.len))), want = next_logits(*m, prefix);
      ASSERT_EQ(got.size(), want.size());
      ASSERT_EQ(kv.len, int64_t(len));
      float scale = 0;
      for (float w : want) scale = std::max(scale, std::fabs(w));
      const float tol = (dt == DType::F32 ? 1e-5f : 2e-2f) * scale;
      for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], want[j], tol) << "length " << len << " id " << j;
    }
    for (uint64_t seed : {1u, 2u, 3u}) {
      SampleOptions o;
      o.tokens = 20;
      o.seed = seed;
      const std::vector<int32_t> prompt{3, 1, 4};
      EXPECT_EQ(generate(*m, prompt, o), generate_uncached(*m, prompt, o)) << "seed " << seed;
    }
  }
}

// Memory: the cache holds its positions and nothing grows with the tokens drawn.
TEST_P(SampleArch, TheCacheIsAllThatGrowsAndItIsBounded) {
  const ModelConfig c = small_cfg(GetParam());
  const auto m = make_model(c);
  m->init(4);
  Allocator& a = Allocator::global();
  const size_t before = a.active_total();
  KVCache kv = m->make_kv_cache(c.T);
  const size_t cache = size_t(2 * c.L * c.T * c.kv_heads() * c.head_size()) * sizeof(float);
  EXPECT_EQ(a.active(Category::KVCache), cache);
  EXPECT_EQ(a.active_total() - before, cache);
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  for (size_t i = 0; i < tokens.size(); ++i) cached_logits(*m, kv, std::span<const int32_t>(tokens).subspan(i, 1));
  EXPECT_EQ(a.active_total() - before, cache) << "only the cache outlives a token";
}

INSTANTIATE_TEST_SUITE_P(Archs, SampleArch, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& i) { return std::string(arch_name(i.param)); });

TEST(Sample, SameSeedSameOutputOtherSeedOtherOutput) {
  const auto m = make_model(small_cfg());
  m->init(2);
  const std::vector<int32_t> prompt{1, 2};
  SampleOptions o;
  o.tokens = 24;
  o.temperature = 1.0;
  o.seed = 42;
  const auto a = generate(*m, prompt, o);
  EXPECT_EQ(generate(*m, prompt, o), a);
  o.seed = 43;
  EXPECT_NE(generate(*m, prompt, o), a);
}

TEST(Sample, DrawsFollowSoftmaxOverTemperature) {
  const std::vector<float> l{2.0f, 1.0f, 0.0f, -1.0f, 0.5f};
  const int n = 40000;
  for (double t : {0.5, 1.0, 2.0}) {
    const auto f = frequencies(l, t, 0, n, 7);
    const auto p = expected_probs(l, t, 0);
    for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(f[i], p[i], 0.01) << "temperature " << t << " id " << i;
  }
  // Lower temperature concentrates on the most likely token, higher spreads out.
  const double cold = frequencies(l, 0.5, 0, n, 3)[0], warm = frequencies(l, 1.0, 0, n, 3)[0],
               hot = frequencies(l, 2.0, 0, n, 3)[0];
  EXPECT_GT(cold, warm + 0.1);
  EXPECT_GT(warm, hot + 0.1);
}

TEST(Sample, TopKDrawsOnlyAmongTheKLargest) {
  const std::vector<float> l{0.1f, 3.0f, -2.0f, 2.5f, 2.9f, 1.0f};
  const auto f = frequencies(l, 1.0, 3, 30000, 9);
  const auto p = expected_probs(l, 1.0, 3);  // ids 1, 4, 3
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(f[i], p[i], 0.01) << i;
  EXPECT_EQ(f[0] + f[2] + f[5], 0.0);
}

TEST(Sample, GreedyTiesGoToTheLowerId) {
  std::mt19937_64 gen(0);
  EXPECT_EQ(pick_token(std::vector<float>{1.0f, 5.0f, 5.0f, 2.0f}, 0.0, 0, gen), 1);
  EXPECT_EQ(pick_token(std::vector<float>{1.0f, 5.0f, 5.0f, 2.0f}, 1.0, 1, gen), 1);
}

TEST(Sample, ContextIsCroppedToTheBlockSize) {
  const auto m = make_model(small_cfg());
  m->init(8);
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 20; ++i) long_prompt.push_back(int32_t((i * 7) % 32));
  const std::vector<int32_t> tail(long_prompt.end() - 8, long_prompt.end());
  SampleOptions o;
  o.tokens = 6;
  o.temperature = 0.8;
  o.seed = 4;
  EXPECT_EQ(generate(*m, long_prompt, o), generate(*m, tail, o));
}

TEST(Sample, BadOptionsAndPromptsAreOneLineErrors) {
  const auto m = make_model(small_cfg());
  m->init(1);
  const std::vector<int32_t> p{1};
  auto with = [&](auto edit) {
    SampleOptions o;
    o.tokens = 1;
    edit(o);
    return error_of([&] { generate(*m, p, o); });
  };
  EXPECT_NE(with([](SampleOptions& o) { o.temperature = -0.5; }).find("[sample] --temperature must be"), std::string::npos);
  EXPECT_NE(with([](SampleOptions& o) { o.temperature = std::nan(""); }).find("--temperature"), std::string::npos);
  EXPECT_NE(with([](SampleOptions& o) { o.temperature = std::numeric_limits<double>::infinity(); }).find("--temperature"),
            std::string::npos);
  EXPECT_NE(with([](SampleOptions& o) { o.top_k = -1; }).find("--top-k must be between 0 and the vocabulary size 32"),
            std::string::npos);
  EXPECT_NE(with([](SampleOptions& o) { o.top_k = 33; }).find("--top-k"), std::string::npos);
  EXPECT_NE(with([](SampleOptions& o) { o.tokens = -1; }).find("--tokens must be >= 0"), std::string::npos);
  EXPECT_EQ(with([](SampleOptions& o) { o.top_k = 32; }), "<no remat::Error thrown>");  // k = V is the whole vocabulary
  SampleOptions o;
  EXPECT_NE(error_of([&] { generate(*m, std::vector<int32_t>{}, o); }).find("the prompt is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { generate(*m, std::vector<int32_t>{1, 32}, o); }).find("prompt token 1 is 32, outside"),
            std::string::npos);
  EXPECT_NE(error_of([&] { generate(*m, std::vector<int32_t>{-3}, o); }).find("outside"), std::string::npos);
  o.tokens = 0;
  EXPECT_TRUE(generate(*m, p, o).empty());
}

TEST(Sample, NonFiniteLogitsAreAnError) {
  std::mt19937_64 gen(0);
  const std::string e = error_of([&] { pick_token(std::vector<float>{1.0f, std::nanf("")}, 1.0, 0, gen); });
  EXPECT_NE(e.find("[sample] the model's logit for token 1 is NaN"), std::string::npos) << e;
}

TEST(Sample, BytesPrintAsValidText) {
  auto text = [](std::vector<int32_t> b) { return bytes_text(b); };
  EXPECT_EQ(text({'H', 'i', '\n', '\t', '~'}), "Hi\n\t~");
  EXPECT_EQ(text({0, 7, 27, 127, 'a'}), "????a");  // control bytes and DEL
  EXPECT_EQ(text({0xC3, 0xA9}), "\xC3\xA9");      // é passes through
  EXPECT_EQ(text({0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80}), "\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(text({0x80, 'a'}), "?a");               // a stray continuation byte
  EXPECT_EQ(text({0xC3, 'a'}), "?a");               // a truncated sequence, then a fresh byte
  EXPECT_EQ(text({0xC0, 0x80}), "??");              // overlong: never a lead byte
  EXPECT_EQ(text({0xED, 0xA0, 0x80}), "???");       // a surrogate
  EXPECT_EQ(text({0xE2, 0x82}), "?");               // open at the end
  EXPECT_EQ(text({0xFF, 0xC3, 0xC3, 0xA9}), "??\xC3\xA9");
  // Streaming gives the same text as the whole.
  ByteText s;
  std::string streamed;
  for (int32_t b : {0x41, 0xC3, 0xA9, 0xE2, 0x82}) streamed += s.push(b);
  streamed += s.finish();
  EXPECT_EQ(streamed, text({0x41, 0xC3, 0xA9, 0xE2, 0x82}));
}

TEST(Sample, ByteLevelMeansAVocabularyOfBytes) {
  ModelConfig c;
  c.V = 256;
  EXPECT_TRUE(byte_level(c));
  c.V = 65;
  EXPECT_TRUE(byte_level(c));
  c.V = 257;
  EXPECT_FALSE(byte_level(c));
}
