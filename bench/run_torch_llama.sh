#!/usr/bin/env bash
# Run the PyTorch LLaMA peer (bench/torch_llama.py, Debian python3-torch 1.13, CPU) in the setting of
# ../shared/peers/run.sh: this file mirrors run.sh line by line; only the script it runs differs.
# Usage: bench/run_torch_llama.sh --L 12 --d 256 --heads 4 --kv-heads 2 --hidden 688 --T 256 --B 8 --vocab 256 --policy none --threads 2 [--autocast bf16] [--out f.jsonl]
# Policies: none | block (torch.utils.checkpoint per block) | sqrt (checkpoint_sequential) | every-k --k K
# --autocast bf16: PyTorch's CPU mixed precision (torch.autocast), the peer for a bf16 engine.
# Needs: apt-get install -y python3-torch libopenblas0-pthread libtcmalloc-minimal4
#   (without libopenblas0-pthread, PyTorch's fp32 matmul falls back to the slow reference BLAS).
# OpenBLAS: its own choice of kernels is kept, unless it falls back to a pre-AVX kernel on an AVX-512/AVX2 CPU
# (OpenBLAS 0.3.21 does so on some CPUs and hypervisors); then the best matching kernels are forced.
# PEER_OPENBLAS_CORETYPE=NAME overrides.
# Mirror note: run.sh as shipped computes $core but its exec line does not pass it on (OPENBLAS_CORETYPE is
# only unset), so the forcing and the override have no effect there; this copy keeps that exactly, so that
# both peers always run in the same setting. (Here OpenBLAS 0.3.21 picks Cooperlake by itself.)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
pre=(); [[ -f $tc ]] && pre=(LD_PRELOAD=$tc)
core=${PEER_OPENBLAS_CORETYPE:-}
if [[ -z $core ]]; then
  # What OpenBLAS picks by itself; keep it unless it is a pre-AVX fallback on an AVX-512 or AVX2 CPU.
  ob=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0
  auto=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 -c "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); l.openblas_get_corename.restype=ctypes.c_char_p; print(l.openblas_get_corename().decode())" "$ob" 2>/dev/null || true)
  case ${auto,,} in
    ""|prescott|core2|penryn|dunnington|nehalem|atom|katmai|coppermine|northwood|banias|opteron|barcelona|generic|unknown)
      if grep -qw avx512_bf16 /proc/cpuinfo; then core=Cooperlake
      elif grep -qw avx512f /proc/cpuinfo; then core=SkylakeX
      elif grep -qw avx2 /proc/cpuinfo; then core=Haswell; fi ;;
  esac
fi
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive "${pre[@]}" /usr/bin/python3 "$here/torch_llama.py" "$@"
