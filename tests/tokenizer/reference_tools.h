// Helpers for the tokenizer tests that compare against reference implementations run as child
// processes (node for GPT-2 and LLaMA 3, python3 for SentencePiece): a shell command's exit status
// and output, an npm package installed for the tests, and the texts every comparison uses.
#pragma once
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace remat_tok_test {

namespace fs = std::filesystem;

struct Ran {
  int status = -1;
  std::string out;  // stdout and stderr
};
inline Ran run(const std::string& cmd) {
  Ran r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// This folder (tests/tokenizer). The compiler names the file relative to the build folder, where
// `remat` is built, when it runs there (as Ninja does).
inline fs::path source_dir() {
  const fs::path f(__FILE__);
  return (f.is_absolute() ? f : fs::path(REMAT_BINARY).parent_path() / f).parent_path();
}

// The folder holding node_modules/<package> (installed with npm into <build>/npm-ref/<package> on first use,
// from npm's cache when it has it), when `marker` (a path under node_modules) exists after; or ""
// with the reason, naming what to install, in `why`.
inline fs::path npm_reference(const std::string& package_at_version, const std::string& marker, std::string& why) {
  if (run("node --version").status != 0) {
    why = "node is not installed (Debian: apt-get install nodejs npm)";
    return {};
  }
  // A folder per package: npm install prunes what the folder's package.json does not name.
  const fs::path dir = fs::path(REMAT_BINARY).parent_path() / "npm-ref" / package_at_version.substr(0, package_at_version.rfind('@'));
  if (fs::exists(dir / "node_modules" / marker)) return dir;
  if (run("npm --version").status != 0) {
    why = "npm is not installed (Debian: apt-get install npm), needed for the npm package " + package_at_version;
    return {};
  }
  fs::create_directories(dir);
  // ctest runs these tests in parallel: one npm install at a time (flock), a no-op after the first.
  const Ran r = run("cd '" + dir.string() + "' && flock install.lock timeout 300 npm install --prefer-offline --no-audit --no-fund --no-save " +
                    package_at_version);
  if (r.status != 0 || !fs::exists(dir / "node_modules" / marker)) {
    why = "npm install " + package_at_version + " failed (no registry or cache?): " + r.out.substr(0, 300);
    return {};
  }
  return dir;
}

// The ids a node reference script gives for each text (one node run for all): `node <script>
// <args...> <texts.json> <ids.json>`, through files named by `tag` in `dir`.
inline std::vector<std::vector<int32_t>> node_ids(const std::string& script_and_args, const fs::path& dir,
                                                  const std::string& tag, const std::vector<std::string>& texts,
                                                  std::string& error) {
  const fs::path in = dir / (tag + ".texts.json"), out = dir / (tag + ".ids.json");
  std::ofstream(in) << nlohmann::json(texts).dump();
  const Ran r = run("node " + script_and_args + " '" + in.string() + "' '" + out.string() + "'");
  std::vector<std::vector<int32_t>> ids;
  if (r.status != 0) error = r.out;
  else ids = nlohmann::json::parse(slurp(out)).get<std::vector<std::vector<int32_t>>>();
  fs::remove(in);
  fs::remove(out);
  return ids;
}

// Compares `tok`'s ids for each text with `want`'s, showing the first five that differ, and checks
// that decoding gives each text back. Returns the number that differ.
inline int compare_ids(const remat::tok::Tokenizer& tok, const std::vector<std::string>& texts,
                       const std::vector<std::vector<int32_t>>& want, std::vector<std::string>* report) {
  int differ = 0;
  for (size_t i = 0; i < texts.size() && i < want.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(texts[i]);
    if (got != want[i] && differ++ < 5)
      report->push_back("text " + std::to_string(i) + " " + nlohmann::json(texts[i]).dump() + ": " + std::to_string(got.size()) +
                        " ids vs the reference's " + std::to_string(want[i].size()) + "\nremat: " +
                        nlohmann::json(got).dump().substr(0, 400) + "\nref:   " + nlohmann::json(want[i]).dump().substr(0, 400));
    if (tok.decode(got) != texts[i]) report->push_back("text " + std::to_string(i) + " does not decode to itself");
  }
  return differ;
}

// Byte-level BPE encodes every byte, invalid UTF-8 too (which no JavaScript reference can be asked
// about: its strings cannot hold it), and decoding gives the bytes back: the texts that do not
// round-trip (none).
inline std::vector<std::string> invalid_utf8_not_round_tripped(const remat::tok::Tokenizer& tok, const std::string& hostile) {
  std::vector<std::string> bad;
  for (std::string s : {std::string("ab\xff\xfe cd\xc3 \xe2\x82\n"), std::string("\x80\x80\x80 x"),
                        hostile + "\xed\xa0\x80\xc0\xaf"})
    if (tok.decode(tok.encode(s)) != s) bad.push_back(s);
  return bad;
}

// The built-in corpus's text (src/data/corpus), read from the source tree.
inline std::string corpus_text() {
  return slurp(source_dir() / ".." / ".." / "src" / "data" / "corpus" / "shakespeare_excerpt.txt");
}

inline void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) s += char(cp);
  else if (cp < 0x800) s += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  else if (cp < 0x10000) s += {char(0xE0 | (cp >> 12)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
  else
    s += {char(0xF0 | (cp >> 18)), char(0x80 | ((cp >> 12) & 0x3F)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
}

// Valid UTF-8 that stresses a tokenizer: mixed scripts, emoji (with ZWJ sequences and skin tones),
// combining marks, control characters, long runs of spaces, newlines and digits, contractions.
inline std::string hostile_text() {
  std::string s =
      "Hello, World! It's we'll THEY'RE 'tis ''s '''\n"
      "Ελληνικά русский 日本語の文章 한국어 العربية हिन्दी ไทย עברית\n"
      "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✔︎\n"
      "combining: e\u0301 a\u0308\u0323 Z\u0351\u0352\u0353\u0354 \u0915\u093F\n"
      "controls: \x01\x02\x07\x1b[31mred\x1b[0m \x7f \u200b\u200d\u2028\u2029\u00a0\u3000\n"
      "numbers: 1234567890123456789 ٣٤٥ १२३ ５６７ ⅠⅡⅢ ½ ² 3.14159 1e-10 0x7fff\n"
      "tabs\t\t\tand\r\nwindows\r\n   \n\n\n";
  s += std::string(300, ' ') + "x" + std::string(1000, '9') + " " + std::string(200, '\n') + "end" +
       std::string(50, '\t') + "!!!???..." + std::string(100, ' ');
  return s;
}

// `count` random valid UTF-8 strings (fixed seed). Code points come from long-assigned blocks only,
// so that a reference built on a newer Unicode version than Debian's unicode-data classes them alike;
// U+0085 and U+FEFF are left out because JavaScript's \s differs from the White_Space property
// that GPT-2's pattern meant (Python's `regex`) on exactly those two.
inline std::vector<std::string> random_texts(int count, uint32_t seed = 20240520) {
  static const std::vector<std::pair<uint32_t, uint32_t>> pools = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x20, 0x7E},    {'0', '9'},       {' ', ' '},      {'\n', '\n'},
      {0x01, 0x1F},     {0xA0, 0xFF},     {0x100, 0x17F},  {0x370, 0x3FF},   {0x400, 0x4FF},  {0x5D0, 0x5EA},
      {0x620, 0x64A},   {0x660, 0x669},   {0x900, 0x97F},  {0x300, 0x36F},   {0x2000, 0x206F}, {0x2160, 0x2188},
      {0x3000, 0x3003}, {0x3041, 0x3096}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0xFF10, 0xFF5A}, {0x1F300, 0x1F64F},
      {0x1F900, 0x1F9FF}};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string s;
    const int len = int(rng() % 40);
    for (int k = 0; k < len; ++k) {
      const auto [lo, hi] = pools[rng() % pools.size()];
      const uint32_t cp = lo + rng() % (hi - lo + 1);
      if (cp == 0x85 || cp == 0xFEFF) continue;
      if (rng() % 8 == 0) s += std::string(1 + rng() % 6, rng() % 2 ? ' ' : '\'');
      put_utf8(s, cp);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace remat_tok_test
