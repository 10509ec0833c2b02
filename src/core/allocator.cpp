#include "core/allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"

namespace remat {

const char* category_name(Category c) {
  switch (c) {
    case Category::Parameter: return "parameter";
    case Category::Gradient: return "gradient";
    case Category::OptimizerState: return "optimizer";
    case Category::SavedActivation: return "saved_activation";
    case Category::Checkpoint: return "checkpoint";
    case Category::Recompute: return "recompute";
    case Category::Activation: return "activation_transient";
    case Category::ActivationGrad: return "activation_grad";
    case Category::Workspace: return "workspace";
    case Category::Data: return "data";
    case Category::KVCache: return "kv_cache";
    case Category::Debug: return "debug";
    case Category::kCount: break;
  }
  return "?";
}

std::string format_bytes(size_t b) {
  char buf[64];
  if (b >= (size_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1 << 30));
  else if (b >= (size_t(1) << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / double(1 << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

Allocator& Allocator::global() {
  static Allocator a;
  // At exit, return the cached blocks to the system (else every process "leaks" them, and
  // LeakSanitizer says so), and free any block released later instead of caching it. Constructed
  // after `a`, so destroyed before it; any static Tensor allocated through `a` was constructed after
  // both, so it is destroyed (and its block released) before this runs.
  static struct CacheAtExit {
    ~CacheAtExit() { a.set_cache_limit(0); }
  } cache_at_exit;
  return a;
}

const char* dtype_name(DType d) { return record::enum_name(d); }

void Allocator::bump_peaks_locked() {
  for (int i = 0; i < kNumCategories; ++i) {
    if (active_[i] > peak_[i]) peak_[i] = active_[i];
    for (int d = 0; d < kNumDTypes; ++d)
      if (active_dt_[i][d] > peak_dt_[i][d]) peak_dt_[i][d] = active_dt_[i][d];
  }
  if (total_ > total_ever_) total_ever_ = total_;
  if (total_ > total_peak_) {
    total_peak_ = total_;
    at_total_peak_ = active_;
  }
  if (act_ > act_peak_) {
    act_peak_ = act_;
    act_peak_dt_ = act_dt_;
  }
}

void Allocator::account(size_t bytes, Category cat, const std::string& name, DType dt) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (limit_ != 0 && total_ + bytes > limit_) {
      std::string live;
      for (int i = 0; i < kNumCategories; ++i)
        if (active_[i]) live += std::string(" ") + category_name(Category(i)) + "=" + format_bytes(active_[i]);
      throw Error("memory", "allocating '" + name + "' (" + format_bytes(bytes) + ", " + category_name(cat) +
                                ") would exceed the limit of " + format_bytes(limit_) + "; live:" + live,
                  "raise --memory-limit, or use a checkpoint strategy (--recompute block) or a smaller --micro-batch");
    }
    active_[int(cat)] += bytes;
    active_dt_[int(cat)][int(dt)] += bytes;
    total_ += bytes;
    ++allocations_;
    allocated_bytes_ += bytes;
    if (limit_ != 0 && total_ + cached_ > limit_) drop_cache_locked();  // keep live + cached within it
    if (is_activation(cat)) {
      act_ += bytes;
      act_dt_[int(dt)] += bytes;
    }
    if (track_names_) {
      auto& ns = names_[name];
      ns.active += bytes;
      ns.category = cat;
      ns.dtype = dt;
      if (ns.active > ns.peak) ns.peak = ns.active;
      if (is_activation(cat)) {
        ns.act_active += bytes;
        if (ns.act_active > ns.act_peak) ns.act_peak = ns.act_active;
      }
    }
    bump_peaks_locked();
  }
}

size_t Allocator::block_size(size_t bytes) {
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  if (rounded < kMapThreshold) return rounded;
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (rounded + page - 1) / page * page;
}

// Under AddressSanitizer every block comes from malloc, so that ASan's redzones guard the large ones too.
#if defined(__SANITIZE_ADDRESS__)
static constexpr bool kMapLarge = false;
#else
static constexpr bool kMapLarge = true;
#endif
// Whether a block of this size comes from malloc (else it is mapped).
static bool from_malloc(size_t size) { return !kMapLarge || size < Allocator::kMapThreshold; }

void* Allocator::system_alloc(size_t size) {
  if (from_malloc(size)) return std::aligned_alloc(64, size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void Allocator::system_free(void* p, size_t size) {
  if (from_malloc(size)) std::free(p);
  else munmap(p, size);
}

void Allocator::make_room_locked(size_t room) {
  size_t bound = std::max(live_high_, handed_out_ + room);
  if (limit_ != 0) bound = std::min(bound, std::max(limit_, handed_out_ + room));
  while (cached_ > 0 && handed_out_ + cached_ + room > bound) {
    auto it = std::prev(cache_.end());  // the largest blocks first: the fewest system calls
    void* b = it->second.back();
    it->second.pop_back();
    system_free(b, it->first);
    cached_ -= it->first;
    if (from_malloc(it->first)) from_malloc_ -= it->first;
    if (it->second.empty()) cache_.erase(it);
  }
}

void* Allocator::allocate(size_t bytes, Category cat, const std::string& name, DType dt) {
  account(bytes, cat, name, dt);
  const size_t size = block_size(bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = cache_.find(size);
    if (it != cache_.end()) {
      void* p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) cache_.erase(it);
      cached_ -= size;
      handed_out_ += size;
      return p;
    }
    make_room_locked(size);
  }
  void* p = system_alloc(size);
  if (!p) {
    unaccount(bytes, cat, name, dt);
    throw Error("memory", "the system refused " + format_bytes(bytes) + " for '" + name + "'",
                "use a smaller model, --micro-batch or a checkpoint strategy");
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    handed_out_ += size;
    if (from_malloc(size)) from_malloc_ += size;
    live_high_ = std::max(live_high_, handed_out_);
    system_peak_ = std::max(system_peak_, handed_out_ + cached_);
  }
  return p;
}

void Allocator::release(void* p, size_t bytes, Category cat, const std::string& name, DType dt) {
  if (p) {
    std::lock_guard<std::mutex> lk(mu_);
    const size_t size = block_size(bytes);
    handed_out_ -= size;
    // Under a hard limit the cache keeps live + cached within it, so the limit bounds the process.
    if (cached_ + size <= cache_limit_ && (limit_ == 0 || total_ + cached_ + size <= limit_ + bytes)) {
      cache_[size].push_back(p);
      cached_ += size;
    } else {
      system_free(p, size);
      if (from_malloc(size)) from_malloc_ -= size;
    }
  }
  unaccount(bytes, cat, name, dt);
}

void Allocator::unaccount(size_t bytes, Category cat, const std::string& name, DType dt) {
  std::lock_guard<std::mutex> lk(mu_);
  REMAT_ASSERT(active_dt_[int(cat)][int(dt)] >= bytes, "allocator: release of more bytes than live in category");
  active_[int(cat)] -= bytes;
  active_dt_[int(cat)][int(dt)] -= bytes;
  total_ -= bytes;
  if (is_activation(cat)) {
    act_ -= bytes;
    act_dt_[int(dt)] -= bytes;
  }
  auto it = track_names_ ? names_.find(name) : names_.end();
  if (it != names_.end()) {
    it->second.active -= bytes;
    if (is_activation(cat)) it->second.act_active -= bytes;
  }
}

void Allocator::retag(size_t bytes, Category from, Category to, const std::string& name, DType dt) {
  if (from == to) return;
  std::lock_guard<std::mutex> lk(mu_);
  REMAT_ASSERT(active_dt_[int(from)][int(dt)] >= bytes, "allocator: retag of more bytes than live in category");
  active_[int(from)] -= bytes;
  active_[int(to)] += bytes;
  active_dt_[int(from)][int(dt)] -= bytes;
  active_dt_[int(to)][int(dt)] += bytes;
  if (is_activation(from)) {
    act_ -= bytes;
    act_dt_[int(dt)] -= bytes;
  }
  if (is_activation(to)) {
    act_ += bytes;
    act_dt_[int(dt)] += bytes;
  }
  if (track_names_) {
    NameStats& ns = names_[name];
    ns.category = to;
    if (is_activation(from)) ns.act_active -= bytes;
    if (is_activation(to)) {
      ns.act_active += bytes;
      if (ns.act_active > ns.act_peak) ns.act_peak = ns.act_active;
    }
  }
  bump_peaks_locked();
}

size_t Allocator::active(Category c) const { std::lock_guard<std::mutex> lk(mu_); return active_[int(c)]; }
size_t Allocator::peak(Category c) const { std::lock_guard<std::mutex> lk(mu_); return peak_[int(c)]; }
size_t Allocator::active_total() const { std::lock_guard<std::mutex> lk(mu_); return total_; }
size_t Allocator::peak_total() const { std::lock_guard<std::mutex> lk(mu_); return total_peak_; }
size_t Allocator::peak_total_ever() const { std::lock_guard<std::mutex> lk(mu_); return total_ever_; }
size_t Allocator::active_activation() const { std::lock_guard<std::mutex> lk(mu_); return act_; }
size_t Allocator::peak_activation() const { std::lock_guard<std::mutex> lk(mu_); return act_peak_; }
size_t Allocator::active(Category c, DType d) const { std::lock_guard<std::mutex> lk(mu_); return active_dt_[int(c)][int(d)]; }
size_t Allocator::peak(Category c, DType d) const { std::lock_guard<std::mutex> lk(mu_); return peak_dt_[int(c)][int(d)]; }
size_t Allocator::peak_activation(DType d) const { std::lock_guard<std::mutex> lk(mu_); return act_peak_dt_[int(d)]; }
std::array<size_t, kNumCategories> Allocator::active_at_peak_total() const {
  std::lock_guard<std::mutex> lk(mu_);
  return at_total_peak_;
}
uint64_t Allocator::allocations() const { std::lock_guard<std::mutex> lk(mu_); return allocations_; }
uint64_t Allocator::allocated_bytes() const { std::lock_guard<std::mutex> lk(mu_); return allocated_bytes_; }
size_t Allocator::cached() const { std::lock_guard<std::mutex> lk(mu_); return cached_; }
size_t Allocator::system_bytes() const { std::lock_guard<std::mutex> lk(mu_); return handed_out_ + cached_; }
size_t Allocator::malloc_bytes() const { std::lock_guard<std::mutex> lk(mu_); return from_malloc_; }
size_t Allocator::live_high_water() const { std::lock_guard<std::mutex> lk(mu_); return live_high_; }
size_t Allocator::system_peak() const { std::lock_guard<std::mutex> lk(mu_); return system_peak_; }

size_t untracked_heap_bytes() {
  const struct mallinfo2 mi = mallinfo2();
  const size_t heap = mi.uordblks + mi.hblkhd;
  const size_t ours = Allocator::global().malloc_bytes();
  return heap > ours ? heap - ours : 0;
}

size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? size_t(resident) * size_t(page) : 0;
}

size_t peak_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %llu kB", &kib) == 1) {
      found = true;
      break;
    }
  std::fclose(f);
  return found ? size_t(kib) * 1024 : 0;
}

void Allocator::drop_cache_locked() {
  for (auto& [size, blocks] : cache_)
    for (void* b : blocks) {
      system_free(b, size);
      if (from_malloc(size)) from_malloc_ -= size;
    }
  cache_.clear();
  cached_ = 0;
}

void Allocator::release_cache() {
  std::lock_guard<std::mutex> lk(mu_);
  drop_cache_locked();
}

void Allocator::set_cache_limit(size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cache_limit_ = bytes;
  }
  release_cache();
}

size_t Allocator::limit() const { std::lock_guard<std::mutex> lk(mu_); return limit_; }
void Allocator::set_limit(size_t bytes) { std::lock_guard<std::mutex> lk(mu_); limit_ = bytes; }

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lk(mu_);
  peak_ = active_;
  peak_dt_ = active_dt_;
  total_peak_ = total_;
  at_total_peak_ = active_;
  act_peak_ = act_;
  act_peak_dt_ = act_dt_;
  for (auto& [n, s] : names_) {
    s.peak = s.active;
    s.act_peak = s.act_active;
  }
}

std::map<std::string, NameStats> Allocator::by_name() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {names_.begin(), names_.end()};
}

std::string Allocator::live_summary() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string s;
  for (int i = 0; i < kNumCategories; ++i)
    if (active_[i] || peak_[i]) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  %-22s live %12s   peak %12s\n", category_name(Category(i)),
                    format_bytes(active_[i]).c_str(), format_bytes(peak_[i]).c_str());
      s += buf;
    }
  return s;
}

}  // namespace remat
