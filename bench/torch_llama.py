#!/usr/bin/python3
"""LLaMA decoder in PyTorch (Debian python3-torch 1.13, CPU) with Hugging Face parameter names: the
independent peer of remat's LLaMA, for speed/memory (--mode bench) and for gradients (--mode grads).

Run with the Debian interpreter (/usr/bin/python3; a pyenv `python3` has no torch). For timings use
bench/run_torch_llama.sh, which sets up the environment exactly as ../shared/peers/run.sh does.

Model (LlamaForCausalLM, no biases, untied head unless config.json says tie_word_embeddings):
  x0 = model.embed_tokens.weight[idx]                                   (V, C)
  per layer i (model.layers.i.*):
    h = input_layernorm(x)             RMSNorm: x * rsqrt(mean(x^2) + eps) * w, in fp32 (or fp64)
    q, k, v = self_attn.{q,k,v}_proj(h)   weights (out, in): q NH*HS x C, k/v KVH*HS x C
    RoPE (HF rotate_half) on q and k per head; table cos/sin(t * theta^(-2i/HS)), i < HS/2,
      computed in float64 and cast to float32 (then to the run's dtype):
      x'[i] = x[i] cos - x[i+HS/2] sin,  x'[i+HS/2] = x[i+HS/2] cos + x[i] sin
    causal softmax(q k^T / sqrt(HS)) v, query head h reads kv head h // (NH/KVH) (HF repeat_kv)
    x = x + self_attn.o_proj(attn)                 o: C x NH*HS
    x = x + mlp.down_proj(silu(gate_proj(h2)) * up_proj(h2)),  h2 = post_attention_layernorm(x)
  logits = lm_head(model.norm(x_L)); loss = mean cross-entropy over all B*T positions.

Modes
  --mode bench   one config + one policy per process, as ../shared/peers/torch_gpt2_ckpt.py: saved-
                 activation bytes (saved_tensors_hooks), baseline / peak RSS, median step time of
                 forward + backward + AdamW, tokens/s; one JSON line on stdout (and appended to --out)
                 with the GPT-2 peer's keys (plus arch, kv_heads, hidden, rope_theta, rms_norm_eps).
                 Policies: none | block (checkpoint per block, use_reentrant=False, RNG preserved) |
                 sqrt (checkpoint_sequential, round(sqrt(L)) segments, last one not checkpointed) |
                 every-k --k K.  --autocast bf16 runs the step under torch.autocast("cpu", bfloat16).
                 Init as HF: normal(0, 0.02) for linears and the embedding, ones for the norms.
  --mode grads   --model DIR --tokens FILE --B B --T T --out GRADS.safetensors [--dtype float32|float64]
                 loads DIR/config.json + DIR/model.safetensors (F32 or BF16; or a sharded
                 model.safetensors.index.json), inputs row b = tokens[b*T : b*T+T], targets shifted by
                 one; prints {"loss": ...} and writes every parameter's gradient (HF names) as F32.
                 Token file: llm.c (256 int32 header, magic 20240520, version 1 = uint16 / 2 = uint32
                 tokens, header[2] = count) or raw uint16.
  --mode check   self-checks in float64: torch.autograd.gradcheck of the loss w.r.t. a few parameter
                 tensors of a tiny model, and block / sqrt / every-k gradients equal to none's.

Examples
  bench/run_torch_llama.sh --L 12 --d 256 --heads 4 --kv-heads 2 --hidden 688 --T 256 --B 8 --policy block
  /usr/bin/python3 bench/torch_llama.py --mode grads --model DIR --tokens t.bin --B 2 --T 32 --out g.safetensors
  /usr/bin/python3 bench/torch_llama.py --mode check
"""
import argparse
import contextlib
import json
import math
import os
import platform
import resource
import statistics
import struct
import sys
import time
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

try:
    from torch.func import functional_call
