#include "planner/dp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>

#include "core/error.h"

namespace remat::planner::dp {

BlockBytes block_bytes(const PartTrace& p) {
  const BlockMemory m = block_memory(p);
  BlockBytes b;
  b.kept = m.kept;
  b.input = m.input;
  for (int held = 0; held < 2; ++held) {
    size_t gone = 0, rise = 0;
    for (int op = int(m.freed.size()) - 1; op >= 0; --op) {
      if (m.rebuilt[op] > gone) rise = std::max(rise, m.rebuilt[op] - gone);
      gone += m.freed[op];
      if (op == m.input_op && !held) gone += b.input;
    }
    (held ? b.rise_held : b.rise_cur) = rise;
  }
  return b;
}

namespace {

// Option (1) for block s under policy p: its internals, then [s+1, t) (sub, may be null: nothing
// after s), then its backward (and the free of x_s if held). first: before the head (D), else a
// replay (C).
inline double keep_cost(const Problem& pb, int s, int p, int held, int first, const double* sub, size_t m) {
  const size_t a = pb.A[held][s][p];
  if (pb.keep_lo[first][held][sub ? 0 : 1][s][p] > m) return kInf;
  const double rest = sub ? sub[m - a] : 0.0;
  return pb.K[first][s][p] + rest + pb.Bk[first][held][s][p];
}
// The cost of running blocks s..s2-1 without keeping anything. A homogeneous chain's replay tables
// are filled for s = 0 alone and read for every s (Tables::idx), so there the cost is taken from the
// start of the chain, Fsum[s2 - s] - Fsum[0]: the same double for every s. (Fsum[s2] - Fsum[s] differs
// from it in the last bit for costs that are not exact in binary, as calibrated seconds are.)
inline double run_cost(const Problem& pb, int first, int s, int s2) {
  return first == 0 && pb.homogeneous ? pb.Fsum[0][s2 - s] - pb.Fsum[0][0] : pb.Fsum[first][s2] - pb.Fsum[first][s];
}
// Option (2) split at s2: x_s kept, blocks s..s2-1 run, then [s2, t) within m - x, then [s, s2) from x_s.
// lo: its least m (split_lo of block s, pass_lo of the blocks between).
inline double split_cost(const Problem& pb, int s, int s2, int first, const double* a, const double* b, size_t m,
                         size_t lo) {
  if (lo > m) return kInf;
  return run_cost(pb, first, s, s2) + a[m - pb.x] + b[m];
}

// out[m] = min(out[m], keep_cost(..., m)) for every m, as a loop the compiler vectorises: the same
// expression, (F + rest) + B, so the same doubles as keep_cost (the Emitter compares them).
void keep_into(const Problem& pb, int s, int p, int held, int first, const double* sub, double* out, size_t M) {
  const size_t a = pb.A[held][s][p], lo = pb.keep_lo[first][held][sub ? 0 : 1][s][p];
  const double F = pb.K[first][s][p], B = pb.Bk[first][held][s][p];
  if (sub) {
#pragma omp simd
    for (size_t m = lo; m <= M; ++m) out[m] = std::min(out[m], F + sub[m - a] + B);
  } else {
    const double c = F + 0.0 + B;
    for (size_t m = lo; m <= M; ++m) out[m] = std::min(out[m], c);
  }
}
// The same for split_cost: (run_cost + a[m - x]) + b[m]. Every row is non-increasing in m
// (more memory never costs time), `out` too, option by option; so the split's value is at least its
// value at M, and from the first m where `out` is already that low it cannot improve `out`: only the
// prefix before it is updated. The table is the same, double for double, as without the bound.
void split_into(const Problem& pb, int s, int s2, int first, const double* a, const double* b, double* out, size_t M,
                size_t lo) {
  const double f = run_cost(pb, first, s, s2);
  const size_t x = pb.x;
  if (lo > M) return;
  const double least = f + a[M - x] + b[M];
  if (!(least < kInf)) return;
  // The first m >= lo with out[m] <= least (out is non-increasing), or M + 1.
  const size_t end = size_t(std::partition_point(out + lo, out + M + 1, [least](double v) { return v > least; }) - out);
#pragma omp simd
  for (size_t m = lo; m < end; ++m) out[m] = std::min(out[m], f + a[m - x] + b[m]);
}

}  // namespace

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
        size_t lo = pb.split_lo[0][held][s];
        for (int s2 = s + 1; s2 < t; ++s2) {
          split_into(pb, s, s2, 0, tb.C(s2, t, 0), tb.C(s, s2, 1), out, M, lo);
          lo = std::max(lo, pb.pass_lo[0][s2]);
        }
      }
    }
  }
  double* dl = tb.D(L);
  for (size_t m = pb.head; m <= M; ++m) dl[m] = 0;
  for (int s = L - 1; s >= 0; --s) {
    double* out = tb.D(s);
    for (int p = 0; p < pb.P; ++p) keep_into(pb, s, p, 0, 1, tb.D(s + 1), out, M);
    size_t lo = pb.split_lo[1][0][s];
    for (int s2 = s + 1; s2 <= L; ++s2) {
      split_into(pb, s, s2, 1, tb.D(s2), tb.C(s, s2, 1), out, M, lo);
      if (s2 < L) lo = std::max(lo, pb.pass_lo[1][s2]);
    }
  }
}

