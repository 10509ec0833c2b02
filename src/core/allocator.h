// The accounting allocator. Every byte remat allocates comes through here, tagged with a Category
// (what it is for) and a name ("h.3.attn.probs"). It keeps live and peak bytes per category and per
// name, and an optional hard limit, in the spirit of MLX's memory.h (active / peak / reset_peak /
// limit). Activation memory -- the product -- is the sum of three categories (SavedActivation,
// Checkpoint, Recompute); its peak is tracked as one number so that "peak activation bytes" is a
// single measured quantity, comparable to the planner's prediction.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace remat {

enum class Category : uint8_t {
  Parameter,        // model weights
  Gradient,         // parameter gradients
  OptimizerState,   // AdamW m and v
  SavedActivation,  // tensors the tape keeps for backward (first forward)
  Checkpoint,       // segment / block boundary activations kept by a checkpoint
  Recompute,        // tensors kept by a replayed (recomputed) region, in flight during backward
  Activation,       // op outputs nobody saved: transient
  ActivationGrad,   // gradients w.r.t. activations: transient
  Workspace,        // kernel scratch
  Data,             // token buffers
  KVCache,          // keys and values kept for generation (model/sample.h)
  Debug,            // copies made by --determinism-check
  kCount
};
constexpr int kNumCategories = int(Category::kCount);
const char* category_name(Category c);
// The categories whose sum is "activation memory".
constexpr bool is_activation(Category c) {
  return c == Category::SavedActivation || c == Category::Checkpoint || c == Category::Recompute;
}

struct NameStats {
  size_t active = 0, peak = 0;          // all bytes under this name
  size_t act_active = 0, act_peak = 0;  // ... while in an activation category
  Category category = Category::Activation;
  DType dtype = DType::F32;
};

class Allocator {
 public:
  // track_names = false: no per-name statistics (by_name() stays empty), for the accountants of dry
  // runs, which read only category peaks and counts: a name lookup per tensor was the largest cost of
  // planning a 1000-block chain.
  explicit Allocator(bool track_names = true) : track_names_(track_names) {}
  // The process-wide allocator used by Tensor.
  static Allocator& global();

  // 64-byte aligned, zero bytes allowed. Throws remat::Error when the limit would be exceeded,
  // naming the tensor, its size and what was live.
  // `dt` is the element type the bytes hold: live and peak bytes are also kept per dtype.
  void* allocate(size_t bytes, Category cat, const std::string& name, DType dt = DType::F32);
  void release(void* p, size_t bytes, Category cat, const std::string& name, DType dt = DType::F32);
  // The bookkeeping of allocate/release without the memory: counts, peaks, names and the limit.
  // A dry run (DryRunAccount in core/tensor.h) measures with these what a real run would allocate.
  void account(size_t bytes, Category cat, const std::string& name, DType dt = DType::F32);
  void unaccount(size_t bytes, Category cat, const std::string& name, DType dt = DType::F32);
  // Moves `bytes` from one category to another (a tensor becoming saved, or a checkpoint).
  void retag(size_t bytes, Category from, Category to, const std::string& name, DType dt = DType::F32);

  size_t active(Category c) const;
  size_t peak(Category c) const;
  size_t active_total() const;
  size_t peak_total() const;
  // The highest peak_total() has been since construction (reset_peak() does not touch it).
  size_t peak_total_ever() const;
  size_t active_activation() const;  // SavedActivation + Checkpoint + Recompute, now
  size_t peak_activation() const;    // ... its high-water mark since the last reset_peak()
  // Per dtype: live bytes of a category, its own high-water mark, and the dtype split of the
  // activation bytes at the moment of peak_activation() (the split sums to it).
  size_t active(Category c, DType d) const;
  size_t peak(Category c, DType d) const;
  size_t peak_activation(DType d) const;
  // The live bytes of every category at the moment of peak_total() (they sum to it): what a step
  // held at its highest, transients and workspace included (remat trace --svg draws it).
  std::array<size_t, kNumCategories> active_at_peak_total() const;
  // Every allocation (or account()) since construction: how many, and their bytes summed.
  uint64_t allocations() const;
  uint64_t allocated_bytes() const;
  // Peaks restart from the current live values.
  void reset_peak();
  // 0 means no limit. The limit applies to the total of all categories.
  void set_limit(size_t bytes);
  size_t limit() const;
  // Per-name statistics (names as given at allocation).
  std::map<std::string, NameStats> by_name() const;
  // Human-readable table of the live bytes per category (used in limit errors and reports).
  std::string live_summary() const;
  // Freed blocks are kept, by exact size, for reuse: a training step allocates the same sizes
  // every time, and fresh pages cost a fault each (the OS zeroes them). Cached bytes are not live
  // and count in no category; they are reported apart, as PyTorch's "reserved" memory.
  //
  // The cache never makes the process larger than the step itself: the system bytes this allocator
  // holds (live blocks + cache) never exceed the high-water mark of its live blocks
  // (live_high_water()). A request the cache cannot serve first gives cached blocks of other sizes
  // back to the system until the new block fits under that mark, so memory freed by one phase (a
  // forward over a longer context, a validation pass) is never held beside another's. Blocks of
  // kMapThreshold bytes and more are mapped from the system directly (mmap) and unmapped when given
  // back, so they leave the resident set at once; smaller ones come from malloc.
  static constexpr size_t kMapThreshold = size_t(64) << 10;
  size_t cached() const;
  // The largest the live blocks (rounded as allocated) have been: the cache's bound.
  size_t live_high_water() const;
  // The system bytes held at their highest (live blocks + cache): <= live_high_water().
  size_t system_peak() const;
  // Returns every cached block to the system.
  void release_cache();
  // Caps the cache (default 2 GiB; with a limit set, live + cached stays within the limit); blocks
  // freed beyond it go back to the system.
  void set_cache_limit(size_t bytes);
  // Bytes of the system's memory this allocator holds: its live blocks, each rounded up to 64 as
  // allocated, and its cache. (Accounted bytes are the sizes asked for, not rounded.)
  size_t system_bytes() const;
  // Of those, the blocks malloc holds (below kMapThreshold): what glibc's own figures include.
  size_t malloc_bytes() const;

