#include "checkpoint/executor.h"

#include "checkpoint/replay.h"
#include "core/error.h"

namespace remat {

using autograd::Recorder;
using autograd::RecordScope;

ChainExecutor::ChainExecutor(const Chain& chain, Schedule schedule, ExecutorOptions opt, autograd::Counters* counters)
    : chain_(chain),
      schedule_(std::move(schedule)),
      opt_(std::move(opt)),
      counters_(counters),
      boundary_(chain.L),
      tapes_(chain.L),
      in_id_(chain.L, 0),
      out_id_(chain.L, 0),
      captured_(chain.L) {}

Tensor ChainExecutor::forward(const Tensor& x0) {
  cur_ = x0;
  cur_pos_ = 0;
  for (; pc_ < schedule_.size(); ++pc_) {
    const Action& a = schedule_[pc_];
    if (a.kind != Action::Kind::Forward || a.recompute) break;
    if (opt_.before_action) opt_.before_action(a);
    run_forward(a);
    if (opt_.on_action) opt_.on_action(a);
  }
  REMAT_ASSERT(cur_pos_ == chain_.L, "schedule: the forward phase must reach x_L");
  Tensor xL = std::move(cur_);
  cur_pos_ = -1;
  return xL;
}

Tensor ChainExecutor::backward(autograd::GradTable& g, Tensor dxL) {
  dx_ = std::move(dxL);
  for (; pc_ < schedule_.size(); ++pc_) {
    const Action& a = schedule_[pc_];
    if (opt_.before_action) opt_.before_action(a);
    if (a.kind == Action::Kind::Forward) run_forward(a);
    else run_backward(a, g);
    if (opt_.on_action) opt_.on_action(a);
  }
  for (int i = 0; i < chain_.L; ++i)
    REMAT_ASSERT(!boundary_[i].defined() && tapes_[i].empty(), "schedule: state left over after backward");
  return std::move(dx_);
}

void ChainExecutor::run_forward(const Action& a) {
  const int i = a.block;
  Tensor in;
  if (cur_pos_ == i) in = cur_;
  else if (boundary_[i].defined()) in = boundary_[i];
  else REMAT_ASSERT(false, "schedule: forward of a block whose input is neither current nor a checkpoint");

  Pass p;
  p.recompute = a.recompute;
  p.policy = opt_.block_policy.empty() ? opt_.policy : opt_.block_policy.at(size_t(i));
  p.captured = &captured_[i];
  p.check_determinism = opt_.check_determinism;
  p.break_replay = opt_.break_replay;
  p.counters = counters_;
  if (a.keep == Keep::Boundary) {
    // A boundary kept while replaying a segment is in-flight recompute, not a checkpoint.
    if (in.category() == Category::Activation) in.retag(a.recompute ? Category::Recompute : Category::Checkpoint);
    boundary_[i] = in;
  }
  if (a.keep == Keep::Internals) {
    REMAT_ASSERT(tapes_[i].empty(), "schedule: block internals recorded twice");
    p.tape = &tapes_[i];
    in_id_[i] = in.id();
  }
  Tensor out = run_pass(p, "block " + std::to_string(i), [&] { return chain_.block(i, in); });
  if (a.keep == Keep::Internals) out_id_[i] = out.id();
  if (counters_) (a.recompute ? counters_->block_recomputes : counters_->block_forwards)++;
  cur_ = std::move(out);
  cur_pos_ = i + 1;
}

void ChainExecutor::run_backward(const Action& a, autograd::GradTable& g) {
  const int i = a.block;
  if (a.kind == Action::Kind::Free) {
    boundary_[i] = Tensor();
    return;
  }
  REMAT_ASSERT(!tapes_[i].empty(), "schedule: backward of a block whose internals are not recorded");
  cur_ = Tensor();  // a replayed x_{i+1} is nobody's input any more
  cur_pos_ = -1;
  if (dx_.defined()) g.bind_id(out_id_[i], std::move(dx_));
  Recorder r = autograd::recorder();
  r.counters = counters_;
  {
    RecordScope scope(r);
    tapes_[i].backward(g);
  }
  dx_ = g.take(in_id_[i]);
  if (counters_) counters_->block_backwards++;
}

}  // namespace remat
