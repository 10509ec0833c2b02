#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" ctest --test-dir build --output-on-failure "$@"
