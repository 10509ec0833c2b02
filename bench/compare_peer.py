#!/usr/bin/env python3
r"""remat against a PyTorch peer (Debian python3-torch 1.13) on one config, one after the other in the
same session, so that the ratios are comparable on a noisy machine.

    python3 bench/compare_peer.py --layers 12 --channels 256 --heads 4 --seq 256 --batch 8 --vocab 256 \
        --strategies none block sqrt [--attention flash] [--peer-attn naive] [--steps 5]
    python3 bench/compare_peer.py --arch llama --kv-heads 2 --hidden 688 --layers 12 --channels 256 --heads 4 \
        --seq 256 --batch 8 --vocab 256 --strategies none block sqrt

--arch gpt2 (default): remat `bench --json ...` against ../shared/peers/run.sh (torch_gpt2_ckpt.py),
run exactly as shipped.
--arch llama: remat `bench --json --arch llama --kv-heads K --hidden H ...` against
bench/run_torch_llama.sh (bench/torch_llama.py --mode bench), a line-by-line copy of run.sh's
environment logic (tcmalloc LD_PRELOAD when present, OMP_WAIT_POLICY=passive, OpenBLAS's own kernel
choice unless it is a pre-AVX fallback, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset). No dropout.

The peer runs in run.sh's own setting. An earlier version forced OPENBLAS_CORETYPE=SkylakeX unless
--peer-as-shipped was given; that made PyTorch 1.37x slower on an AMD EPYC, where OpenBLAS picks
Cooperlake itself, so it is gone and --peer-as-shipped is accepted as a no-op (the peer is always run
as shipped). The environment passes through unchanged (PEER_OPENBLAS_CORETYPE included, though run.sh
as shipped computes its OpenBLAS choice without applying it; run_torch_llama.sh copies that too).

Prints one row per strategy: activation bytes and step time of both, and remat / PyTorch ratios.
remat's activation bytes are the accounting allocator's measured peak of saved tensors,
PyTorch's are its saved_tensors_hooks count (same method in both peers), both per step.
COMPARE_JSON=file also writes the rows (both sides' full JSON) to a file.
"""
import argparse
import json
import math
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def remat_equivalent(a, policy):
    """remat's strategy doing what the peer's policy does: PyTorch's `block` recomputes every block
    (remat skips the last one's recompute unless --recompute-last), and its `sqrt` is
    checkpoint_sequential with round(sqrt(L)) segments, the last one not checkpointed (remat's
    uniform:K with its default tail skip)."""
    if policy == "block":
        return "block", ["--recompute-last"]
    if policy == "sqrt":
        return "uniform:%d" % max(1, round(math.sqrt(a.layers))), []
    return policy, []


def run_remat(a, strategy):
    strategy, extra = remat_equivalent(a, strategy)
    cmd = [a.remat, "bench", "--json"]
    if a.arch == "llama":
        cmd += ["--arch", "llama", "--kv-heads", str(a.kv_heads), "--hidden", str(a.hidden)]
    cmd += ["--layers", str(a.layers), "--channels", str(a.channels), "--heads", str(a.heads), "--seq", str(a.seq),
            "--batch", str(a.batch), "--vocab", str(a.vocab), "--steps", str(a.steps), "--warmup", str(a.warmup),
            "--threads", str(a.threads), "--dropout", str(a.dropout), "--attention", a.attention,
            "--recompute", strategy] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]


def peer_command(a):
    """The peer's launcher, run as it is: ../shared/peers/run.sh for GPT-2, bench/run_torch_llama.sh (its
    line-by-line copy) for LLaMA. Both set tcmalloc, OpenMP passive waiting and OpenBLAS's own kernel
    choice (forced only over a pre-AVX fallback); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset."""
    if a.arch == "llama":
        return [a.llama_peer]
    return [a.peer]


