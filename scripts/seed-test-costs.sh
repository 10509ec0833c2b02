#!/usr/bin/env bash
# seed-test-costs.sh BUILD_DIR: gives a build that has never run its tests ctest's cost data for the
# longest ones (tests/ctest_costs.txt), so that `ctest -j` starts them first. Without it a fresh build
# runs the tests in their listed order, and a 5-minute test that happens to start last adds its
# 5 minutes to the suite's end. ctest keeps the file up to date after every run.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$1/Testing/Temporary/CTestCostData.txt"
if [ ! -s "$dest" ]; then
  mkdir -p "$(dirname "$dest")"
  grep -v '^#' "$here/tests/ctest_costs.txt" > "$dest"
fi
