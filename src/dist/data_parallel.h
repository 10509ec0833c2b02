// Data parallelism over the ranks of a run (Comm), and ZeRO stages 1 and 3 (Rajbhandari et al. 2020).
//
// Each rank runs its own micro-batches; their gradient is summed over ranks in rank order, so the
// bits never depend on MPI's algorithm or on timing: a run on N ranks is bit-identical to one
// process that accumulates each rank's micro-batches into a gradient of its own and sums those in
// rank order (`--ranks N` without mpirun runs exactly that: the reference, and a way to continue a
// multi-rank run on one machine).
//
// The reduction of a block's parameters starts (non-blocking) as soon as the schedule's backward of
// that block ends in the step's last micro-batch, and overlaps the rest of the backward and every
// replay in it; the embedding's and the head's start after the chain. Each parameter's chunk r is
// reduced on rank r (an all-to-all of chunks, then a sum in rank order), then every chunk is
// gathered again (ZeRO-0) or kept where it is (ZeRO-1: the rank updates its chunk with its chunk of
// AdamW's state, then the parameters are gathered). The buffers a reduction receives into live
// from its start to the end of the backward, at points fixed by the schedule, so the whole step's
// peak is the same in every run and the dry run predicts it (StepExtension).
//
// ZeRO-3 shards the parameters too. Between steps a rank holds its chunk of every parameter's fp32
// master, gradient and bf16 copy (parameter_chunks()) and nothing whole. The schedule says when each
// block runs, so the gathers follow it instead of guessing from hooks: a block's parameters (its bf16
// copies under --precision bf16) are gathered before the block's first action, the next action's
// block is prefetched while it runs, and they are freed after the action unless the schedule's next
// use of the block is the very next action (a replay right before its backward: one gather serves
// both). Where a segment replays several blocks before their backwards, Parallelism::hold keeps each
// replayed block gathered until its backward, or frees it and gathers again. The first forward's
// gather is always freed: the backward gathers again, at most once per block with `hold`. A block's
// whole gradient lives from its first backward to the end of its reduction, which leaves the rank
// its chunk summed in rank order, as ZeRO-0 and 1 sum it: the same bits. With several micro-batches
// a rank, each rank's gradients stay whole until the last one (as PyTorch FSDP's no_sync), so that
// the sums keep that order. The embedding and the head are gathered for the whole step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "model/model.h"
#include "step/step.h"

namespace remat::dist {

struct Parallelism {
  int ranks = 1;  // the data-parallel ranks (mpirun's processes, or emulated in one process)
  int zero = 0;   // 0: replicated optimizer state; 1: sharded; 3: parameters and gradients sharded too
  int64_t accum = 1;  // micro-batches per rank per step
  // Start each block's reduction when its backward ends, and under ZeRO-3 gather the next action's
  // block while one runs (false: every reduction after the backward, and each gather when its block
  // is about to run, for benchmarks of how much of the communication the step hides).
  bool overlap = true;
  // For the planner's dry runs: price the step of this rank instead of this process's (-1). The last
  // rank's chunks are the largest of every parameter (each rank's is the floor or the ceiling of
  // n / ranks, and the last one's the ceiling), so its step bounds every rank's, and every rank plans
  // the same plan from it.
  int as_rank = -1;
  // ZeRO-3: a block replayed before its backward, with other actions between, stays gathered (true) or
  // is gathered again for its backward (false: less memory, more all-gathers).
  bool hold = true;
};

class DataParallel : public StepExtension {
 public:
  // `model`'s parameters on this process; under a dry run (shape_only()) nothing is communicated and
  // the buffers are counted, not made.
  DataParallel(Model& model, const Comm& comm, Parallelism p);
  ~DataParallel() override;

  // The ranks this process runs: its own under mpirun, all of them when it emulates them.
  int first_rank() const;
  int local_ranks() const;
  Shard shard() const;  // the optimizer state's (whole unless ZeRO-1 or 3 under mpirun)

