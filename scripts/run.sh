#!/usr/bin/env bash
# Sets up, builds and runs the main job: train a small GPT on the built-in corpus and print the
# memory/compute report. Extra arguments go to `remat train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target remat
./build/remat train "$@"