 private:
  void bump_peaks_locked();
  void drop_cache_locked();
  mutable std::mutex mu_;
  std::array<size_t, kNumCategories> active_{}, peak_{};
  std::array<std::array<size_t, kNumDTypes>, kNumCategories> active_dt_{}, peak_dt_{};
  std::array<size_t, kNumDTypes> act_dt_{}, act_peak_dt_{};
  std::array<size_t, kNumCategories> at_total_peak_{};
  size_t total_ = 0, total_peak_ = 0, total_ever_ = 0, act_ = 0, act_peak_ = 0, limit_ = 0;
  // Hashed, not ordered: every allocation looks its name up (a dry run of a 1000-block chain makes
  // millions); by_name() sorts a copy.
  std::unordered_map<std::string, NameStats> names_;
  // A block's size as held from the system: 64-byte multiples from malloc, pages when mapped.
  static size_t block_size(size_t bytes);
  static void* system_alloc(size_t size);
  static void system_free(void* p, size_t size);
  // Gives cached blocks back, largest first, until `room` more bytes fit under the high-water mark
  // (and the limit, when set).
  void make_room_locked(size_t room);
  std::map<size_t, std::vector<void*>> cache_;  // block size -> free blocks
  size_t cached_ = 0, cache_limit_ = size_t(2) << 30;
  size_t handed_out_ = 0;  // block bytes of the live blocks
  size_t live_high_ = 0;   // the high-water mark of handed_out_
  size_t system_peak_ = 0; // the high-water mark of handed_out_ + cached_
  size_t from_malloc_ = 0; // live + cached bytes of the blocks malloc holds (below kMapThreshold)
  uint64_t allocations_ = 0, allocated_bytes_ = 0;
  bool track_names_ = true;
};

// An array of trivially copyable T from the global accounting allocator, tagged and named, zeroed,
// released when it goes: for tables that are not tensors (a tokenizer's). Movable, not copyable.
template <class T>
class AccountedArray {
  static_assert(std::is_trivially_copyable_v<T>, "AccountedArray holds plain data");

 public:
  AccountedArray() = default;
  AccountedArray(size_t n, Category cat, std::string name) : n_(n), cat_(cat), name_(std::move(name)) {
    p_ = static_cast<T*>(Allocator::global().allocate(n * sizeof(T), cat_, name_));
    if (n) std::memset(static_cast<void*>(p_), 0, n * sizeof(T));
  }
  AccountedArray(AccountedArray&& o) noexcept { *this = std::move(o); }
  AccountedArray& operator=(AccountedArray&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(p_, o.p_);
      std::swap(n_, o.n_);
      cat_ = o.cat_;
      name_ = std::move(o.name_);
    }
    return *this;
  }
  AccountedArray(const AccountedArray&) = delete;
  AccountedArray& operator=(const AccountedArray&) = delete;
  ~AccountedArray() { reset(); }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  void reset() {
    if (p_) Allocator::global().release(p_, n_ * sizeof(T), cat_, name_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
  Category cat_ = Category::Data;
  std::string name_;
};

// Heap bytes in use in this process that the accounting allocator does not hold: glibc's heap in use
// (mallinfo2: uordblks + hblkhd, the latter its mmapped chunks) minus the blocks Allocator::global()
// took from malloc (those it maps itself are not in glibc's figures). That is oneDNN's primitive cache and scratchpad, the C++ and OpenMP runtimes, and
// any std::vector the engine keeps (ideally none). Heap only: thread stacks, the binary and
// memory-mapped token files are not in it (they show in resident_bytes()).
size_t untracked_heap_bytes();
// The process's resident set size (/proc/self/statm), or 0 where it cannot be read.
size_t resident_bytes();
// The process's peak resident set size (VmHWM in /proc/self/status), or 0 where it cannot be read.
size_t peak_resident_bytes();

// Formats a byte count as "12.3 MiB".
std::string format_bytes(size_t bytes);

}  // namespace remat
