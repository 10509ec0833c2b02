#!/usr/bin/env bash
# Data parallelism on this machine: tokens/s of one process with 2 OpenMP threads against mpirun -np 2
# with 1 thread each (the same global batch, so the same work), and how much of the gradient
# reduction the backward hides. One table; each cell the median over RUNS runs of the run's median
# step (its steps after the first WARM), the settings interleaved round by round so that they see the
# same background load.
#
#   bash bench/bench_mpi.sh [REMAT_BINARY]      (default: build/remat)
#
# MODEL (default "--preset shakespeare"), BATCH (8), STEPS (12), WARM (2), RUNS (3).
# Hidden share: 1 - wait(overlapped) / wait(--no-overlap), where wait is the time a step waits for its
# reductions after the backward (metrics' reduce_wait_s), with and without checkpointing; under
# --zero 3 also for its all-gathers (gather_wait_s: the waits before blocks run, with the next block
# prefetched against none).
set -euo pipefail
cd "$(dirname "$0")/.."
remat=$(realpath "${1:-build/remat}")
if ! command -v mpirun > /dev/null; then
  echo "bench_mpi: needs mpirun: apt-get install openmpi-bin" >&2
  exit 1
fi
model=${MODEL:---preset shakespeare}
batch=${BATCH:-8}
steps=${STEPS:-12}
warm=${WARM:-2}
runs=${RUNS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
common=(train $model --batch "$batch" --micro-batch $((batch / 2)) --steps "$steps" --eval-every 0 --sample-tokens 0 --quiet)

# median FIELD FILE: the median of FIELD over the metrics lines after the first $warm.
median() {
  grep -o "\"$1\": [0-9.e+-]*" "$2" | tail -n +$((warm + 1)) | awk '{print $2}' | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
cells=(one mpi mpi_no block block_no z3 z3_no z3_block z3_block_no)
run_cell() {
  local cell=$1 out=$tmp/$1.$2.jsonl
  case $cell in
    one) OMP_NUM_THREADS=2 "$remat" "${common[@]}" --recompute none --metrics-out "$out" > /dev/null ;;
    mpi) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute none --metrics-out "$out" > /dev/null ;;
    mpi_no) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute none --no-overlap --metrics-out "$out" > /dev/null ;;
    block) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute block --metrics-out "$out" > /dev/null ;;
    block_no) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute block --no-overlap --metrics-out "$out" > /dev/null ;;
    z3) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute none --zero 3 --metrics-out "$out" > /dev/null ;;
    z3_no) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute none --zero 3 --no-overlap --metrics-out "$out" > /dev/null ;;
    z3_block) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute block --zero 3 --metrics-out "$out" > /dev/null ;;
    z3_block_no) OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" "${common[@]}" --recompute block --zero 3 --no-overlap --metrics-out "$out" > /dev/null ;;
  esac
}
for r in $(seq "$runs"); do
  for c in "${cells[@]}"; do run_cell "$c" "$r"; done
done
med_of_runs() {  # med_of_runs CELL FIELD
  for r in $(seq "$runs"); do median "$2" "$tmp/$1.$r.jsonl"; done | sort -g |
    awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
echo "bench_mpi: $model, batch $batch (micro-batch $((batch / 2)) per rank), $steps steps, median of $runs runs; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-52s %12s %16s %16s\n" "setting" "tokens/s" "reduce wait ms" "gather wait ms"
for c in "${cells[@]}"; do
  case $c in
    one) label="1 process, 2 threads" ;;
    mpi) label="2 ranks x 1 thread, none" ;;
    mpi_no) label="2 ranks x 1 thread, none, --no-overlap" ;;
    block) label="2 ranks x 1 thread, block" ;;
    block_no) label="2 ranks x 1 thread, block, --no-overlap" ;;
    z3) label="2 ranks x 1 thread, none, --zero 3" ;;
    z3_no) label="2 ranks x 1 thread, none, --zero 3, --no-overlap" ;;
    z3_block) label="2 ranks x 1 thread, block, --zero 3" ;;
    z3_block_no) label="2 ranks x 1 thread, block, --zero 3, --no-overlap" ;;
  esac
  tps=$(med_of_runs "$c" tokens_per_s)
  wait_ms=$( [ "$c" = one ] && echo "-" || awk -v w="$(med_of_runs "$c" reduce_wait_s)" 'BEGIN {printf "%.3f", w * 1e3}')
  gather_ms=$(case $c in z3*) awk -v w="$(med_of_runs "$c" gather_wait_s)" 'BEGIN {printf "%.3f", w * 1e3}' ;; *) echo "-" ;; esac)
  printf "%-52s %12.0f %16s %16s\n" "$label" "$tps" "$wait_ms" "$gather_ms"
done
awk -v a="$(med_of_runs mpi tokens_per_s)" -v b="$(med_of_runs one tokens_per_s)" \
  'BEGIN {printf "2 ranks x 1 thread / 1 process x 2 threads: %.3fx\n", a / b}'
awk -v a="$(med_of_runs z3 tokens_per_s)" -v b="$(med_of_runs one tokens_per_s)" \
  'BEGIN {printf "2 ranks x 1 thread under --zero 3 / 1 process x 2 threads: %.3fx\n", a / b}'
for s in "" block; do
  o=${s:-mpi}; n=${s:-mpi}_no
  [ -n "$s" ] && n=block_no
  awk -v w="$(med_of_runs "$o" reduce_wait_s)" -v x="$(med_of_runs "$n" reduce_wait_s)" -v what="${s:-none}" \
    'BEGIN {if (x > 0) printf "reduction hidden behind the backward (%s): %.0f%%\n", what, 100 * (1 - w / x)}'
done
for o in z3 z3_block; do
  awk -v w="$(med_of_runs "$o" gather_wait_s)" -v x="$(med_of_runs "${o}_no" gather_wait_s)" \
    -v what="$([ "$o" = z3 ] && echo none || echo block)" \
    'BEGIN {if (x > 0) printf "ZeRO-3 all-gathers hidden by the prefetch (%s): %.0f%%\n", what, 100 * (1 - w / x)}'
done
