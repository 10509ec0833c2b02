#include "tokenizer/byte_bpe.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>
#include <queue>

#include "core/error.h"
#include "core/text.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode_classes.h"

namespace remat::tok {

namespace {
constexpr const char* kC = "tokenizer";

// The inverse of byte_to_char for code points up to 0x143; -1 for others.
int char_to_byte(uint32_t cp) {
  static const std::array<int, 0x144> table = [] {
    std::array<int, 0x144> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char(uint8_t(b))] = b;
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// A vocabulary string (byte-to-character mapped) as raw bytes; false when a character is not one.
bool unmap(const std::string& s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode_utf8(s, i);
    const int b = d.cp == kInvalid ? -1 : char_to_byte(d.cp);
    if (b < 0) return false;
    out += char(b);
    i += d.len;
  }
  return true;
}

}  // namespace

uint32_t byte_to_char(uint8_t b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 take 256, 257, ... in byte order.
  const auto printable = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE); };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (int x = 0; x < b; ++x) n += !printable(x);
  return 256 + n;
}

namespace {
constexpr uint64_t kUsed = uint64_t(1) << 63;  // ids are below 2^31: the pair's key never has this bit
uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
size_t table_size(size_t entries) { return std::bit_ceil(std::max<size_t>(2 * entries, 16)); }
}  // namespace

