#include "tokenizer/token_file.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/text.h"

namespace remat::tok {

namespace {
constexpr const char* kC = "tokenize";
constexpr int32_t kMagic = 20240520;  // llm.c's token file magic (data/dataset.cpp reads it)
constexpr int kHeaderInts = 256;

bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// One output token file: the header, patched with the count at the end, then the tokens.
class TokenWriter {
 public:
  TokenWriter(const std::string& path, int version) : w_(path), version_(version) {
    int32_t header[kHeaderInts] = {};
    w_.write(header, sizeof header);
  }
  void append(const std::vector<int32_t>& ids) {
    if (version_ == 1) {
      buf16_.resize(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) buf16_[i] = uint16_t(ids[i]);
      w_.write(buf16_.data(), buf16_.size() * 2);
    } else {
      w_.write(ids.data(), ids.size() * 4);  // ids are >= 0: the uint32 bytes are the same
    }
    count_ += ids.size();
  }
  uint64_t count() const { return count_; }
  void finish() {
    if (count_ > uint64_t(INT32_MAX))
      throw Error(kC, quote_name(w_.path()) + " would hold " + with_commas(count_) +
                          " tokens, more than an llm.c header's int32 count can say (" + with_commas(INT32_MAX) + ")",
                  "tokenize the inputs in parts, into several files");
    int32_t head[3] = {kMagic, version_, int32_t(count_)};
    w_.overwrite(0, head, sizeof head);
  }
  void commit() { w_.commit(); }

 private:
  AtomicWriter w_;
  int version_;
  uint64_t count_ = 0;
  std::vector<uint16_t> buf16_;
};

struct File {
  FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};
}  // namespace

size_t safe_cut(std::string_view s, size_t from) {
  for (size_t p = std::max<size_t>(from, 1); p < s.size(); ++p) {
    const unsigned char a = static_cast<unsigned char>(s[p - 1]);
    const bool alnum = (a >= '0' && a <= '9') || ((a | 0x20) >= 'a' && (a | 0x20) <= 'z');
    if (ascii_space(s[p]) && alnum) return p;
  }
  return std::string_view::npos;
}

namespace {
// Encodes each chunk into its own id list, on every thread; the first error is rethrown.
void encode_chunks(const Tokenizer& tok, const std::vector<std::string_view>& chunks, std::vector<std::vector<int32_t>>& ids,
                   size_t first) {
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < int64_t(chunks.size()); ++c) {
    try {
      tok.encode(chunks[size_t(c)], ids[size_t(c) + first]);
    } catch (...) {
#pragma omp critical(remat_tokenize_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}
}  // namespace

std::vector<int32_t> encode_document(const Tokenizer& tok, std::string_view text, size_t chunk_bytes) {
  const size_t chunk = chunk_bytes ? chunk_bytes : tok.chunk_bytes();
  std::vector<std::string_view> chunks;
  for (size_t pos = 0; pos < text.size();) {
    size_t next = std::string_view::npos;
    size_t cut = pos + chunk < text.size() ? tok.cut(text, pos + chunk, &next) : std::string_view::npos;
    if (cut == std::string_view::npos) cut = next = text.size();
    chunks.push_back(text.substr(pos, cut - pos));
    pos = next;
  }
  std::vector<std::vector<int32_t>> ids(chunks.size());
  encode_chunks(tok, chunks, ids, 0);
  size_t n = tok.document_start() ? 1 : 0;
  for (const auto& v : ids) n += v.size();
  std::vector<int32_t> out;
  out.reserve(n);
  if (tok.document_start()) out.push_back(*tok.document_start());
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

TokenizeResult tokenize_files(const Tokenizer& tok, const std::vector<std::string>& inputs, const std::string& out,
                              const std::string& val_out, const TokenizeOptions& opt) {
  if (inputs.empty()) throw Error(kC, "no input files", "name them with --in FILE...");
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1))
    throw Error(kC, "the validation fraction must be in [0, 1), got " + std::to_string(opt.val_fraction));
  TokenizeResult res;
  res.version = tok.vocab_size() <= 65536 ? 1 : 2;
  uint64_t total = 0;
  for (const auto& in : inputs) total += regular_file_size(in, "text file");
  const uint64_t val_start = opt.val_fraction > 0 ? uint64_t(double(total) * (1 - opt.val_fraction)) : UINT64_MAX;
  TokenWriter train(out, res.version);
  std::unique_ptr<TokenWriter> val;
  if (opt.val_fraction > 0) val = std::make_unique<TokenWriter>(val_out, res.version);

  const auto t0 = std::chrono::steady_clock::now();
  const int threads = omp_get_max_threads();
  const size_t chunk = opt.chunk_bytes ? opt.chunk_bytes : tok.chunk_bytes();
  const size_t block = chunk * size_t(std::max(4, 2 * threads));  // bytes read per batch
  uint64_t done = 0;  // input bytes encoded
  std::string pending;
  std::vector<std::string_view> chunks;
  std::vector<uint64_t> starts;  // each chunk's offset in all inputs
  std::vector<std::vector<int32_t>> ids;
  std::vector<char> buf(block);
  for (const auto& in : inputs) {
    File file;
    file.f = std::fopen(in.c_str(), "rb");
    if (!file.f) throw Error("io", "cannot open text file " + quote_name(in) + ": " + std::strerror(errno));
    bool first = true, eof = false;
    pending.clear();
    while (!eof) {
      const size_t n = std::fread(buf.data(), 1, buf.size(), file.f);
      if (n < buf.size()) {
        if (std::ferror(file.f)) throw Error("io", "error reading " + quote_name(in) + ": " + std::strerror(errno));
        eof = true;
      }
      pending.append(buf.data(), n);
      // Cut what is pending into chunks; without EOF, the part after the last cut waits for more.
      chunks.clear();
      starts.clear();
      size_t pos = 0;
      while (pos < pending.size()) {
        // A chunk also ends at the first place it may at or after the validation part's start.
        size_t target = pos + chunk;
        if (val_start > done + pos && val_start - done < target) target = size_t(val_start - done);
        size_t next = std::string_view::npos;
        size_t cut = target < pending.size() ? tok.cut(pending, target, &next) : std::string_view::npos;
        if (cut == std::string_view::npos) {
          if (!eof) break;
          cut = next = pending.size();
        }
        chunks.emplace_back(pending.data() + pos, cut - pos);
        starts.push_back(done + pos);
        pos = next;
      }
      ids.assign(chunks.size() + 1, {});
      if (first && tok.document_start()) ids[0].push_back(*tok.document_start());
      first = false;
      encode_chunks(tok, chunks, ids, 1);
      // ids[0] (a document start) goes with the first chunk's part.
      for (size_t c = 0; c <= chunks.size(); ++c) {
        const uint64_t at = c == 0 ? (chunks.empty() ? done : starts[0]) : starts[c - 1];
        (val && at >= val_start ? *val : train).append(ids[c]);
      }
      done += pos;
      pending.erase(0, pos);
      if (opt.progress)
        opt.progress({done, total, train.count() + (val ? val->count() : 0),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    }
  }
  train.finish();
  if (val) {
    if (val->count() == 0)
      throw Error(kC, "the validation part is empty: the last " + std::to_string(opt.val_fraction) +
                          " of the text holds no place where the tokenizer may cut it (such as an ASCII letter or digit before a space)",
                  "use a larger --val-fraction, or none");
    val->finish();
  }
  train.commit();
  if (val) val->commit();
  res.bytes = done;
  res.train_tokens = train.count();
  res.val_tokens = val ? val->count() : 0;
  return res;
}

}  // namespace remat::tok