except ImportError:  # torch 1.13
    from torch.nn.utils.stateless import functional_call

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention") or hasattr(F, "_scaled_dot_product_attention")


# ----------------------------------------------------------------------------- config
class Config:
    def __init__(self, vocab_size=256, hidden_size=256, intermediate_size=688, num_hidden_layers=12,
                 num_attention_heads=4, num_key_value_heads=None, rms_norm_eps=1e-5, rope_theta=10000.0,
                 max_position_embeddings=2048, head_dim=None, tie_word_embeddings=False):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.rms_norm_eps, self.rope_theta = float(rms_norm_eps), float(rope_theta)
        self.max_position_embeddings = max_position_embeddings
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.tie_word_embeddings = bool(tie_word_embeddings)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads {num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")

    @classmethod
    def from_hf(cls, path):
        with open(path) as f:
            j = json.load(f)
        if j.get("model_type", "llama") != "llama":
            raise ValueError(f"{path}: model_type {j.get('model_type')!r}, expected 'llama'")
        if j.get("rope_scaling"):
            raise ValueError(f"{path}: rope_scaling {j['rope_scaling']} is not supported")
        if j.get("hidden_act", "silu") != "silu":
            raise ValueError(f"{path}: hidden_act {j['hidden_act']!r}, expected 'silu'")
        if j.get("attention_bias") or j.get("mlp_bias"):
            raise ValueError(f"{path}: attention_bias / mlp_bias are not supported")
        return cls(vocab_size=j["vocab_size"], hidden_size=j["hidden_size"], intermediate_size=j["intermediate_size"],
                   num_hidden_layers=j["num_hidden_layers"], num_attention_heads=j["num_attention_heads"],
                   num_key_value_heads=j.get("num_key_value_heads"), rms_norm_eps=j.get("rms_norm_eps", 1e-6),
                   rope_theta=j.get("rope_theta", 10000.0),
                   max_position_embeddings=j.get("max_position_embeddings", 2048), head_dim=j.get("head_dim"),
                   tie_word_embeddings=j.get("tie_word_embeddings", False))

    def to_hf(self, torch_dtype="float32"):
        return dict(architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype=torch_dtype,
                    vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                    intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
                    num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
                    head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta,
                    max_position_embeddings=self.max_position_embeddings, hidden_act="silu",
                    tie_word_embeddings=self.tie_word_embeddings, attention_bias=False, mlp_bias=False,
                    rope_scaling=None, initializer_range=0.02, bos_token_id=1, eos_token_id=2)


# ----------------------------------------------------------------------------- model
def rope_table(T, HS, theta):
    """cos, sin of shape (T, HS): angle(t, i) = t * theta^(-2i/HS) for i < HS/2, repeated for the
    second half (HF layout); computed in float64, cast to float32."""
    i = torch.arange(HS // 2, dtype=torch.float64)
    inv = torch.pow(torch.tensor(float(theta), dtype=torch.float64), -2.0 * i / HS)
    t = torch.arange(T, dtype=torch.float64)
    ang = torch.outer(t, inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Rotary(nn.Module):
    """Shared by every layer; buffers are not persistent (not in the state dict)."""

    def __init__(self, T, HS, theta):
        super().__init__()
        cos, sin = rope_table(T, HS, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):  # x: (B, heads, T, HS)
        T = x.shape[-2]
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        return x * cos + rotate_half(x) * sin


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        xf = x.float() if dt in (torch.float16, torch.bfloat16) else x  # fp32 (fp64 stays fp64)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dt)  # HF: weight * normalised.to(input_dtype)


class Attention(nn.Module):
    def __init__(self, cfg, rotary, attn_impl):
        super().__init__()
        C, NH, KVH, HS = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.NH, self.KVH, self.HS, self.attn_impl = NH, KVH, HS, attn_impl
        self.q_proj = nn.Linear(C, NH * HS, bias=False)
        self.k_proj = nn.Linear(C, KVH * HS, bias=False)
        self.v_proj = nn.Linear(C, KVH * HS, bias=False)
        self.o_proj = nn.Linear(NH * HS, C, bias=False)
        self.__dict__["rotary"] = rotary  # shared, not a submodule (not repeated in module listings)

    def forward(self, x):
        B, T, _ = x.shape
        NH, KVH, HS = self.NH, self.KVH, self.HS
        q = self.q_proj(x).view(B, T, NH, HS).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KVH, HS).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KVH, HS).transpose(1, 2)
        q, k = self.rotary(q), self.rotary(k)
        if KVH != NH:  # HF repeat_kv: query head h reads kv head h // (NH / KVH)
            rep = NH // KVH
            k = k[:, :, None].expand(B, KVH, rep, T, HS).reshape(B, NH, T, HS)
            v = v[:, :, None].expand(B, KVH, rep, T, HS).reshape(B, NH, T, HS)
        if self.attn_impl == "naive":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        elif hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: private, returns (out, attn_weights)
            y, _ = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)
        y = y.transpose(1, 2).contiguous().view(B, T, NH * HS)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(C, H, bias=False)
        self.up_proj = nn.Linear(C, H, bias=False)
        self.down_proj = nn.Linear(H, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, rotary, attn_impl):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, rotary, attn_impl)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg, rotary, attn_impl):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.Sequential(*[DecoderLayer(cfg, rotary, attn_impl) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, T=None, attn_impl="naive", policy="none", k=2):
        super().__init__()
        self.cfg, self.policy, self.k = cfg, policy, k
        T = max(T or 0, cfg.max_position_embeddings)
        self.rotary = Rotary(T, cfg.head_dim, cfg.rope_theta)
        self.model = LlamaModel(cfg, self.rotary, attn_impl)
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.ckpt_recorder = None  # callable(tensor) -> None, set by the measurement code
        self.init_hf()

    def init_hf(self, std=0.02):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=std)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)

    def _ckpt(self, fn, x):
        if self.ckpt_recorder is not None:
            self.ckpt_recorder(x)  # the segment input is kept alive by checkpoint's closure
        return checkpoint(fn, x, use_reentrant=False, preserve_rng_state=True)

    def forward(self, idx, targets):
        x = self.model.embed_tokens(idx)
        layers, p, L = self.model.layers, self.policy, self.cfg.num_hidden_layers
        if p == "none":
            x = layers(x)
        elif p == "block":
            for blk in layers:
                x = self._ckpt(blk, x)
        elif p == "sqrt":
            x = checkpoint_sequential(layers, max(1, round(math.sqrt(L))), x)  # 1.13: reentrant; last seg. stored
        elif p == "every-k":
            for s in range(0, L, self.k):
                x = self._ckpt(layers[s:s + self.k], x)
        else:
            raise ValueError(p)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, w)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# ----------------------------------------------------------------------------- I/O