ByteBpe::ByteBpe(const BpeSpec& spec) : source_(spec.source), ignore_merges_(spec.ignore_merges), pre_(spec.pre) {
  const std::string src = quote_name(spec.source);
  int64_t max_id = -1;
  for (const auto& [s, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const auto& a : spec.added) max_id = std::max(max_id, a.id);
  if (max_id < 0) throw Error(kC, src + " has an empty vocabulary", "is this a tokenizer file?");
  if (max_id >= INT32_MAX)
    throw Error(kC, src + " has token id " + std::to_string(max_id) + ", too large for an int32 id");
  // Checked and gathered in std containers first (freed when the constructor returns), then laid
  // out flat in the accounting allocator.
  const size_t n = size_t(max_id) + 1;
  std::vector<std::string> bytes(n);
  std::vector<bool> present(n, false);
  std::unordered_map<std::string, int32_t> by_string;  // vocabulary string (mapped form) -> id
  std::string raw;
  for (const auto& [s, id] : spec.vocab) {
    if (id < 0) throw Error(kC, src + ": token " + quote_name(s) + " has negative id " + std::to_string(id));
    if (present[size_t(id)])
      throw Error(kC, src + ": id " + std::to_string(id) + " is given to two tokens (" + quote_name(s) + " and " +
                          quote_name(bytes[size_t(id)]) + ")", "the vocabulary is corrupt");
    bool is_added = false;
    for (const auto& a : spec.added) is_added |= a.id == id;
    if (!unmap(s, raw)) {
      if (!is_added)
        throw Error(kC, src + ": token " + quote_name(s) + " (id " + std::to_string(id) +
                            ") is not byte-level (a character outside GPT-2's byte-to-character map)",
                    "remat reads byte-level BPE vocabularies (GPT-2, LLaMA 3); for SentencePiece give tokenizer.model");
      raw = s;
    }
    bytes[size_t(id)] = raw;
    present[size_t(id)] = true;
    by_string.emplace(s, int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    const uint32_t cp = byte_to_char(uint8_t(b));
    if (cp < 0x80) ch = char(cp);
    else ch = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    auto it = by_string.find(ch);
    if (it == by_string.end())
      throw Error(kC, src + ": the vocabulary has no token for byte " + std::to_string(b) + " (" + quote_name(ch) + ")",
                  "a byte-level vocabulary holds all 256 bytes");
    byte_id_[size_t(b)] = it->second;
  }
  std::vector<Merge> merges;
  merges.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    const auto ia = by_string.find(a), ib = by_string.find(b), iab = by_string.find(a + b);
    const std::string what = src + ": merge " + std::to_string(r + 1) + " (" + quote_name(a) + " " + quote_name(b) + ")";
    if (ia == by_string.end() || ib == by_string.end())
      throw Error(kC, what + " names the unknown token " + quote_name(ia == by_string.end() ? a : b),
                  "the merges do not belong to this vocabulary");
    if (iab == by_string.end())
      throw Error(kC, what + " makes " + quote_name(a + b) + ", which is not in the vocabulary",
                  "the merges do not belong to this vocabulary");
    merges.push_back({kUsed | (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second), int32_t(r), iab->second});
  }
  std::vector<std::pair<std::string, int32_t>> added;
  for (const auto& a : spec.added) {
    if (a.content.empty()) throw Error(kC, src + ": added token " + std::to_string(a.id) + " is empty");
    if (!present[size_t(a.id)]) {
      bytes[size_t(a.id)] = a.content;
      present[size_t(a.id)] = true;
    }
    added.emplace_back(a.content, int32_t(a.id));
    added_first_[uint8_t(a.content[0])] = true;
    // A document's first token in llm.c's token files: GPT-2's end of text, LLaMA 3's beginning.
    if (a.content == "<|endoftext|>" || a.content == "<|begin_of_text|>") eot_ = int32_t(a.id);
  }
  std::stable_sort(added.begin(), added.end(), [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  size_t total = 0;
  for (const auto& b : bytes) total += b.size();
  if (total >= UINT32_MAX) throw Error(kC, src + "'s tokens hold more than 4 GiB of text");
  text_ = AccountedArray<char>(total, Category::Data, "tokenizer.vocab");
  offset_ = AccountedArray<uint32_t>(n + 1, Category::Data, "tokenizer.vocab");
  present_ = AccountedArray<uint8_t>(n, Category::Data, "tokenizer.vocab");
  for (size_t id = 0, at = 0; id < n; ++id) {
    offset_[id] = uint32_t(at);
    std::memcpy(text_.data() + at, bytes[id].data(), bytes[id].size());
    at += bytes[id].size();
    offset_[id + 1] = uint32_t(at);
    present_[id] = present[id];
  }
  merges_ = AccountedArray<Merge>(table_size(merges.size()), Category::Data, "tokenizer.merges");
  for (const Merge& m : merges) {
    const size_t mask = merges_.size() - 1;
    size_t i = mix(m.key) & mask;
    while (merges_[i].key != 0 && merges_[i].key != m.key) i = (i + 1) & mask;
    if (merges_[i].key == 0) merges_[i] = m;  // a repeated pair: the first rank wins
  }
  if (ignore_merges_) {
    whole_ = AccountedArray<int32_t>(table_size(spec.vocab.size()), Category::Data, "tokenizer.whole");
    for (const auto& [s, id] : spec.vocab) {
      const std::string_view t = token(int32_t(id));
      const size_t mask = whole_.size() - 1;
      size_t i = std::hash<std::string_view>{}(t) & mask;
      while (whole_[i] != 0 && token(whole_[i] - 1) != t) i = (i + 1) & mask;
      if (whole_[i] == 0) whole_[i] = int32_t(id) + 1;
    }
  }
  size_t added_total = 0;
  for (const auto& a : added) added_total += a.first.size();
  added_text_ = AccountedArray<char>(added_total, Category::Data, "tokenizer.added");
  added_off_ = AccountedArray<uint32_t>(added.size() + 1, Category::Data, "tokenizer.added");
  added_id_ = AccountedArray<int32_t>(added.size(), Category::Data, "tokenizer.added");
  for (size_t k = 0, at = 0; k < added.size(); ++k) {
    added_off_[k] = uint32_t(at);
    std::memcpy(added_text_.data() + at, added[k].first.data(), added[k].first.size());
    at += added[k].first.size();
    added_off_[k + 1] = uint32_t(at);
    added_id_[k] = added[k].second;
  }
}

size_t ByteBpe::table_bytes() const {
  return text_.size() + offset_.size() * sizeof(uint32_t) + present_.size() + merges_.size() * sizeof(Merge) +
         whole_.size() * sizeof(int32_t) + added_text_.size() + added_off_.size() * sizeof(uint32_t) +
         added_id_.size() * sizeof(int32_t);
}

const ByteBpe::Merge* ByteBpe::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = kUsed | (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  const size_t mask = merges_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (merges_[i].key == key) return &merges_[i];
    if (merges_[i].key == 0) return nullptr;
  }
}

int32_t ByteBpe::find_whole(std::string_view bytes) const {
  const size_t mask = whole_.size() - 1;
  for (size_t i = std::hash<std::string_view>{}(bytes) & mask;; i = (i + 1) & mask) {
    if (whole_[i] == 0) return -1;
    if (token(whole_[i] - 1) == bytes) return whole_[i] - 1;
  }
}

std::string ByteBpe::name() const {
  return "byte-level BPE " + quote_name(source_) + " (" + with_commas(uint64_t(vocab_size())) + " tokens)";
}

void ByteBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t id = find_whole(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_id_[uint8_t(piece[0])]);
    return;
  }
  // A linked list of symbols and a heap of candidate merges, lowest rank (then leftmost) first; an
  // entry is stale when its symbols changed since it was pushed. With each token's merges ranked
  // after the merge that made it (as BPE training writes them), this merges exactly as GPT-2's
  // reference loop does: the lowest-ranked pair everywhere, left to right, then the next.
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  std::vector<Sym> sym(n);
  for (size_t i = 0; i < n; ++i) sym[i] = {byte_id_[uint8_t(piece[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1};
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  const auto push = [&](int32_t pos) {
    if (pos < 0 || sym[size_t(pos)].next < 0) return;
    const int32_t l = sym[size_t(pos)].id, r = sym[size_t(sym[size_t(pos)].next)].id;
    if (const Merge* m = find_merge(l, r)) heap.push({m->rank, pos, l, r});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& s = sym[size_t(c.pos)];
    if (s.id != c.left || s.next < 0 || sym[size_t(s.next)].id != c.right) continue;  // stale
    const int32_t gone = s.next;
    s.id = find_merge(c.left, c.right)->id;
    s.next = sym[size_t(gone)].next;
    if (s.next >= 0) sym[size_t(s.next)].prev = c.pos;
    sym[size_t(gone)].id = -1;  // dead: no stale entry can match it
    push(s.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

void ByteBpe::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  // Words repeat: each call keeps the ids of the pieces it has seen (views into `text`, so the
  // cache lives no longer than the call and needs no lock), up to a bound on its size.
  constexpr size_t kMaxCached = 1 << 16;
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> seen;  // piece -> [begin, end) in `out`
  split(pre_, text, [&](std::string_view p) {
    if (p.size() == 1) {
      out.push_back(byte_id_[uint8_t(p[0])]);
      return;
    }
    auto it = seen.find(p);
    if (it != seen.end()) {
      const auto [b, e] = it->second;
      for (uint32_t k = b; k < e; ++k) out.push_back(out[k]);
      return;
    }
    const size_t b = out.size();
    encode_piece(p, out);
    if (seen.size() < kMaxCached && out.size() < UINT32_MAX) seen.emplace(p, std::make_pair(uint32_t(b), uint32_t(out.size())));
  });
}

void ByteBpe::encode(std::string_view text, std::vector<int32_t>& out) const {
  size_t done = 0;
  if (added_id_.size() > 0) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!added_first_[uint8_t(text[i])]) continue;
      for (size_t k = 0; k < added_id_.size(); ++k) {
        const std::string_view content(added_text_.data() + added_off_[k], added_off_[k + 1] - added_off_[k]);
        if (text.substr(i).starts_with(content)) {
          encode_ordinary(text.substr(done, i - done), out);
          out.push_back(added_id_[k]);
          done = i + content.size();
          i = done - 1;
          break;
        }
      }
    }
  }
  encode_ordinary(text.substr(done), out);
}

std::string ByteBpe::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id, vocab_size(), name());
    if (!present_[size_t(id)])
      throw Error(kC, "token id " + std::to_string(id) + " is not in the vocabulary of " + name(),
                  "the ids were made by another tokenizer");
    out += token(id);
  }
  return out;
}

}  // namespace remat::tok
