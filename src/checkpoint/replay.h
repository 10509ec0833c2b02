// The one way a recorded piece of the model runs, as a first pass or as a replay. The chain executor
// (a block of a schedule) and checkpoint() (a user's region) both run through run_pass(), so both
// keep, recompute, check determinism and break replays on purpose (--debug-break-replay) in exactly
// the same way:
//   - a pass that keeps nothing will be replayed: under --determinism-check, the first such pass
//     clones every would-be save into `captured` (a later pass that keeps nothing, such as a
//     replay on the way to a nested checkpoint, leaves it be);
//   - a replay that keeps its internals compares every save against `captured`, names the first
//     tensor that differs, and checks it saved as many tensors as the first pass;
//   - a replay under --debug-break-replay draws dropout from another stream (a salted seed), which
//     the determinism check must catch.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "core/error.h"

namespace remat {

struct Pass {
  bool recompute = false;                   // a replay (its FLOPs count as recompute)
  autograd::Tape* tape = nullptr;           // keep the internals here; null: keep nothing
  const autograd::Policy* policy = nullptr; // what a kept pass saves (null: everything)
  std::vector<Tensor>* captured = nullptr;  // the determinism check's clones of the first pass's saves
  bool check_determinism = false;
  bool break_replay = false;
  autograd::Counters* counters = nullptr;   // null: the enclosing recorder's
};

// Runs f() under the recording state `p` describes and returns its result. `what` names the piece in
// a determinism error ("block 3", "region 'checkpoint'").
template <class F>
auto run_pass(const Pass& p, const std::string& what, F&& f) -> decltype(f()) {
  autograd::Recorder r = autograd::recorder();
  if (p.counters) r.counters = p.counters;
  r.recompute = p.recompute;
  r.policy = p.policy;
  r.rng_salt = (p.recompute && p.break_replay) ? autograd::kBrokenReplaySalt : 0;
  r.tape = p.tape;
  r.save_category = p.recompute ? Category::Recompute : Category::SavedActivation;
  r.capture = (!p.tape && p.check_determinism && p.captured && p.captured->empty()) ? p.captured : nullptr;
  r.verify = (p.recompute && p.tape && p.check_determinism) ? p.captured : nullptr;
  r.verify_pos = 0;
  autograd::RecordScope scope(r);
  auto out = f();
  autograd::clear_recipes();
  if (r.verify) {
    const size_t replayed = autograd::recorder().verify_pos;
    if (replayed != p.captured->size())
      throw Error("determinism", "the replay of " + what + " saved " + std::to_string(replayed) +
                                     " tensors, its first pass " + std::to_string(p.captured->size()));
    p.captured->clear();
  }
  return out;
}

}  // namespace remat
