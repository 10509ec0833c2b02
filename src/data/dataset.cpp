#include "data/dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/allocator.h"
#include "core/error.h"

namespace remat::data {

namespace {

constexpr const char* kC = "data";
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// 1234567 -> "1,234,567".
std::string with_commas(uint64_t v) {
  std::string s = std::to_string(v), r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) r += ',';
    r += s[i];
  }
  return r;
}

std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Size of a readable regular file; `what` is its role ("text file", "token file").
uint64_t file_size_or_throw(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw Error(kC, what + " '" + path + "' does not exist",
                  "check the --data path, or omit --data to train on the built-in corpus");
    throw Error(kC, "cannot read " + what + " '" + path + "': " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode))
    throw Error(kC, what + " '" + path + "' is a directory, not a file", "pass a file inside it, e.g. train.bin");
  if (!S_ISREG(st.st_mode)) throw Error(kC, what + " '" + path + "' is not a regular file");
  if (st.st_size == 0) throw Error(kC, what + " '" + path + "' is empty", "it must hold at least one window of tokens");
  return uint64_t(st.st_size);
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

File open_or_throw(const std::string& path, const std::string& what) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(kC, "cannot open " + what + " '" + path + "': " + std::strerror(errno));
  return f;
}

void read_exact(FILE* f, void* dst, size_t bytes, const std::string& path) {
  if (bytes && std::fread(dst, 1, bytes, f) != bytes)
    throw Error(kC, "reading '" + path + "' failed before its end", "was the file modified while being read?");
}

// splitmix64 finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

// ---- TokenDataset ----------------------------------------------------------------------------

TokenDataset::~TokenDataset() { reset(); }

TokenDataset::TokenDataset(TokenDataset&& o) noexcept { *this = std::move(o); }

TokenDataset& TokenDataset::operator=(TokenDataset&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    n_ = std::exchange(o.n_, 0);
    max_token_ = std::exchange(o.max_token_, -1);
    byte_level_ = o.byte_level_;
    desc_ = std::move(o.desc_);
    alloc_name_ = std::move(o.alloc_name_);
  }
  return *this;
}

void TokenDataset::reset() noexcept {
  if (data_) Allocator::global().release(data_, n_ * sizeof(uint16_t), Category::Data, alloc_name_);
  data_ = nullptr;
  n_ = 0;
  max_token_ = -1;
}

void TokenDataset::allocate(size_t n, std::string alloc_name) {
  reset();
  alloc_name_ = std::move(alloc_name);
  data_ = static_cast<uint16_t*>(Allocator::global().allocate(n * sizeof(uint16_t), Category::Data, alloc_name_));
  n_ = n;
}

void TokenDataset::finish() {
  max_token_ = n_ ? int(*std::max_element(data_, data_ + n_)) : -1;
}

TokenDataset TokenDataset::from_tokens(std::span<const uint16_t> tokens, std::string description, bool byte_level,
                                       const std::string& alloc_name) {
  TokenDataset d;
  d.allocate(tokens.size(), alloc_name);
  if (!tokens.empty()) std::memcpy(d.data_, tokens.data(), tokens.size_bytes());
  d.byte_level_ = byte_level;
  d.desc_ = std::move(description);
  d.finish();
  return d;
}

TokenDataset TokenDataset::from_text_file(const std::string& path) {
  const uint64_t size = file_size_or_throw(path, "text file");
  File f = open_or_throw(path, "text file");
  TokenDataset d;
  d.allocate(size, "data.tokens");
  unsigned char buf[1 << 16];
  for (uint64_t i = 0; i < size;) {
    const size_t m = size_t(std::min<uint64_t>(sizeof buf, size - i));
    read_exact(f.get(), buf, m, path);
    for (size_t j = 0; j < m; ++j) d.data_[i + j] = buf[j];
    i += m;
  }
  d.byte_level_ = true;
  d.desc_ = "text file '" + path + "' (byte-level, " + with_commas(size) + " tokens)";
  d.finish();
  return d;
}

TokenDataset TokenDataset::from_token_file(const std::string& path) {
  const uint64_t size = file_size_or_throw(path, "token file");
  File f = open_or_throw(path, "token file");
  uint64_t count = 0;
  std::string format = "raw uint16";
  int32_t header[256] = {};
  if (size >= kLlmcHeaderBytes) {
    read_exact(f.get(), header, kLlmcHeaderBytes, path);
    if (header[0] != kLlmcMagic) std::rewind(f.get());
  }
  if (size >= kLlmcHeaderBytes && header[0] == kLlmcMagic) {
    if (header[1] == 2)
      throw Error(kC, "token file '" + path + "' is llm.c version 2 (uint32 tokens, e.g. LLaMA 3), not supported",
                  "remat reads version 1 files (GPT-2 uint16 tokens)");
    if (header[1] != 1)
      throw Error(kC, "token file '" + path + "' has the llm.c magic but unknown version " + std::to_string(header[1]),
                  "remat reads llm.c version 1 files");
    const uint64_t payload = size - kLlmcHeaderBytes;
    if (header[2] < 0 || payload != uint64_t(header[2]) * 2)
      throw Error(kC, "llm.c token file '" + path + "': the header says " + std::to_string(header[2]) +
                          " tokens (" + std::to_string(int64_t(header[2]) * 2) + " bytes after the 1024-byte header) but " +
                          std::to_string(payload) + " bytes follow",
                  "the file is truncated or corrupt; regenerate it");
    count = uint64_t(header[2]);
    format = "llm.c";
  } else {
    if (size % 2 != 0)
      throw Error(kC, "token file '" + path + "' has an odd byte count (" + std::to_string(size) +
                          "); uint16 token files hold 2 bytes per token",
                  "was it written by nanoGPT/llm.c prepare scripts? text files must not end in .bin");
    count = size / 2;
  }
  // The stream is now positioned at the first token.
  TokenDataset d;
  d.allocate(count, "data.tokens");
  read_exact(f.get(), d.data_, count * 2, path);
  d.finish();
  d.byte_level_ = false;
  d.desc_ = "token file '" + path + "' (" + format + ", " + with_commas(count) + " tokens, max id " +
            std::to_string(d.max_token_) + ")";
  return d;
}

