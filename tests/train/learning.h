// The learning test's configuration (test_model.cpp; test_bf16.cpp trains it in both precisions):
// a 4-block, 128-wide byte-level model on tinyshakespeare, batch 16 x 64, lr 3e-3 with 20 warm-up
// steps, one validation at the end over 16 batches.
#pragma once
#include <string>

#include "train/trainer.h"

namespace remat::learning_test {

inline TrainOptions options(Arch arch, const std::string& data, int64_t steps) {
  TrainOptions o;
  o.model.arch = arch;
  o.model.L = 4; o.model.C = 128; o.model.NH = 4; o.model.T = 64; o.model.V = 256;
  if (arch == Arch::Llama) o.model.KVH = 2;
  o.data = data;
  o.steps = steps;
  o.batch = 16;
  o.lr = 3e-3f;
  o.warmup = 20;
  o.eval_every = 0;
  o.eval_batches = 16;
  o.sample_tokens = 0;
  o.quiet = true;
  return o;
}

}  // namespace remat::learning_test
