// What the small training runs of these tests share: a run that prints nothing (no progress line, no
// report text) and spends no time beside its steps (validation over one batch, at the start and the
// end only; no sample). A test sets its model, steps and batch, and whatever it varies, on top.
#pragma once
#include "train/trainer.h"

namespace remat::test_options {

inline TrainOptions quiet() {
  TrainOptions o;
  o.eval_every = 0;
  o.eval_batches = 1;
  o.sample_tokens = 0;
  o.progress = false;
  o.quiet = true;
  return o;
}

}  // namespace remat::test_options
