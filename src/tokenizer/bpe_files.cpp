// Reading byte-level BPE files: Hugging Face's tokenizer.json, and vocab.json + merges.txt (GPT-2's
// encoder.json + vocab.bpe are the same two files under their original names).
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "tokenizer/byte_bpe.h"

namespace remat::tok {

namespace {
constexpr const char* kC = "tokenizer";
using nlohmann::json;

json parse_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(kC, quote_name(path) + " is not valid JSON (" + printable(e.what(), 120, true) + ")",
                "is the file complete? download it again");
  }
}

void read_vocab(const json& v, const std::string& where, BpeSpec& spec) {
  if (!v.is_object()) throw Error(kC, where + ": the vocabulary is not a JSON object of token: id");
  spec.vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer())
      throw Error(kC, where + ": token " + quote_name(it.key()) + " has id " + printable(it.value().dump(), 40) +
                          ", not an integer");
    spec.vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
}

// A merge "a b" (the two tokens, split at the one space: byte-level tokens hold no space).
std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& where, size_t n) {
  const size_t sp = line.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
    throw Error(kC, where + ": merge " + std::to_string(n) + " " + quote_name(line) + " is not two tokens apart by one space");
  return {line.substr(0, sp), line.substr(sp + 1)};
}
// The pre-tokenizer: GPT-2's (ByteLevel with its own pattern), or a Split on a known pattern
// followed by ByteLevel without one (LLaMA 3's); never a prefix space.
Pretokenizer read_pretokenizer(const json& pre, const std::string& where) {
  const auto byte_level = [](const json& p, bool regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == regex &&
           !p.value("add_prefix_space", false);
  };
  if (byte_level(pre, true)) return Pretokenizer::Gpt2;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2 && byte_level(pre["pretokenizers"][1], false)) {
    const json& sp = pre["pretokenizers"][0];
    const json pattern = sp.is_object() && sp.contains("pattern") && sp["pattern"].is_object() ? sp["pattern"].value("Regex", json())
                                                                                              : json();
    if (sp.value("type", "") == "Split" && sp.value("behavior", "") == "Isolated" && !sp.value("invert", false) &&
        pattern.is_string()) {
      if (pattern.get<std::string>() == kLlama3Pattern) return Pretokenizer::Llama3;
      if (pattern.get<std::string>() == kGpt2Pattern) return Pretokenizer::Gpt2;
      throw Error(kC, where + ": the pre-tokenizer's pattern " + quote_name(printable(pattern.get<std::string>(), 120)) + " is not one remat knows",
                  "remat reads byte-level BPE with GPT-2's or LLaMA 3's pattern");
    }
  }
  throw Error(kC, where + ": pre-tokenizer " + printable(pre.dump(), 100) + " is not supported",
              "remat reads GPT-2's ByteLevel pre-tokenizer, and LLaMA 3's Split pattern followed by ByteLevel, "
              "without a prefix space");
}
}  // namespace

BpeSpec read_tokenizer_json(const std::string& path) {
  const json j = parse_json(path);
  const std::string where = quote_name(path);
  BpeSpec spec;
  spec.source = path;
  try {
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
      throw Error(kC, where + " has no \"model\" object", "is this a Hugging Face tokenizer.json?");
    const json& m = j["model"];
    const std::string type = m.value("type", "");
    if (type != "BPE")
      throw Error(kC, where + " holds a " + (type.empty() ? "model without a type" : printable(type, 40) + " model") +
                          "; remat reads byte-level BPE tokenizer.json files",
                  "for a SentencePiece model give its tokenizer.model");
    if (m.value("byte_fallback", false) || (m.contains("continuing_subword_prefix") && !m["continuing_subword_prefix"].is_null()) ||
        (m.contains("end_of_word_suffix") && !m["end_of_word_suffix"].is_null()))
      throw Error(kC, where + ": a BPE model with byte fallback or word prefixes/suffixes is not byte-level BPE",
                  "remat reads byte-level BPE (GPT-2 style) tokenizer.json files");
    spec.pre = read_pretokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), where);
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      throw Error(kC, where + ": normalizer " + printable(j["normalizer"].dump(), 100) + " is not supported",
                  "remat reads byte-level BPE without a normalizer, as GPT-2's");
    spec.ignore_merges = m.value("ignore_merges", false);
    if (!m.contains("vocab")) throw Error(kC, where + " has no model.vocab");
    read_vocab(m["vocab"], where, spec);
    const json& merges = m.contains("merges") ? m["merges"] : json::array();
    if (!merges.is_array()) throw Error(kC, where + ": model.merges is not a list");
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& e = merges[i];
      if (e.is_string()) spec.merges.push_back(split_merge(e.get<std::string>(), where, i + 1));
      else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
        spec.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      else
        throw Error(kC, where + ": merge " + std::to_string(i + 1) + " " + printable(e.dump(), 60) +
                            " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      const json& added = j["added_tokens"];
      if (!added.is_array()) throw Error(kC, where + ": added_tokens is not a list");
      for (const json& a : added) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string())
          throw Error(kC, where + ": added token " + printable(a.dump(), 60) + " lacks an integer id or a content");
        spec.added.push_back({a["content"].get<std::string>(), a["id"].get<int64_t>(), a.value("special", false)});
      }
    }
  } catch (const json::exception& e) {  // a field of the wrong type
    throw Error(kC, where + " is malformed (" + printable(e.what(), 120, true) + ")", "is this a Hugging Face tokenizer.json?");
  }
  return spec;
}

BpeSpec read_vocab_merges(const std::string& vocab_path, const std::string& merges_path) {
  BpeSpec spec;
  spec.source = vocab_path;
  read_vocab(parse_json(vocab_path), quote_name(vocab_path), spec);
  const std::string text = read_file(merges_path);
  const std::string where = quote_name(merges_path);
  size_t n = 0;
  for (size_t i = 0; i < text.size();) {
    size_t e = text.find('\n', i);
    if (e == std::string::npos) e = text.size();
    std::string line = text.substr(i, e - i);
    i = e + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 0 && spec.merges.empty() && line.starts_with("#version"))) continue;
    spec.merges.push_back(split_merge(line, where, ++n));
  }
  // GPT-2's <|endoftext|> is in its vocabulary; mark it as the added token it is.
  for (const auto& [s, id] : spec.vocab)
    if (s == "<|endoftext|>") spec.added.push_back({s, id, true});
  return spec;
}

}  // namespace remat::tok