def load_hf_folder(d, dtype, T):
    cfg = Config.from_hf(os.path.join(d, "config.json"))
    model = LlamaForCausalLM(cfg, T=T)
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        tensors, _ = safetensors_py.load(single)
    else:
        idx = os.path.join(d, "model.safetensors.index.json")
        if not os.path.exists(idx):
            raise FileNotFoundError(f"{d}: neither model.safetensors nor model.safetensors.index.json")
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for s in shards:
            tensors.update(safetensors_py.load(os.path.join(d, s))[0])
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    extra = sorted(n for n in set(tensors) - set(params) if not n.endswith("rotary_emb.inv_freq"))
    if missing or extra:
        raise ValueError(f"{d}: weights do not match the config: missing {missing[:8]}, unexpected {extra[:8]}")
    with torch.no_grad():
        for n, p in params.items():
            t = tensors[n]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{n}: shape {tuple(t.shape)} in the file, {tuple(p.shape)} from config.json")
            if t.dtype not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
                raise ValueError(f"{n}: dtype {t.dtype} not supported")
            p.copy_(t.to(torch.float32))
    return cfg, model.to(dtype)


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) >= 1024:
        hdr = struct.unpack("<256i", raw[:1024])
        if hdr[0] == 20240520:
            ver, n = hdr[1], hdr[2]
            if ver not in (1, 2):
                raise ValueError(f"{path}: llm.c token file of unknown version {ver}")
            dt, size = (torch.int16, 2) if ver == 1 else (torch.int32, 4)
            if len(raw) - 1024 != n * size:
                raise ValueError(f"{path}: header says {n} tokens, payload is {len(raw) - 1024} bytes")
            t = torch.frombuffer(bytearray(raw[1024:]), dtype=dt).to(torch.int64)
            return t & 0xFFFF if ver == 1 else t & 0xFFFFFFFF
    if len(raw) % 2:
        raise ValueError(f"{path}: raw uint16 token file of odd size {len(raw)}")
    return torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int64) & 0xFFFF


