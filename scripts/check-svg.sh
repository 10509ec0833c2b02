#!/usr/bin/env bash
# Renders SVG pictures (remat trace --svg, remat plan --svg) in headless Chromium at two sizes, to look
# at them as a browser shows them: full size (900 px wide, the pictures' own) and half size (450 px,
# a narrow column), each as an <img>, as a page embeds them (no script runs in an image):
#
#   bash scripts/check-svg.sh [--out DIR] [--sizes "900 450"] FILE.svg [FILE.svg ...]
#
# Each FILE.svg becomes FILE-900.png and FILE-450.png beside it (or in --out DIR), and the script
# prints their paths. Needs Debian's chromium (apt-get install -y chromium); not part of the build or
# CI (tests/cli/test_svg_chromium.cpp runs it when chromium is there). The pictures to check, as the
# README makes them:
#   remat trace --layers 4 --recompute block --svg t.svg --svg-persistent
#   remat plan --layers 4 --step-budget 28MiB --frontier --svg f.svg
#   remat plan --layers 4 --step-budget 20MiB --svg g.svg     # no plan fits: drawn, then refused
#   bash scripts/check-svg.sh t.svg f.svg g.svg
set -euo pipefail

usage() { echo "usage: $0 [--out DIR] [--sizes \"900 450\"] FILE.svg [FILE.svg ...]" >&2; exit 2; }
out_dir=""
sizes="900 450"
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || usage; out_dir="$2"; shift 2 ;;
    --sizes) [ $# -ge 2 ] || usage; sizes="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || usage
for w in $sizes; do
  case "$w" in ''|*[!0-9]*) echo "error: --sizes takes widths in px, got '$w'" >&2; exit 2 ;; esac
done

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
  for w in $sizes; do
    h=$(( (w * 560 + 899) / 900 ))  # the pictures are 900 x 560
    png="${out_dir:-$(dirname "$abs")}/$base-$w.png"
    # A private profile and page per render keep runs independent; the window is the image's size.
    work="$(mktemp -d)"
    printf '<!doctype html><html><body style="margin:0;background:#fff"><img src="file://%s" width="%d" height="%d" style="display:block"></body></html>\n' \
      "$abs" "$w" "$h" > "$work/page.html"
    if "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --allow-file-access-from-files \
        --user-data-dir="$work/profile" --screenshot="$png" --window-size="$w,$h" "file://$work/page.html" \
        >/dev/null 2>&1 && [ -s "$png" ]; then
      echo "$png"
    else
      echo "error: $browser could not render '$f' at $w px" >&2
      status=1
    fi
    rm -rf "$work"
  done
done
exit $status
