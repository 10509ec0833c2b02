// The pre-tokenizers of byte-level BPE, written by hand: the text is cut into the pieces that a
// pattern matches, left to right, taking the first alternative that matches at each position.
// - GPT-2's (Radford et al. 2019):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// - LLaMA 3's (Grattafiori et al. 2024; OpenAI's cl100k_base pattern, in its tokenizer.json):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   where (?i:...) folds case as Unicode's simple case folding does (so 'ſ, U+017F, is 's).
// Invalid UTF-8 bytes count as "other" characters (what U+FFFD, their usual replacement, is), so no
// byte is dropped: the pieces always concatenate back to the text.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace remat::tok {

enum class Pretokenizer : uint8_t { Gpt2, Llama3 };
// The patterns above as Hugging Face's tokenizer.json writes them (a Split pre-tokenizer's Regex).
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;

// Calls piece(p) for each piece, in order. Pieces are views into `text`.
void gpt2_split(std::string_view text, const std::function<void(std::string_view)>& piece);
void llama3_split(std::string_view text, const std::function<void(std::string_view)>& piece);
void split(Pretokenizer p, std::string_view text, const std::function<void(std::string_view)>& piece);
// The pieces as a vector (tests).
std::vector<std::string_view> pieces(Pretokenizer p, std::string_view text);
inline std::vector<std::string_view> gpt2_pieces(std::string_view text) { return pieces(Pretokenizer::Gpt2, text); }

}  // namespace remat::tok
