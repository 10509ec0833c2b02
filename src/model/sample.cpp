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
  const Tensor logits = model.logits(x);
  std::vector<float> out(size_t(cfg.V));
  if (logits.is_bf16()) {  // --precision bf16: widened exactly
    const bf16* row = logits.data_bf16() + (len - 1) * cfg.V;
    for (int64_t j = 0; j < cfg.V; ++j) out[size_t(j)] = bf16_to_float(row[j]);
  } else {
    const float* row = logits.data() + (len - 1) * cfg.V;
    std::copy(row, row + cfg.V, out.begin());
  }
  return out;
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
  for (int64_t n = 0; n < o.tokens; ++n) {
    signal_point("sample");
    threads::adapt();
    if (o.stop && o.stop->load() != 0) break;
    const std::vector<float> row = next_logits(model, ctx);
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
