#!/usr/bin/env bash
# Training throughput alone and beside one and two busy processes, for remat train's default and for
# fixed OpenMP settings (passive, active, --threads 1), and for the PyTorch peer. Prints one table:
# tokens/s, the median of RUNS runs, each run the mean over its steps after the first WARM (total
# tokens / total step time), and the default's share of the best fixed setting in each column.
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
# A busy process is `sh -c 'while :; do :; done'`, not pinned: another program that wants a core.
# LOADS (default "0 1 2"): the numbers of busy processes, one column each.
set -euo pipefail
cd "$(dirname "$0")/.."
remat=$(realpath "${1:-build/remat}")
runs=${RUNS:-5}
steps=${STEPS:-30}
warm=${WARM:-2}
nice_n=${NICE:-0}
peer=${PEER:-../shared/peers}
tmp=$(mktemp -d)
busy=()
cleanup() {
  [[ ${#busy[@]} -gt 0 ]] && kill "${busy[@]}" 2>/dev/null || true
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
  "remat, OMP_WAIT_POLICY=active|e OMP_WAIT_POLICY=active"
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
loads=(${LOADS:-0 1 2})
for load in "${loads[@]}"; do
  for ((k = 0; k < load; k++)); do
    nice -n "$nice_n" sh -c 'while :; do :; done' &
    busy+=($!)
  done
  for ((r = 1; r <= runs; r++)); do
    for i in "${!settings[@]}"; do
      res[$load,$i]+="$(run_one "${settings[$i]#*|}") "
    done
    echo "bench_contention: $load busy, round $r of $runs done (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
  if [[ ${#busy[@]} -gt 0 ]]; then kill "${busy[@]}"; wait "${busy[@]}" 2>/dev/null || true; busy=(); fi
done

echo "remat: $remat ($("$remat" --version | head -1)); $(nproc) cores; median of $runs runs of $steps steps (first $warm left out); niceness $nice_n"
echo
head="| setting |" rule="|---|"
for load in "${loads[@]}"; do
  case $load in 0) head+=" alone |" ;; 1) head+=" beside 1 busy process |" ;; *) head+=" beside $load busy processes |" ;; esac
  rule+="---|"
done
echo "$head"; echo "$rule"
declare -A med
for i in "${!settings[@]}"; do
  row="| ${settings[$i]%%|*} |"
  for load in "${loads[@]}"; do
    # shellcheck disable=SC2086
    med[$load,$i]=$(median ${res[$load,$i]})
    row+=" ${med[$load,$i]} |"
  done
  echo "$row"
done
# The default's share of the best fixed remat setting (passive, active, --threads 1) in each column.
def=-1
for i in "${!settings[@]}"; do [[ ${settings[$i]#*|} == u ]] && def=$i; done
row="| remat's default / best fixed setting |"
for load in "${loads[@]}"; do
  best=0
  for i in "${!settings[@]}"; do
    case ${settings[$i]} in *passive*|*active*|*"--threads 1"*) [[ ${settings[$i]} == remat* ]] || continue
      best=$(awk -v a="$best" -v b="${med[$load,$i]}" 'BEGIN {print (b > a ? b : a)}') ;; esac
  done
  row+=" $(awk -v d="${med[$load,$def]}" -v b="$best" 'BEGIN {printf "%.2fx", d / b}') |"
done
echo "$row"
echo
for i in "${!settings[@]}"; do
  line="runs, ${settings[$i]%%|*}:"
  for load in "${loads[@]}"; do line+=" $load busy: ${res[$load,$i]};"; done
  echo "$line"
done