def run_peer(a, policy):
    cmd = peer_command(a) + ["--L", str(a.layers), "--d", str(a.channels), "--heads", str(a.heads), "--T",
                             str(a.seq), "--B", str(a.batch), "--vocab", str(a.vocab), "--policy", policy, "--attn",
                             a.peer_attn, "--threads", str(a.threads), "--steps", str(a.steps), "--warmup",
                             str(a.warmup)]
    if a.arch == "llama":
        cmd += ["--mode", "bench", "--kv-heads", str(a.kv_heads), "--hidden", str(a.hidden)]
    else:
        cmd += ["--dropout", str(a.dropout)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: same as --heads)")
    ap.add_argument("--hidden", type=int, default=0,
                    help="llama: MLP width (0: LLaMA's rule, 8C/3 rounded up to a multiple of 256)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--strategies", nargs="+", default=["none", "block", "sqrt"])
    ap.add_argument("--attention", default="naive", choices=["naive", "flash"])
    ap.add_argument("--peer-attn", default="naive", choices=["naive", "sdpa"])
    ap.add_argument("--remat", default=os.path.join(root, "build", "remat"))
    ap.add_argument("--peer", default=os.path.join(root, "..", "shared", "peers", "run.sh"))
    ap.add_argument("--llama-peer", default=os.path.join(here, "run_torch_llama.sh"))
    ap.add_argument("--peer-as-shipped", action="store_true",
                    help="no-op, kept for old command lines: the peer is always run as shipped now")
    a = ap.parse_args()
    peer = a.llama_peer if a.arch == "llama" else a.peer
    if not os.path.exists(peer):
        sys.exit(f"compare_peer: no PyTorch peer at {peer}" + ("" if a.arch == "llama" else
                                                              " (the ../shared folder is absent)"))
    if a.arch == "llama":
        if a.dropout != 0.0:
            sys.exit("compare_peer: --arch llama has no dropout (the LLaMA peer has none)")
        a.kv_heads = a.kv_heads or a.heads
        a.hidden = a.hidden or 256 * ((int(8 * a.channels / 3) + 255) // 256)
        arch = f"llama KVH={a.kv_heads} H={a.hidden} "
    else:
        if a.kv_heads or a.hidden:
            sys.exit("compare_peer: --kv-heads and --hidden are for --arch llama")
        arch = "gpt2 "
    print(f"config {arch}L={a.layers} C={a.channels} NH={a.heads} T={a.seq} B={a.batch} V={a.vocab} "
          f"dropout={a.dropout} threads={a.threads}; remat attention {a.attention}, PyTorch attention {a.peer_attn}; "
          f"peer {os.path.relpath(peer)} as shipped")
    print("MiB: activation bytes held at the end of the forward (what PyTorch's saved_tensors_hooks count);\n"
          "remat peak: remat's measured peak over the whole step (backward recompute included)")
    print(f"{'strategy (remat equiv.)':24s} {'remat MiB':>10s} {'torch MiB':>10s} {'act ratio':>9s} {'remat peak':>10s} "
          f"{'remat ms':>9s} {'torch ms':>9s} {'time ratio':>10s} {'speedup':>8s}")
    rows = []
    for s in a.strategies:
        r = run_remat(a, s)
        p = run_peer(a, s)
        rm, pm = r["forward_end_activation_bytes"] / 2**20, p["saved_act_bytes"] / 2**20
        rp = r["peak_activation_bytes"] / 2**20
        rt, pt = r["step_ms_median"], p["step_time_med_s"] * 1e3
        rows.append(dict(strategy=s, remat=r, torch=p, act_ratio=rm / pm, time_ratio=rt / pt))
        label = s if s == "none" else f"{s}={r['strategy']}{'+last' if r.get('recompute_last') else ''}"
        print(f"{label:24s} {rm:10.1f} {pm:10.1f} {rm / pm:9.3f} {rp:10.1f} {rt:9.1f} {pt:9.1f} {rt / pt:10.3f} "
              f"{pt / rt:7.2f}x", flush=True)
    if os.environ.get("COMPARE_JSON"):
        with open(os.environ["COMPARE_JSON"], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
