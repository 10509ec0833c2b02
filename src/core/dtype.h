// Element types of a Tensor. fp32 is the default everywhere; bf16 holds activations and the matmul
// copy of the weights under --precision bf16 (kernels/bf16.h has the bulk conversions). The scalar
// bf16 type and its exact rounding live here, below every layer, so that a Tensor can fill, clone
// and name its own dtype and the allocator can count bytes per dtype.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/record_fwd.h"

namespace remat {

enum class DType : uint8_t { F32, BF16, kCount };
constexpr int kNumDTypes = int(DType::kCount);
constexpr size_t dtype_size(DType d) { return d == DType::BF16 ? 2 : 4; }
// "f32", "bf16": the names the report, the trace and the plan file use.
const char* dtype_name(DType d);
}  // namespace remat
template <>
struct remat::record::EnumNames<remat::DType> {
  static constexpr std::pair<remat::DType, const char*> values[] = {{remat::DType::F32, "f32"}, {remat::DType::BF16, "bf16"}};
};
namespace remat {

// bfloat16 storage: the top 16 bits of an IEEE float (1 sign, 8 exponent, 7 mantissa bits).
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes");

// Exact widening.
inline float bf16_to_float(bf16 h) { return std::bit_cast<float>(uint32_t(h.bits) << 16); }

// Round-to-nearest-even narrowing; NaN stays NaN (quietened).
inline bf16 float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  // Adding 0x7FFF plus the kept LSB rounds half to even; a carry out of the mantissa bumps the
  // exponent, which is the correct result (up to +inf for the largest finite floats).
  return bf16{uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

// The value f would have after a round trip through bf16: what a bf16 tensor stores for f.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace remat
