// The optimal planner's dynamic program, inside the planner layer: the chain in slots, the value
// tables, their fill and the emitter that rebuilds a schedule from them. optimal.cpp builds the
// public API (optimal_plan, the frontier) on it. The recursion follows Beaumont et al. (2019),
// "Optimal checkpointing for heterogeneous chains", extended with a policy per block, the two
// passes' costs (first pass, replay) and the rise of each block's backward.
#pragma once
#include <cstddef>
#include <limits>
#include <vector>

#include "planner/optimal.h"

namespace remat::planner::dp {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline size_t ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

// Block i under policy p, in bytes: what keeping its internals holds (kept, its input among them),
// and how far its backward rises above that (rebuilt tensors against what earlier ops freed), with
// its input x_i released by its earliest holder (cur) or held as a checkpoint until freed (held).
// Mirrors simulate_memory op by op.
struct BlockBytes {
  size_t kept = 0, input = 0, rise_cur = 0, rise_held = 0;
};

BlockBytes block_bytes(const PartTrace& p);

// The chain as the DP sees it, in slots of q bytes (every size rounded up).
struct Problem {
  int L = 0, P = 0;
  bool homogeneous = false;
  // Keeping block s with x_s held never costs less, in slots or time, than with x_s just computed
  // (A, A + R and the backward's cost are each at least as large), for every block and policy. Then
  // C(s, t, 0) = min(keeps with x_s just computed, C(s, t, 1)): the splits, the same for both, are
  // evaluated once.
  bool held_dominates = false;
  size_t q = 1;
  size_t x = 0, head = 0;                 // slots (head: its least m, see keep_lo)
  std::vector<std::vector<size_t>> A[2];  // [held][i][p]: slots held while block i keeps its internals
  std::vector<std::vector<size_t>> R[2];  // [held][i][p]: slots its backward rises above that
  // The least m at which each option fits, in slots: the activations' own (A + R, |x|) or, planning
  // for the whole step (PlanProblem::step), each of the option's actions' bytes above the level too.
  // keep_lo[first][held][last][i][p]: keeping block i's internals (last: its backward right after its
  // forward, the block output still live). split_lo[first][held][i]: the forward of block i that
  // starts a split (keeping x_i, or with x_i held). pass_lo[first][i]: a forward keeping nothing
  // inside a split, x_s held. head: the head (the least m of D(L)).
  std::vector<std::vector<size_t>> keep_lo[2][2][2];
  std::vector<size_t> split_lo[2][2];
  std::vector<size_t> pass_lo[2];
  // Costs, [first]: 1 in the first pass (before the head), 0 in a replay (after it).
  std::vector<double> Fsum[2];                 // [first][i]: prefix sums of the forwards keeping nothing
  std::vector<std::vector<double>> K[2];       // [first][i][p]: the forward keeping internals under p
  std::vector<std::vector<double>> Bk[2][2];   // [first][held][i][p]: its backward, then the free if held
  double fixed = 0;
};

// Value tables. C(s, t, held)[m]: the least cost of backpropagating blocks [s, t) within m slots,
// given x_s (held: as a checkpoint, counted in m; else just computed, not yet stored). D(s)[m]: the
// same for [s, L) followed by the head, before which nothing is recomputed.
class Tables {
 public:
  Tables(const Problem& pb, size_t M) : pb_(pb), M_(M) {
    const size_t states = pb.homogeneous ? size_t(pb.L + 1) : size_t(pb.L + 1) * size_t(pb.L + 1);
    C_[0].assign(states * (M + 1), kInf);
    C_[1].assign(states * (M + 1), kInf);
    D_.assign(size_t(pb.L + 1) * (M + 1), kInf);
  }
  size_t M() const { return M_; }
  double* C(int s, int t, int held) { return &C_[held][idx(s, t) * (M_ + 1)]; }
  const double* C(int s, int t, int held) const { return &C_[held][idx(s, t) * (M_ + 1)]; }
  double* D(int s) { return &D_[size_t(s) * (M_ + 1)]; }
  const double* D(int s) const { return &D_[size_t(s) * (M_ + 1)]; }

 private:
  size_t idx(int s, int t) const { return pb_.homogeneous ? size_t(t - s) : size_t(s) * size_t(pb_.L + 1) + size_t(t); }
  const Problem& pb_;
  size_t M_;
  std::vector<double> C_[2], D_;
};

// Fills every table of `tb` for `pb`.
void fill(const Problem& pb, Tables& tb);

// Rebuilds the schedule behind a table entry: the first option whose cost equals the entry (the
// same expression, so the same double).
struct Emitter {
  const Problem& pb;
  const Tables& tb;
  Schedule out;
  std::vector<int> policy;

  void fwd(int i, Keep k, bool re) { out.push_back({Action::Kind::Forward, i, k, re}); }

  // Emits segment [s, t) (top: [s, L) and the head, before which nothing is recomputed) from the
  // table entry at m slots, x_s held or not.
  void seg(int s, int t, int held, size_t m, bool top);
};

// Refuses chains whose tables would not fit or fill in reasonable time (a user error: --layers
// 100000), before any table is allocated. M: slots per table row.
void check_dp_size(int L, int P, bool homogeneous, double M);

struct Prepared {
  Problem pb;
  size_t exact_q = 1;  // the sizes' common divisor: slots of this size make the DP exact
  size_t emb = 0;   // bytes, held throughout
  size_t top = 0;   // bytes: the fastest plan's peak (store everything under the cheapest policy);
                    // planning for the whole step, above what every plan holds (StepBytes::persistent)
  TimeModel tm;     // the problem's, or flop_time
};

// The problem in slots for `pp`: at the sizes' common divisor, or coarser to keep the tables within
// about 1e8 updates, over budgets up to budget_hint (for_frontier: up to the fastest plan's peak).
Prepared prepare(const PlanProblem& pp, size_t budget_hint, bool for_frontier);

}  // namespace remat::planner::dp
