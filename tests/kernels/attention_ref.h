// Double-precision scalar reference for causal multi-head / grouped-query attention (forward and
// backward), plus small helpers shared by test_attention.cpp and test_flash_attention.cpp (AttnDims
// by the bf16 attention tests too). Same layout and dropout index as src/kernels/attention.h. Written
// as plain loops over query heads (query head h reads kv head h / (NH/KVH)), independently of the
// kernels' (b, kv head) grouping.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/philox.h"

namespace remat::test {

// NH query heads, KVH key/value heads (NH % KVH == 0), HS floats per head.
struct AttnDims {
  int64_t B, T, NH, KVH, HS;
  int64_t C() const { return NH * HS; }                // out / dout row width
  int64_t C3() const { return (NH + 2 * KVH) * HS; }  // qkv / dqkv row width
  int64_t kv(int64_t h) const { return h / (NH / KVH); }
  // Channel offsets within a qkv row: query head h, key head g, value head g.
  int64_t q_off(int64_t h) const { return h * HS; }
  int64_t k_off(int64_t g) const { return (NH + g) * HS; }
  int64_t v_off(int64_t g) const { return (NH + KVH + g) * HS; }
  int64_t qkv_size() const { return B * T * C3(); }
  int64_t out_size() const { return B * T * C(); }
  int64_t probs_size() const { return B * NH * T * T; }
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
           " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS);
  }
};

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// max|a - b| / max(max|b|, 1e-30): error relative to the reference's largest magnitude.
template <class A, class B>
double max_rel_err(const A& a, const B& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / std::max(den, 1e-30);
}

inline bool ref_keep(const AttnDims& d, float p, uint64_t seed, uint64_t offset, int64_t b, int64_t h, int64_t i,
                     int64_t j) {
  if (p <= 0.f) return true;
  return remat::kernels::dropout_keep(seed, offset + uint64_t(((b * d.NH + h) * d.T + i) * d.T + j), p);
}

// Scaled scores s_ij = q_i.k_j / sqrt(HS) for one (b, h), in double.
inline double ref_score(const AttnDims& d, const std::vector<double>& qkv, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t HS = d.HS, C3 = d.C3();
  const double* q = qkv.data() + (b * d.T + i) * C3 + d.q_off(h);
  const double* k = qkv.data() + (b * d.T + j) * C3 + d.k_off(d.kv(h));
  double s = 0;
  for (int64_t c = 0; c < HS; ++c) s += q[c] * k[c];
  return s / std::sqrt(double(HS));
}

// out (B,T,NH*HS), probs (B,NH,T,T) pre-dropout with zero upper triangle, lse (B,NH,T).
inline void ref_forward(const AttnDims& d, const std::vector<double>& qkv, float p, uint64_t seed, uint64_t offset,
                        std::vector<double>& out, std::vector<double>* probs = nullptr,
                        std::vector<double>* lse = nullptr) {
  const int64_t B = d.B, T = d.T, C = d.C(), NH = d.NH, HS = d.HS, C3 = d.C3();
  out.assign(B * T * C, 0.0);
  if (probs) probs->assign(B * NH * T * T, 0.0);
  if (lse) lse->assign(B * NH * T, 0.0);
  const double inv = 1.0 / (1.0 - double(p));
  std::vector<double> s(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, s[j] = ref_score(d, qkv, b, h, i, j));
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
        if (lse) (*lse)[(b * NH + h) * T + i] = mx + std::log(sum);
        double* o = out.data() + (b * T + i) * C + h * HS;
        for (int64_t j = 0; j <= i; ++j) {
          const double P = s[j] / sum;
          if (probs) (*probs)[((b * NH + h) * T + i) * T + j] = P;
          const double Pd = ref_keep(d, p, seed, offset, b, h, i, j) ? P * inv : 0.0;
          const double* v = qkv.data() + (b * T + j) * C3 + d.v_off(d.kv(h));
          for (int64_t c = 0; c < HS; ++c) o[c] += Pd * v[c];
        }
      }
}

// dqkv (B,T,(NH+2KVH)*HS) = gradient of sum(out * dout) w.r.t. qkv (overwritten).
inline void ref_backward(const AttnDims& d, const std::vector<double>& qkv, const std::vector<double>& dout, float p,
                         uint64_t seed, uint64_t offset, std::vector<double>& dqkv) {
  const int64_t B = d.B, T = d.T, C = d.C(), NH = d.NH, HS = d.HS, C3 = d.C3();
  const double scale = 1.0 / std::sqrt(double(HS)), inv = 1.0 / (1.0 - double(p));
  dqkv.assign(B * T * C3, 0.0);
  std::vector<double> P(T), dP(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, P[j] = ref_score(d, qkv, b, h, i, j));
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (P[j] = std::exp(P[j] - mx));
        const double* g = dout.data() + (b * T + i) * C + h * HS;
        double D = 0;
        for (int64_t j = 0; j <= i; ++j) {
          P[j] /= sum;
          const double m = ref_keep(d, p, seed, offset, b, h, i, j) ? inv : 0.0;
          const double* v = qkv.data() + (b * T + j) * C3 + d.v_off(d.kv(h));
          double* dv = dqkv.data() + (b * T + j) * C3 + d.v_off(d.kv(h));
          double dpd = 0;
          for (int64_t c = 0; c < HS; ++c) {
            dpd += g[c] * v[c];
            dv[c] += P[j] * m * g[c];
          }
          dP[j] = dpd * m;
          D += P[j] * dP[j];
        }
        const double* q = qkv.data() + (b * T + i) * C3 + d.q_off(h);
        double* dq = dqkv.data() + (b * T + i) * C3 + d.q_off(h);
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = P[j] * (dP[j] - D) * scale;
          const double* k = qkv.data() + (b * T + j) * C3 + d.k_off(d.kv(h));
          double* dk = dqkv.data() + (b * T + j) * C3 + d.k_off(d.kv(h));
          for (int64_t c = 0; c < HS; ++c) {
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
          }
        }
      }
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Columns [lo, hi) of a qkv row holding part 0 = the query heads, 1 = the key heads, 2 = the value heads.
inline std::pair<int64_t, int64_t> qkv_part(const AttnDims& d, int part) {
  const int64_t lo = part == 0 ? 0 : part == 1 ? d.k_off(0) : d.v_off(0);
  const int64_t hi = part == 0 ? d.k_off(0) : part == 1 ? d.v_off(0) : d.C3();
  return {lo, hi};
}

// The largest magnitude in one part of the qkv-shaped b (see qkv_part).
template <class B>
double part_max_abs(const AttnDims& d, const B& b, int part) {
  const auto [lo, hi] = qkv_part(d, part);
  double m = 0;
  for (int64_t r = 0; r < d.B * d.T; ++r)
    for (int64_t c = lo; c < hi; ++c) m = std::max(m, std::abs(double(b[size_t(r * d.C3() + c)])));
  return m;
}

// max_rel_err restricted to one part of the qkv rows, relative to that part's own largest reference
// magnitude: a wrong or missing dK or dV cannot hide behind a larger dQ.
template <class A, class B>
double part_rel_err(const AttnDims& d, const A& a, const B& b, int part) {
  const auto [lo, hi] = qkv_part(d, part);
  double num = 0;
  for (int64_t r = 0; r < d.B * d.T; ++r)
    for (int64_t c = lo; c < hi; ++c) {
      const size_t i = size_t(r * d.C3() + c);
      num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    }
  return num / std::max(part_max_abs(d, b, part), 1e-30);
}

}  // namespace remat::test
