#!/usr/bin/env python3
r"""remat against a PyTorch peer (Debian python3-torch 1.13) in one run, one process after the other in the
same session, so that the ratios are comparable on a noisy machine. Two tables:

Activations and time, one precision (the default):

    python3 bench/compare_peer.py --layers 12 --channels 256 --heads 4 --seq 256 --batch 8 --vocab 256 \
        --strategies none block sqrt [--attention flash] [--peer-attn naive] [--steps 5] [--precision bf16]
    python3 bench/compare_peer.py --arch llama --kv-heads 2 --hidden 688 --layers 12 --channels 256 --heads 4 \
        --seq 256 --batch 8 --vocab 256 --strategies none block sqrt

  One row per strategy: activation bytes and step time of both, and remat / PyTorch ratios. remat's
  activation bytes are the accounting allocator's measured peak of saved tensors, PyTorch's are its
  saved_tensors_hooks count (same method in both peers), both per step. --precision bf16 runs remat
  with --precision bf16 and the peer with --autocast bf16.

bf16 speed, four rows per config:

    python3 bench/compare_peer.py --speed [--configs 'L12 C256 T256 B8 V256; L12 C768 T512 B4 V8192'] \
        [--strategies none] [--rounds 1] [--steps 5] [--warmup 2]

  For each config and strategy, four rows: PyTorch fp32, PyTorch bf16 autocast (--autocast bf16),
  remat fp32, remat bf16 (--precision bf16). Each row is one process (warm-up + timed steps, its
  median kept); the four run round-robin, --rounds times, the first row of round r being row r mod 4,
  so that the machine's drift hits all four alike. A row's ms/step is the median of its rounds'
  medians, its tokens/s is B*T over that. Ratios are of tokens/s: remat bf16 / PyTorch bf16 autocast,
  remat bf16 / PyTorch fp32, remat bf16 / remat fp32, with remat's speed targets where it has set one
  for the config (the two default configs). GFLOP/s is the model's forward + backward FLOPs per step (remat's dry run, the same
  count for every row: recomputation is not counted, so it is tokens/s in other units), against
  oneDNN's bf16 matmul and the fp32 sgemm as remat bench measures them at the start of each run
  (2048x768x3072, the median over the config's runs; with an older remat that measures only sgemm,
  bench_bf16's 2048x768x768 instead). bench_bf16 (next to --remat) also measures both at 2048x768x768
  before and after the rows, a check on the machine's drift. `uptime` is printed
  before and after. --configs takes remat bench's syntax (L layers, C channels, NH heads, KVH kv-heads,
  H hidden, T seq, B batch, V vocab); a key left out takes the flag's value, except NH, which is C/64
  (GPT-2's head size) unless --heads is given. Without --configs, model flags (--layers ...) give one
  config; with none of them, the two default configs run (GPT-2 L12 C256 T256 B8 V256, L12 C768 T512 B4 V8192).

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

COMPARE_JSON=file also writes the rows (every process's full JSON) to a file (atomically).
"""
import argparse
import copy
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)

# The issue's speed targets (#10, "Speed, in a benchmark"), remat bf16's tokens/s over each other row's,
# for strategy none, keyed by (arch, L, C, T, B, V).
ISSUE_TARGETS = {
    ("gpt2", 12, 256, 256, 8, 256): {"torch_bf16": 2.0, "torch_fp32": 3.0},
    ("gpt2", 12, 768, 512, 4, 8192): {"torch_bf16": 1.5, "remat_fp32": 1.7},
}
DEFAULT_SPEED_CONFIGS = "L12 C256 T256 B8 V256; L12 C768 T512 B4 V8192"
# The four rows of --speed: (key, label, side, precision).
SPEED_ROWS = [("torch_fp32", "PyTorch fp32", "torch", "fp32"),
              ("torch_bf16", "PyTorch bf16 autocast", "torch", "bf16"),
              ("remat_fp32", "remat fp32", "remat", "fp32"),
              ("remat_bf16", "remat bf16", "remat", "bf16")]
# The model flags' defaults (the issue's first config); with --speed, giving any of them (or --heads) runs
# that one model instead of the default --configs.
MODEL_DEFAULTS = dict(layers=12, channels=256, seq=256, batch=8, vocab=256)
CONFIG_KEYS = {"L": "layers", "C": "channels", "NH": "heads", "KVH": "kv_heads", "H": "hidden", "T": "seq",
               "B": "batch", "V": "vocab"}


