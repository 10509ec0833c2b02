// Token data for training, and a sampler that turns it into (inputs, targets) batches
// deterministically.
//
// Sources (TokenDataset::load, Format):
//  - text file: byte-level tokens (token = byte value, V = 256);
//  - raw uint16 array (nanoGPT train.bin, no header);
//  - llm.c token file: 256 little-endian int32 header (magic 20240520, version, token count), then
//    the tokens: version 1 = uint16 (GPT-2), version 2 = uint32 (LLaMA 3 and other vocabularies
//    above 65,535). Detected by the magic, whatever the file name;
//  - the built-in corpus (byte-level), compiled into the binary.
//
// Storage and memory accounting:
//  - Token files (raw uint16, llm.c v1 and v2) are memory-mapped read-only (mmap, PROT_READ,
//    MAP_PRIVATE) and used in place: nothing is copied or widened. uint16 files keep their 2-byte
//    width (width() == 2); read them through operator[] or copy_window(), which widen one token at
//    a time. Mapped bytes are NOT counted by the accounting allocator: they are file-backed page
//    cache pages, faulted in on first touch and reclaimable by the kernel, not heap memory, so no
//    Category (Data included) grows when a file is mapped. They are reported apart:
//    mapped_bytes() for one dataset's mapping, live_mapped_bytes() for the whole process.
//  - Text files, the built-in corpus and from_tokens() hold uint32 tokens (width() == 4) in a heap
//    buffer from the accounting allocator, Category::Data, name "data.tokens" (or the given name):
//    4 bytes per token.
//  - split() returns views into the same storage (mapping or buffer), sharing its ownership: no
//    copy, and either part may outlive the original. The storage is released with its last view.
//  - The mapped file must not be truncated or rewritten while a dataset maps it (reading a page
//    past the new end of file raises SIGBUS; nothing in-process can prevent that).
// Host byte order must be little-endian (checked at compile time) since files are used as-is.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/fingerprint.h"

namespace remat::data {

// Auto: "" -> the built-in corpus; a file starting with the llm.c magic -> LlmC; else a file whose
// name ends in ".bin" (any case) -> U16; else Text.
enum class Format { Auto, Text, U16, LlmC };
// "auto", "text", "u16", "llmc".
const char* format_name(Format f);
// Inverse of format_name (case-insensitive; "llm.c" is accepted too). Throws remat::Error listing
// the valid names.
Format parse_format(const std::string& name);

class TokenDataset {
 public:
  TokenDataset() = default;
  ~TokenDataset();
  TokenDataset(TokenDataset&& o) noexcept;
  TokenDataset& operator=(TokenDataset&& o) noexcept;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  // Loads `path_or_empty` in format `f` (Auto: detected, see Format). Forcing Text reads any file
  // byte-level (a .bin too); forcing U16 maps any file as raw uint16 (error on an odd byte count);
  // forcing LlmC requires the magic. "" means the built-in corpus (Auto or Text only).
  // Errors (remat::Error, one line naming the file, with a hint): missing file, directory, not a
  // regular file, empty file, odd byte count, llm.c truncated header / unknown version / negative or
  // zero token count / count disagreeing with the file size, file larger than the address space.
  static TokenDataset load(const std::string& path_or_empty, Format f = Format::Auto);
  // load(path, Format::Text).
  static TokenDataset from_text_file(const std::string& path);
  // A token file: llm.c when it starts with the magic, raw uint16 otherwise (whatever its name).
  static TokenDataset from_token_file(const std::string& path);
  // The built-in Shakespeare excerpt (byte-level), compiled into the binary.
  static TokenDataset builtin();
  // Wraps a uint32 copy of `tokens` in an accounted buffer (tests, derived datasets).
  static TokenDataset from_tokens(std::span<const uint16_t> tokens, std::string description, bool byte_level,
                                  const std::string& alloc_name = "data.tokens");
  static TokenDataset from_tokens(std::span<const uint32_t> tokens, std::string description, bool byte_level,
                                  const std::string& alloc_name = "data.tokens");

  size_t size() const { return n_; }
  // Token i (no bound check), widened to uint32 whatever the stored width.
  uint32_t operator[](size_t i) const {
    return width_ == 2 ? static_cast<const uint16_t*>(data_)[i] : static_cast<const uint32_t*>(data_)[i];
  }
  // out[k] = token (start + k) for k < n, as int32 (tokens >= 2^31 wrap: call check_vocab first).
  // Throws remat::Error when [start, start + n) is not inside the dataset.
  void copy_window(size_t start, size_t n, int32_t* out) const;
  // Bytes per stored token: 4 (uint32) or 2 (a uint16 token file mapped as-is); 0 when empty.
  int width() const { return width_; }
  // The stored tokens, without a copy. tokens() needs width() == 4 and tokens_u16() width() == 2;
  // the other one throws remat::Error (use operator[] / copy_window / to_vector for any width).
  // Both are empty for an empty dataset.
  std::span<const uint32_t> tokens() const;
  std::span<const uint16_t> tokens_u16() const;
  // A uint32 copy of all tokens (tests, small data).
  std::vector<uint32_t> to_vector() const;
  // The stored tokens' content fingerprint (one pass, which faults in a mapped file): what a
  // checkpoint records of its data, so that a resume notices changed data but not a moved file.
  Fingerprint fingerprint() const;