TokenDataset TokenDataset::builtin() {
  const std::string text = builtin_corpus_text();
  TokenDataset d;
  d.allocate(text.size(), "data.tokens");
  for (size_t i = 0; i < text.size(); ++i) d.data_[i] = static_cast<unsigned char>(text[i]);
  d.byte_level_ = true;
  d.desc_ = "built-in corpus (shakespeare excerpt, " + with_commas(text.size()) + " tokens)";
  d.finish();
  return d;
}

TokenDataset TokenDataset::load(const std::string& path) {
  if (path.empty()) return builtin();
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0) return from_token_file(path);
  return from_text_file(path);
}

std::pair<TokenDataset, TokenDataset> TokenDataset::split(double val_fraction, int64_t T) const {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw Error(kC, "validation fraction " + fmt_g(val_fraction) + " is not between 0 and 1",
                "use e.g. 0.1 for a 90/10 split");
  if (T < 1) throw Error(kC, "sequence length " + std::to_string(T) + " must be positive");
  const uint64_t n_val = uint64_t(std::llround(double(n_) * val_fraction));
  const uint64_t n_train = n_ - std::min<uint64_t>(n_val, n_);
  const uint64_t need = uint64_t(T) + 1;
  for (auto [part, len] : {std::pair<const char*, uint64_t>{"training", n_train}, {"validation", n_val}})
    if (len < need)
      throw Error(kC, "splitting " + with_commas(n_) + " tokens with validation fraction " + fmt_g(val_fraction) +
                          " leaves " + with_commas(len) + " " + part + " tokens, fewer than one window of T + 1 = " +
                          std::to_string(need) + " tokens",
                  "use a smaller --seq, a different validation fraction, or more data");
  auto tok = tokens();
  return {from_tokens(tok.first(n_train), desc_ + ", train split (" + with_commas(n_train) + " tokens)", byte_level_,
                      "data.train"),
          from_tokens(tok.subspan(n_train), desc_ + ", val split (" + with_commas(n_val) + " tokens)", byte_level_,
                      "data.val")};
}

// ---- BatchSampler ----------------------------------------------------------------------------

BatchSampler::BatchSampler(const TokenDataset& ds, int64_t B, int64_t T, uint64_t seed)
    : ds_(&ds), B_(B), T_(T), windows_(0), seed_(seed) {
  if (B < 1) throw Error(kC, "batch size " + std::to_string(B) + " must be at least 1");
  if (T < 1) throw Error(kC, "sequence length " + std::to_string(T) + " must be at least 1");
  if (ds.size() < uint64_t(T) + 1)
    throw Error(kC, "the dataset has " + with_commas(ds.size()) + " tokens, fewer than one window of T + 1 = " +
                        with_commas(uint64_t(T) + 1) + " tokens (T = " + std::to_string(T) + ")",
                "use a smaller --seq or a larger dataset");
  windows_ = int64_t((ds.size() - 1) / uint64_t(T));
}

uint64_t BatchSampler::window_start(uint64_t step, int64_t b) const {
  const uint64_t h = mix64(mix64(mix64(seed_) ^ step) ^ uint64_t(b));
  const uint64_t range = ds_->size() - uint64_t(T_);  // starts 0 .. n - T - 1
  return uint64_t((unsigned __int128)h * range >> 64);
}

void BatchSampler::fill_row(uint64_t start, int64_t b, int32_t* inputs, int32_t* targets) const {
  const uint16_t* src = ds_->tokens().data() + start;
  int32_t* in = inputs + b * T_;
  int32_t* tg = targets + b * T_;
  for (int64_t t = 0; t < T_; ++t) {
    in[t] = src[t];
    tg[t] = src[t + 1];
  }
}

void BatchSampler::sample(uint64_t step, int32_t* inputs, int32_t* targets) const {
  for (int64_t b = 0; b < B_; ++b) fill_row(window_start(step, b), b, inputs, targets);
}

void BatchSampler::sequential(uint64_t index, int32_t* inputs, int32_t* targets) const {
  for (int64_t b = 0; b < B_; ++b) {
    const auto w = uint64_t(((unsigned __int128)index * uint64_t(B_) + uint64_t(b)) % uint64_t(windows_));
    fill_row(w * uint64_t(T_), b, inputs, targets);
  }
}

std::string decode_bytes(std::span<const int32_t> tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int32_t t : tokens)
    s += (t == '\n' || t == '\t' || (t >= 32 && t <= 126)) ? char(t) : '?';
  return s;
}

}  // namespace remat::data
