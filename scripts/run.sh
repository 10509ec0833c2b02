#!/usr/bin/env bash
# Sets up, builds and runs the main job: train a small GPT on the built-in corpus with one checkpoint
# per block and selective recomputation, measure its step time against store-everything, and print
# the memory/compute report, ending on its summary in plain words. Arguments, when given, replace
# these defaults and go to `remat train` as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target remat
if [ $# -eq 0 ]; then
  # No sample: after 200 steps (about 2.5 nats per byte) it would not be readable text yet.
  set -- --recompute block --policy selective --compare-none --sample-tokens 0
fi
./build/remat train "$@"
