#include "planner/optimal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <numeric>
#include <optional>

#include "core/allocator.h"
#include "core/error.h"

namespace remat::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Block i under policy p, in bytes: what keeping its internals holds (kept, its input among them),
// and how far its backward rises above that (rebuilt tensors against what earlier ops freed), with
// its input x_i released by its earliest holder (cur) or held as a checkpoint until freed (held).
// Mirrors simulate_memory op by op.
struct BlockBytes {
  size_t kept = 0, input = 0, rise_cur = 0, rise_held = 0;
};

BlockBytes block_bytes(const PartTrace& p) {
  BlockBytes b;
  b.kept = p.kept_bytes();
  b.input = p.input_bytes();
  std::vector<size_t> freed(p.ops.size(), 0), rebuilt(p.ops.size(), 0);
  int input_op = -1;
  for (const TensorRecord& t : p.kept) {
    const int first = *std::min_element(t.holders.begin(), t.holders.end());
    if (t.input) input_op = first;
    else freed[first] += t.bytes;
  }
  for (const TensorRecord& t : p.dropped)
    for (int h : t.holders) rebuilt[h] += t.bytes;
  for (int held = 0; held < 2; ++held) {
    size_t gone = 0, rise = 0;
    for (int op = int(p.ops.size()) - 1; op >= 0; --op) {
      if (rebuilt[op] > gone) rise = std::max(rise, rebuilt[op] - gone);
      gone += freed[op];
      if (op == input_op && !held) gone += b.input;
    }
    (held ? b.rise_held : b.rise_cur) = rise;
  }
  return b;
}

size_t ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

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
  size_t x = 0, head = 0;                 // slots
  std::vector<std::vector<size_t>> A[2];  // [held][i][p]: slots held while block i keeps its internals
  std::vector<std::vector<size_t>> R[2];  // [held][i][p]: slots its backward rises above that
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

// Option (1) for block s under policy p: its internals, then [s+1, t) (sub, may be null: nothing
// after s), then its backward (and the free of x_s if held). first: before the head (D), else a
// replay (C).
inline double keep_cost(const Problem& pb, int s, int p, int held, int first, const double* sub, size_t m) {
  const size_t a = pb.A[held][s][p];
  if (a + pb.R[held][s][p] > m) return kInf;
  const double rest = sub ? sub[m - a] : 0.0;
  return pb.K[first][s][p] + rest + pb.Bk[first][held][s][p];
}
// Option (2) split at s2: x_s kept, blocks s..s2-1 run, then [s2, t) within m - x, then [s, s2) from x_s.
inline double split_cost(const Problem& pb, int s, int s2, int first, const double* a, const double* b, size_t m) {
  if (pb.x > m) return kInf;
  return (pb.Fsum[first][s2] - pb.Fsum[first][s]) + a[m - pb.x] + b[m];
}

// out[m] = min(out[m], keep_cost(..., m)) for every m, as a loop the compiler vectorises: the same
// expression, (F + rest) + B, so the same doubles as keep_cost (the Emitter compares them).
void keep_into(const Problem& pb, int s, int p, int held, int first, const double* sub, double* out, size_t M) {
  const size_t a = pb.A[held][s][p], lo = a + pb.R[held][s][p];
  const double F = pb.K[first][s][p], B = pb.Bk[first][held][s][p];
  if (sub) {
#pragma omp simd
    for (size_t m = lo; m <= M; ++m) out[m] = std::min(out[m], F + sub[m - a] + B);
  } else {
    const double c = F + 0.0 + B;
    for (size_t m = lo; m <= M; ++m) out[m] = std::min(out[m], c);
  }
}
// The same for split_cost: ((Fsum[s2] - Fsum[s]) + a[m - x]) + b[m]. Every row is non-increasing in m
// (more memory never costs time), `out` too, option by option; so the split's value is at least its
// value at M, and from the first m where `out` is already that low it cannot improve `out`: only the
// prefix before it is updated. The table is the same, double for double, as without the bound.
void split_into(const Problem& pb, int s, int s2, int first, const double* a, const double* b, double* out, size_t M) {
  const double f = pb.Fsum[first][s2] - pb.Fsum[first][s];
  const size_t x = pb.x;
  if (x > M) return;
  const double least = f + a[M - x] + b[M];
  if (!(least < kInf)) return;
  // The first m >= x with out[m] <= least (out is non-increasing), or M + 1.
  const size_t end = size_t(std::partition_point(out + x, out + M + 1, [least](double v) { return v > least; }) - out);
#pragma omp simd
  for (size_t m = x; m < end; ++m) out[m] = std::min(out[m], f + a[m - x] + b[m]);
}

