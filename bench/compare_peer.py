#!/usr/bin/env python3
"""remat against the PyTorch peer (../shared/peers, Debian python3-torch 1.13) on one config, one
after the other in the same session, so that the ratios are comparable on a noisy machine.

    python3 bench/compare_peer.py --layers 12 --channels 256 --heads 4 --seq 256 --batch 8 --vocab 256 \
        --strategies none block sqrt [--attention flash] [--peer-attn naive] [--steps 5]

Prints one row per strategy: activation bytes and step time of both, and remat / PyTorch ratios.
remat's activation bytes are the accounting allocator's measured peak of saved tensors,
PyTorch's are its saved_tensors_hooks count (torch_gpt2_ckpt.py), both per step.
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
    cmd = [a.remat, "bench", "--json", "--layers", str(a.layers), "--channels", str(a.channels), "--heads",
           str(a.heads), "--seq", str(a.seq), "--batch", str(a.batch), "--vocab", str(a.vocab), "--steps",
           str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads), "--dropout", str(a.dropout),
           "--attention", a.attention, "--recompute", strategy] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]


def peer_command(a):
    """run.sh's setting (OpenMP passive waiting, tcmalloc), plus OPENBLAS_CORETYPE=SkylakeX unless
    --peer-as-shipped: OpenBLAS 0.3.21 does not recognise this CPU and falls back to its Prescott
    (SSE3) kernels when the variable is unset, as run.sh leaves it (2.8 s/step instead of 1.06 s on
    the L12 C256 config). Forcing the AVX-512 kernels is PyTorch's fastest setting here."""
    if a.peer_as_shipped:
        return [a.peer], os.environ.copy()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_L2_SIZE",)}
    env.update(OPENBLAS_CORETYPE="SkylakeX", OMP_WAIT_POLICY="passive")
    tc = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
    if os.path.exists(tc):
        env["LD_PRELOAD"] = tc
    script = os.path.join(os.path.dirname(os.path.abspath(a.peer)), "torch_gpt2_ckpt.py")
    return ["/usr/bin/python3", script], env


def run_peer(a, policy):
    head, env = peer_command(a)
    cmd = head + ["--L", str(a.layers), "--d", str(a.channels), "--heads", str(a.heads), "--T", str(a.seq), "--B",
           str(a.batch), "--vocab", str(a.vocab), "--policy", policy, "--attn", a.peer_attn, "--threads",
           str(a.threads), "--steps", str(a.steps), "--warmup", str(a.warmup), "--dropout", str(a.dropout)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    ap.add_argument("--peer-as-shipped", action="store_true", help="run ../shared/peers/run.sh exactly as it is")
    a = ap.parse_args()
    if not os.path.exists(a.peer):
        sys.exit(f"compare_peer: no PyTorch peer at {a.peer} (the ../shared folder is absent)")
    print(f"config L={a.layers} C={a.channels} NH={a.heads} T={a.seq} B={a.batch} V={a.vocab} dropout={a.dropout} "
          f"threads={a.threads}; remat attention {a.attention}, PyTorch attention {a.peer_attn}")
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