  // Largest token id present (-1 when empty). Computed on first call (one pass over the tokens,
  // which faults in a mapped file), then cached. Thread-safe.
  int64_t max_token() const;
  // Throws remat::Error("data", "the data holds token X but the vocabulary is V (...)",
  // "use --vocab X+1 or more ...") when max_token() >= V.
  void check_vocab(int64_t V) const;

  // True for byte-level data (text files, the built-in corpus): V = 256, decode with decode_bytes.
  bool byte_level() const { return byte_level_; }
  // What was loaded: Text (text files and the built-in corpus), U16, LlmC; Auto for from_tokens()
  // and an empty (default or moved-from) dataset. Split parts keep their parent's format.
  Format format() const { return format_; }
  // e.g. "llm.c v2 token file 'x.bin' (1,234 uint32 tokens)",
  // "built-in corpus (shakespeare excerpt, 200,000 tokens)".
  const std::string& description() const { return desc_; }

  // True when the tokens live in a read-only file mapping.
  bool mapped() const;
  // Size of the whole file mapping this dataset views (shared with its split parts; 0 when not
  // mapped). Not allocator-accounted, see the header comment.
  size_t mapped_bytes() const;
  // Bytes of the accounted Category::Data buffer this dataset views (shared with its split parts;
  // 0 when mapped).
  size_t buffer_bytes() const;
  // Bytes of all live token-file mappings in the process.
  static size_t live_mapped_bytes();

  // Contiguous split into (train, val); val is the last round(size * val_fraction) tokens. Both are
  // views into this dataset's storage (no copy). Throws if either part is shorter than one window
  // of T + 1 tokens.
  std::pair<TokenDataset, TokenDataset> split(double val_fraction, int64_t T) const;

 private:
  struct Storage;  // a read-only file mapping or an accounted buffer (dataset_storage.h)
  // load() of a file; with token_default, Auto without the magic means U16 whatever the name.
  static TokenDataset load_file(const std::string& path, Format f, bool token_default);
  static TokenDataset from_buffer(size_t n, std::string description, bool byte_level, const std::string& alloc_name);
  uint32_t* mutable_u32();  // the buffer being filled by a from_* factory
  TokenDataset view(size_t start, size_t n, std::string description) const;

  std::shared_ptr<const Storage> store_;
  const void* data_ = nullptr;  // first token, inside store_
  size_t n_ = 0;
  int width_ = 0;
  bool byte_level_ = false;
  Format format_ = Format::Auto;
  std::string desc_;
  mutable std::atomic<int64_t> max_cache_{-2};  // -2: not computed yet
};

// Batches of B windows of T + 1 tokens: inputs = window[0..T), targets = window[1..T]. Holds a
// reference to the dataset, which must outlive it. Reads tokens through copy_window(), so it works
// on uint16 and uint32 storage alike.
class BatchSampler {
 public:
  // Throws if the dataset is shorter than T + 1 tokens.
  BatchSampler(const TokenDataset& ds, int64_t B, int64_t T, uint64_t seed);

  // Random windows; the start of row b is a pure function of (seed, step, b). inputs and targets
  // hold B * T int32 each.
  void sample(uint64_t step, int32_t* inputs, int32_t* targets) const;
  // Evaluation batch `index`: row b is window (index * B + b) mod num_windows(), where window w
  // starts at w * T, so consecutive windows tile the data (wrapping at the end).
  void sequential(uint64_t index, int32_t* inputs, int32_t* targets) const;
  // Number of full windows in the dataset, and of sequential batches needed to cover them all.
  int64_t num_windows() const { return windows_; }
  int64_t num_sequential_batches() const { return (windows_ + B_ - 1) / B_; }
  // Start of row b in sample(step) (exposed for tests).
  uint64_t window_start(uint64_t step, int64_t b) const;

  int64_t B() const { return B_; }
  int64_t T() const { return T_; }

 private:
  void fill_row(uint64_t start, int64_t b, int32_t* inputs, int32_t* targets) const;
  const TokenDataset* ds_;
  int64_t B_, T_, windows_;
  uint64_t seed_;
};

// Text of byte-level tokens; bytes other than printable ASCII, '\n' and '\t' become '?'.
std::string decode_bytes(std::span<const int32_t> tokens);

// The built-in corpus text (defined in builtin_corpus.cpp).
std::string builtin_corpus_text();

}  // namespace remat::data
