// Trainer's state (trainer.h), shared by trainer.cpp (setup, one step, validation, sampling) and
// run_loop.cpp (Trainer::run). Internal to those files.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "dist/data_parallel.h"
#include "tokenizer/tokenizer.h"
#include "train/run_state.h"
#include "train/save_dir.h"
#include "train/trainer.h"

namespace remat {

// trainer_checks.cpp: every option checked before anything is allocated (remat::Error naming the
// flag); the micro-batch (one per rank without --micro-batch) and the sequence length.
struct TrainShape {
  int64_t micro, T;
};
TrainShape check_train_options(const TrainOptions& o);
// Under mpirun: every rank's run description and data fingerprints against rank 0's.
void check_ranks_agree(const RunConfig& o, const Fingerprint& train, const Fingerprint& val);

struct Trainer::Impl {
  TrainOptions opt;
  std::unique_ptr<Model> model;
  data::TokenDataset train_data, val_data;
  std::unique_ptr<data::BatchSampler> sampler, val_sampler;
  std::vector<Tensor> m, v;  // AdamW state
  StrategySpec strategy;
  NamePolicy policy;
  Schedule schedule;
  int64_t micro = 0, T = 0, accum = 1;
  std::vector<NamePolicy> block_policies;  // a plan's, one per block (TrainOptions::block_policy)
  std::unique_ptr<BatchBuffers> batch;     // one micro-batch's inputs and targets
  size_t data_bytes = 0;                   // the data sets' accounted bytes (dry_run_step's data_bytes)
  std::string data_description;
  int64_t start_step = 0, skipped = 0;
  double last_norm = 0;
  bool last_finite = true;
  CheckpointIdentity identity;        // the run's id and data, recorded in every checkpoint
  std::unique_ptr<SaveDir> save_dir;  // the locked --save-dir, when given (rank 0's)
  // Data parallelism (--ranks > 1): the reduction of gradients over ranks and ZeRO-1's shards.
  std::unique_ptr<dist::DataParallel> dp;
  int64_t rank_accum = 1;
  std::unique_ptr<tok::Tokenizer> tokenizer;  // RunConfig::tokenizer's, when not bytes
  // Under mpirun: the signals' flag (TrainOptions::stop), and what every rank agreed on at the last
  // step boundary, which opt.stop then points to.
  const std::atomic<int>* signal_stop = nullptr;
  std::atomic<int> agreed_stop{0};  // micro-batches per rank per step (accum / ranks)

  explicit Impl(const TrainOptions& o) : opt(o), model(make_model(o.model)) {}
};

}  // namespace remat
