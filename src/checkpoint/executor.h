// Runs a Schedule over a chain of blocks x_{i+1} = block(i, x_i). The caller runs the part of the
// model after the chain (the head) between forward() and backward().
#pragma once
#include <functional>
#include <vector>

#include "autograd/tape.h"
#include "checkpoint/schedule.h"

namespace remat {

struct Chain {
  int L = 0;
  std::function<Tensor(int i, const Tensor& x)> block;
};

struct ExecutorOptions {
  bool check_determinism = false;  // hash-free: clone every would-be save, compare on replay
  bool break_replay = false;       // debugging: a fresh RNG stream on recompute (must fail the check)
  const autograd::Policy* policy = nullptr;
  // A policy per block (a plan's choice), overriding `policy` when not empty. A block's replays
  // record and check its saves under its own policy.
  std::vector<const autograd::Policy*> block_policy;
  std::function<void(const Action&)> on_action;      // tracing hook, called after each action
  std::function<void(const Action&)> before_action;  // ... and before each (a probe of memory per action)
};

class ChainExecutor {
 public:
  ChainExecutor(const Chain& chain, Schedule schedule, ExecutorOptions opt, autograd::Counters* counters);
  // Forward phase from x0 (the embedding output); returns x_L.
  Tensor forward(const Tensor& x0);
  // Backward phase given dL/dx_L (gradients of parameters accumulate in g); returns dL/dx0.
  Tensor backward(autograd::GradTable& g, Tensor dxL);

 private:
  void run_forward(const Action& a);
  void run_backward(const Action& a, autograd::GradTable& g);

  const Chain& chain_;
  Schedule schedule_;
  ExecutorOptions opt_;
  autograd::Counters* counters_;
  size_t pc_ = 0;
  Tensor cur_;       // x_{cur_pos_}: the output of the last forward action
  int cur_pos_ = -1;
  std::vector<Tensor> boundary_;          // checkpoints x_i
  std::vector<autograd::Tape> tapes_;     // internals of block i
  std::vector<uint64_t> in_id_, out_id_;  // identities of block i's recorded input and output
  std::vector<std::vector<Tensor>> captured_;
  Tensor dx_;
};

}  // namespace remat
