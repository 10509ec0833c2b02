// The attention and dropout kernels of each storage type, under one name per entry: Kernels<float>
// and Kernels<bf16>. The fp32 and bf16 attention kernels are different code (the bf16 ones stage
// tiles for bf16 dot products, and AMX where the CPU has it), so they stay twins; this table lets
// an op body be written once, as a template over the storage type, with one dtype dispatch per op
// (autograd/dispatch.h), as ggml's type traits table does for its quantised types.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/bf16.h"
#include "kernels/dropout.h"
#include "kernels/dropout_bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_bf16.h"

namespace remat::kernels {

template <class S>
struct Kernels;

template <>
struct Kernels<float> {
  static int64_t attention_workspace(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
    return attention_workspace_floats(B, T, NH, KVH, HS, threads);
  }
  static int64_t probs_workspace(int64_t, int64_t T, int64_t, int64_t, int64_t HS, int64_t threads) {
    return attention_probs_workspace_floats(T, HS, threads);
  }
  static int64_t flash_workspace(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
    return flash_attention_workspace_floats(B, T, NH, KVH, HS, threads);
  }
  static constexpr auto attention_forward = kernels::attention_forward;
  static constexpr auto probs_forward = kernels::attention_probs_forward;
  static constexpr auto attention_backward = kernels::attention_backward;
  static constexpr auto flash_forward = kernels::flash_attention_forward;
  static constexpr auto flash_backward = kernels::flash_attention_backward;
  static constexpr auto dropout_forward = kernels::dropout_forward;
  static constexpr auto dropout_backward = kernels::dropout_backward;
};

template <>
struct Kernels<bf16> {
  static int64_t attention_workspace(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
    return attention_bf16_workspace_floats(B, T, NH, KVH, HS, threads);
  }
  // The bf16 probabilities-only forward stages its tiles as the full forward does.
  static int64_t probs_workspace(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
    return attention_bf16_workspace_floats(B, T, NH, KVH, HS, threads);
  }
  static int64_t flash_workspace(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
    return flash_attention_bf16_workspace_floats(B, T, NH, KVH, HS, threads);
  }
  static constexpr auto attention_forward = kernels::attention_bf16_forward;
  static constexpr auto probs_forward = kernels::attention_bf16_probs_forward;
  static constexpr auto attention_backward = kernels::attention_bf16_backward;
  static constexpr auto flash_forward = kernels::flash_attention_bf16_forward;
  static constexpr auto flash_backward = kernels::flash_attention_bf16_backward;
  static constexpr auto dropout_forward = kernels::dropout_bf16_forward;
  static constexpr auto dropout_backward = kernels::dropout_bf16_backward;
};

}  // namespace remat::kernels
