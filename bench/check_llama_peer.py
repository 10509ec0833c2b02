#!/usr/bin/env python3
"""End-to-end agreement of remat's LLaMA with the PyTorch peer (bench/torch_llama.py, float64).

    python3 bench/check_llama_peer.py [--remat build/remat] [--rtol 1e-5] [--keep DIR]
    python3 bench/check_llama_peer.py --self-test     # the PyTorch peer in float32 stands in for remat

For each case (tiny LLaMA: L=2 C=64 NH=4 HS=16 H=176 V=256 T=32 B=2, theta 10000, eps 1e-5; with
KVH = 2, KVH = NH = 4 and KVH = 1), it writes a Hugging Face folder (config.json, model.safetensors
F32, seeded random weights with std 0.1 and norm weights 1 + 0.1 N(0, 1)) and an llm.c v1 token file
of random byte tokens, then runs

    REMAT grads --init-from DIR --data TOKENS --batch B --seq T --out R.safetensors

(stdout: one JSON line {"loss": ...}; R.safetensors: every parameter's gradient, HF names, F32) and

    torch_llama.py --mode grads --model DIR --tokens TOKENS --B B --T T --dtype float64 --out P.safetensors

and compares: |loss_r - loss_p| / |loss_p| <= rtol; the gradient names match exactly (none missing,
none extra); for every tensor, max|g_r - g_p| / max|g_p| <= rtol. Prints a table per case.
Exit 0 on agreement, 1 otherwise (the worst offenders listed), 77 (skip) when torch cannot be
imported or the remat binary is missing.

--self-test runs the same cases with `torch_llama.py --dtype float32` in place of remat, then checks
that the comparison catches a perturbed gradient entry, a perturbed loss, a missing and an extra
gradient, and a transposed (wrong-layout) gradient.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
SKIP = 77
DEBIAN_PY = "/usr/bin/python3"

try:
    import torch
except ImportError:
    # a pyenv / venv python3 without torch: rerun under Debian's interpreter, which has python3-torch
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PY) and os.path.exists(DEBIAN_PY) and \
            subprocess.run([DEBIAN_PY, "-c", "import torch"], capture_output=True).returncode == 0:
        os.execv(DEBIAN_PY, [DEBIAN_PY, os.path.abspath(__file__)] + sys.argv[1:])
    print("check_llama_peer: SKIP: torch is not importable (apt-get install python3-torch)")
    sys.exit(SKIP)

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, here)
import safetensors_py  # noqa: E402
import torch_llama  # noqa: E402

CASES = [("gqa", 4, 2), ("mha", 4, 4), ("mqa", 4, 1)]  # (name, NH, KVH)


def make_case(d, name, NH, KVH, seed, L=2, C=64, H=176, V=256, T=32, B=2):
    os.makedirs(d, exist_ok=True)
    cfg = torch_llama.Config(vocab_size=V, hidden_size=C, intermediate_size=H, num_hidden_layers=L,
                             num_attention_heads=NH, num_key_value_heads=KVH, rms_norm_eps=1e-5, rope_theta=10000.0,
                             max_position_embeddings=max(T, 64))
    torch.manual_seed(seed)
    m = torch_llama.LlamaForCausalLM(cfg)
    m.init_hf(std=0.1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg.to_hf("float32"), f, indent=2)
    safetensors_py.save(os.path.join(d, "model.safetensors"),
                        {n: p.detach().float() for n, p in m.named_parameters()}, {"format": "pt"})
    g = torch.Generator().manual_seed(seed + 1)
    toks = torch.randint(0, 256, (B * T + 1 + 7,), generator=g).tolist()
    tokpath = os.path.join(d, "tokens.bin")
    torch_llama.write_tokens_llmc(tokpath, toks, version=1)
    return dict(name=name, dir=d, tokens=tokpath, B=B, T=T, desc=f"L={L} C={C} NH={NH} KVH={KVH} HS={C // NH} "
                f"H={H} V={V} T={T} B={B}")


def last_json(out, what):
    lines = [l for l in out.splitlines() if l.strip().startswith("{")]
    if not lines:
        raise RuntimeError(f"{what}: no JSON line on stdout:\n{out}")
    return json.loads(lines[-1])


def run_peer(case, dtype, out):
    cmd = [sys.executable, os.path.join(here, "torch_llama.py"), "--mode", "grads", "--model", case["dir"],
           "--tokens", case["tokens"], "--B", str(case["B"]), "--T", str(case["T"]), "--dtype", dtype,
           "--threads", "1", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"peer failed ({' '.join(cmd)}):\n{r.stdout}{r.stderr}")
    return last_json(r.stdout, "torch_llama.py")["loss"]


def run_remat(remat, case, out):
    cmd = [remat, "grads", "--init-from", case["dir"], "--data", case["tokens"], "--batch", str(case["B"]),
           "--seq", str(case["T"]), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"remat failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return last_json(r.stdout, "remat grads")["loss"]


def compare(loss_r, grads_r, loss_p, grads_p, rtol):
    """Returns (ok, rows, problems); rows = [(name, rel err or None, max|g_p|)], sorted worst first."""
    problems = []
    loss_rel = abs(loss_r - loss_p) / max(abs(loss_p), 1e-30)
    if not loss_rel <= rtol:  # NaN fails too
        problems.append(f"loss: {loss_r!r} vs peer {loss_p!r}, rel {loss_rel:.3e} > {rtol:g}")
    missing = sorted(set(grads_p) - set(grads_r))
    extra = sorted(set(grads_r) - set(grads_p))
    if missing:
        problems.append(f"missing gradients: {missing}")
    if extra:
        problems.append(f"extra gradients: {extra}")
    rows = []
    for n in sorted(set(grads_p) & set(grads_r)):
        gp, gr = grads_p[n].double(), grads_r[n].double()
        scale = gp.abs().max().item()
        if tuple(gr.shape) != tuple(gp.shape):
            problems.append(f"{n}: shape {tuple(gr.shape)}, peer {tuple(gp.shape)}")
            rows.append((n, float("inf"), scale))
            continue
        if grads_r[n].dtype != torch.float32:
            problems.append(f"{n}: dtype {grads_r[n].dtype}, expected F32")
        err = (gr - gp).abs().max().item() / max(scale, 1e-30)
        if not torch.isfinite(gr).all():
            err = float("inf")
        rows.append((n, err, scale))
    rows.sort(key=lambda r: -r[1])  # worst first (NaN-free: non-finite gradients are inf)
    problems += [f"{n}: max|dg| / max|g| = {err:.3e} > {rtol:g}" for n, err, _ in rows if not err <= rtol]
    return not problems, dict(loss_rel=loss_rel, rows=rows), problems


def print_table(case, loss_r, loss_p, res, rtol, label):
    print(f"== {case['name']}: {case['desc']}  ({label} vs PyTorch float64)")
    print(f"   loss {label} {loss_r:.10f}  peer {loss_p:.10f}  rel {res['loss_rel']:.2e}")
    print(f"   {'tensor':52s} {'max rel err':>11s} {'max|g|':>10s}")
    for n, err, scale in sorted(res["rows"]):
        flag = "" if err <= rtol else "  <-- FAIL"
        print(f"   {n:52s} {err:11.2e} {scale:10.3e}{flag}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remat", default=os.path.join(root, "build", "remat"))
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--self-test", action="store_true",
                    help="the PyTorch peer in float32 stands in for remat; also checks that errors are caught")
    ap.add_argument("--keep", default="", help="keep the folders, token files and gradients under this directory")
    a = ap.parse_args()
    if not a.self_test and not (os.path.isfile(a.remat) and os.access(a.remat, os.X_OK)):
        print(f"check_llama_peer: SKIP: no remat binary at {a.remat}")
        return SKIP
    label = "torch-f32" if a.self_test else "remat"
    work = a.keep or tempfile.mkdtemp(prefix="check_llama_peer.")
    os.makedirs(work, exist_ok=True)
    failures, results = [], []
    try:
        for i, (name, NH, KVH) in enumerate(CASES):
            case = make_case(os.path.join(work, name), name, NH, KVH, a.seed + 10 * i)
            # Beside the model folder, not inside it: remat refuses to write into its --init-from folder.
            pg, rg = os.path.join(work, f"{name}_grads_torch_f64.safetensors"), os.path.join(
                work, f"{name}_grads_torch_f32.safetensors" if a.self_test else f"{name}_grads_remat.safetensors")
            loss_p = run_peer(case, "float64", pg)
            loss_r = run_peer(case, "float32", rg) if a.self_test else run_remat(a.remat, case, rg)
            grads_p, grads_r = safetensors_py.load(pg)[0], safetensors_py.load(rg)[0]
            ok, res, problems = compare(loss_r, grads_r, loss_p, grads_p, a.rtol)
            print_table(case, loss_r, loss_p, res, a.rtol, label)
            results.append((case, loss_r, grads_r, loss_p, grads_p))
            if not ok:
                failures += [f"{name}: {p}" for p in problems[:8]]
                if len(problems) > 8:
                    failures.append(f"{name}: ... and {len(problems) - 8} more")
        if a.self_test:
            failures += negative_controls(results[0], a.rtol)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("FAIL (worst first per case):")
        for f in failures:
            print("  " + f)
        return 1
    print(f"OK: {len(CASES)} cases agree within rtol {a.rtol:g}" + (" (self-test, negative controls caught)"
                                                                    if a.self_test else ""))
    return 0


def negative_controls(result, rtol):
    """Each deliberate corruption of the stand-in's output must fail the comparison."""
    case, loss_r, grads_r, loss_p, grads_p = result
    failures = []

    def expect_fail(what, lr, gr):
        ok, res, problems = compare(lr, gr, loss_p, grads_p, rtol)
        print(f"   negative control: {what:58s} -> {'NOT CAUGHT' if ok else 'caught: ' + problems[0]}")
        if ok:
            failures.append(f"negative control not caught: {what}")

    print("== negative controls (self-test)")
    name = "model.layers.1.self_attn.k_proj.weight"
    g = {k: v.clone() for k, v in grads_r.items()}
    j = int(g[name].abs().argmin())  # the smallest entry: only the tensor's own scale can catch it
    g[name].view(-1)[j] += 3 * rtol * grads_p[name].abs().max().item()
    expect_fail(f"{name}[{j}] += 3 rtol max|g|", loss_r, g)
    g = {k: v.clone() for k, v in grads_r.items()}
    g["model.norm.weight"] *= 1 + 3 * rtol
    expect_fail("model.norm.weight *= 1 + 3 rtol", loss_r, g)
    expect_fail("loss *= 1 + 3 rtol", loss_r * (1 + 3 * rtol), grads_r)
    g = dict(grads_r)
    del g["lm_head.weight"]
    expect_fail("lm_head.weight missing", loss_r, g)
    g = dict(grads_r)
    g["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(8)
    expect_fail("an extra gradient", loss_r, g)
    g = dict(grads_r)
    w = g["model.layers.0.mlp.gate_proj.weight"]
    g["model.layers.0.mlp.gate_proj.weight"] = w.t().contiguous().reshape(w.shape)  # (in, out) data, (out, in) shape
    expect_fail("gate_proj gradient stored (in, out)", loss_r, g)
    g = dict(grads_r)
    g["model.layers.0.mlp.up_proj.weight"] = g["model.layers.0.mlp.up_proj.weight"].double()
    expect_fail("a gradient stored as F64", loss_r, g)
    # An engine that rotates interleaved pairs (x[2i], x[2i+1]) (Meta's / GPT-J's RoPE) instead of HF's halves
    # computes exactly HF's model on q/k weights whose rows are permuted within each head; its gradients are
    # the HF gradients permuted back. Emulate it with the float32 peer on a permuted copy of the folder.
    d2 = case["dir"] + "_interleaved"
    shutil.copytree(case["dir"], d2, dirs_exist_ok=True)
    cfg = torch_llama.Config.from_hf(os.path.join(d2, "config.json"))
    HS, h = cfg.head_dim, cfg.head_dim // 2
    perm = torch.tensor([2 * i for i in range(h)] + [2 * i + 1 for i in range(h)])
    w, _ = safetensors_py.load(os.path.join(case["dir"], "model.safetensors"))
    qk = [n for n in w if n.endswith("q_proj.weight") or n.endswith("k_proj.weight")]
    for n in qk:
        w[n] = w[n].view(-1, HS, w[n].shape[1])[:, perm, :].reshape(w[n].shape).contiguous()
    safetensors_py.save(os.path.join(d2, "model.safetensors"), w, {"format": "pt"})
    case2 = dict(case, dir=d2)
    out = os.path.join(d2, "grads_interleaved.safetensors")
    loss_i = run_peer(case2, "float32", out)
    g = safetensors_py.load(out)[0]
    for n in qk:
        back = torch.empty_like(g[n]).view(-1, HS, g[n].shape[1])
        back[:, perm, :] = g[n].view(-1, HS, g[n].shape[1])
        g[n] = back.reshape(g[n].shape)
    expect_fail("RoPE on interleaved pairs instead of halves", loss_i, g)
    return failures


if __name__ == "__main__":
    sys.exit(main())
