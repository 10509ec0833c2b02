// Differentiable ops over Tensors. Each op runs its kernel, and when recording builds a Node whose
// saved tensors are declared in one place (the node's fields, set through autograd::save), with its
// FLOPs. Names are the activation table's names: an op called "h.3.ln_1" produces "h.3.ln_1" (its
// output) and "h.3.ln_1.mean" / "h.3.ln_1.rstd". Under a ShapeOnlyScope (core/tensor.h) ops skip
// their kernels but build the same nodes: that dry run is the planner's activation table.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "autograd/tape.h"

namespace remat::autograd {

// Where a dropout site draws its mask: element i uses Philox(seed, offset + i).
struct Rng {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

enum class AttentionKind { Naive, Flash };
const char* attention_kind_name(AttentionKind k);

// Precision. Every op takes fp32 or bf16 activations (core/dtype.h) and returns its input's dtype,
// except where an argument says otherwise: the embedding and the norms write `out_dtype`, and add()
// returns its first operand's dtype (an fp32 residual stream plus a bf16 branch: --fp32-residual).
// An op dispatches once on its dtypes (autograd/dispatch.h) to its kernel over that storage type:
// on bf16, bf16 storage, fp32 math, fp32 norm statistics and log-sum-exp; its activation gradients are bf16, its parameter gradients fp32. Weights: norms,
// biases and embedding tables are the fp32 masters; a matmul takes the weight in its input's dtype
// (Model::mm_weight).
//
// (B*T) tokens -> (B, T, C) = wte[token] + wpe[position]; an undefined wpe means no positions.
Tensor embedding(std::span<const int32_t> tokens, const Tensor& wte, const Tensor& wpe, int64_t B, int64_t T,
                 const std::string& name, DType out_dtype = DType::F32);
// Layernorm over the last dimension. Saves the input, mean and rstd (fp32).
Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& name,
                 DType out_dtype = DType::F32);
// x (..., C) @ w (C, OC) + b (OC): Hugging Face Conv1D layout. Saves the input.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& name);
// x (..., C) @ w^T where w is (OC, C): the tied LM head. Saves the input.
Tensor linear_nt(const Tensor& x, const Tensor& w, const std::string& name);
// Causal self-attention over qkv (B, T, (NH + 2*KVH) * HS) -> (B, T, NH * HS): NH query heads,
// KVH key/value heads (grouped-query attention when KVH < NH; GPT-2's qkv (B, T, 3C) is KVH = NH).
// Naive saves qkv and the (B, NH, T, T) probabilities; flash saves qkv, its output and the
// (B, NH, T) log-sum-exp. Neither stores a mask.
Tensor attention(const Tensor& qkv, int64_t NH, int64_t KVH, float p, Rng rng, AttentionKind kind,
                 const std::string& name);
// RMSNorm over the last dimension (LLaMA). Saves the input and rstd.
Tensor rmsnorm(const Tensor& x, const Tensor& w, float eps, const std::string& name, DType out_dtype = DType::F32);
// silu(gate) * up (LLaMA's SwiGLU MLP). Saves gate and up.
Tensor swiglu(const Tensor& gate, const Tensor& up, const std::string& name);
// Rotary position embeddings on q (B, T, NH*HS) and k (B, T, KVH*HS) (Hugging Face's rotate_half
// convention, angle t * theta^(-2i/HS)), packed with v into the attention's qkv layout. Saves nothing:
// the backward rotates back with tables it rebuilds. `pos0` > 0 (generation with a key/value cache:
// the tokens are positions pos0 .. pos0+T-1) is forward only, not under a tape.
Tensor rope_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t NH, int64_t KVH, float theta,
                const std::string& name, int64_t pos0 = 0);
// Generation with a key/value cache (model/sample.h): one layer's keys and values of the positions so
// far, fp32, (capacity, KVH*HS) each.
struct KVLayer {
  Tensor k, v;
};
// Causal attention of the n tokens of qkv (1, n, (NH + 2*KVH)*HS), at positions pos .. pos+n-1, over
// the keys and values of positions 0 .. pos+n-1, after writing theirs into `kv` (kernels/
// attention_decode.h). Forward only, not under a tape. -> (1, n, NH*HS) in qkv's dtype.
Tensor attention_cached(const Tensor& qkv, int64_t NH, int64_t KVH, const KVLayer& kv, int64_t pos,
                        const std::string& name);
// Tanh-form GELU. Saves the input.
Tensor gelu(const Tensor& x, const std::string& name);
// a + b, in a's dtype (a and b both fp32, both bf16, or a fp32 and b bf16). Saves nothing.
Tensor add(const Tensor& a, const Tensor& b, const std::string& name);
// Inverted dropout. Saves nothing: backward regenerates the mask from (seed, offset).
// p == 0 returns x itself.
Tensor dropout(const Tensor& x, float p, Rng rng, const std::string& name);
// Mean softmax cross-entropy over positions with a target >= 0, times `scale`, as a (1,) tensor.
// `count` is the number of positions the mean divides by (so micro-batches can share one mean).
// Saves the logits and the per-row log-sum-exp.
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, double count, const std::string& name);

}  // namespace remat::autograd
