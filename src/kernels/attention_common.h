// What the four attention kernels (attention.cpp, attention_bf16.cpp, flash_attention.cpp,
// flash_attention_bf16.cpp) share: their argument checks and thread count. `who` is the kernel's
// name ("attention", "flash_attention_bf16", ...), which starts its messages and names its workspace
// function (who + "_workspace_floats"). Internal to those files.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "core/error.h"
#include "kernels/vec_bf16.h"  // REMAT_ASSERT_IN

namespace remat::kernels::attention_common {

inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

inline void check_heads(const char* who, int64_t NH, int64_t KVH, int64_t HS) {
  REMAT_ASSERT_IN(who, NH > 0 && KVH > 0 && HS > 0, "NH, KVH and HS must be positive");
  REMAT_ASSERT_IN(who, NH % KVH == 0, "NH must be a multiple of KVH");
}

// Threads to run on: as many as OpenMP offers and the workspace can hold (per_thread floats each).
inline int threads_for(const char* who, std::span<float> workspace, int64_t per_thread) {
  const int64_t fit = per_thread > 0 ? int64_t(workspace.size()) / per_thread : 1;
  REMAT_ASSERT_IN(who, fit >= 1, std::string("workspace smaller than ") + who + "_workspace_floats(..., 1)");
  REMAT_ASSERT_IN(who, reinterpret_cast<uintptr_t>(workspace.data()) % 8 == 0, "workspace must be 8-byte aligned");
  return int(std::min<int64_t>(omp_get_max_threads(), fit));
}

}  // namespace remat::kernels::attention_common
