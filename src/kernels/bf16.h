// bfloat16 storage: the top 16 bits of an IEEE float (1 sign, 8 exponent, 7 mantissa bits). Used for
// activations and the matmul copy of the weights under --precision bf16; all arithmetic stays fp32
// (kernels load bf16, compute in fp32, round once when they store).
//
// Rounding fp32 -> bf16 is round-to-nearest-even on every non-NaN value, denormals included (kept,
// not flushed); a NaN stays a NaN of the same sign and top mantissa bits, made quiet (bit 6 set), as
// the AVX512_BF16 instruction does. bf16 -> fp32 is exact (a shift).
//
// Bulk conversions dispatch at run time on CPUID: with AVX512_BF16 they use vcvtne2ps2bf16 (which
// flushes denormal inputs to zero, so the rare denormal lanes are redone exactly), otherwise a
// portable loop. Both give identical bits (tests/kernels/test_convert_bf16.cpp checks every float
// class). The path can be forced, for tests and for benchmarking the fallback, with set_bf16_isa()
// or the environment variable REMAT_BF16_ISA=portable|avx512_bf16 (read once, at first use).
// Implemented in convert_bf16.cpp.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace remat::kernels {

// The scalar type and its exact conversions are core/dtype.h's (a Tensor's dtype); the kernels name
// them unqualified.
using ::remat::bf16;
using ::remat::bf16_to_float;
using ::remat::float_to_bf16;
using ::remat::round_bf16;

enum class Bf16Isa : uint8_t { Portable, Avx512Bf16 };
const char* bf16_isa_name(Bf16Isa isa);  // "portable", "avx512_bf16"

// The best path this CPU supports (CPUID).
Bf16Isa bf16_cpu_isa();
// The path the bulk kernels use now: the forced one if any, else the CPU's.
Bf16Isa bf16_isa();
// Forces a path (clamped to what the CPU supports) and returns the previous one. Not thread-safe
// against kernels running concurrently: call between kernels.
Bf16Isa set_bf16_isa(Bf16Isa isa);

// dst[i] = float_to_bf16(src[i]) / bf16_to_float(src[i]), i < n, on bf16_isa()'s path. Serial: for
// use inside a parallel loop (each thread converting its own rows).
void to_bf16(bf16* dst, const float* src, int64_t n);
void to_float(float* dst, const bf16* src, int64_t n);
// The same over OpenMP threads, for whole tensors (the bf16 copy of the weights, casts).
void to_bf16_parallel(bf16* dst, const float* src, int64_t n);
void to_float_parallel(float* dst, const bf16* src, int64_t n);

// Each path alone, for tests (the AVX512_BF16 one must only be called when bf16_cpu_isa() has it).
namespace bf16_path {
void to_bf16_portable(bf16* dst, const float* src, int64_t n);
void to_bf16_avx512(bf16* dst, const float* src, int64_t n);
}  // namespace bf16_path

}  // namespace remat::kernels
