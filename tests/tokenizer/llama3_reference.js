// The reference side of tests/tokenizer/test_llama3_reference.cpp: LLaMA 3's tokenizer is OpenAI's
// tiktoken BPE with the cl100k_base pre-tokenizer pattern (Grattafiori et al. 2024). The npm package
// js-tiktoken ships cl100k_base's ranks and encoder; this script
//   build <folder holding node_modules> <tokenizer.json>
//     writes those ranks as a Hugging Face tokenizer.json laid out as LLaMA 3's is: a Split
//     pre-tokenizer on LLaMA 3's pattern, then ByteLevel; ignore_merges; merges derived from the
//     ranks the way Hugging Face converts tiktoken files (each token's merge is the last step of
//     running BPE on its own bytes with the lower ranks); the special tokens as added tokens.
//   encode <folder holding node_modules> <texts.json> <ids.json>
//     writes js-tiktoken's ids for each text (special tokens in the text are tokens).
const path = require('path');
const fs = require('fs');
const mod = (p) => require(path.join(process.argv[3], 'node_modules', p));
const { Tiktoken } = mod('js-tiktoken/dist/lite.cjs');
const ranks = mod('js-tiktoken/dist/ranks/cl100k_base.cjs');

// The pattern as LLaMA 3's tokenizer.json writes it.
const LLAMA3 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// JavaScript has no (?i:...) group: the same contractions with their case folded by hand, as
// Unicode's simple case folding does it for Rust's regex and Oniguruma (U+017F, long s, is s).
const JS_PATTERN = LLAMA3.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "('[sS\\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");

function byteToChar() {  // GPT-2's bytes_to_unicode
  const printable = (x) => (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae;
  const out = [];
  let n = 0;
  for (let b = 0; b < 256; ++b) out.push(printable(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++));
  return out;
}

function build(outPath) {
  const enc = new Tiktoken(ranks);
  const b2c = byteToChar();
  const str = (bytes) => Array.from(bytes, (b) => b2c[b]).join('');
  const key = (bytes) => String.fromCharCode(...bytes);
  const rankOf = new Map();
  for (const [rank, bytes] of enc.textMap) rankOf.set(key(bytes), rank);
  const vocab = {};
  const merges = [];
  const n = enc.textMap.size;
  for (let r = 0; r < n; ++r) {
    const bytes = enc.textMap.get(r);
    vocab[str(bytes)] = r;
    if (bytes.length < 2) continue;
    // BPE on the token's own bytes with ranks below r: lowest-ranked adjacent pair first.
    let parts = Array.from(bytes, (b) => [b]);
    for (;;) {
      let best = -1, bestRank = r;
      for (let i = 0; i + 1 < parts.length; ++i) {
        const k = rankOf.get(key([...parts[i], ...parts[i + 1]]));
        if (k !== undefined && k < bestRank) { bestRank = k; best = i; }
      }
      if (best < 0) break;
      parts.splice(best, 2, [...parts[best], ...parts[best + 1]]);
    }
    if (parts.length === 2) merges.push([str(parts[0]), str(parts[1])]);
  }
  const added = Object.entries(ranks.special_tokens).map(([content, id]) => ({
    id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: LLAMA3 }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges,
    },
  };
  fs.writeFileSync(outPath + '.tmp', JSON.stringify(json));
  fs.renameSync(outPath + '.tmp', outPath);
}

function encode(inPath, outPath) {
  const enc = new Tiktoken({ ...ranks, pat_str: JS_PATTERN });
  const texts = JSON.parse(fs.readFileSync(inPath, 'utf-8'));
  fs.writeFileSync(outPath, JSON.stringify(texts.map((t) => enc.encode(t, 'all'))));
}

if (process.argv[2] === 'build') build(process.argv[4]);
else if (process.argv[2] === 'encode') encode(process.argv[4], process.argv[5]);
else {
  console.error('usage: node llama3_reference.js build|encode <folder> ...');
  process.exit(2);
}
