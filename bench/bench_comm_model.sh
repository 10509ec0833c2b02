#!/usr/bin/env bash
# The communication model of `remat plan --ranks N --bandwidth B --latency L` (planner/comm.h: the
# latency-bandwidth model of ring collectives, Hockney 1994; Thakur, Rabenseifner and Gropp 2005)
# calibrated against this machine's 2-rank runs: for three model widths, the time a step waits for
# its gradient reduction when all of it starts after the backward (--no-overlap: nothing hidden, so
# the wait is the whole communication), median over RUNS runs; the link (latency, bandwidth) that
# fits the first two; and what the model then predicts for each, the third a check it was not fitted to.
#
#   bash bench/bench_comm_model.sh [REMAT_BINARY]      (default: build/remat)
#
# STEPS (12), WARM (2), RUNS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
remat=$(realpath "${1:-build/remat}")
if ! command -v mpirun > /dev/null; then
  echo "bench_comm_model: needs mpirun: apt-get install openmpi-bin" >&2
  exit 1
fi
steps=${STEPS:-12}
warm=${WARM:-2}
runs=${RUNS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
# The first two fit the link; the third checks it.
models=("--preset shakespeare" "--preset shakespeare --layers 8 --channels 512 --heads 8"
        "--preset shakespeare --layers 6 --channels 384 --heads 6")
median() {  # median of the numbers on stdin
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
echo "bench_comm_model: 2 ranks x 1 thread, --no-overlap, $steps steps, median of $runs runs; load $(cut -d' ' -f1-3 /proc/loadavg)"
rows=()
for m in "${models[@]}"; do
  waits=()
  for r in $(seq "$runs"); do
    out=$tmp/m.$r.jsonl
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "${mpi[@]}" "$remat" train $m --batch 8 --micro-batch 4 --steps "$steps" --eval-every 0 \
      --sample-tokens 0 --quiet --no-overlap --metrics-out "$out" > /dev/null
    waits+=("$(grep -o '"reduce_wait_s": [0-9.e+-]*' "$out" | tail -n +$((warm + 1)) | awk '{print $2}' | median)")
  done
  wait_s=$(printf '%s\n' "${waits[@]}" | median)
  # The model's count for the same step: the "none" row of plan's table (collectives, received).
  # shellcheck disable=SC2086
  row=$(OMP_NUM_THREADS=1 "$remat" plan $m --batch 4 --ranks 2 --zero 0 --bandwidth 1GB --latency 1us | grep -E '^  none ' | head -1)
  rows+=("$m|$wait_s|$row")
done
python3 - "${rows[@]}" <<'PY'
import sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
data = []
for arg in sys.argv[1:]:
    model, wait, row = arg.split("|")
    f = row.split()
    # none, GFLOP, compute (value unit), collectives, received (value unit), comm, step
    collectives = int(f[4]); received = float(f[5]) * units[f[6]]
    data.append((model, float(wait), collectives, received))
(m1, t1, c1, r1), (m2, t2, c2, r2) = data[0], data[1]
# t = c (N - 1) alpha + r / beta with N = 2: solve for alpha and 1 / beta.
det = c1 * r2 - c2 * r1
alpha = (t1 * r2 - t2 * r1) / det
inv_beta = (c1 * t2 - c2 * t1) / det
if inv_beta <= 0 or alpha < 0:
    print(f"no physical fit (latency {alpha * 1e6:.2f} us, 1/bandwidth {inv_beta:.3g} s/B): the waits are noise-dominated; rerun on a quieter machine")
    sys.exit(0)
print(f"fitted on the first two: latency {alpha * 1e6:.2f} us per message, bandwidth {1 / inv_beta / 1e9:.2f} GB/s "
      f"(remat plan --ranks N --bandwidth {1 / inv_beta / 1e9:.2f}GB --latency {alpha * 1e6:.0f}us)")
print(f"{'model':60s} {'collectives':>11s} {'received':>12s} {'measured ms':>12s} {'model ms':>9s}")
for i, (model, t, c, r) in enumerate(data):
    pred = c * alpha + r * inv_beta
    print(f"{model:60s} {c:11d} {r / 2**20:8.2f} MiB {t * 1e3:12.3f} {pred * 1e3:9.3f}" + ("   (check: not fitted)" if i >= 2 else ""))
PY