def write_tokens_llmc(path, tokens, version=1):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = 20240520, version, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack(f"<{len(tokens)}{'H' if version == 1 else 'I'}", *[int(t) for t in tokens]))


def batch_from_tokens(tokens, B, T):
    need = B * T + 1
    if tokens.numel() < need:
        raise ValueError(f"token file holds {tokens.numel()} tokens, B*T+1 = {need} needed")
    x = torch.stack([tokens[b * T:b * T + T] for b in range(B)])
    y = torch.stack([tokens[b * T + 1:b * T + T + 1] for b in range(B)])
    return x, y


def grads_mode(args):
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    torch.set_num_threads(args.threads)
    cfg, model = load_hf_folder(args.model, dtype, args.T)
    tokens = read_tokens(args.tokens)
    idx, tgt = batch_from_tokens(tokens, args.B, args.T)
    if int(max(idx.max(), tgt.max())) >= cfg.vocab_size:
        raise ValueError(f"token {int(max(idx.max(), tgt.max()))} >= vocab_size {cfg.vocab_size}")
    model.policy = args.policy
    loss = model(idx, tgt)
    loss.backward()
    grads = {n: p.grad.detach().to(torch.float32) for n, p in model.named_parameters()}
    safetensors_py.save(args.out, grads, {"format": "pt", "loss": repr(loss.item()), "dtype": args.dtype})
    print(json.dumps({"loss": loss.item()}), flush=True)


# ----------------------------------------------------------------------------- measurement (as torch_gpt2_ckpt.py)
def storage_key(t):
    s = t.storage()
    return s.data_ptr(), s.size() * t.element_size()


class SavedBytes:
    """Tracks tensors saved for backward during one forward pass (saved_tensors_hooks pack hook,
    plus the inputs of non-reentrant checkpoint segments, which 1.13 keeps alive in a closure that
    the hook does not see). At the end of forward, sums the bytes of the distinct storages that are
    still alive (dedupe by storage data_ptr); parameter storages are reported separately."""

    def __init__(self, model):
        self.param_ptrs = {p.storage().data_ptr() for p in model.parameters()}
        self.buf_ptrs = {b.storage().data_ptr() for b in model.buffers()}
        self.entries = {}  # ptr -> list of (weakref, nbytes, kind)
        self.n_packed = 0

    def _add(self, t, kind):
        if not isinstance(t, torch.Tensor):
            return
        ptr, nb = storage_key(t)
        self.entries.setdefault(ptr, []).append((weakref.ref(t), nb, kind))

    def pack(self, t):
        self.n_packed += 1
        self._add(t, "hook")
        return t

    @staticmethod
    def unpack(t):
        return t

    def ckpt_input(self, t):
        self._add(t, "ckpt_input")

    def summary(self):
        act = par = buf = 0
        by_kind = {"hook": 0, "ckpt_input": 0}
        n_alive = 0
        for ptr, lst in self.entries.items():
            alive = [(nb, kind) for (w, nb, kind) in lst if w() is not None]
            if not alive:
                continue
            n_alive += 1
            nb = max(a[0] for a in alive)
            if ptr in self.param_ptrs:
                par += nb
            elif ptr in self.buf_ptrs:
                buf += nb
            else:
                act += nb
                kinds = {a[1] for a in alive}
                by_kind["hook" if "hook" in kinds else "ckpt_input"] += nb
        return dict(saved_act_bytes=act, saved_act_hook_bytes=by_kind["hook"],
                    saved_act_ckpt_input_only_bytes=by_kind["ckpt_input"], saved_param_bytes=par,
                    saved_buffer_bytes=buf, n_packed=self.n_packed, n_distinct_alive_storages=n_alive)