  // Before a local rank's micro-batches (emulated ranks: each starts from a zero gradient).
  void begin_rank(int local);
  void before_step(const Schedule& schedule) override;
  void before_action(const Action& a) override;
  void after_action(const Action& a) override;
  void after_micro_batch() override;
  void end_rank(int local, double loss_sum);  // the rank's summed micro-batch losses
  void after_backward() override;  // every reduction complete
  void after_update() override;    // ZeRO-1: the updated chunks gathered
  std::vector<Param>* parameter_chunks() override;  // ZeRO-3's chunks; else null
  // ZeRO-3: every parameter whole again on every rank (a collective), for what reads the whole model
  // between steps: validation, a checkpoint, the saved weights, a sample. The next step frees them.
  void unshard();
  // ZeRO-3: the all-gathers of blocks' parameters in the last step, the bytes each rank received, and
  // the wall seconds the step waited for them before a block ran (what the prefetch did not hide).
  int64_t last_gathers() const { return gathers_; }
  int64_t last_gathered_bytes() const { return gathered_bytes_; }
  double last_gather_wait_s() const { return gather_wait_s_; }
  // The global gradient norm: the sum of squares of each parameter's chunks, in parameter then rank
  // order, the same bits on every rank and for either stage.
  double grad_norm() const;
  // Wall seconds the last step waited for reductions after its backward: the communication the
  // backward did not hide.
  double last_wait_s() const { return wait_s_; }
  // Every rank's loss sum, summed in rank order.
  double loss_sum() const;
  // ZeRO-1: the full moments on rank 0 (for a checkpoint; empty elsewhere), and a checkpoint's full
  // moments cut to this rank's chunk.
  void gather_moments(const std::vector<Tensor>& shard, std::vector<Tensor>* full) const;
  static void cut_moments(const std::vector<Tensor>& full, Shard s, std::vector<Tensor>* shard);

 private:
  struct Bucket;
  int rank() const;  // p_.as_rank, or this process's
  bool zero3() const { return p_.zero == 3 && !emulated_; }
  void start(Bucket& b);
  void progress();
  // ZeRO-3: a bucket's parameters made whole (started; wait() completes them), and freed.
  void gather(Bucket& b, bool count);
  void wait(Bucket& b);
  void free(Bucket& b);
  void restore_grads(Bucket& b);  // a bucket's whole gradients, zeroed, if they are not held
  void finish(Bucket& b);         // ZeRO-3: a reduction completed into the chunks, its gradients freed
  // Whether the tensor of `q` that the bucket's actions read is its bf16 copy, its master, or both.
  std::vector<Tensor*> gathered_tensors(Param& q, bool rest);
  Model& model_;
  const Comm& comm_;
  Parallelism p_;
  std::vector<std::unique_ptr<Bucket>> buckets_;  // one per block, then one for the rest
  std::vector<Bucket*> order_;                    // the started ones, in the order they started
  std::vector<std::vector<int64_t>> off_;         // per parameter: its N chunks' bounds (chunks())
  std::vector<Tensor> sum_;                       // emulated ranks: the gradient summed so far
  std::vector<double> losses_;                    // per local rank
  std::vector<Param> chunks_;                     // ZeRO-3: this rank's chunks
  bool whole_ = true;                             // ZeRO-3: the model's parameters are whole and current
  Schedule schedule_;                             // the step's, for ZeRO-3's gathers
  size_t pc_ = 0;                                 // the action of the schedule that runs next
  int64_t gathers_ = 0, gathered_bytes_ = 0;
  double gather_wait_s_ = 0;
  int micro_ = 0;                                 // micro-batches done in this rank's step
  bool emulated_ = false;
  double wait_s_ = 0;
};

// What the planner dry-runs for one rank of `ranks` under ZeRO stage `zero` (0, 1 or 3), `rank_accum`
// micro-batches a rank: the last rank's step (Parallelism::as_rank), the largest, so that every rank
// plans the same plan and every rank's step fits it. Empty for one rank. Works with or without mpirun.
RankShare rank_share_to_plan(int ranks, int zero, int64_t rank_accum, bool overlap, bool hold = true);

}  // namespace remat::dist
