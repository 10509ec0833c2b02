// Activation checkpointing for any function of tensors.
//
//   Tensors y = remat::checkpoint([&](const Tensors& in) { return Tensors{mlp(in[0])}; }, {x});
//
// Forward: runs `fn` without recording, so nothing inside it is saved; the region's inputs are kept
// (Category::Checkpoint). Backward: replays `fn` under a local tape (Category::Recompute), hands the
// outputs' gradients to the replayed outputs, backpropagates through the local tape into the same
// gradient table (so inputs and parameters used inside get their gradients, accumulated in the same
// order as without checkpointing) and frees the local tape. Regions nest. Dropout inside replays
// exactly because masks are a pure function of (seed, offset): no RNG state is stashed.
#pragma once
#include <functional>

#include "autograd/tape.h"

namespace remat {

using RegionFn = std::function<Tensors(const Tensors&)>;

// Runs fn(inputs) as a checkpointed region. With no tape recording, it is just fn(inputs).
// `policy` (optional) decides which named tensors the replay keeps; it must outlive the backward.
Tensors checkpoint(RegionFn fn, const Tensors& inputs, const autograd::Policy* policy = nullptr);

// Single-tensor convenience.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x);

}  // namespace remat
