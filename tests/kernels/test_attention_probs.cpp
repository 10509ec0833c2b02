// attention_probs_forward, the rebuild of selective recomputation: the probabilities alone (Q K^T,
// the causal mask, the softmax; no P V, no output), bit for bit as attention_forward writes them, for
// multi-head and grouped-query attention, odd head sizes and sequence lengths that are not multiples
// of the 64-query tile, with and without dropout (the probabilities are pre-dropout), on any thread
// count and with a workspace for one thread.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attention_ref.h"
#include "kernels/attention.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull, kOffset = 977;

std::vector<float> forward_probs(const AttnDims& d, const std::vector<float>& qkv, float p) {
  std::vector<float> out(d.out_size()), probs(d.B * d.NH * d.T * d.T, -7.f);
  std::vector<float> ws(attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, omp_get_max_threads()));
  attention_forward(out, probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  return probs;
}

std::vector<float> rebuilt_probs(const AttnDims& d, const std::vector<float>& qkv, int threads, int ws_threads) {
  std::vector<float> probs(d.B * d.NH * d.T * d.T, std::nanf(""));  // every element must be written
  std::vector<float> ws(attention_probs_workspace_floats(d.T, d.HS, ws_threads), std::nanf(""));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  attention_probs_forward(probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, ws);
  omp_set_num_threads(saved);
  return probs;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ProbsRebuild : public ::testing::TestWithParam<AttnDims> {};

}  // namespace

TEST_P(ProbsRebuild, BitIdenticalToTheForwardsProbabilities) {
  const AttnDims d = GetParam();
  const auto qkv = random_vec(d.qkv_size(), 11, -2.f, 2.f);
  for (float p : {0.f, 0.1f}) {
    const auto fwd = forward_probs(d, qkv, p);
    EXPECT_TRUE(same_bits(rebuilt_probs(d, qkv, 2, 2), fwd)) << "p=" << p;
    EXPECT_TRUE(same_bits(rebuilt_probs(d, qkv, 1, 1), fwd)) << "p=" << p << ", one thread";
    EXPECT_TRUE(same_bits(rebuilt_probs(d, qkv, 2, 1), fwd)) << "p=" << p << ", workspace for one thread";
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, ProbsRebuild,
                         ::testing::Values(AttnDims{2, 100, 4, 4, 16},   // multi-head, T not a multiple of 64
                                           AttnDims{1, 130, 6, 2, 13},   // grouped-query, odd HS
                                           AttnDims{2, 64, 8, 1, 32},    // multi-query
                                           AttnDims{1, 1, 2, 2, 8},      // one token
                                           AttnDims{3, 17, 3, 3, 7}));

TEST(ProbsRebuild, WorkspaceHoldsOnlyThePackedKeys) {
  // Far less than the forward's: no V, no dropped-probability rows.
  EXPECT_LT(attention_probs_workspace_floats(1024, 64, 2), attention_workspace_floats(1, 1024, 12, 12, 64, 2) / 2);
  EXPECT_GE(attention_probs_workspace_floats(1024, 64, 1), 64 * 1024);
}
