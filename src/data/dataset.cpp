#include "data/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/allocator.h"
#include "core/error.h"
#include "core/signal_point.h"
#include "core/text.h"

static_assert(std::endian::native == std::endian::little,
              "remat::data uses little-endian token files in place: a big-endian host would need byte swapping");

namespace remat::data {

namespace {

constexpr const char* kC = "data";
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderInts = 256;
constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);
// Largest file remat tries to map: 2^47 bytes (128 TiB), the user address space of x86-64 and
// arm64 with 4-level page tables. Larger files cannot be mapped whole.
constexpr uint64_t kMaxMapBytes = uint64_t(1) << 47;
constexpr int64_t kMaxUnknown = -2;  // max_cache_ before the first max_token()

std::atomic<size_t> g_mapped_bytes{0};

std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with_bin(const std::string& path) {
  return path.size() >= 4 && lower(path.substr(path.size() - 4)) == ".bin";
}

// splitmix64 finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a readable, non-empty regular file and returns its size; `what` is its role in messages
// ("text file", "token file").
uint64_t open_or_throw(const std::string& path, const std::string& what, Fd& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw Error(kC, what + " '" + path + "' does not exist",
                  "check the --data path, or omit --data to train on the built-in corpus");
    throw Error(kC, "cannot open " + what + " '" + path + "': " + std::strerror(err),
                "check the file's permissions");
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw Error(kC, "cannot read " + what + " '" + path + "': " + std::strerror(errno), "check the file");
  if (S_ISDIR(st.st_mode))
    throw Error(kC, what + " '" + path + "' is a directory, not a file", "pass a file inside it, e.g. train.bin");
  if (!S_ISREG(st.st_mode))
    throw Error(kC, what + " '" + path + "' is not a regular file", "copy the data to a regular file first");
  if (st.st_size <= 0)
    throw Error(kC, what + " '" + path + "' is empty", "it must hold at least one window of tokens");
  return uint64_t(st.st_size);
}

// Reads exactly `bytes` at `offset`.
void pread_exact(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd, p, bytes, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw Error(kC, "reading '" + path + "' failed: " + std::strerror(errno), "check the file and the disk");
    if (r == 0)
      throw Error(kC, "reading '" + path + "' failed before its end", "was the file modified while being read?");
    p += r;
    bytes -= size_t(r);
    offset += uint64_t(r);
  }
}

}  // namespace

const char* format_name(Format f) {
  switch (f) {
    case Format::Auto: return "auto";
    case Format::Text: return "text";
    case Format::U16: return "u16";
    case Format::LlmC: return "llmc";
  }
  return "?";
}

Format parse_format(const std::string& name) {
  const std::string s = lower(name);
  if (s == "auto") return Format::Auto;
  if (s == "text") return Format::Text;
  if (s == "u16" || s == "uint16") return Format::U16;
  if (s == "llmc" || s == "llm.c") return Format::LlmC;
  throw Error(kC, "unknown data format '" + name + "'",
              "use auto (detect), text (byte-level), u16 (raw uint16 array) or llmc (llm.c token file)");
}

// ---- Storage ---------------------------------------------------------------------------------

// The bytes a dataset and its split views share: a read-only file mapping (not allocator-
// accounted) or a buffer from the accounting allocator (Category::Data).
struct TokenDataset::Storage {
  void* base = nullptr;
  size_t bytes = 0;
  bool mapped = false;
  std::string name;  // allocation name of a buffer

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (!base) return;
    if (mapped) {
      ::munmap(base, bytes);
      g_mapped_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    } else {
      Allocator::global().release(base, bytes, Category::Data, name);
    }
  }
};

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

TokenDataset TokenDataset::from_text_file(const std::string& path) { return load_file(path, Format::Text, false); }

TokenDataset TokenDataset::from_token_file(const std::string& path) { return load_file(path, Format::Auto, true); }

TokenDataset TokenDataset::load(const std::string& path, Format f) {
  if (!path.empty()) return load_file(path, f, false);
  if (f == Format::Auto || f == Format::Text) return builtin();
  throw Error(kC, std::string("data format ") + format_name(f) + " needs a file, but no data path was given",
              "pass --data FILE, or leave the format on auto to train on the built-in corpus");
}

