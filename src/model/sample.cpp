#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "autograd/tape.h"
#include "core/error.h"
#include "core/text.h"
#include "core/signal_point.h"
#include "core/threads.h"

namespace remat {

void check_sample_options(const SampleOptions& o, int64_t V) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw Error("sample", "--temperature must be a number >= 0, got " + short_number(o.temperature),
                "e.g. --temperature 0.8 (0: always the most likely token)");
  if (o.top_k < 0 || o.top_k > V)
    throw Error("sample", "--top-k must be between 0 and the vocabulary size " + std::to_string(V) + ", got " +
                              std::to_string(o.top_k),
                "e.g. --top-k 40 (0: the whole vocabulary)");
  if (o.tokens < 0)
    throw Error("sample", "--tokens must be >= 0, got " + std::to_string(o.tokens), "e.g. --tokens 200");
}

namespace {
// Row `r` of a (1, n, V) logits tensor, widened exactly from bf16 (--precision bf16).
std::vector<float> logits_row(const Tensor& logits, int64_t r) {
  const int64_t V = logits.dim(-1);
  std::vector<float> out(static_cast<size_t>(V));
  if (logits.is_bf16())
    for (int64_t j = 0; j < V; ++j) out[size_t(j)] = bf16_to_float(logits.data_bf16()[r * V + j]);
  else
    std::copy_n(logits.data() + r * V, V, out.begin());
  return out;
}

// The last position of x (1, n, C) as (1, 1, C): the head runs on it alone.
Tensor last_position(const Tensor& x) {
  const int64_t n = x.dim(1), C = x.dim(2);
  Tensor last = Tensor::empty({1, 1, C}, Category::Activation, "last_position", x.dtype());
  if (last.shape_only()) return last;
  if (x.is_bf16()) std::copy_n(x.data_bf16() + (n - 1) * C, C, last.data_bf16());
  else std::copy_n(x.data() + (n - 1) * C, C, last.data());
  return last;
}
}  // namespace

std::vector<float> cached_logits(const Model& model, KVCache& kv, std::span<const int32_t> tokens) {
  REMAT_ASSERT(!tokens.empty() && kv.len + int64_t(tokens.size()) <= kv.capacity(), "cached_logits: no room in the cache");
  autograd::Recorder r;  // no tape: nothing saved
  autograd::RecordScope scope(r);
  const int64_t pos = kv.len;
  Tensor x = model.embed_at(tokens, pos);
  for (int i = 0; i < model.num_layers(); ++i) x = model.block_cached(i, x, kv.layers[size_t(i)], pos);
  kv.len += int64_t(tokens.size());
  const Tensor logits = model.logits(last_position(x));
  if (logits.shape_only()) return {};
  return logits_row(logits, 0);
}

std::vector<float> next_logits(const Model& model, std::span<const int32_t> context) {
  const ModelConfig& cfg = model.config();
  REMAT_ASSERT(!context.empty(), "next_logits needs a non-empty context");
  const int64_t len = std::min<int64_t>(int64_t(context.size()), cfg.T);
  const std::span<const int32_t> window = context.subspan(context.size() - size_t(len));
  autograd::Recorder r;  // no tape: nothing saved
  autograd::RecordScope scope(r);
  const StepRng off{0, false};
  Tensor x = model.embed(window, 1, len, off);
  for (int i = 0; i < model.num_layers(); ++i) x = model.block(i, x, off);
  const Tensor logits = model.logits(last_position(x));  // the head on the last position alone
  if (logits.shape_only()) return {};
  return logits_row(logits, 0);
}

size_t generation_bytes(const Model& model, int64_t prompt_len, int64_t tokens) {
  if (tokens <= 0 || prompt_len <= 0) return 0;
  const int64_t T = model.config().T;
  Allocator acct(/*track_names=*/false);
  {
    ShapeOnlyScope shapes;
    DryRunAccount counted(acct);
    std::vector<int32_t> ctx(size_t(std::min(prompt_len + tokens - 1, T + 1)), 0);
    // generate()'s two regimes at their largest: the cache filled by the prompt, then its last
    // position; and, once the window slides, the window's whole forward.
    if (prompt_len < T) {
      const int64_t capacity = std::min(T, prompt_len + tokens - 1), first = std::min(prompt_len, capacity);
      KVCache kv = model.make_kv_cache(capacity);
      const std::span<const int32_t> all(ctx.data(), size_t(capacity));
      cached_logits(model, kv, all.first(size_t(first)));
      if (capacity > first) {
        kv.len = capacity - 1;
        cached_logits(model, kv, all.subspan(size_t(capacity - 1)));
      }
    }
    if (prompt_len + tokens - 1 > T || prompt_len >= T) next_logits(model, std::span<const int32_t>(ctx).first(size_t(T)));
  }
  return acct.peak_total();
}

