// Text files to llm.c token files (the format data/dataset.h reads): a 256-int32 header (magic
// 20240520, version, token count), then the tokens, uint16 (version 1) for vocabularies up to
// 65,536 ids and uint32 (version 2) above.
//
// Streaming: each input is read in blocks and cut into chunks of about `chunk_bytes`, where the
// tokenizer says (Tokenizer::cut) the chunks' ids are those of the whole file:
// - byte-level BPE: where an ASCII letter or digit is followed by an ASCII white-space byte
//   (safe_cut). Neither GPT-2's pattern nor LLaMA 3's makes a piece across such a place (LLaMA 3's
//   joins punctuation to the newlines after it, so a cut after punctuation would not do), and both
//   look only forward.
// - SentencePiece with its usual settings (a dummy prefix, pieces split at white space): at a single
//   space between ASCII letters or digits, which the next chunk's dummy prefix stands for.
// A stretch without such a place is held whole.
// Chunks are encoded in parallel (OpenMP) and written in order: the output is byte-identical at any
// thread count. Each input is one document, starting with document_start() when the tokenizer has
// one (as llm.c's preparation scripts do). Outputs are written atomically (core/atomic_file.h):
// on any error, nothing is left half-written.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace remat::tok {

// The first position p >= from where a chunk may end (s[p-1] an ASCII letter or digit, s[p] ASCII space),
// or std::string_view::npos.
size_t safe_cut(std::string_view s, size_t from);

// The ids `remat tokenize` writes for one input file holding `text`: the document start (when the
// tokenizer has one), then the text's ids, encoded in chunks of about `chunk_bytes` cut by safe_cut,
// on every OpenMP thread. The same ids at any thread count (train reads text files this way).
std::vector<int32_t> encode_document(const Tokenizer& tok, std::string_view text, size_t chunk_bytes = 0);

struct TokenizeProgress {
  uint64_t bytes_done, bytes_total, tokens;
  double seconds;
};

struct TokenizeOptions {
  // The last fraction of the input bytes (at a chunk boundary) goes to val_out instead of out.
  double val_fraction = 0;
  size_t chunk_bytes = 0;  // 0: the tokenizer's own (Tokenizer::chunk_bytes())
  // Called after each batch of chunks is written.
  std::function<void(const TokenizeProgress&)> progress;
};

struct TokenizeResult {
  uint64_t bytes = 0, train_tokens = 0, val_tokens = 0;
  int version = 0;  // llm.c token file version written
};

// Tokenizes `inputs` into `out` (and, with val_fraction > 0, `val_out`). Throws remat::Error for a
// missing or unreadable input, a read error, or more tokens than the header's int32 count holds.
TokenizeResult tokenize_files(const Tokenizer& tok, const std::vector<std::string>& inputs, const std::string& out,
                              const std::string& val_out, const TokenizeOptions& opt);

}  // namespace remat::tok