TokenDataset TokenDataset::load_file(const std::string& path, Format f, bool token_default) {
  const bool bin = ends_with_bin(path);
  const std::string what = f == Format::Text                                                   ? "text file"
                           : (f == Format::U16 || f == Format::LlmC || bin || token_default) ? "token file"
                                                                                             : "data file";
  Fd fd;
  const uint64_t size = open_or_throw(path, what, fd);
  const std::string q = "'" + path + "'";

  // The llm.c magic is the first little-endian int32.
  int32_t first = 0;
  if (size >= sizeof first) pread_exact(fd.fd, &first, sizeof first, 0, path);
  const bool magic = size >= sizeof first && first == kLlmcMagic;
  if (f == Format::Auto) f = magic ? Format::LlmC : (bin || token_default) ? Format::U16 : Format::Text;

  // Maps the whole file read-only.
  auto map_file = [&]() -> std::shared_ptr<const Storage> {
    if (size > kMaxMapBytes || size > std::numeric_limits<size_t>::max())
      throw Error(kC, what + " " + q + " is " + with_commas(size) + " bytes, more than the " +
                          with_commas(kMaxMapBytes) + "-byte address space remat can map",
                  "split the data into smaller files");
    auto st = std::make_shared<Storage>();
    void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      if (err == ENOMEM)
        throw Error(kC, "cannot map " + what + " " + q + " (" + with_commas(size) + " bytes): " + std::strerror(err),
                    "the file is larger than the address space left to this process (see ulimit -v); split it "
                    "into smaller files");
      throw Error(kC, "cannot map " + what + " " + q + " (" + with_commas(size) + " bytes): " + std::strerror(err),
                  "token files are memory-mapped: put the file on a local file system that supports mmap");
    }
    st->base = p;
    st->bytes = size_t(size);
    st->mapped = true;
    g_mapped_bytes.fetch_add(st->bytes, std::memory_order_relaxed);
    return st;
  };

  TokenDataset d;
  switch (f) {
    case Format::Auto:  // resolved above
    case Format::Text: {
      try {
        d = from_buffer(size_t(std::min<uint64_t>(size, std::numeric_limits<size_t>::max())),
                        "text file " + q + " (byte-level, " + with_commas(size) + " tokens)", true, "data.tokens");
      } catch (const Error& e) {  // the allocator's message does not name the file
        std::string why = e.what();
        why = why.substr(0, why.find(" (hint: "));
        throw Error(kC, "text file " + q + " (" + with_commas(size) + " bytes) does not fit in memory as uint32 tokens: " +
                            why,
                    "use a smaller text file, or tokenise it into a .bin token file (memory-mapped, not copied)");
      }
      uint32_t* out = d.mutable_u32();
      std::vector<unsigned char> buf(size_t(std::min<uint64_t>(size, 1 << 16)));
      for (uint64_t i = 0; i < size;) {
        const size_t m = size_t(std::min<uint64_t>(buf.size(), size - i));
        pread_exact(fd.fd, buf.data(), m, i, path);
        std::copy(buf.begin(), buf.begin() + std::ptrdiff_t(m), out + i);
        i += m;
      }
      d.format_ = Format::Text;
      return d;
    }
    case Format::U16: {
      if (size % 2 != 0)
        throw Error(kC, what + " " + q + " has an odd byte count (" + with_commas(size) +
                            "); uint16 token files hold 2 bytes per token",
                    "was it written completely by a nanoGPT/llm.c prepare script? a text file loads with "
                    "--data-format text");
      d.store_ = map_file();
      d.data_ = d.store_->base;
      d.n_ = size_t(size / 2);
      d.width_ = sizeof(uint16_t);
      d.format_ = Format::U16;
      d.desc_ = "raw uint16 token file " + q + " (" + with_commas(d.n_) + " tokens)";
      return d;
    }
    case Format::LlmC: {
      if (!magic) {
        if (size < sizeof first)
          throw Error(kC, what + " " + q + " is not an llm.c token file: at " + with_commas(size) +
                              " bytes it is too short to hold the magic " + std::to_string(kLlmcMagic),
                      "leave the data format on auto, or load it as text (--data-format text)");
        throw Error(kC, what + " " + q + " is not an llm.c token file: it starts with " + std::to_string(first) +
                            ", not the magic " + std::to_string(kLlmcMagic),
                    "load a raw uint16 array with --data-format u16, text with --data-format text, or leave the "
                    "format on auto");
      }
      if (size < kLlmcHeaderBytes)
        throw Error(kC, "llm.c token file " + q + " has a truncated header: the file is " + with_commas(size) +
                            " bytes, shorter than the " + with_commas(kLlmcHeaderBytes) + "-byte header",
                    "the file is cut short, regenerate it; if it is a raw uint16 array that happens to start with "
                    "the llm.c magic, load it with --data-format u16");
      int32_t header[kLlmcHeaderInts];
      pread_exact(fd.fd, header, kLlmcHeaderBytes, 0, path);
      const int32_t version = header[1];
      if (version != 1 && version != 2)
        throw Error(kC, "token file " + q + " has the llm.c magic but unknown version " + std::to_string(version),
                    "remat reads llm.c version 1 (uint16 tokens, GPT-2) and version 2 (uint32 tokens, e.g. LLaMA 3)");
      const int width = version == 1 ? 2 : 4;
      const std::string v = "llm.c v" + std::to_string(version) + " token file " + q;
      const int64_t count = header[2];
      if (count < 0)
        throw Error(kC, v + ": the header's token count is negative (" + std::to_string(count) + ")",
                    "the header is corrupt; regenerate the file");
      const uint64_t want = kLlmcHeaderBytes + uint64_t(count) * uint64_t(width);
      if (want != size)
        throw Error(kC, v + ": the header says " + with_commas(uint64_t(count)) + " tokens (" + with_commas(want) +
                            " bytes: the " + with_commas(kLlmcHeaderBytes) + "-byte header + " +
                            with_commas(uint64_t(count)) + " x " + std::to_string(width) + ") but the file is " +
                            with_commas(size) + " bytes (" + with_commas(size - kLlmcHeaderBytes) +
                            " bytes follow the header)",
                    "the file is truncated or corrupt; regenerate it");
      if (count == 0)
        throw Error(kC, v + " holds zero tokens", "it must hold at least one window of tokens; regenerate it");
      d.store_ = map_file();
      d.data_ = static_cast<const unsigned char*>(d.store_->base) + kLlmcHeaderBytes;
      d.n_ = size_t(count);
      d.width_ = width;
      d.format_ = Format::LlmC;
      d.desc_ = v + " (" + with_commas(d.n_) + (width == 2 ? " uint16" : " uint32") + " tokens)";
      return d;
    }
  }
  throw Error(kC, "unknown data format " + std::to_string(int(f)), "use auto, text, u16 or llmc");
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
    throw Error(kC, "validation fraction " + fmt_g(val_fraction) + " is not between 0 and 1",
                "use e.g. --val-fraction 0.1 for a 90/10 split");
  if (T < 1) throw Error(kC, "sequence length " + std::to_string(T) + " must be positive", "e.g. --seq 128");
  const uint64_t n_val = std::min<uint64_t>(uint64_t(std::llround(double(n_) * val_fraction)), n_);
  const uint64_t n_train = n_ - n_val;
  const uint64_t need = uint64_t(T) + 1;
  for (auto [part, len] : {std::pair<const char*, uint64_t>{"training", n_train}, {"validation", n_val}})
    if (len < need)
      throw Error(kC, "splitting " + with_commas(n_) + " tokens with validation fraction " + fmt_g(val_fraction) +
                          " leaves " + with_commas(len) + " " + part + " tokens, fewer than one window of T + 1 = " +
                          std::to_string(need) + " tokens",
                  std::string("use a smaller --seq, ") +
                      (std::string(part) == "validation" ? "a larger --val-fraction, --val-data FILE" : "a smaller --val-fraction") +
                      ", or more data");
  return {view(0, size_t(n_train), desc_ + ", train split (" + with_commas(n_train) + " tokens)"),
          view(size_t(n_train), size_t(n_val), desc_ + ", val split (" + with_commas(n_val) + " tokens)")};
}

// ---- BatchSampler ----------------------------------------------------------------------------

BatchSampler::BatchSampler(const TokenDataset& ds, int64_t B, int64_t T, uint64_t seed)
    : ds_(&ds), B_(B), T_(T), windows_(0), seed_(seed) {
  if (B < 1) throw Error(kC, "batch size " + std::to_string(B) + " must be at least 1", "e.g. --batch 8");
  if (T < 1) throw Error(kC, "sequence length " + std::to_string(T) + " must be at least 1", "e.g. --seq 128");
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
  ds_->copy_window(size_t(start), size_t(T_), inputs + b * T_);
  ds_->copy_window(size_t(start) + 1, size_t(T_), targets + b * T_);
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
