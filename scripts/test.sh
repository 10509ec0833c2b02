#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
bash scripts/seed-test-costs.sh build
# OMP_WAIT_POLICY=passive unless set: idle OpenMP threads sleep instead of spinning. The test binaries
# (unlike `remat`, see src/cli/main.cpp) run on libgomp's default, whose spinning threads steal the
# cores from the working ones whenever anything else runs: under a load average of 6 to 9, `ctest -R
# '^Resume\.'` (8 tests) took 32-57 s with the default against 1.3-2.0 s with passive. No test
# asserts a timing.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# Two tests at a time (REMAT_TEST_JOBS): most tests wait on a child process or the disk part of the
# time, so two at once keep both cores busy.
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" ctest --test-dir build --output-on-failure -j "${REMAT_TEST_JOBS:-2}" "$@"
