#!/usr/bin/env bash
# Builds the engine, the `remat` binary and every test with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DREMAT_SANITIZE=ON) in build-asan, and runs the test suite with ctest. Any finding fails the run:
# ASan and UBSan halt on the first error, and LeakSanitizer checks every process at exit.
# Extra arguments go to ctest. Run by .ci/run after the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# -O1 -g1: ASan's recommended optimisation level (fast enough, readable stack traces), and it
# compiles faster than -O2 -g. No benchmarks: they are not tests.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DREMAT_SANITIZE=ON -DREMAT_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "${REMAT_JOBS:-2}"

supp="$PWD/scripts/lsan.supp"
# allocator_may_return_null=1: malloc/aligned_alloc of a size ASan cannot serve (over 1 TiB) returns
# null, as without ASan, so remat's allocator reports it as an error instead of ASan aborting.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

# Excluded here (they run, unsanitized, in scripts/test.sh):
# - the learning tests, which train for hundreds of steps to reach a loss threshold. Under ASan they
#   take many minutes each, and they run no code path that the short training tests do not;
# - CliErrors.AbsurdSizes: its last case has `remat train` ask operator new for 25 TiB and expects
#   std::bad_alloc, reported as a [memory] error. ASan's throwing operator new cannot throw: it aborts
#   on such a request whatever its options.
# Tests run one at a time: each already uses both cores (OpenMP), and spinning OpenMP threads of two
# processes sharing two cores slow each other down many times over.
exclude='Learns|CliErrors\.AbsurdSizes'
ctest --test-dir build-asan --output-on-failure --timeout 600 -E "$exclude" "$@"