void fill(const Problem& pb, Tables& tb) {
  const int L = pb.L;
  const size_t M = tb.M();
  for (int n = 1; n <= L; ++n) {
    const int s_end = pb.homogeneous ? 1 : L - n + 1;
    for (int s = 0; s < s_end; ++s) {
      const int t = s + n;
      const double* sub = n > 1 ? tb.C(s + 1, t, 0) : nullptr;
      for (int held = 1; held >= 0; --held) {
        double* out = tb.C(s, t, held);
        if (held == 0 && pb.held_dominates) std::copy(tb.C(s, t, 1), tb.C(s, t, 1) + M + 1, out);
        for (int p = 0; p < pb.P; ++p) keep_into(pb, s, p, held, 0, sub, out, M);
        if (held == 0 && pb.held_dominates) continue;
        for (int s2 = s + 1; s2 < t; ++s2) split_into(pb, s, s2, 0, tb.C(s2, t, 0), tb.C(s, s2, 1), out, M);
      }
    }
  }
  double* dl = tb.D(L);
  for (size_t m = pb.head; m <= M; ++m) dl[m] = 0;
  for (int s = L - 1; s >= 0; --s) {
    double* out = tb.D(s);
    for (int p = 0; p < pb.P; ++p) keep_into(pb, s, p, 0, 1, tb.D(s + 1), out, M);
    for (int s2 = s + 1; s2 <= L; ++s2) split_into(pb, s, s2, 1, tb.D(s2), tb.C(s, s2, 1), out, M);
  }
}

// Rebuilds the schedule behind a table entry: the first option whose cost equals the entry (the
// same expression, so the same double).
struct Emitter {
  const Problem& pb;
  const Tables& tb;
  Schedule out;
  std::vector<int> policy;

  void fwd(int i, Keep k, bool re) { out.push_back({Action::Kind::Forward, i, k, re}); }

  void seg(int s, int t, int held, size_t m, bool top) {
    if (top && s == pb.L) return;  // the head
    const double want = top ? tb.D(s)[m] : tb.C(s, t, held)[m];
    REMAT_ASSERT(want < kInf, "planner: reconstructing an infeasible plan");
    const bool re = !top;  // before the head nothing is a recompute
    const double* sub = top ? tb.D(s + 1) : (t - s > 1 ? tb.C(s + 1, t, 0) : nullptr);
    for (int p = 0; p < pb.P; ++p) {
      if (keep_cost(pb, s, p, held, top, sub, m) != want) continue;
      fwd(s, Keep::Internals, re);
      policy[s] = p;
      if (top || t - s > 1) seg(s + 1, t, 0, m - pb.A[held][s][p], top);
      out.push_back({Action::Kind::Backward, s, Keep::Nothing, false});
      if (held) out.push_back({Action::Kind::Free, s, Keep::Nothing, false});
      return;
    }
    for (int s2 = s + 1; s2 < t || (top && s2 == t); ++s2) {
      const double* first = top ? tb.D(s2) : tb.C(s2, t, 0);
      if (split_cost(pb, s, s2, top, first, tb.C(s, s2, 1), m) != want) continue;
      fwd(s, held ? Keep::Nothing : Keep::Boundary, re);
      for (int i = s + 1; i < s2; ++i) fwd(i, Keep::Nothing, re);
      seg(s2, t, 0, m - pb.x, top);
      seg(s, s2, 1, m, false);
      return;
    }
    REMAT_ASSERT(false, "planner: no option reproduces the table");
  }
};

// Refuses chains whose tables would not fit or fill in reasonable time (a user error: --layers
// 100000), before any table is allocated. M: slots per table row.
void check_dp_size(int L, int P, bool homogeneous, double M) {
  const double rows = homogeneous ? 3.0 * (L + 1) : 2.0 * (L + 1) * (L + 1) + (L + 1);
  const double bytes = rows * (M + 1) * sizeof(double);
  const double updates = (homogeneous ? 1.5 * double(L) * L : double(L) * L * L / 3.0) * (M + P);
  if (bytes <= kMaxTableBytes && updates <= kMaxTableUpdates) return;
  char what[200];
  std::snprintf(what, sizeof what, "a chain of %d blocks is too long for the optimal planner: its tables would take %.3g GiB and %.2g updates (at most %.0f GiB and %.0e)",
                L, bytes / 1073741824.0, updates, kMaxTableBytes / 1073741824.0, kMaxTableUpdates);
  throw Error("planner", what,
              "plan fewer blocks (the tables grow as L^3: up to about " + std::to_string(max_planned_layers()) +
                  " blocks), or price named strategies with remat plan --recompute sqrt block uniform:K");
}

