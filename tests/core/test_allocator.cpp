#include <algorithm>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"

using namespace remat;

namespace {
struct LimitGuard {
  ~LimitGuard() { Allocator::global().set_limit(0); }
};
}  // namespace

TEST(Allocator, TracksLiveAndPeakPerCategoryAndName) {
  auto& a = Allocator::global();
  a.reset_peak();
  size_t base = a.active(Category::SavedActivation);
  {
    Tensor t = Tensor::empty({4, 8}, Category::SavedActivation, "h.0.attn.probs");
    EXPECT_EQ(a.active(Category::SavedActivation), base + 128);
    {
      Tensor u = Tensor::zeros({16}, Category::SavedActivation, "h.0.ln_1.mean");
      EXPECT_EQ(a.active(Category::SavedActivation), base + 192);
    }
    EXPECT_EQ(a.active(Category::SavedActivation), base + 128);
    EXPECT_EQ(a.by_name().at("h.0.attn.probs").active, 128u);
  }
  EXPECT_EQ(a.active(Category::SavedActivation), base);
  EXPECT_EQ(a.peak(Category::SavedActivation), base + 192);
  EXPECT_EQ(a.by_name().at("h.0.attn.probs").peak, 128u);
  a.reset_peak();
  EXPECT_EQ(a.peak(Category::SavedActivation), base);
}

TEST(Allocator, RetagMovesBytesAndActivationSumCountsThreeCategories) {
  auto& a = Allocator::global();
  a.reset_peak();
  size_t act0 = a.active_activation();
  Tensor t = Tensor::empty({10}, Category::Activation, "x");
  EXPECT_EQ(a.active_activation(), act0);  // transient is not "activation memory"
  t.retag(Category::Checkpoint);
  EXPECT_EQ(a.active_activation(), act0 + 40);
  EXPECT_EQ(t.category(), Category::Checkpoint);
  Tensor r = Tensor::empty({5}, Category::Recompute, "y");
  EXPECT_EQ(a.active_activation(), act0 + 60);
  EXPECT_EQ(a.peak_activation(), act0 + 60);
}

TEST(Allocator, SharedStorageIsFreedOnce) {
  auto& a = Allocator::global();
  size_t base = a.active(Category::Workspace);
  Tensor t = Tensor::empty({100}, Category::Workspace, "w");
  Tensor u = t;
  Tensor v = t.reshaped({10, 10});
  EXPECT_EQ(t.id(), v.id());
  EXPECT_EQ(a.active(Category::Workspace), base + 400);
  t = Tensor();
  u = Tensor();
  EXPECT_EQ(a.active(Category::Workspace), base + 400);
  v = Tensor();
  EXPECT_EQ(a.active(Category::Workspace), base);
}

TEST(Allocator, LimitErrorNamesTensorSizeAndLiveBytes) {
  LimitGuard g;
  auto& a = Allocator::global();
  Tensor keep = Tensor::empty({256}, Category::Parameter, "wte.weight");
  a.set_limit(a.active_total() + 1000);
  try {
    Tensor big = Tensor::empty({1 << 20}, Category::SavedActivation, "h.3.attn.probs");
    FAIL() << "expected the limit to throw";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("h.3.attn.probs"), std::string::npos) << m;
    EXPECT_NE(m.find("4.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("parameter="), std::string::npos) << m;
    EXPECT_NE(m.find("hint:"), std::string::npos) << m;
  }
  // Nothing was counted for the failed allocation.
  EXPECT_LE(a.active_total(), a.limit());
}

TEST(Tensor, CloneCopiesValuesIntoNewStorage) {
  Tensor t = Tensor::empty({3}, Category::Activation, "a");
  t.data()[0] = 1; t.data()[1] = 2; t.data()[2] = 3;
  Tensor c = t.clone(Category::Debug, "copy");
  EXPECT_NE(c.id(), t.id());
  EXPECT_EQ(c.data()[2], 3.0f);
  EXPECT_EQ(c.category(), Category::Debug);
  EXPECT_EQ(shape_str(t.shape()), "(3)");
}

TEST(Allocator, CacheReusesFreedBlocksAndStaysWithinALimit) {
  LimitGuard g;
  auto& a = Allocator::global();
  a.release_cache();
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000}, Category::Workspace, "ws");
    first = t.data();
  }
  EXPECT_EQ(a.cached(), 4032u);  // 4000 bytes, rounded up to 64
  {
    Tensor t = Tensor::empty({1000}, Category::Workspace, "ws2");
    EXPECT_EQ(static_cast<void*>(t.data()), first) << "a block of the same size is reused";
    EXPECT_EQ(a.cached(), 0u);
  }
  // Under a limit, live + cached stays within it.
  a.set_limit(a.active_total() + 6000);
  {
    Tensor t = Tensor::empty({1000}, Category::Workspace, "a");  // takes the cached block
    Tensor u = Tensor::empty({400}, Category::Workspace, "b");
  }
  EXPECT_LE(a.active_total() + a.cached(), a.limit());
  a.set_limit(0);
  a.release_cache();
  EXPECT_EQ(a.cached(), 0u);
}