def rss_now_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def vm_hwm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_batch(B, T, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, vocab, (B, T + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def env_info():
    import numpy
    blas = []
    try:
        with open("/proc/self/maps") as f:
            blas = sorted({l.split()[-1] for l in f if ("blas" in l or "blis" in l or "dnnl" in l) and "/" in l})
    except OSError:
        pass
    return dict(torch=torch.__version__, python=platform.python_version(), numpy=numpy.__version__,
                torch_threads=torch.get_num_threads(), interop_threads=torch.get_num_interop_threads(),
                blas_libs_mapped=blas,
                OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
                OPENBLAS_L2_SIZE=os.environ.get("OPENBLAS_L2_SIZE", "(unset)"),
                OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "(unset)"),
                OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "(unset)"),
                OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                LD_PRELOAD=os.environ.get("LD_PRELOAD", "(unset)"),
                have_sdpa=HAVE_SDPA, cpu_capability=torch.backends.cpu.get_cpu_capability()
                if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability") else "?")


def cfg_from_flags(a):
    return Config(vocab_size=a.vocab, hidden_size=a.d, intermediate_size=a.hidden, num_hidden_layers=a.L,
                  num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, rms_norm_eps=a.eps,
                  rope_theta=a.rope_theta, max_position_embeddings=a.T)


def bench(args):
    torch.set_num_threads(args.threads)
    if args.config:
        cfg = Config.from_hf(args.config)
        args.L, args.d, args.heads = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads
        args.kv_heads, args.hidden, args.vocab = cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size
        args.eps, args.rope_theta = cfg.rms_norm_eps, cfg.rope_theta
    else:
        cfg = cfg_from_flags(args)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg, T=args.T, attn_impl=args.attn, policy=args.policy, k=args.k)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    # allocate grads and AdamW state up front so the baseline RSS contains params+grads+m+v
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
        st = opt.state[p]
        st["step"] = torch.tensor(0.0)
        st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    n_params = sum(p.numel() for p in model.parameters())
    idx, tgt = make_batch(args.B, args.T, cfg.vocab_size, args.seed + 1)
    a = torch.randn(256, 256)  # touch BLAS / OpenMP pools once so their buffers are in the baseline
    (a @ a).sum().item()
    del a
    base_rss = rss_now_bytes()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hwm_reset = reset_hwm()
    hwm_after_reset = vm_hwm_bytes()

    def amp():
        if args.autocast == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(instrument=False):
        opt.zero_grad(set_to_none=False)
        s = None
        if instrument:
            sb = SavedBytes(model)
            model.ckpt_recorder = sb.ckpt_input
            with torch.autograd.graph.saved_tensors_hooks(sb.pack, sb.unpack), amp():
                loss = model(idx, tgt)
            model.ckpt_recorder = None
            rss_fwd = rss_now_bytes()
            s = sb.summary()
            s["rss_end_of_forward_bytes"] = rss_fwd
        else:
            with amp():
                loss = model(idx, tgt)
        loss.backward()
        opt.step()
        return loss.item(), s

    times, losses, saved = [], [], None
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss, s = step(instrument=(i == 0))
        dt = time.perf_counter() - t0
        if s is not None:
            saved = s
        losses.append(loss)
        if i >= args.warmup:
            times.append(dt)
        print(f"  step {i} {'(warm-up, instrumented)' if i == 0 else '(warm-up)' if i < args.warmup else ''}"
              f" {dt:.3f}s loss {loss:.4f}", file=sys.stderr)
    peak_hwm = vm_hwm_bytes()
    ru_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    med = statistics.median(times)
    rec = dict(kind="bench", label=args.label, arch="llama", L=args.L, d=args.d, heads=args.heads,
               kv_heads=cfg.num_key_value_heads, hidden=args.hidden, head_dim=cfg.head_dim, T=args.T, B=args.B,
               vocab=cfg.vocab_size, rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps, dropout=0.0,
               policy=args.policy, autocast=args.autocast, k=args.k if args.policy == "every-k" else None,
               sqrt_segments=max(1, round(math.sqrt(args.L))) if args.policy == "sqrt" else None,
               attn=args.attn, threads=args.threads, n_params=n_params, tokens_per_step=args.B * args.T,
               warmup=args.warmup, steps=args.steps, step_times_s=[round(t, 4) for t in times],
               step_time_med_s=round(med, 4), tokens_per_s=round(args.B * args.T / med, 1),
               loss_first=losses[0], loss_last=losses[-1],
               base_rss_bytes=base_rss, ru_maxrss_before_steps_bytes=maxrss_before, hwm_reset_ok=hwm_reset,
               hwm_after_reset_bytes=hwm_after_reset, peak_rss_hwm_bytes=peak_hwm, ru_maxrss_bytes=ru_maxrss,
               peak_minus_base_bytes=peak_hwm - base_rss, **saved, env=env_info(), argv=sys.argv[1:])
    line = json.dumps(rec)
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    mb = 1 / 2**20
    pol = f"every-{args.k}" if args.policy == "every-k" else args.policy
    print(f"[{args.label}] llama L={args.L} d={args.d} NH={args.heads} KVH={cfg.num_key_value_heads} H={args.hidden} "
          f"T={args.T} B={args.B} V={cfg.vocab_size} {pol:7s} {args.attn:5s} "
          f"saved_act {saved['saved_act_bytes']*mb:9.1f} MB  base {base_rss*mb:7.1f} MB  peak {peak_hwm*mb:8.1f} MB "
          f"(+{(peak_hwm-base_rss)*mb:8.1f})  step {med:7.3f}s  {args.B*args.T/med:8.1f} tok/s", file=sys.stderr)