struct Prepared {
  Problem pb;
  size_t exact_q = 1;  // the sizes' common divisor: slots of this size make the DP exact
  size_t emb = 0;   // bytes, held throughout
  size_t top = 0;   // bytes: the fastest plan's peak (store everything under the cheapest policy)
  TimeModel tm;     // the problem's, or flop_time
};

Prepared prepare(const PlanProblem& pp, size_t budget_hint, bool for_frontier) {
  if (pp.traces.empty()) throw Error("planner", "no policy to plan with", "give at least one candidate policy");
  const int L = int(pp.traces[0].blocks.size());
  const int P = int(pp.traces.size());
  for (const StepTrace& t : pp.traces)
    REMAT_ASSERT(int(t.blocks.size()) == L && t.boundary_bytes == pp.traces[0].boundary_bytes,
                 "planner: candidate traces of different chains");
  if (L <= 0) throw Error("planner", "the chain has no blocks", "use --layers 1 or more");
  REMAT_ASSERT(pp.time.valid() || pp.time.empty(), "planner: a time model with some of its terms missing");
  Prepared pr;
  pr.tm = pp.time.valid() ? pp.time : flop_time(pp.traces);
  const TimeModel& tm = pr.tm;
  Problem& pb = pr.pb;
  pb.L = L;
  pb.P = P;
  pr.emb = pp.traces[0].embed.kept_bytes();
  const size_t xb = pp.traces[0].boundary_bytes, headb = pp.traces[0].head.kept_bytes();

  std::vector<std::vector<BlockBytes>> bb(L, std::vector<BlockBytes>(P));
  std::vector<double> pass[2] = {std::vector<double>(L), std::vector<double>(L)};  // [first][i]
  for (int first = 0; first < 2; ++first) {
    pb.K[first].assign(L, std::vector<double>(P));
    for (int held = 0; held < 2; ++held) pb.Bk[first][held].assign(L, std::vector<double>(P));
  }
  for (int i = 0; i < L; ++i) {
    pass[1][i] = tm.forward_pass(i);
    pass[0][i] = tm.recompute_pass(i);
    const double fr = tm.free_checkpoint(i);
    for (int p = 0; p < P; ++p) {
      bb[i][p] = block_bytes(pp.traces[p].blocks[i]);
      pb.K[1][i][p] = tm.forward_store(i, p);
      pb.K[0][i][p] = tm.recompute_store(i, p);
      pb.Bk[1][0][i][p] = pb.Bk[1][1][i][p] = tm.backward_stored(i, p);  // the first pass never frees
      pb.Bk[0][0][i][p] = tm.backward_replayed(i, p);
      pb.Bk[0][1][i][p] = tm.backward_replayed(i, p) + fr;
    }
  }
  pb.fixed = tm.fixed;
  for (int first = 0; first < 2; ++first) {
    pb.Fsum[first].assign(L + 1, 0.0);
    for (int i = 0; i < L; ++i) pb.Fsum[first][i + 1] = pb.Fsum[first][i] + pass[first][i];
  }
  pb.homogeneous = true;
  for (int i = 1; i < L && pb.homogeneous; ++i) {
    if (pass[0][i] != pass[0][0] || pass[1][i] != pass[1][0]) pb.homogeneous = false;
    for (int p = 0; p < P; ++p) {
      const BlockBytes &a = bb[i][p], &b = bb[0][p];
      if (a.kept != b.kept || a.input != b.input || a.rise_cur != b.rise_cur || a.rise_held != b.rise_held)
        pb.homogeneous = false;
      for (int first = 0; first < 2; ++first) {
        if (pb.K[first][i][p] != pb.K[first][0][p]) pb.homogeneous = false;
        for (int held = 0; held < 2; ++held)
          if (pb.Bk[first][held][i][p] != pb.Bk[first][held][0][p]) pb.homogeneous = false;
      }
    }
  }

  // Sizes in bytes, [held][i][p].
  auto held_bytes = [&](int held, int i, int p) {
    const BlockBytes& b = bb[i][p];
    return held ? xb + b.kept - b.input : b.kept;
  };
  size_t g = std::gcd(xb, headb);
  for (int i = 0; i < L; ++i)
    for (int p = 0; p < P; ++p)
      for (int held = 0; held < 2; ++held)
        g = std::gcd(g, std::gcd(held_bytes(held, i, p), held ? bb[i][p].rise_held : bb[i][p].rise_cur));
  if (g == 0) g = 1;

  // The fastest plan's peak bounds every budget worth planning for; store-everything under each
  // policy, the largest of them, is above it.
  size_t top = 0;
  for (int p = 0; p < P; ++p)
    top = std::max(top, simulate_memory(pp.traces[p], make_schedule(parse_strategy("none", L, false), L)).peak_activation);
  pr.top = top;
  size_t range = top > pr.emb ? top - pr.emb : 0;
  if (!for_frontier && budget_hint < top) range = budget_hint > pr.emb ? budget_hint - pr.emb : 0;

  // Resolution: about 1e8 table updates (a tenth of a second here), and tables of at most 256 MiB.
  const double work = pb.homogeneous ? 2.0 * double(L) * double(L) * 1.5 : double(L) * double(L) * double(L) / 3.0 + 1;
  double slots = pp.max_slots ? double(pp.max_slots) : std::clamp(1e8 / work, 256.0, 65536.0);
  const double states = pb.homogeneous ? 3.0 * (L + 1) : 2.0 * (L + 1) * (L + 1) + (L + 1);
  slots = std::min(slots, std::max(16.0, 256.0 * 1048576.0 / 8.0 / states));
  pr.exact_q = g;
  pb.q = g;
  if (double(range) / double(g) > slots) pb.q = size_t(std::ceil(double(range) / slots / double(g))) * g;
  const size_t q = pb.q;
  check_dp_size(L, P, pb.homogeneous, double(range) / double(q) + 2.0 * L + 5.0);
  pb.x = ceil_div(xb, q);
  pb.head = ceil_div(headb, q);
  for (int held = 0; held < 2; ++held) {
    pb.A[held].assign(L, std::vector<size_t>(P));
    pb.R[held].assign(L, std::vector<size_t>(P));
    for (int i = 0; i < L; ++i)
      for (int p = 0; p < P; ++p) {
        pb.A[held][i][p] = ceil_div(held_bytes(held, i, p), q);
        pb.R[held][i][p] = ceil_div(held ? bb[i][p].rise_held : bb[i][p].rise_cur, q);
      }
  }
  pb.held_dominates = true;
  for (int i = 0; i < L; ++i)
    for (int p = 0; p < P; ++p)
      if (pb.A[0][i][p] > pb.A[1][i][p] || pb.A[0][i][p] + pb.R[0][i][p] > pb.A[1][i][p] + pb.R[1][i][p] ||
          !(pb.Bk[0][0][i][p] <= pb.Bk[0][1][i][p]))
        pb.held_dominates = false;
  return pr;
}