// The cache never makes the process larger than its live blocks have been: freed blocks of one size
// are given back before a block of another size is taken from the system beyond that high-water mark.
TEST(Allocator, CacheStaysWithinTheLiveHighWaterMark) {
  Allocator a;  // its own: the global one's high-water mark is the whole test binary's
  const size_t mib = size_t(1) << 20;
  void* p = a.allocate(8 * mib, Category::Activation, "ctx.8");
  a.release(p, 8 * mib, Category::Activation, "ctx.8");
  EXPECT_EQ(a.cached(), 8 * mib);
  EXPECT_EQ(a.live_high_water(), 8 * mib);
  // A longer context: another size. The 8 MiB block goes back to the system first.
  void* q = a.allocate(9 * mib, Category::Activation, "ctx.9");
  EXPECT_EQ(a.cached(), 0u) << "the cached block of another size was given back";
  EXPECT_EQ(a.system_bytes(), 9 * mib);
  a.release(q, 9 * mib, Category::Activation, "ctx.9");
  // Smaller sizes fit under the mark beside the cached block only as far as the mark allows.
  void* r = a.allocate(4 * mib, Category::Activation, "ctx.4");
  EXPECT_LE(a.system_bytes(), a.live_high_water());
  a.release(r, 4 * mib, Category::Activation, "ctx.4");
  // A growing context, as sampling without a cache makes: the system bytes never pass the mark.
  size_t worst = 0;
  for (size_t k = 1; k <= 64; ++k) {
    void* b = a.allocate(k * 64 * 1024, Category::Activation, "grow");
    worst = std::max(worst, a.system_bytes());
    EXPECT_LE(a.system_bytes(), a.live_high_water()) << "at size " << k * 64 << " KiB";
    a.release(b, k * 64 * 1024, Category::Activation, "grow");
  }
  EXPECT_LE(worst, 9 * mib) << "the 9 MiB mark bounds every later size";
  EXPECT_EQ(a.system_peak(), 9 * mib);
  // A block is reused at its own size: no system call, the same pointer.
  void* s1 = a.allocate(3 * mib, Category::Activation, "same");
  a.release(s1, 3 * mib, Category::Activation, "same");
  void* s2 = a.allocate(3 * mib, Category::Activation, "same");
  EXPECT_EQ(s1, s2);
  a.release(s2, 3 * mib, Category::Activation, "same");
  a.release_cache();
  EXPECT_EQ(a.system_bytes(), 0u);
}

// ZeRO-3 gives a parameter's bytes back between the blocks that use it: an evicted storage keeps its
// name, category, shape and identity (the tape's key), counts nothing, and refuses to be read; a dry
// run counts the same.
TEST(Tensor, EvictGivesTheBytesBackAndKeepsTheIdentity) {
  auto& a = Allocator::global();
  const size_t base = a.active(Category::Parameter);
  Tensor t = Tensor::zeros({4, 8}, Category::Parameter, "h.0.mlp.c_fc.weight");
  const uint64_t id = t.id();
  EXPECT_EQ(a.active(Category::Parameter), base + 128);
  t.evict();
  EXPECT_FALSE(t.resident());
  EXPECT_EQ(a.active(Category::Parameter), base);
  EXPECT_EQ(t.id(), id);
  EXPECT_EQ(t.numel(), 32);
  EXPECT_EQ(t.name(), "h.0.mlp.c_fc.weight");
  try {
    (void)t.data();
    ADD_FAILURE() << "an evicted tensor was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'h.0.mlp.c_fc.weight' was read while evicted"), std::string::npos) << e.what();
  }
  const size_t grads = a.active(Category::Gradient);
  t.retag(Category::Gradient);  // nothing counted moves
  EXPECT_EQ(a.active(Category::Gradient), grads);
  t.retag(Category::Parameter);
  t.restore();
  EXPECT_TRUE(t.resident());
  EXPECT_EQ(a.active(Category::Parameter), base + 128);
  t.data()[31] = 1.0f;
  t.evict();  // destroyed evicted: released once, not twice
  {
    Allocator dry(/*track_names=*/false);
    ShapeOnlyScope shapes;
    DryRunAccount count(dry);
    Tensor d = Tensor::empty({16}, Category::Parameter, "d");
    EXPECT_EQ(dry.active(Category::Parameter), 64u);
    d.evict();
    EXPECT_EQ(dry.active(Category::Parameter), 0u);
    d.restore();
    EXPECT_EQ(dry.active(Category::Parameter), 64u);
  }
  EXPECT_EQ(a.active(Category::Parameter), base);
}
