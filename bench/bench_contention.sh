#!/usr/bin/env bash
# Training throughput alone and beside one busy process (issue #11, "Contention"), for OpenMP wait
# policies of `remat train` and for the PyTorch peer. Prints one table: tokens/s, the median of RUNS
# runs, each run the mean over its steps after the first WARM (total tokens / total step time).
# Settings run interleaved, round by round, so that they see the same background load.
#
#   bash bench/bench_contention.sh [REMAT_BINARY]      (default: build/remat)
#
# SPINS="1000 3000": also rows with GOMP_SPINCOUNT set to each of these.
# ONLY_REMAT=1: leave out the PyTorch rows.
# BEFORE=path: also run that binary with the wait policy unset (a remat built without the re-exec of
# src/cli/main.cpp, i.e. on libgomp's default), as the first row.
# RUNS (default 5), STEPS (30), WARM (2): runs per cell, steps per run, steps left out.
# NICE: run everything (remat, the peer and the busy process alike) at this niceness. With
# sched_autogroup (/proc/sys/kernel/sched_autogroup_enabled = 1) niceness only orders the processes
# of one session; to keep other sessions' processes out of the "alone" column, give the run's
# session priority instead, as root:
#   setsid bash -c 'echo -15 > /proc/self/autogroup; exec bash bench/bench_contention.sh'
# PEER: ../shared/peers (skipped when absent, or without python3-torch).
# The busy process is `sh -c 'while :; do :; done'`, not pinned: a second program that wants a core.
set -euo pipefail
cd "$(dirname "$0")/.."
remat=$(realpath "${1:-build/remat}")
runs=${RUNS:-5}
steps=${STEPS:-30}
warm=${WARM:-2}
nice_n=${NICE:-0}
peer=${PEER:-../shared/peers}
tmp=$(mktemp -d)
busy=""
cleanup() {
  [[ -n $busy ]] && kill "$busy" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# The default model and batch of `remat train` (preset shakespeare: L=4 C=128 NH=4 T=128, batch 8).
train=(train --steps "$steps" --eval-every 0 --sample-tokens 0 --no-progress)
peer_args=(--L 4 --d 128 --heads 4 --T 128 --B 8 --vocab 256 --policy none --attn naive --threads 2
           --steps $((steps - warm)) --warmup "$warm")

# label | how it runs. "u" runs remat with OMP_WAIT_POLICY and GOMP_SPINCOUNT unset (remat's own
# default, or libgomp's for a binary without it); the others set one variable, which remat keeps.
settings=()
[[ -n ${BEFORE:-} ]] && settings+=("remat before (libgomp's default), wait policy unset|b")
settings+=(
  "remat, wait policy unset (remat's default)|u"
  "remat, GOMP_SPINCOUNT=300000 (libgomp's default)|e GOMP_SPINCOUNT=300000"
  "remat, OMP_WAIT_POLICY=passive|e OMP_WAIT_POLICY=passive"
  "remat, --threads 1|t"
)
for n in ${SPINS:-}; do settings+=("remat, GOMP_SPINCOUNT=$n|e GOMP_SPINCOUNT=$n"); done
if [[ -z ${ONLY_REMAT:-} && -x $peer/run.sh ]] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  settings+=("PyTorch, run.sh (OMP_WAIT_POLICY=passive)|p" "PyTorch, OMP_WAIT_POLICY unset (libgomp's default)|q")
fi

# One run: prints tokens/s.
run_one() {
  local how=$1 out=$tmp/m.jsonl
  rm -f "$out"
  case $how in
    b) env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT nice -n "$nice_n" "$BEFORE" "${train[@]}" --metrics-out "$out" >/dev/null ;;
    u) env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT nice -n "$nice_n" "$remat" "${train[@]}" --metrics-out "$out" >/dev/null ;;
    e\ *) env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "${how#e }" nice -n "$nice_n" "$remat" "${train[@]}" \
            --metrics-out "$out" >/dev/null ;;
    t) env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT nice -n "$nice_n" "$remat" "${train[@]}" --threads 1 \
         --metrics-out "$out" >/dev/null ;;
    p) nice -n "$nice_n" "$peer/run.sh" "${peer_args[@]}" --out "$out" >/dev/null 2>&1 ;;
    q) # run.sh's setting (tcmalloc, its OpenBLAS core type) without its OMP_WAIT_POLICY=passive.
       local core
       core=$(sed -n 's/.*"OPENBLAS_CORETYPE": "\([^"(]*\)".*/\1/p' "$tmp/peer_env" 2>/dev/null || true)
       env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ${core:+OPENBLAS_CORETYPE=$core} \
         LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
         nice -n "$nice_n" /usr/bin/python3 "$peer/torch_gpt2_ckpt.py" "${peer_args[@]}" --out "$out" >/dev/null 2>&1 ;;
  esac
  case $how in
    p|q) [[ $how == p ]] && cp "$out" "$tmp/peer_env"
         /usr/bin/python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); t=r["step_times_s"]; print("%.0f" % (r["tokens_per_step"]*len(t)/sum(t)))' "$out" ;;
    *) /usr/bin/python3 -c 'import json,sys; w=int(sys.argv[2]); r=[json.loads(l) for l in open(sys.argv[1])][w:]; print("%.0f" % (len(r)/sum(1/x["tokens_per_s"] for x in r)))' "$out" "$warm" ;;
  esac
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A res
for load in alone busy; do
  if [[ $load == busy ]]; then
    nice -n "$nice_n" sh -c 'while :; do :; done' &
    busy=$!
  fi
  for ((r = 1; r <= runs; r++)); do
    for i in "${!settings[@]}"; do
      res[$load,$i]+="$(run_one "${settings[$i]#*|}") "
    done
    echo "bench_contention: $load, round $r of $runs done (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
  if [[ -n $busy ]]; then kill "$busy"; wait "$busy" 2>/dev/null || true; busy=""; fi
done

echo "remat: $remat ($("$remat" --version | head -1)); $(nproc) cores; median of $runs runs of $steps steps (first $warm left out); niceness $nice_n"
echo
echo "| setting | alone, tokens/s | beside one busy process, tokens/s | busy / alone |"
echo "|---|---|---|---|"
for i in "${!settings[@]}"; do
  # shellcheck disable=SC2086
  a=$(median ${res[alone,$i]}) b=$(median ${res[busy,$i]})
  echo "| ${settings[$i]%%|*} | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}') |"
done
echo
for i in "${!settings[@]}"; do echo "runs, ${settings[$i]%%|*}: alone ${res[alone,$i]}; busy ${res[busy,$i]}"; done