void Emitter::seg(int s, int t, int held, size_t m, bool top) {
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
  size_t lo = pb.split_lo[top][held][s];
  for (int s2 = s + 1; s2 < t || (top && s2 == t); lo = std::max(lo, s2 < pb.L ? pb.pass_lo[top][s2] : 0), ++s2) {
    const double* first = top ? tb.D(s2) : tb.C(s2, t, 0);
    if (split_cost(pb, s, s2, top, first, tb.C(s, s2, 1), m, lo) != want) continue;
    fwd(s, held ? Keep::Nothing : Keep::Boundary, re);
    for (int i = s + 1; i < s2; ++i) fwd(i, Keep::Nothing, re);
    seg(s2, t, 0, m - pb.x, top);
    seg(s, s2, 1, m, false);
    return;
  }
  REMAT_ASSERT(false, "planner: no option reproduces the table");
}

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
      const double rebuild = tm.rebuild ? tm.rebuild(i, p) : 0.0;  // as price_schedule adds it
      pb.Bk[1][0][i][p] = pb.Bk[1][1][i][p] = tm.backward_stored(i, p) + rebuild;  // the first pass never frees
      pb.Bk[0][0][i][p] = tm.backward_replayed(i, p) + rebuild;
      pb.Bk[0][1][i][p] = tm.backward_replayed(i, p) + rebuild + fr;
    }
  }
  pb.fixed = tm.fixed;
  for (int first = 0; first < 2; ++first) {
    pb.Fsum[first].assign(L + 1, 0.0);
    for (int i = 0; i < L; ++i) pb.Fsum[first][i + 1] = pb.Fsum[first][i] + pass[first][i];
  }
  // Planning for the whole step: each action's bytes above the activation level before it, less what
  // every plan holds (StepBytes::persistent); kNever where not measured (the DP takes no such option).
  // A forward keeping nothing is one per block whatever its candidate (as its cost is): the most of them.
  const StepBytes* sb = pp.step ? &*pp.step : nullptr;
  constexpr size_t kNever = std::numeric_limits<size_t>::max() / 4;
  struct Above {
    size_t keep[2][2] = {};  // [first][held]: the forward keeping internals
    size_t bwd[2][2] = {};   // [held][last]: its backward
    size_t free = 0;         // the free of x_i after it (held)
    bool operator==(const Above&) const = default;
  };
  std::vector<std::vector<Above>> ab(L, std::vector<Above>(P));
  std::vector<size_t> split_w[2][2], pass_w[2];  // [first][held][i], [first][i]
  size_t head_w = 0;
  for (int first = 0; first < 2; ++first) {
    pass_w[first].assign(L, 0);
    for (int held = 0; held < 2; ++held) split_w[first][held].assign(L, 0);
  }
  if (sb) {
    REMAT_ASSERT(sb->head >= sb->persistent, "planner: the head holds less than every plan");
    head_w = sb->head - sb->persistent;
    auto w = [&](Action a, int p, bool in, bool cur, bool bnd) -> size_t {
      const std::optional<size_t> v = sb->action(a, p, in, cur, bnd);
      if (!v) return kNever;
      REMAT_ASSERT(*v >= sb->persistent, "planner: an action holds less than every plan");
      return *v - sb->persistent;
    };
    using K = Action::Kind;
    for (int i = 0; i < L; ++i)
      for (int p = 0; p < P; ++p) {
        Above& a = ab[i][p];
        for (int first = 0; first < 2; ++first) {
          const bool re = first == 0;
          for (int held = 0; held < 2; ++held) a.keep[first][held] = w({K::Forward, i, Keep::Internals, re}, p, held, !held, held);
          split_w[first][0][i] = std::max(split_w[first][0][i], w({K::Forward, i, Keep::Boundary, re}, p, false, true, false));
          split_w[first][1][i] = std::max(split_w[first][1][i], w({K::Forward, i, Keep::Nothing, re}, p, true, false, true));
          pass_w[first][i] = std::max(pass_w[first][i], w({K::Forward, i, Keep::Nothing, re}, p, false, true, false));
        }
        for (int held = 0; held < 2; ++held)
          for (int last = 0; last < 2; ++last) a.bwd[held][last] = w({K::Backward, i, Keep::Nothing, false}, p, held, last, held);
        a.free = w({K::Free, i, Keep::Nothing, false}, p, false, false, true);
      }
  }

  pb.homogeneous = true;
  for (int i = 1; i < L && pb.homogeneous; ++i) {
    for (int first = 0; first < 2; ++first) {
      if (pass_w[first][i] != pass_w[first][0]) pb.homogeneous = false;
      for (int held = 0; held < 2; ++held)
        if (split_w[first][held][i] != split_w[first][held][0]) pb.homogeneous = false;
    }
    if (pass[0][i] != pass[0][0] || pass[1][i] != pass[1][0]) pb.homogeneous = false;
    for (int p = 0; p < P; ++p) {
      const BlockBytes &a = bb[i][p], &b = bb[0][p];
      if (a.kept != b.kept || a.input != b.input || a.rise_cur != b.rise_cur || a.rise_held != b.rise_held ||
          !(ab[i][p] == ab[0][p]))
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
  // ... and the whole step's: its largest, to bound the range.
  size_t most_above = head_w;
  auto take = [&](size_t v) {
    if (v >= kNever) return;
    g = std::gcd(g, v);
    most_above = std::max(most_above, v);
  };
  take(head_w);
  for (int i = 0; i < L; ++i) {
    for (int first = 0; first < 2; ++first) {
      take(pass_w[first][i]);
      for (int held = 0; held < 2; ++held) take(split_w[first][held][i]);
    }
    for (int p = 0; p < P; ++p) {
      const Above& a = ab[i][p];
      for (int k = 0; k < 2; ++k)
        for (int l = 0; l < 2; ++l) take(a.keep[k][l]), take(a.bwd[k][l]);
      take(a.free);
    }
  }
  if (g == 0) g = 1;

  // The fastest plan's peak bounds every budget worth planning for; store-everything under each
  // policy, the largest of them, is above it.
  size_t top = 0;
  for (int p = 0; p < P; ++p)
    top = std::max(top, simulate_memory(pp.traces[p], make_schedule(parse_strategy("none", L, false), L)).peak_activation);
  if (sb) top += xb + most_above;  // a bound on the fastest plan's whole step, above what every plan holds
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
  // The least m of each option, in slots (dp.h).
  auto slots_of = [&](size_t v) { return v >= kNever ? kNever : ceil_div(v, q); };
  const size_t x = pb.x;
  for (int first = 0; first < 2; ++first) {
    pb.pass_lo[first].assign(L, 0);
    for (int held = 0; held < 2; ++held) {
      pb.split_lo[first][held].assign(L, 0);
      for (int last = 0; last < 2; ++last) pb.keep_lo[first][held][last].assign(L, std::vector<size_t>(P));
    }
    for (int i = 0; i < L; ++i) {
      pb.pass_lo[first][i] = x + slots_of(pass_w[first][i]);
      pb.split_lo[first][0][i] = std::max(x, slots_of(split_w[first][0][i]));
      pb.split_lo[first][1][i] = x + slots_of(split_w[first][1][i]);
      for (int held = 0; held < 2; ++held)
        for (int last = 0; last < 2; ++last)
          for (int p = 0; p < P; ++p) {
            const Above& a = ab[i][p];
            const size_t kept = pb.A[held][i][p];
            size_t lo = kept + pb.R[held][i][p];
            if (sb) {
              lo = std::max({lo, (held ? x : 0) + slots_of(a.keep[first][held]), kept + slots_of(a.bwd[held][last])});
              if (held) lo = std::max(lo, x + slots_of(a.free));
            }
            pb.keep_lo[first][held][last][i][p] = std::min(lo, kNever);
          }
    }
  }
  pb.head = std::max(pb.head, slots_of(head_w));
  pb.held_dominates = true;
  for (int i = 0; i < L; ++i) {
    if (pb.split_lo[0][0][i] > pb.split_lo[0][1][i]) pb.held_dominates = false;
    for (int p = 0; p < P; ++p)
      if (pb.A[0][i][p] > pb.A[1][i][p] || pb.keep_lo[0][0][0][i][p] > pb.keep_lo[0][1][0][i][p] ||
          pb.keep_lo[0][0][1][i][p] > pb.keep_lo[0][1][1][i][p] || !(pb.Bk[0][0][i][p] <= pb.Bk[0][1][i][p]))
        pb.held_dominates = false;
  }
  return pr;
}

}  // namespace remat::planner::dp
