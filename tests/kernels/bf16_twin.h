// Helpers for holding a kernel, fp32 or bf16, to an independent reference: conversions of whole
// vectors, and the comparisons shared by the kernel tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bf16.h"

namespace remat::test {

inline std::vector<kernels::bf16> b16(const std::vector<float>& v) {
  std::vector<kernels::bf16> o(v.size());
  kernels::to_bf16(o.data(), v.data(), int64_t(v.size()));
  return o;
}
inline std::vector<float> f32(const std::vector<kernels::bf16>& v) {
  std::vector<float> o(v.size());
  kernels::to_float(o.data(), v.data(), int64_t(v.size()));
  return o;
}
// Storage of a tensor of type S made from fp32 values (bf16: rounded once), and what a reference reads
// from it (bf16 widened exactly, fp32 as is).
template <class S>
std::vector<S> stored(const std::vector<float>& v) {
  if constexpr (std::is_same_v<S, kernels::bf16>)
    return b16(v);
  else
    return v;
}
inline std::vector<float> widen(const std::vector<float>& v) { return v; }
inline std::vector<float> widen(const std::vector<kernels::bf16>& v) { return f32(v); }

// got (fp32) within frac of the largest |want| everywhere.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what,
                         double frac = 1e-5) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double m = 0;
  for (double w : want) m = std::max(m, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), frac * m) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

// The same bytes (bf16 or fp32 vectors): bit-identical results.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
// Position of a bf16 value on the number line, in ulps (-0 and +0 both 0).
inline int ord(kernels::bf16 h) { return (h.bits & 0x8000) ? -int(h.bits & 0x7FFF) : int(h.bits); }

// got[i] has exactly the bits of the twin's value rounded to bf16.
inline void expect_bits_of_rounded(const std::vector<kernels::bf16>& got, const std::vector<float>& twin,
                                   const std::string& what) {
  ASSERT_EQ(got.size(), twin.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i].bits, kernels::float_to_bf16(twin[i]).bits)
        << what << " at " << i << ": " << kernels::bf16_to_float(got[i]) << " vs fp32 " << twin[i];
}

// got[i] within one bf16 ulp of round(twin[i]) (the twin's expression evaluated with other FMA
// contractions can cross one rounding boundary), or, with floor_frac > 0, where the value cancelled
// to near zero, within floor_frac of the tensor's largest |twin| (a few fp32 ulps of the terms can be
// more than a bf16 ulp of the tiny result).
inline void expect_within_1ulp(const std::vector<kernels::bf16>& got, const std::vector<float>& twin,
                               const std::string& what, double floor_frac = 0.0) {
  ASSERT_EQ(got.size(), twin.size()) << what;
  double m = 0;
  for (float x : twin) m = std::max(m, double(std::fabs(x)));
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = kernels::bf16_to_float(got[i]);
    if (std::abs(ord(got[i]) - ord(kernels::float_to_bf16(twin[i]))) <= 1 ||
        std::fabs(double(g) - double(twin[i])) <= floor_frac * m)
      continue;
    FAIL() << what << " at " << i << ": " << g << " vs fp32 " << twin[i];
  }
}

}  // namespace remat::test
