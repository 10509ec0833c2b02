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
//
// What `fn` may capture. `fn` is stored on the tape and CALLED AGAIN during tape.backward(), possibly
// long after checkpoint() has returned and the scope that built the lambda has ended. So:
//   - `fn` itself is copied (moved) into the tape: its by-value captures live as long as the tape.
//   - Whatever it captures BY REFERENCE must outlive the backward. `[&]` is safe only for objects
//     that do (a model, its parameters, a policy); a local of the forward's scope -- an int, a
//     Tensor, or another lambda such as the inner `fn` of a nested region -- dangles at replay.
//     Capture such things by value: `[=]`, `[fn]`, `[w1, seed]`.
//   - Activations belong in `inputs`, not in captures. Inputs are what the region keeps (and what
//     the memory accounting counts as the checkpoint); a Tensor captured by value is a handle that
//     keeps its buffer alive, uncounted, until the tape is freed. Parameters captured by value are
//     fine: they are alive anyway.
//   - `fn` must be a pure function of its inputs and captures (same result on replay): draw dropout
//     with a fixed (seed, offset), not from a counter that advances per call.
#pragma once
#include <functional>

#include "autograd/tape.h"

namespace remat {

using RegionFn = std::function<Tensors(const Tensors&)>;

// Runs fn(inputs) as a checkpointed region. With no tape recording, it is just fn(inputs).
// `policy` (optional) decides which named tensors the replay keeps; it must outlive the backward.
Tensors checkpoint(RegionFn fn, const Tensors& inputs, const autograd::Policy* policy = nullptr);

// Single-tensor convenience. `fn` is copied; its captures follow the rules above.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x);

}  // namespace remat