def fail(msg):
    sys.exit(f"compare_peer: {msg}")


def run_json(cmd, what, env=None):
    """Runs cmd and returns its stdout; a failure is one line naming what failed, its last words and the command."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["(no output)"])[-1]
        fail(f"{what} failed (exit {p.returncode}): {last} [command: {shlex.join(cmd)}]")
    return p.stdout


def parse_json(text, what, cmd):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"{what} printed no JSON ({e}) [command: {shlex.join(cmd)}]")


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


def run_remat(a, strategy, precision):
    strategy, extra = remat_equivalent(a, strategy)
    cmd = [a.remat, "bench", "--json"]
    if a.arch == "llama":
        cmd += ["--arch", "llama", "--kv-heads", str(a.kv_heads), "--hidden", str(a.hidden)]
    cmd += ["--layers", str(a.layers), "--channels", str(a.channels), "--heads", str(a.heads), "--seq", str(a.seq),
            "--batch", str(a.batch), "--vocab", str(a.vocab), "--timed-steps", str(a.steps), "--untimed-steps", str(a.warmup),
            "--threads", str(a.threads), "--dropout", str(a.dropout), "--attention", a.attention,
            "--precision", precision, "--recompute", strategy] + extra
    what = f"remat ({precision}, {strategy})"
    rows = parse_json(run_json(cmd, what), what, cmd)
    if not isinstance(rows, list) or len(rows) != 1:
        fail(f"{what} printed {len(rows) if isinstance(rows, list) else 'no'} rows, not one [command: {shlex.join(cmd)}]")
    return rows[0]


def peer_command(a):
    """The peer's launcher, run as it is: ../shared/peers/run.sh for GPT-2, bench/run_torch_llama.sh (its
    line-by-line copy) for LLaMA. Both set tcmalloc, OpenMP passive waiting and OpenBLAS's own kernel
    choice (forced only over a pre-AVX fallback); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset."""
    if a.arch == "llama":
        return [a.llama_peer]
    return [a.peer]


def run_peer(a, policy, precision):
    cmd = peer_command(a) + ["--L", str(a.layers), "--d", str(a.channels), "--heads", str(a.heads), "--T",
                             str(a.seq), "--B", str(a.batch), "--vocab", str(a.vocab), "--policy", policy, "--attn",
                             a.peer_attn, "--threads", str(a.threads), "--steps", str(a.steps), "--warmup",
                             str(a.warmup)]
    if a.arch == "llama":
        cmd += ["--mode", "bench", "--kv-heads", str(a.kv_heads), "--hidden", str(a.hidden)]
    else:
        cmd += ["--dropout", str(a.dropout)]
    if precision == "bf16":
        cmd += ["--autocast", "bf16"]
    out = run_json(cmd, f"PyTorch peer ({precision}, {policy})")
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        fail(f"the PyTorch peer printed no JSON line [command: {shlex.join(cmd)}]")
    p = parse_json(lines[-1], "the PyTorch peer", cmd)
    if not any("openblas" in lib for lib in p.get("env", {}).get("blas_libs_mapped", ["openblas"])):
        print("warning: PyTorch runs its fp32 matmuls on the reference BLAS, not OpenBLAS "
              "(apt-get install -y libopenblas0-pthread)", flush=True)
    return p


def finish_model(a):
    """Fills the architecture's defaults and checks the flags that depend on it; returns the label of the
    architecture for the config line."""
    if a.arch == "llama":
        if a.dropout != 0.0:
            fail("--arch llama has no dropout (the LLaMA peer has none)")
        a.kv_heads = a.kv_heads or a.heads
        a.hidden = a.hidden or 256 * ((int(8 * a.channels / 3) + 255) // 256)
        return f"llama KVH={a.kv_heads} H={a.hidden} "
    if a.kv_heads or a.hidden:
        fail("--kv-heads and --hidden are for --arch llama (in --configs too: KVH and H)")
    return "gpt2 "


def model_line(a, arch):
    return f"{arch}L={a.layers} C={a.channels} NH={a.heads} T={a.seq} B={a.batch} V={a.vocab}"


def parse_configs(a, text):
    """--configs 'L12 C256 T256 B8 V256; ...' (remat bench's syntax) into one copy of the flags per config;
    text None: the flags' own model, as one config."""
    out = []
    for part in text.split(";") if text is not None else [""]:
        if text is not None and not part.strip():
            continue
        c = copy.copy(a)
        given = set()
        for tok in part.split():
            key = tok.rstrip("0123456789")
            val = tok[len(key):]
            if key not in CONFIG_KEYS or not val:
                fail(f"--configs: '{tok}' in '{part.strip()}' is not KEY then a number "
                     f"(keys: {', '.join(CONFIG_KEYS)}; e.g. 'L12 C768 NH12 T512 B4 V8192')")
            if key in given:
                fail(f"--configs: {key} is given twice in '{part.strip()}'")
            if int(val) <= 0:
                fail(f"--configs: {tok} in '{part.strip()}' must be positive")
            given.add(key)
            setattr(c, CONFIG_KEYS[key], int(val))
        if "NH" not in given and not a.heads_given:
            if c.channels % 64:
                fail(f"'{part.strip() or 'C' + str(c.channels)}' has no NH and C={c.channels} is not a multiple of 64 "
                 f"(GPT-2's head size): add NH to --configs or give --heads")
            c.heads = c.channels // 64
        out.append(c)
    if not out:
        fail("--configs is empty (e.g. --configs 'L12 C256 T256 B8 V256; L12 C768 T512 B4 V8192')")
    return out


def gemm_rates(a):
    """oneDNN's bf16 matmul and the fp32 sgemm at 2048x768x768 (forward product), GFLOP/s, measured by
    bench_bf16 with --threads threads (median of 3); None when bench_bf16 is absent."""
    if not os.access(a.bench_bf16, os.X_OK):
        return None
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    cmd = [a.bench_bf16, "--benchmark_filter=^BM_(gemm_bf16|sgemm)/M:2048/K:768/N:768/op:0/",
           "--benchmark_format=json", "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
           "--benchmark_min_time=0.2"]
    d = parse_json(run_json(cmd, "bench_bf16 (the matmul rates)", env=env), "bench_bf16", cmd)
    r = {}
    for b in d["benchmarks"]:
        if b.get("aggregate_name") == "median":
            key = "bf16" if b["name"].startswith("BM_gemm_bf16") else "sgemm"
            r[key] = b["GFLOP/s"]
            if key == "bf16":
                r["bf16_impl"] = b.get("label", "")
    if "bf16" not in r or "sgemm" not in r:
        fail(f"bench_bf16 at {a.bench_bf16} reported no BM_gemm_bf16 / BM_sgemm 2048x768x768 median "
             f"(rebuild it: cmake --build BUILD --target bench_bf16)")
    return r


def uptime(when):
    p = subprocess.run(["uptime"], capture_output=True, text=True)
    print(f"uptime {when}: {p.stdout.strip()}", flush=True)


def activations_table(a):
    arch = finish_model(a)
    peer = a.llama_peer if a.arch == "llama" else a.peer
    prec = "" if a.precision == "fp32" else "; remat --precision bf16, PyTorch --autocast bf16"
    print(f"config {model_line(a, arch)} dropout={a.dropout} threads={a.threads}; remat attention {a.attention}, "
          f"PyTorch attention {a.peer_attn}; peer {os.path.relpath(peer)} as shipped{prec}")
    print("MiB: activation bytes held at the end of the forward (what PyTorch's saved_tensors_hooks count);\n"
          "remat peak: remat's measured peak over the whole step (backward recompute included)")
    print(f"{'strategy (remat equiv.)':24s} {'remat MiB':>10s} {'torch MiB':>10s} {'act ratio':>9s} {'remat peak':>10s} "
          f"{'remat ms':>9s} {'torch ms':>9s} {'time ratio':>10s} {'speedup':>8s}")
    rows = []
    for s in a.strategies:
        r = run_remat(a, s, a.precision)
        p = run_peer(a, s, a.precision)
        rm, pm = r["forward_end_activation_bytes"] / 2**20, p["saved_act_bytes"] / 2**20
        rp = r["peak_activation_bytes"] / 2**20
        rt, pt = r["step_ms_median"], p["step_time_med_s"] * 1e3
        rows.append(dict(strategy=s, precision=a.precision, remat=r, torch=p, act_ratio=rm / pm, time_ratio=rt / pt))
        label = s if s == "none" else f"{s}={r['strategy']}{'+last' if r.get('recompute_last') else ''}"
        print(f"{label:24s} {rm:10.1f} {pm:10.1f} {rm / pm:9.3f} {rp:10.1f} {rt:9.1f} {pt:9.1f} {rt / pt:10.3f} "
              f"{pt / rt:7.2f}x", flush=True)
    return rows


def run_row(c, strategy, side, precision):
    """One process of one speed row: its median step time in ms, the model FLOPs per step (remat only) and
    its full JSON."""
    if side == "remat":
        r = run_remat(c, strategy, precision)
        if r.get("precision", precision) not in (precision, {"fp32": "f32"}.get(precision)):
            fail(f"remat ran {r.get('precision')} when asked for --precision {precision}")
        return r["step_ms_median"], r["fwd_flops"] + r["bwd_flops"], r
    p = run_peer(c, strategy, precision)
    if p.get("autocast", "none") != ("bf16" if precision == "bf16" else "none"):
        fail(f"the PyTorch peer ran autocast={p.get('autocast')} when asked for {precision}")
    if p["tokens_per_step"] != c.batch * c.seq:
        fail(f"the PyTorch peer counted {p['tokens_per_step']} tokens per step, not B*T = {c.batch * c.seq}")
    return p["step_time_med_s"] * 1e3, None, p


def speed_one(c, strategy, rounds):
    """The four rows of one config and strategy, round-robin; returns {key: dict(ms_runs, ms, tok_s, ...)} and
    the model FLOPs per step."""
    runs = {k: [] for k, _, _, _ in SPEED_ROWS}
    full = {k: [] for k, _, _, _ in SPEED_ROWS}
    flops = {}
    for r in range(rounds):
        order = SPEED_ROWS[r % len(SPEED_ROWS):] + SPEED_ROWS[:r % len(SPEED_ROWS)]
        for key, _, side, precision in order:
            ms, f, js = run_row(c, strategy, side, precision)
            runs[key].append(ms)
            full[key].append(js)
            if f is not None:
                flops[key] = f
    # The FLOP count is the model's, so fp32 and bf16 must agree on it.
    f32, f16 = flops["remat_fp32"], flops["remat_bf16"]
    if abs(f32 - f16) > 1e-9 * max(f32, f16):
        fail(f"remat's fp32 and bf16 rows count different FLOPs per step ({f32:.6g} and {f16:.6g}): "
             f"they did not run the same model")
    # The matmul rates remat measured in each run, in the run's precision (2048x768x3072; remat bench's header):
    # its bf16 rows' is oneDNN's bf16 matmul when the JSON names its bf16 paths (an older remat measured sgemm).
    rates = {}
    if all("bf16_paths" in js for js in full["remat_bf16"]):
        rates = dict(bf16=statistics.median(js["gemm_peak_gflops"] for js in full["remat_bf16"]),
                     sgemm=statistics.median(js["gemm_peak_gflops"] for js in full["remat_fp32"]),
                     bf16_paths=full["remat_bf16"][-1]["bf16_paths"])
    out = {}
    for key, _, _, _ in SPEED_ROWS:
        ms = statistics.median(runs[key])
        out[key] = dict(ms_runs=runs[key], ms=ms, tok_s=c.batch * c.seq / (ms * 1e-3), gflops=f32 / (ms * 1e-3) * 1e-9,
                        runs=full[key])
    return out, f32, rates


def pct(x, ref):
    return f"{100 * x / ref:.1f}%" if ref else "-"


def speed_tables(a):
    configs = parse_configs(a, a.configs if a.configs is not None or a.model_given else DEFAULT_SPEED_CONFIGS)
    for c in configs:
        c.arch_label = finish_model(c)
    peer = a.llama_peer if a.arch == "llama" else a.peer
    print(f"bf16 speed: remat {os.path.relpath(a.remat)} against PyTorch {os.path.relpath(peer)} as shipped; "
          f"{a.threads} threads, remat attention {a.attention}, PyTorch attention {a.peer_attn}, dropout {a.dropout}; "
          f"each row one process of {a.warmup} warm-up + {a.steps} timed steps (median), "
          f"{a.rounds} round(s) round-robin", flush=True)
    uptime("before")
    before = gemm_rates(a)
    if before is None:
        print(f"matmul rates: not measured (no bench_bf16 at {a.bench_bf16}: cmake --build BUILD --target "
              f"bench_bf16, or --bench-bf16 PATH)", flush=True)
    else:
        print(f"matmul rates before, 2048x768x768: oneDNN bf16 {before['bf16']:.0f} GFLOP/s ({before['bf16_impl']}), "
              f"fp32 sgemm {before['sgemm']:.0f} GFLOP/s", flush=True)
    results = []
    for c in configs:
        for s in a.strategies:
            print(f"\nconfig {model_line(c, c.arch_label)}, strategy {s}", flush=True)
            rows, flops, rates = speed_one(c, s, a.rounds)
            results.append(dict(config=model_line(c, c.arch_label), arch=c.arch, layers=c.layers, channels=c.channels,
                                heads=c.heads, seq=c.seq, batch=c.batch, vocab=c.vocab, strategy=s,
                                model_flops_per_step=flops, rows=rows, remat_matmul=rates))
            if rates:
                paths = ", ".join(f"{k} {v}" for k, v in rates["bf16_paths"].items())
                print(f"  remat's matmul rates in these runs (2048x768x3072, median): bf16 {rates['bf16']:.0f} GFLOP/s, "
                      f"fp32 sgemm {rates['sgemm']:.0f} GFLOP/s; remat's bf16 paths: {paths}", flush=True)
            for key, label, _, _ in SPEED_ROWS:
                r = rows[key]
                per = " ".join(f"{m:.1f}" for m in r["ms_runs"])
                print(f"  {label:22s} {r['ms']:9.1f} ms/step ({per})  {r['tok_s']:9.0f} tok/s  "
                      f"{r['gflops']:7.1f} GFLOP/s", flush=True)
    after = gemm_rates(a)
    uptime("after")
    ref = None
    if after is not None:
        print(f"matmul rates after, 2048x768x768: oneDNN bf16 {after['bf16']:.0f} GFLOP/s, "
              f"fp32 sgemm {after['sgemm']:.0f} GFLOP/s")
        ref = {k: max(before[k], after[k]) for k in ("bf16", "sgemm")}

    print("\nSummary. ms: median step (forward + backward + AdamW); GFLOP/s: model forward + backward FLOPs "
          "(remat's dry run, no recompute) per second")
    if all(res["remat_matmul"] for res in results):
        print("  %bf16mm: of oneDNN's bf16 matmul, %sgemm: of fp32 sgemm, both as remat measured them in the config's "
              "runs (2048x768x3072, printed under each config)")
    elif ref:
        print(f"  %bf16mm: of oneDNN's bf16 matmul, {ref['bf16']:.0f} GFLOP/s; %sgemm: of fp32 sgemm, "
              f"{ref['sgemm']:.0f} GFLOP/s (bench_bf16, 2048x768x768, the higher of before and after)")
    w = max([len("config")] + [len(res["config"]) for res in results])
    hdr = f"{'config':{w}s} {'strategy':8s} {'row':22s} {'ms/step':>9s} {'tok/s':>8s} {'GFLOP/s':>8s} {'%bf16mm':>8s} {'%sgemm':>7s}"
    print(hdr)
    for res in results:
        rr = res["remat_matmul"] or ref or {}
        for key, label, _, _ in SPEED_ROWS:
            r = res["rows"][key]
            print(f"{res['config']:{w}s} {res['strategy']:8s} {label:22s} {r['ms']:9.1f} {r['tok_s']:8.0f} "
                  f"{r['gflops']:8.1f} {pct(r['gflops'], rr.get('bf16')):>8s} {pct(r['gflops'], rr.get('sgemm')):>7s}")
    print("\nremat bf16's tokens/s over each row's (with the targets, where remat has set one for the config):")
    print(f"{'config':{w}s} {'strategy':8s} {'/ PyTorch bf16':>22s} {'/ PyTorch fp32':>22s} {'/ remat fp32':>22s}")
    for res in results:
        key = (res["arch"], res["layers"], res["channels"], res["seq"], res["batch"], res["vocab"])
        targets = ISSUE_TARGETS.get(key, {}) if res["strategy"] == "none" else {}
        rb = res["rows"]["remat_bf16"]["tok_s"]
        cells = []
        res["ratios"] = {}
        for other in ("torch_bf16", "torch_fp32", "remat_fp32"):
            x = rb / res["rows"][other]["tok_s"]
            res["ratios"]["remat_bf16/" + other] = x
            t = targets.get(other)
            cells.append(f"{x:.2f}x" + (f" (>= {t:g}x: {'met' if x >= t else 'SHORT'})" if t else ""))
        print(f"{res['config']:{w}s} {res['strategy']:8s} {cells[0]:>22s} {cells[1]:>22s} {cells[2]:>22s}")
    return dict(matmul_before=before, matmul_after=after, results=results)


def write_json_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".compare_peer.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"compare_peer: {message} (see --help)\n")


def main():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: same as --heads)")
    ap.add_argument("--hidden", type=int, default=0,
                    help="llama: MLP width (0: LLaMA's rule, 8C/3 rounded up to a multiple of 256)")
    ap.add_argument("--layers", type=int, default=None, help="default 12")
    ap.add_argument("--channels", type=int, default=None, help="default 256")
    ap.add_argument("--heads", type=int, default=None, help="attention heads (default 4; with --speed: C/64)")
    ap.add_argument("--seq", type=int, default=None, help="default 256")
    ap.add_argument("--batch", type=int, default=None, help="default 8")
    ap.add_argument("--vocab", type=int, default=None, help="default 256")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--strategies", nargs="+", default=None,
                    help="peer policies (none block sqrt; remat runs its equivalent); default none block sqrt, "
                         "with --speed: none")
    ap.add_argument("--attention", default="naive", choices=["naive", "flash"])
    ap.add_argument("--peer-attn", default="naive", choices=["naive", "sdpa"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="without --speed: remat's --precision; bf16 runs the peer with --autocast bf16")
    ap.add_argument("--speed", action="store_true",
                    help="the bf16 speed table: PyTorch fp32 and bf16 autocast, remat fp32 and bf16, per config")
    ap.add_argument("--configs", default=None,
                    help=f"with --speed: models separated by ';' (default: the model flags' one model if any is "
                         f"given, else '{DEFAULT_SPEED_CONFIGS}')")
    ap.add_argument("--rounds", type=int, default=1, help="with --speed: round-robin rounds of the four rows")
    ap.add_argument("--remat", default=os.path.join(root, "build", "remat"))
    ap.add_argument("--bench-bf16", default=None, help="bench_bf16 binary (default: next to --remat)")
    ap.add_argument("--peer", default=os.path.join(root, "..", "shared", "peers", "run.sh"))
    ap.add_argument("--llama-peer", default=os.path.join(here, "run_torch_llama.sh"))
    ap.add_argument("--peer-as-shipped", action="store_true",
                    help="no-op, kept for old command lines: the peer is always run as shipped now")
    a = ap.parse_args()
    a.heads_given = a.heads is not None
    a.model_given = any(getattr(a, k) is not None for k in MODEL_DEFAULTS) or a.heads_given
    for k, v in MODEL_DEFAULTS.items():
        setattr(a, k, v if getattr(a, k) is None else getattr(a, k))
    a.heads = 4 if a.heads is None else a.heads
    a.strategies = a.strategies or (["none"] if a.speed else ["none", "block", "sqrt"])
    a.bench_bf16 = a.bench_bf16 or os.path.join(os.path.dirname(a.remat), "bench_bf16")
    for name in ("threads", "steps", "rounds"):
        if getattr(a, name) < 1:
            fail(f"--{name} must be at least 1 (got {getattr(a, name)})")
    if a.warmup < 0:
        fail(f"--warmup must be at least 0 (got {a.warmup})")
    if not a.speed and (a.configs or a.rounds != 1):
        fail("--configs and --rounds are for --speed (add --speed, or give the model with --layers ... flags)")
    if a.speed and a.precision != "fp32":
        fail("--precision is for the single-precision table: --speed runs both fp32 and bf16")
    if not os.access(a.remat, os.X_OK):
        fail(f"no remat binary at {a.remat}: build it (cmake --build build --target remat) or pass --remat PATH")
    peer = a.llama_peer if a.arch == "llama" else a.peer
    if not os.path.exists(peer):
        fail(f"no PyTorch peer at {peer}" + ("" if a.arch == "llama" else " (the ../shared folder is absent)"))
    out = speed_tables(a) if a.speed else activations_table(a)
    if os.environ.get("COMPARE_JSON"):
        write_json_atomic(os.environ["COMPARE_JSON"], out)


if __name__ == "__main__":
    main()