# ----------------------------------------------------------------------------- self-checks
def reference_loss(m, idx, tgt):
    """The loss written out position by position and head by head, in float64, from the formulas in the
    module docstring (no repeat_kv, no rotate_half, no batched attention)."""
    cfg = m.cfg
    P = {n: p.detach().double() for n, p in m.named_parameters()}
    NH, KVH, HS, eps = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps
    half = HS // 2
    B, T = idx.shape

    def rms(x, w):
        return x / math.sqrt(float((x * x).mean()) + eps) * w

    def rope(v, t):
        out = v.clone()
        for i in range(half):
            a = torch.tensor(t * float(theta) ** (-2.0 * i / HS), dtype=torch.float64)
            c, s_ = float(a.cos().float()), float(a.sin().float())
            out[i] = v[i] * c - v[i + half] * s_
            out[i + half] = v[i + half] * c + v[i] * s_
        return out

    theta = cfg.rope_theta
    total = 0.0
    for b in range(B):
        xs = [P["model.embed_tokens.weight"][int(idx[b, t])].clone() for t in range(T)]
        for l in range(cfg.num_hidden_layers):
            pre = f"model.layers.{l}."
            hs = [rms(x, P[pre + "input_layernorm.weight"]) for x in xs]
            q = [(P[pre + "self_attn.q_proj.weight"] @ h).view(NH, HS) for h in hs]
            k = [(P[pre + "self_attn.k_proj.weight"] @ h).view(KVH, HS) for h in hs]
            v = [(P[pre + "self_attn.v_proj.weight"] @ h).view(KVH, HS) for h in hs]
            q = [torch.stack([rope(q[t][hh], t) for hh in range(NH)]) for t in range(T)]
            k = [torch.stack([rope(k[t][hh], t) for hh in range(KVH)]) for t in range(T)]
            new = []
            for t in range(T):
                heads = []
                for hh in range(NH):
                    kv = hh // (NH // KVH)
                    sc = torch.tensor([float(q[t][hh] @ k[u][kv]) / math.sqrt(HS) for u in range(t + 1)],
                                      dtype=torch.float64)
                    p = torch.exp(sc - sc.max())
                    p = p / p.sum()
                    heads.append(sum(p[u] * v[u][kv] for u in range(t + 1)))
                x = xs[t] + P[pre + "self_attn.o_proj.weight"] @ torch.cat(heads)
                h2 = rms(x, P[pre + "post_attention_layernorm.weight"])
                g, u_ = P[pre + "mlp.gate_proj.weight"] @ h2, P[pre + "mlp.up_proj.weight"] @ h2
                new.append(x + P[pre + "mlp.down_proj.weight"] @ (g / (1 + torch.exp(-g)) * u_))
            xs = new
        W = P["lm_head.weight"] if "lm_head.weight" in P else P["model.embed_tokens.weight"]
        for t in range(T):
            z = W @ rms(xs[t], P["model.norm.weight"])
            total += float(torch.logsumexp(z, 0) - z[int(tgt[b, t])])
    return total / (B * T)