// The spliced trace of the plans finish() prices, kept from plan to plan: only the blocks whose policy
// changed are copied (neighbouring plans of a frontier share most of them).
struct Splicer {
  const std::vector<StepTrace>& traces;
  StepTrace cur;
  std::vector<int> policy;
  explicit Splicer(const std::vector<StepTrace>& t) : traces(t), cur(t.at(0)), policy(cur.blocks.size(), 0) {}
  const StepTrace& get(const std::vector<int>& block_policy) {
    for (size_t i = 0; i < policy.size(); ++i)
      if (block_policy[i] != policy[i]) {
        cur.blocks[i] = traces.at(size_t(block_policy[i])).blocks[i];
        policy[i] = block_policy[i];
      }
    return cur;
  }
};

ChainPlan finish(const PlanProblem& pp, const Prepared& pr, const Tables& tb, size_t m, Splicer* splicer = nullptr) {
  Emitter e{pr.pb, tb, {}, std::vector<int>(size_t(pr.pb.L), 0)};
  e.seg(0, pr.pb.L, 0, m, true);
  ChainPlan plan;
  plan.time = tb.D(0)[m] + pr.pb.fixed;
  plan.schedule = std::move(e.out);
  plan.block_policy = std::move(e.policy);
  plan.policy_names = pp.policy_names;
  std::optional<Splicer> local;
  if (!splicer) splicer = &local.emplace(pp.traces);
  const StepTrace& tr = splicer->get(plan.block_policy);
  plan.memory = simulate_memory(tr, plan.schedule);
  plan.compute = predict_compute(tr, plan.schedule);
  plan.slot_bytes = pr.pb.q;
  return plan;
}

