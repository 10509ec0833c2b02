#!/usr/bin/env bash
# Renders SVG pictures (remat trace --svg, remat plan --frontier --svg) in headless Chromium, to look
# at them as a browser shows them: bash scripts/check-svg.sh timeline.svg [more.svg ...]
# Each FILE.svg becomes FILE.png beside it (or in --out DIR). Needs Debian's chromium
# (apt-get install -y chromium); not part of CI.
set -euo pipefail

usage() { echo "usage: $0 [--out DIR] FILE.svg [FILE.svg ...]" >&2; exit 2; }
out_dir=""
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || usage; out_dir="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || usage

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser="$b"; break; fi
done
if [ -z "$browser" ]; then
  echo "error: no chromium found; install it with: apt-get install -y chromium" >&2
  exit 1
fi
if [ -n "$out_dir" ]; then mkdir -p "$out_dir"; fi

status=0
for f in "${files[@]}"; do
  if [ ! -f "$f" ]; then echo "error: '$f' is not a file; give the path of an .svg" >&2; status=1; continue; fi
  abs="$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
  base="$(basename "${f%.svg}")"
  png="${out_dir:-$(dirname "$abs")}/$base.png"
  # The pictures are 900 x 560; the window leaves a margin. A private profile keeps runs independent.
  profile="$(mktemp -d)"
  if "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
      --screenshot="$png" --window-size=1000,640 "file://$abs" >/dev/null 2>&1 && [ -s "$png" ]; then
    echo "$png"
  else
    echo "error: $browser could not render '$f'" >&2
    status=1
  fi
  rm -rf "$profile"
done
exit $status
