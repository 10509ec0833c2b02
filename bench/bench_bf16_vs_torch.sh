#!/usr/bin/env bash
# Issue #10's speed table in one run: PyTorch fp32, PyTorch bf16 autocast, remat fp32 and remat bf16, four rows
# per config interleaved round-robin, with tokens/s ratios, GFLOP/s against the measured bf16 matmul rate, and
# `uptime` before and after (bench/compare_peer.py --speed does the work; its --help explains every column).
# Usage: bench/bench_bf16_vs_torch.sh [compare_peer.py --speed flags, e.g. --rounds 2 --steps 5 --warmup 2]
#   REMAT_BUILD=DIR picks the build directory holding remat and bench_bf16 (default: build).
# Needs: remat and bench_bf16 built (cmake --build build --target remat bench_bf16), and the PyTorch peer's
#   packages (apt-get install -y python3-torch libopenblas0-pthread libtcmalloc-minimal4).
# Default configs: the issue's, GPT L12 C256 T256 B8 V256 and L12 C768 T512 B4 V8192 (NH = C/64); at L12 C768 a
# PyTorch fp32 step takes several seconds, so one round of 2 warm-up + 5 timed steps takes about 3 minutes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${REMAT_BUILD:-$here/../build}
for bin in remat bench_bf16; do
  if [[ ! -x $build/$bin ]]; then
    echo "bench_bf16_vs_torch: no $bin in $build: build it (cmake --build $build --target $bin) or set REMAT_BUILD=DIR" >&2
    exit 1
  fi
done
"$build/remat" --version
exec python3 "$here/compare_peer.py" --speed --remat "$build/remat" --bench-bf16 "$build/bench_bf16" "$@"