int32_t pick_token(std::span<const float> logits, double temperature, int64_t top_k, std::mt19937_64& gen) {
  const int64_t V = int64_t(logits.size());
  REMAT_ASSERT(V > 0, "pick_token needs logits");
  for (int64_t j = 0; j < V; ++j)
    if (!std::isfinite(logits[size_t(j)]))
      throw Error("sample", "the model's logit for token " + std::to_string(j) + " is " +
                                (std::isnan(logits[size_t(j)]) ? "NaN" : "infinite"),
                  "the weights are broken (a diverged run?); sample from another checkpoint");
  // Candidates by logit, highest first; ties keep the lower id first.
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  const auto better = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  };
  if (temperature == 0) return *std::min_element(ids.begin(), ids.end(), better);
  const int64_t k = top_k == 0 ? V : std::min(top_k, V);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  ids.resize(size_t(k));
  const double mx = logits[size_t(ids[0])];
  std::vector<double> p(ids.size());
  double z = 0;
  for (size_t i = 0; i < ids.size(); ++i) z += p[i] = std::exp((double(logits[size_t(ids[i])]) - mx) / temperature);
  // One uniform in [0, 1) from the top 53 bits: the same on every standard library.
  const double u = double(gen() >> 11) * 0x1.0p-53 * z;
  double acc = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[0];  // rounding left u at z: the most likely token (p[0] = 1 is the largest term)
}

std::vector<int32_t> generate(const Model& model, std::span<const int32_t> prompt, const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token) {
  const int64_t V = model.config().V;
  check_sample_options(o, V);
  if (prompt.empty()) throw Error("sample", "the prompt is empty", "give at least one token to continue");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= V)
      throw Error("sample", "prompt token " + std::to_string(i) + " is " + std::to_string(prompt[i]) +
                                ", outside the vocabulary 0.." + std::to_string(V - 1),
                  "give token ids below " + std::to_string(V));
  std::vector<int32_t> ctx(prompt.begin(), prompt.end());
  ctx.reserve(prompt.size() + size_t(o.tokens));
  std::mt19937_64 gen(o.seed);
  if (o.tokens == 0) return {};
  // Each token sees the last block-size tokens of the context. While the context fits, the cache
  // holds all of it and each new token runs alone. Once the window slides, every position changes
  // (GPT-2's learned positions, and what each later key saw): each token is then the window's whole
  // forward, as without a cache, and the cache is given back.
  const int64_t T = model.config().T;
  KVCache kv;
  if (int64_t(prompt.size()) < T)
    kv = model.make_kv_cache(std::min<int64_t>(T, int64_t(prompt.size()) + o.tokens - 1));
  for (int64_t n = 0; n < o.tokens; ++n) {
    signal_point("sample");
    threads::adapt();
    if (o.stop && o.stop->load() != 0) break;
    if (int64_t(ctx.size()) > kv.capacity()) kv = KVCache();
    const std::vector<float> row =
        kv.layers.empty() ? next_logits(model, ctx)
                          : cached_logits(model, kv, std::span<const int32_t>(ctx).subspan(size_t(kv.len)));
    const size_t drawable = o.vocab > 0 && o.vocab < V ? size_t(o.vocab) : row.size();
    const int32_t tok = pick_token(std::span<const float>(row).first(drawable), o.temperature,
                                   std::min<int64_t>(o.top_k, int64_t(drawable)), gen);
    ctx.push_back(tok);
    if (on_token) on_token(tok);
  }
  return std::vector<int32_t>(ctx.begin() + std::ptrdiff_t(prompt.size()), ctx.end());
}

namespace {
// The range of the first continuation byte after lead byte `b` (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), and how many continuation bytes follow; 0 for no lead byte.
int utf8_lead(unsigned b, unsigned* lo, unsigned* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) return 1;
  if (b == 0xE0) *lo = 0xA0;
  if (b == 0xED) *hi = 0x9F;
  if (b >= 0xE0 && b <= 0xEF) return 2;
  if (b == 0xF0) *lo = 0x90;
  if (b == 0xF4) *hi = 0x8F;
  if (b >= 0xF0 && b <= 0xF4) return 3;
  return 0;
}
}  // namespace

std::string ByteText::push(int32_t byte) {
  const unsigned b = unsigned(byte) & 0xFFu;
  std::string out;
  if (need_ > 0) {
    unsigned lo = 0x80, hi = 0xBF;
    if (pending_.size() == 1) utf8_lead((unsigned char)pending_[0], &lo, &hi);
    if (b >= lo && b <= hi) {
      pending_ += char(b);
      if (--need_ == 0) {
        out.swap(pending_);
      }
      return out;
    }
    out = "?";  // a truncated sequence; `b` starts afresh
    pending_.clear();
    need_ = 0;
  }
  if (b < 0x80) {
    out += (b == '\n' || b == '\t' || (b >= 32 && b <= 126)) ? char(b) : '?';
    return out;
  }
  unsigned lo, hi;
  const int n = utf8_lead(b, &lo, &hi);
  if (n == 0) return out + "?";
  pending_.assign(1, char(b));
  need_ = n;
  return out;
}

std::string ByteText::finish() {
  const bool open = need_ > 0;
  pending_.clear();
  need_ = 0;
  return open ? "?" : "";
}

std::string bytes_text(std::span<const int32_t> tokens) {
  ByteText t;
  std::string s;
  for (int32_t b : tokens) s += t.push(b);
  return s + t.finish();
}

}  // namespace remat
