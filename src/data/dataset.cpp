#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/allocator.h"
#include "core/error.h"
#include "core/signal_point.h"
#include "core/text.h"
#include "data/dataset_storage.h"

namespace remat::data {

std::atomic<size_t> dataset_detail::g_mapped_bytes{0};

using dataset_detail::g_mapped_bytes;
using dataset_detail::kC;

namespace {

constexpr int64_t kMaxUnknown = -2;  // max_cache_ before the first max_token()


}  // namespace

// ---- TokenDataset ----------------------------------------------------------------------------

TokenDataset::~TokenDataset() = default;

TokenDataset::TokenDataset(TokenDataset&& o) noexcept { *this = std::move(o); }

TokenDataset& TokenDataset::operator=(TokenDataset&& o) noexcept {
  if (this != &o) {
    store_ = std::move(o.store_);
    o.store_.reset();
    data_ = std::exchange(o.data_, nullptr);
    n_ = std::exchange(o.n_, 0);
    width_ = std::exchange(o.width_, 0);
    byte_level_ = std::exchange(o.byte_level_, false);
    format_ = std::exchange(o.format_, Format::Auto);
    desc_ = std::move(o.desc_);
    o.desc_.clear();
    max_cache_.store(o.max_cache_.exchange(kMaxUnknown, std::memory_order_relaxed), std::memory_order_relaxed);
  }
  return *this;
}

TokenDataset TokenDataset::from_buffer(size_t n, std::string description, bool byte_level,
                                       const std::string& alloc_name) {
  if (n > std::numeric_limits<size_t>::max() / sizeof(uint32_t))
    throw Error(kC, with_commas(n) + " tokens do not fit in memory as uint32 (" + description + ")",
                "use a smaller file");
  auto st = std::make_shared<Storage>();
  st->name = alloc_name;
  st->bytes = n * sizeof(uint32_t);
  st->base = Allocator::global().allocate(st->bytes, Category::Data, st->name);
  TokenDataset d;
  d.data_ = st->base;
  d.store_ = std::move(st);
  d.n_ = n;
  d.width_ = sizeof(uint32_t);
  d.byte_level_ = byte_level;
  d.desc_ = std::move(description);
  return d;
}

uint32_t* TokenDataset::mutable_u32() {
  // Only the from_* factories call this, on the buffer they just allocated.
  return static_cast<uint32_t*>(const_cast<void*>(data_));
}

TokenDataset TokenDataset::view(size_t start, size_t n, std::string description) const {
  TokenDataset d;
  d.store_ = store_;
  d.data_ = static_cast<const unsigned char*>(data_) + start * size_t(width_);
  d.n_ = n;
  d.width_ = width_;
  d.byte_level_ = byte_level_;
  d.format_ = format_;
  d.desc_ = std::move(description);
  return d;
}

TokenDataset TokenDataset::from_tokens(std::span<const uint16_t> tokens, std::string description, bool byte_level,
                                       const std::string& alloc_name) {
  TokenDataset d = from_buffer(tokens.size(), std::move(description), byte_level, alloc_name);
  std::copy(tokens.begin(), tokens.end(), d.mutable_u32());
  return d;
}

TokenDataset TokenDataset::from_tokens(std::span<const uint32_t> tokens, std::string description, bool byte_level,
                                       const std::string& alloc_name) {
  TokenDataset d = from_buffer(tokens.size(), std::move(description), byte_level, alloc_name);
  if (!tokens.empty()) std::memcpy(d.mutable_u32(), tokens.data(), tokens.size_bytes());
  return d;
}

TokenDataset TokenDataset::builtin() {
  const std::string text = builtin_corpus_text();
  TokenDataset d = from_buffer(text.size(), "built-in corpus (shakespeare excerpt, " + with_commas(text.size()) + " tokens)",
                               true, "data.tokens");
  uint32_t* out = d.mutable_u32();
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  d.format_ = Format::Text;
  return d;
}

void TokenDataset::copy_window(size_t start, size_t n, int32_t* out) const {
  if (start > n_ || n > n_ - start)
    throw Error(kC, "reading tokens [" + with_commas(start) + ", " + with_commas(start) + " + " + with_commas(n) +
                        ") past the end of " + desc_ + " (" + with_commas(n_) + " tokens)",
                "this is a bug in the caller: windows must lie inside the dataset");
  if (width_ == 2) {
    const uint16_t* src = static_cast<const uint16_t*>(data_) + start;
    for (size_t k = 0; k < n; ++k) out[k] = int32_t(src[k]);
  } else if (n) {
    const uint32_t* src = static_cast<const uint32_t*>(data_) + start;
    for (size_t k = 0; k < n; ++k) out[k] = int32_t(src[k]);
  }
}

std::span<const uint32_t> TokenDataset::tokens() const {
  if (n_ == 0) return {};
  if (width_ != 4)
    throw Error(kC, "tokens(): " + desc_ + " holds uint16 tokens mapped as-is, not uint32",
                "read them with operator[], copy_window() or tokens_u16()");
  return {static_cast<const uint32_t*>(data_), n_};
}

std::span<const uint16_t> TokenDataset::tokens_u16() const {
  if (n_ == 0) return {};
  if (width_ != 2)
    throw Error(kC, "tokens_u16(): " + desc_ + " holds uint32 tokens", "read them with tokens() or operator[]");
  return {static_cast<const uint16_t*>(data_), n_};
}

std::vector<uint32_t> TokenDataset::to_vector() const {
  std::vector<uint32_t> v(n_);
  for (size_t i = 0; i < n_; ++i) v[i] = (*this)[i];
  return v;
}

Fingerprint TokenDataset::fingerprint() const { return fingerprint_bytes(data_, n_ * size_t(width_)); }

int64_t TokenDataset::max_token() const {
  int64_t m = max_cache_.load(std::memory_order_relaxed);
  if (m != kMaxUnknown) return m;
  signal_point("scan");
  if (n_ == 0) {
    m = -1;
  } else if (width_ == 2) {
    const auto* p = static_cast<const uint16_t*>(data_);
    m = *std::max_element(p, p + n_);
  } else {
    const auto* p = static_cast<const uint32_t*>(data_);
    m = *std::max_element(p, p + n_);
  }
  max_cache_.store(m, std::memory_order_relaxed);  // racing callers store the same value
  return m;
}

void TokenDataset::check_vocab(int64_t V) const {
  const int64_t m = max_token();
  if (m >= V)
    throw Error(kC, "the data holds token " + std::to_string(m) + " but the vocabulary is " + std::to_string(V) +
                        " (" + desc_ + ")",
                "use --vocab " + std::to_string(m + 1) + " or more, or data tokenised for a vocabulary of " +
                    std::to_string(V));
}

bool TokenDataset::mapped() const { return store_ && store_->mapped; }
size_t TokenDataset::mapped_bytes() const { return mapped() ? store_->bytes : 0; }
size_t TokenDataset::buffer_bytes() const { return store_ && !store_->mapped ? store_->bytes : 0; }
size_t TokenDataset::live_mapped_bytes() { return g_mapped_bytes.load(std::memory_order_relaxed); }

std::pair<TokenDataset, TokenDataset> TokenDataset::split(double val_fraction, int64_t T) const {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw Error(kC, "validation fraction " + short_number(val_fraction) + " is not between 0 and 1",
                "use e.g. --val-fraction 0.1 for a 90/10 split");
  if (T < 1) throw Error(kC, "sequence length " + std::to_string(T) + " must be positive", "e.g. --seq 128");
  const uint64_t n_val = std::min<uint64_t>(uint64_t(std::llround(double(n_) * val_fraction)), n_);
  const uint64_t n_train = n_ - n_val;
  const uint64_t need = uint64_t(T) + 1;
  for (auto [part, len] : {std::pair<const char*, uint64_t>{"training", n_train}, {"validation", n_val}})
    if (len < need)
      throw Error(kC, "splitting " + with_commas(n_) + " tokens with validation fraction " + short_number(val_fraction) +
                          " leaves " + with_commas(len) + " " + part + " tokens, fewer than one window of T + 1 = " +
                          std::to_string(need) + " tokens",
                  std::string("use a smaller --seq, ") +
                      (std::string(part) == "validation" ? "a larger --val-fraction, --val-data FILE" : "a smaller --val-fraction") +
                      ", or more data");
  return {view(0, size_t(n_train), desc_ + ", train split (" + with_commas(n_train) + " tokens)"),
          view(size_t(n_train), size_t(n_val), desc_ + ", val split (" + with_commas(n_val) + " tokens)")};
}

std::string decode_bytes(std::span<const int32_t> tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int32_t t : tokens)
    s += (t == '\n' || t == '\t' || (t >= 32 && t <= 126)) ? char(t) : '?';
  return s;
}

}  // namespace remat::data