// With slots coarser than the sizes' divisor, rounding can cost the DP a plan that fits to the byte;
// the textbook schedules (none, sqrt, uniform:K, either replay mode, with or without the last
// segment recomputed), each under every single policy, are priced exactly and win where they are
// faster. This keeps "never slower than a named strategy at its own memory" true at any resolution.
void improve_with_named(const PlanProblem& pp, const Prepared& pr, size_t budget, ChainPlan& best) {
  const int L = pr.pb.L;
  std::vector<int> Ks;
  for (int K = 1; K <= L; K += (K < 64 ? 1 : std::max(1, K / 16))) Ks.push_back(K);
  for (int p = 0; p < pr.pb.P; ++p) {
    const std::vector<int> pol(size_t(L), p);
    auto consider = [&](const StrategySpec& spec) {
      const Schedule sch = make_schedule(spec, L);
      const double t = schedule_time(pr.tm, sch, pol);
      if (!(t < best.time)) return;
      const MemoryPrediction m = simulate_memory(pp.traces[size_t(p)], sch);
      if (m.peak_activation > budget) return;
      best.schedule = sch;
      best.block_policy = pol;
      best.memory = m;
      best.compute = predict_compute(pp.traces[size_t(p)], sch);
      best.time = t;
    };
    consider(parse_strategy("none", L, false));
    for (bool last : {false, true}) {
      consider(parse_strategy("all", L, last));
      for (int K : Ks)
        for (bool internals : {false, true}) consider(parse_strategy("uniform:" + std::to_string(K), L, last, internals));
    }
  }
}

size_t slots_for(const Prepared& pr, size_t bytes) { return bytes > pr.emb ? (bytes - pr.emb) / pr.pb.q : 0; }
size_t frontier_slots(const Prepared& pr) {
  // Rounding every size up can lift a plan's slot count above its bytes by a slot per term.
  return ceil_div(pr.top > pr.emb ? pr.top - pr.emb : 0, pr.pb.q) + size_t(2 * pr.pb.L + 4);
}

}  // namespace