def check_mode(args):
    torch.set_num_threads(args.threads)
    ok = True
    # 1. finite differences: gradcheck of the loss w.r.t. a few parameter tensors (float64, tiny model)
    cfg = Config(vocab_size=11, hidden_size=16, intermediate_size=20, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=5)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg, T=5).double()
    m.init_hf(std=0.3)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
                p.add_(0.2 * torch.randn_like(p))
    idx, tgt = make_batch(2, 5, cfg.vocab_size, 1)
    names = ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
             "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
             "model.layers.0.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight",
             "model.layers.1.post_attention_layernorm.weight", "model.layers.1.mlp.gate_proj.weight",
             "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight",
             "lm_head.weight"]
    params = dict(m.named_parameters())
    inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)

    def f(*ws):
        return functional_call(m, dict(zip(names, ws)), (idx, tgt))

    t0 = time.perf_counter()
    gc = torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-8, rtol=1e-6, raise_exception=False)
    print(f"gradcheck (float64, L=2 C=16 NH=4 KVH=2 HS=4 H=20 V=11 T=5 B=2, {len(names)} tensors, "
          f"{sum(x.numel() for x in inputs)} entries): {'ok' if gc else 'FAILED'} ({time.perf_counter() - t0:.1f}s)")
    ok &= bool(gc)
    # 1b. a few entries by central differences, printed
    loss0 = m(idx, tgt)
    m.zero_grad()
    loss0.backward()
    g = torch.Generator().manual_seed(3)
    worst = 0.0
    for n in ["model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.gate_proj.weight", "model.norm.weight",
              "model.layers.0.input_layernorm.weight"]:
        p = params[n]
        for _ in range(2):
            j = int(torch.randint(0, p.numel(), (1,), generator=g))
            h = 1e-6
            with torch.no_grad():
                old = p.view(-1)[j].item()
                p.view(-1)[j] = old + h
                lp = m(idx, tgt).item()
                p.view(-1)[j] = old - h
                lm = m(idx, tgt).item()
                p.view(-1)[j] = old
            fd, an = (lp - lm) / (2 * h), p.grad.view(-1)[j].item()
            err = abs(fd - an) / max(abs(an), 1e-12)
            worst = max(worst, err)
            print(f"  {n}[{j}]: autograd {an:+.10e} finite-diff {fd:+.10e} rel {err:.1e}")
    ok &= worst < 1e-6
    # 1c. the forward against a loop-by-loop reference written from the formulas (GQA head mapping, RoPE
    # convention, RMSNorm, SwiGLU, loss), on the gradcheck model
    with torch.no_grad():
        ref = reference_loss(m, idx, tgt)
        got = m(idx, tgt).item()
    print(f"  loop reference loss {ref:.15f}, model {got:.15f}, diff {abs(ref - got):.1e}")
    ok &= abs(ref - got) < 1e-12
    # 2. checkpoint policies: gradients identical to none (float32 and float64)
    for dt in (torch.float32, torch.float64):
        cfg = Config(vocab_size=64, hidden_size=32, intermediate_size=88, num_hidden_layers=5, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=16)
        torch.manual_seed(1)
        m = LlamaForCausalLM(cfg, T=16).to(dt)
        m.init_hf(std=0.1)
        idx, tgt = make_batch(3, 16, cfg.vocab_size, 2)
        ref = None
        for pol, k in (("none", 2), ("block", 2), ("sqrt", 2), ("every-k", 2), ("every-k", 3)):
            m.policy, m.k = pol, k
            m.zero_grad(set_to_none=True)
            loss = m(idx, tgt)
            loss.backward()
            grads = {n: p.grad.clone() for n, p in m.named_parameters()}
            if ref is None:
                ref = (loss.item(), grads)
                continue
            d = max((grads[n] - ref[1][n]).abs().max().item() for n in grads)
            dl = loss.item() - ref[0]
            label = pol if pol != "every-k" else f"every-{k}"
            print(f"  {str(dt)[6:]:8s} {label:8s} loss diff {dl:.1e} "
                  f"max |grad - grad(none)| {d:.1e}")
            ok &= d == 0.0 and dl == 0.0
    print("check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", default="bench", choices=["bench", "grads", "check"])
    # bench
    ap.add_argument("--config", default="", help="bench: a Hugging Face config.json instead of the model flags")
    ap.add_argument("--L", type=int, default=12)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0, help="0: same as --heads")
    ap.add_argument("--hidden", type=int, default=0, help="MLP width; 0: LLaMA's 256-multiple of 8d/3")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-5, help="RMSNorm epsilon")
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.0, help="accepted for symmetry; must be 0")
    ap.add_argument("--policy", default="none", choices=["none", "block", "sqrt", "every-k"])
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--attn", default="naive", choices=["naive", "sdpa"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--autocast", default="none", choices=["none", "bf16"])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default="", help="bench: JSON lines file to append to; grads: gradients .safetensors")
    # grads
    ap.add_argument("--model", default="", help="grads: Hugging Face folder (config.json + model.safetensors)")
    ap.add_argument("--tokens", default="", help="grads: llm.c token file or raw uint16")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    a = ap.parse_args()
    if a.dropout != 0.0:
        sys.exit("torch_llama: LLaMA has no dropout here (--dropout must be 0)")
    if a.kv_heads == 0:
        a.kv_heads = a.heads
    if a.hidden == 0:
        a.hidden = 256 * ((int(2 * 4 * a.d / 3) + 255) // 256)
    if a.attn == "sdpa" and not HAVE_SDPA:
        sys.exit("no scaled_dot_product_attention in this torch")
    if a.mode == "bench":
        bench(a)
    elif a.mode == "grads":
        if not (a.model and a.tokens and a.out):
            sys.exit("torch_llama --mode grads needs --model DIR --tokens FILE --out GRADS.safetensors")
        grads_mode(a)
    else:
        sys.exit(check_mode(a))


if __name__ == "__main__":
    main()
