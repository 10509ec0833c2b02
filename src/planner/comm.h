// The time data parallelism adds to a step, by the latency-bandwidth ("alpha-beta") model of
// collectives (Hockney 1994), with ring algorithms as in Thakur, Rabenseifner and Gropp (2005): a
// reduce-scatter or all-gather of a tensor of n bytes over N ranks costs each rank N - 1 messages and
// (N - 1) / N * n bytes received, (N - 1) * latency + (N - 1) / N * n / bandwidth.
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint/schedule.h"
#include "model/model.h"

namespace remat::planner {

struct Link {
  double bytes_per_s = 0;  // each rank's bandwidth, one direction
  double latency_s = 0;    // per message
};

// The collectives of one optimizer step on one rank: how many (each one tensor, a reduce-scatter or
// an all-gather) and the bytes of the whole tensors they move.
struct CommStep {
  int64_t collectives = 0;
  double tensor_bytes = 0;
  double received_bytes(int ranks) const { return tensor_bytes * (ranks - 1) / ranks; }
  double seconds(int ranks, const Link& l) const {
    return ranks < 2 ? 0 : double(collectives) * (ranks - 1) * l.latency_s + received_bytes(ranks) / l.bytes_per_s;
  }
};

// The parameters ZeRO-3 gathers (dist::DataParallel), as the step reads them: one block's (block 0's;
// every block has the same), its matrices' bf16 copies under bf16, else fp32; and those outside the
// blocks (embedding, final norm, head), the fp32 masters and any bf16 copies: tensors and bytes.
struct GatheredParams {
  int64_t block_tensors = 0, rest_tensors = 0;
  double block_bytes = 0, rest_bytes = 0;
};
GatheredParams gathered_params(const Model& model);

// Per rank and optimizer step of `micro_batches` micro-batches under `schedule`:
// - stages 0 and 1, as remat runs them: each parameter's fp32 gradient reduce-scattered, then the
//   reduced gradient (0) or the updated fp32 parameter (1) all-gathered;
// - stage 2: as stage 1 (remat's parameters are fp32 masters: the same two collectives);
// - stage 3, as remat runs it: each block's parameters as the matmuls read them (bf16 copies under
//   bf16) all-gathered as zero3_gathers(schedule, hold) counts per micro-batch,
//   the parameters outside the blocks (embedding, final norm, head) gathered once a step, and each
//   fp32 gradient reduce-scattered once.
CommStep comm_per_step(const ModelConfig& cfg, int zero, const Schedule& schedule, int64_t micro_batches,
                       bool hold = false);

// "25Gbit" (bits per second, decimal prefixes), "10GB" or "12.5GiB" (bytes per second): bytes per
// second; throws remat::Error naming `flag` otherwise.
double parse_bandwidth(const std::string& text, const std::string& flag);
// "5us", "2ms", "0.5s", "800ns": seconds; throws remat::Error naming `flag` otherwise.
double parse_latency(const std::string& text, const std::string& flag);

}  // namespace remat::planner