int max_planned_layers() {
  // The longest chain of same-shaped blocks check_dp_size accepts with the fewest slots (256).
  int lo = 1, hi = 1 << 20;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    const double M = 256.0 + 2.0 * mid + 5.0;
    const double rows = 3.0 * (mid + 1);
    const bool ok = rows * (M + 1) * sizeof(double) <= kMaxTableBytes && 1.5 * double(mid) * mid * (M + 4) <= kMaxTableUpdates;
    if (ok) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

void check_plannable(int L) {
  if (L > max_planned_layers()) check_dp_size(L, 4, true, 256.0 + 2.0 * L + 5.0);
}

TimeModel flop_time(const std::vector<StepTrace>& traces) {
  TimeModel tm;
  tm.forward_pass = tm.recompute_pass = [&traces](int i) { return traces[0].blocks[size_t(i)].fwd_flops(); };
  tm.forward_store = tm.recompute_store = [&traces](int i, int p) {
    return traces[size_t(p)].blocks[size_t(i)].fwd_flops();
  };
  tm.backward_stored = tm.backward_replayed = [&traces](int i, int p) {
    const PartTrace& b = traces[size_t(p)].blocks[size_t(i)];
    return b.bwd_flops() + b.rebuild_flops();
  };
  tm.free_checkpoint = [](int) { return 0.0; };
  const StepTrace& t = traces.at(0);
  tm.fixed = t.embed.fwd_flops() + t.head.fwd_flops() + t.embed.bwd_flops() + t.head.bwd_flops();
  return tm;
}

double schedule_time(const TimeModel& tm, const Schedule& s, const std::vector<int>& pol) {
  double t = tm.fixed;
  std::vector<char> replayed(pol.size(), 0);  // per block: were its internals recorded by a replay?
  for (const Action& a : s) {
    const size_t i = size_t(a.block);
    switch (a.kind) {
      case Action::Kind::Forward:
        if (a.keep == Keep::Internals) {
          t += a.recompute ? tm.recompute_store(a.block, pol.at(i)) : tm.forward_store(a.block, pol.at(i));
          replayed.at(i) = a.recompute;
        } else {
          t += a.recompute ? tm.recompute_pass(a.block) : tm.forward_pass(a.block);
        }
        break;
      case Action::Kind::Backward:
        t += replayed.at(i) ? tm.backward_replayed(a.block, pol.at(i)) : tm.backward_stored(a.block, pol.at(i));
        break;
      case Action::Kind::Free: t += tm.free_checkpoint(a.block); break;
    }
  }
  return t;
}

StepTrace splice(const std::vector<StepTrace>& traces, const std::vector<int>& block_policy) {
  StepTrace t = traces.at(0);
  for (size_t i = 0; i < t.blocks.size(); ++i)
    if (block_policy.at(i) != 0) t.blocks[i] = traces.at(size_t(block_policy[i])).blocks[i];
  return t;
}

std::string ChainPlan::summary() const {
  int ck = 0;
  const ScheduleCounts c = count(schedule);
  for (const Action& a : schedule)
    if (a.kind == Action::Kind::Forward && a.keep == Keep::Boundary && !a.recompute) ++ck;
  std::string s = std::to_string(ck) + " checkpoint" + (ck == 1 ? "" : "s") + ", " + std::to_string(c.recomputes) +
                  " block recompute" + (c.recomputes == 1 ? "" : "s");
  std::vector<int> n(policy_names.size(), 0);
  for (int p : block_policy) n[size_t(p)]++;
  for (size_t p = 0; p < n.size(); ++p)
    if (n[p] > 0 && policy_names[p] != "none") s += ", " + policy_names[p] + " on " + std::to_string(n[p]) + " block" + (n[p] == 1 ? "" : "s");
  return s;
}

ChainPlan optimal_plan(const PlanProblem& pp, size_t budget) {
  const Prepared pr = prepare(pp, budget, false);
  const size_t M = std::min(slots_for(pr, budget), frontier_slots(pr));
  Tables tb(pr.pb, M);
  fill(pr.pb, tb);
  if (budget < pr.emb || !(tb.D(0)[M] < kInf)) {
    if (pr.pb.q != pr.exact_q) {  // the coarse DP found nothing; a textbook schedule may still fit
      ChainPlan named;
      named.time = kInf;
      named.policy_names = pp.policy_names;
      named.slot_bytes = pr.pb.q;
      improve_with_named(pp, pr, budget, named);
      if (named.time < kInf) return named;
    }
    const ChainPlan least = least_memory_plan(pp);
    const StepTrace& t0 = pp.traces[0];
    throw Error("planner",
                "budget " + format_bytes(budget) + " is below the least activation memory of any plan, " +
                    format_bytes(least.memory.peak_activation) + " (" + least.summary() + "), for " + t0.cfg.describe() +
                    " at micro-batch " + std::to_string(t0.B) + ", seq " + std::to_string(t0.T),
                "raise the budget to at least " + format_bytes(least.memory.peak_activation) +
                    ", or use a smaller --micro-batch or --seq");
  }
  // The least memory that reaches the best cost.
  size_t m = M;
  while (m > 0 && tb.D(0)[m - 1] == tb.D(0)[M]) --m;
  ChainPlan plan = finish(pp, pr, tb, m);
  if (pr.pb.q != pr.exact_q) improve_with_named(pp, pr, budget, plan);
  return plan;
}

ChainPlan least_memory_plan(const PlanProblem& pp) {
  const Prepared pr = prepare(pp, 0, true);
  Tables tb(pr.pb, frontier_slots(pr));
  fill(pr.pb, tb);
  size_t m = 0;
  while (!(tb.D(0)[m] < kInf)) ++m;
  return finish(pp, pr, tb, m);
}

std::vector<ChainPlan> optimal_frontier(const PlanProblem& pp) { return optimal_frontier(pp, 0); }

std::vector<ChainPlan> optimal_frontier(const PlanProblem& pp, size_t limit) {
  const Prepared pr = prepare(pp, limit, limit == 0);
  Tables tb(pr.pb, limit == 0 ? frontier_slots(pr) : std::min(slots_for(pr, limit), frontier_slots(pr)));
  fill(pr.pb, tb);
  std::vector<ChainPlan> all;
  const double* d = tb.D(0);
  Splicer splicer(pp.traces);
  double last = kInf;
  for (size_t m = 0; m <= tb.M(); ++m)
    if (d[m] < last) {
      all.push_back(finish(pp, pr, tb, m, &splicer));
      last = d[m];
    }
  // Exact bytes can order two slot-neighbours the other way: keep the Pareto set.
  std::sort(all.begin(), all.end(), [](const ChainPlan& a, const ChainPlan& b) {
    return a.memory.peak_activation != b.memory.peak_activation ? a.memory.peak_activation < b.memory.peak_activation
                                                                : a.time < b.time;
  });
  std::vector<ChainPlan> f;
  for (ChainPlan& p : all)
    if (f.empty() || p.time < f.back().time) f.push_back(std::move(p));
  return f;
}

namespace {
struct Partial {
  Schedule actions;
  std::vector<int> policy;  // [block] (only blocks of the segment set), -1 elsewhere
};
using Family = std::vector<Partial>;

void append(Partial& to, const Partial& from) {
  to.actions.insert(to.actions.end(), from.actions.begin(), from.actions.end());
  for (size_t i = 0; i < to.policy.size(); ++i)
    if (from.policy[i] >= 0) to.policy[i] = from.policy[i];
}
}  // namespace

void enumerate_family(int L, int P, const std::function<void(const Schedule&, const std::vector<int>&)>& visit) {
  // Memoised lists for C(s, t, held) (after the head) and D(s) (before it), as the DP defines them.
  std::vector<Family> C[2];
  C[0].resize(size_t(L + 1) * size_t(L + 1));
  C[1].resize(size_t(L + 1) * size_t(L + 1));
  auto empty = [&]() { return Partial{{}, std::vector<int>(size_t(L), -1)}; };
  std::function<const Family&(int, int, int)> c = [&](int s, int t, int held) -> const Family& {
    Family& f = C[held][size_t(s) * size_t(L + 1) + size_t(t)];
    if (!f.empty()) return f;
    for (int p = 0; p < P; ++p) {
      auto one = [&](const Partial* sub) {
        Partial x = empty();
        x.actions.push_back({Action::Kind::Forward, s, Keep::Internals, true});
        x.policy[size_t(s)] = p;
        if (sub) append(x, *sub);
        x.actions.push_back({Action::Kind::Backward, s, Keep::Nothing, false});
        if (held) x.actions.push_back({Action::Kind::Free, s, Keep::Nothing, false});
        f.push_back(std::move(x));
      };
      if (t - s == 1) one(nullptr);
      else
        for (const Partial& sub : c(s + 1, t, 0)) one(&sub);
    }
    for (int s2 = s + 1; s2 < t; ++s2)
      for (const Partial& a : c(s2, t, 0))
        for (const Partial& b : c(s, s2, 1)) {
          Partial x = empty();
          x.actions.push_back({Action::Kind::Forward, s, held ? Keep::Nothing : Keep::Boundary, true});
          for (int i = s + 1; i < s2; ++i) x.actions.push_back({Action::Kind::Forward, i, Keep::Nothing, true});
          append(x, a);
          append(x, b);
          f.push_back(std::move(x));
        }
    return f;
  };
  std::function<Family(int)> d = [&](int s) -> Family {
    Family f;
    if (s == L) {
      f.push_back(empty());
      return f;
    }
    for (int p = 0; p < P; ++p)
      for (const Partial& sub : d(s + 1)) {
        Partial x = empty();
        x.actions.push_back({Action::Kind::Forward, s, Keep::Internals, false});
        x.policy[size_t(s)] = p;
        append(x, sub);
        x.actions.push_back({Action::Kind::Backward, s, Keep::Nothing, false});
        f.push_back(std::move(x));
      }
    for (int s2 = s + 1; s2 <= L; ++s2) {
      const Family first = d(s2);
      for (const Partial& a : first)
        for (const Partial& b : c(s, s2, 1)) {
          Partial x = empty();
          x.actions.push_back({Action::Kind::Forward, s, Keep::Boundary, false});
          for (int i = s + 1; i < s2; ++i) x.actions.push_back({Action::Kind::Forward, i, Keep::Nothing, false});
          append(x, a);
          append(x, b);
          f.push_back(std::move(x));
        }
    }
    return f;
  };
  for (const Partial& x : d(0)) visit(x.actions, x.policy);
}

}  // namespace remat::planner
