// GPT-2's pre-tokenizer (Radford et al. 2019), written by hand: the text is cut into the pieces
// that its pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches, left to right, taking the first alternative that matches at each position. Invalid
// UTF-8 bytes count as "other" characters (what U+FFFD, their usual replacement, is), so no byte is
// dropped: the pieces always concatenate back to the text.
#pragma once
#include <functional>
#include <string_view>
#include <vector>

namespace remat::tok {

// Calls piece(p) for each piece, in order. Pieces are views into `text`.
void gpt2_split(std::string_view text, const std::function<void(std::string_view)>& piece);
// The pieces as a vector (tests).
std::vector<std::string_view> gpt2_pieces(std::string_view text);

}  // namespace remat::tok
