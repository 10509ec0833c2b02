#include "checkpoint/schedule.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace remat {

std::string StrategySpec::label() const {
  std::string l = base_label();
  bool multi = false;
  for (int n : segments) multi = multi || n > 1;
  return replay_internals && multi ? l + " (replay internals)" : l;
}

std::string StrategySpec::base_label() const {
  if (name == "uniform") return "uniform:" + std::to_string(segments.size());
  if (name == "segments") {
    std::string s = "segments:";
    for (size_t i = 0; i < segments.size(); ++i) s += (i ? "," : "") + std::to_string(segments[i]);
    return s;
  }
  return name;
}

std::vector<int> uniform_segments(int L, int K) {
  std::vector<int> seg(K, L / K);
  for (int k = 0; k < L % K; ++k) seg[k] += 1;
  return seg;
}

namespace {
int parse_positive(const std::string& s, const std::string& what) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used != s.size() || s.empty() || v <= 0 || v > 1000000)
    throw Error("recompute", "'" + s + "' is not a positive whole number in " + what,
                "write e.g. --recompute uniform:4 or --recompute segments:3,4,5");
  return int(v);
}
}  // namespace

StrategySpec parse_strategy(const std::string& text, int L, bool recompute_last, bool replay_internals) {
  StrategySpec s;
  s.recompute_last = recompute_last;
  s.replay_internals = replay_internals;
  const std::string hint = "choose none, all, block, sqrt, uniform:K or segments:a,b,... (lengths summing to L)";
  if (L <= 0) throw Error("recompute", "the chain has no blocks (L=" + std::to_string(L) + ")", "use --layers 1 or more");
  if (text == "none" || text == "all") {
    s.name = text;
    return s;
  }
  if (text == "block") {
    s.name = "block";
    s.segments.assign(L, 1);
    return s;
  }
  if (text == "sqrt") {
    s.name = "sqrt";
    s.segments = uniform_segments(L, int(std::ceil(std::sqrt(double(L)) - 1e-9)));
    return s;
  }
  const auto colon = text.find(':');
  const std::string head = text.substr(0, colon), tail = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (head == "uniform" && colon != std::string::npos) {
    int K = parse_positive(tail, "uniform:K");
    if (K > L)
      throw Error("recompute", "uniform:" + tail + " asks for more segments than the " + std::to_string(L) + " blocks",
                  "use K <= L (uniform:" + std::to_string(L) + " is the same as block)");
    s.name = "uniform";
    s.segments = uniform_segments(L, K);
    return s;
  }
  if (head == "segments" && colon != std::string::npos) {
    s.name = "segments";
    std::stringstream ss(tail);
    std::string item;
    int sum = 0;
    while (std::getline(ss, item, ',')) {
      s.segments.push_back(parse_positive(item, "segments:..."));
      sum += s.segments.back();
    }
    if (s.segments.empty())
      throw Error("recompute", "segments: needs at least one length", hint);
    if (sum != L)
      throw Error("recompute",
                  "segment lengths " + tail + " sum to " + std::to_string(sum) + ", but the model has " +
                      std::to_string(L) + " layers",
                  "make the lengths sum to " + std::to_string(L));
    return s;
  }
  throw Error("recompute", "unknown strategy '" + text + "'", hint);
}

Schedule make_schedule(const StrategySpec& s, int L) {
  using K = Action::Kind;
  Schedule out;
  auto fwd = [&](int i, Keep keep, bool re) { out.push_back({K::Forward, i, keep, re}); };
  auto bwd = [&](int i) { out.push_back({K::Backward, i, Keep::Nothing, false}); };
  auto free_ck = [&](int i) { out.push_back({K::Free, i, Keep::Nothing, false}); };
  const bool skip_tail = !s.recompute_last;

  if (s.name == "none") {
    for (int i = 0; i < L; ++i) fwd(i, Keep::Internals, false);
    for (int i = L - 1; i >= 0; --i) bwd(i);
    return out;
  }
  if (s.name == "all") {
    // Store only x0. Block i's backward replays blocks 0..i from x0 (spec §3): O(L^2) forwards.
    for (int i = 0; i < L; ++i) {
      const bool tail = skip_tail && i == L - 1;
      fwd(i, tail ? Keep::Internals : (i == 0 ? Keep::Boundary : Keep::Nothing), false);
    }
    for (int i = L - 1; i >= 0; --i) {
      if (!(skip_tail && i == L - 1)) {
        for (int j = 0; j < i; ++j) fwd(j, Keep::Nothing, true);
        fwd(i, Keep::Internals, true);
      }
      bwd(i);
    }
    if (!(skip_tail && L == 1)) free_ck(0);
    return out;
  }
  // Segments: keep each segment's input; replay a segment with internals just before its backward.
  std::vector<int> start;
  for (int k = 0, b = 0; k < int(s.segments.size()); b += s.segments[k++]) start.push_back(b);
  const int nseg = int(s.segments.size());
  for (int k = 0; k < nseg; ++k) {
    const bool tail = skip_tail && k == nseg - 1;
    for (int i = start[k]; i < start[k] + s.segments[k]; ++i)
      fwd(i, tail ? Keep::Internals : (i == start[k] ? Keep::Boundary : Keep::Nothing), false);
  }
  for (int k = nseg - 1; k >= 0; --k) {
    const bool tail = skip_tail && k == nseg - 1;
    const int b = start[k], e = start[k] + s.segments[k];
    if (tail) {
      for (int i = e - 1; i >= b; --i) bwd(i);
    } else if (s.replay_internals) {
      for (int i = b; i < e; ++i) fwd(i, Keep::Internals, true);
      for (int i = e - 1; i >= b; --i) bwd(i);
      free_ck(b);
    } else {
      // Replay the segment keeping only the inputs of its blocks, then each block with its
      // internals right before its backward.
      for (int i = b; i < e - 1; ++i) fwd(i, i == b ? Keep::Nothing : Keep::Boundary, true);
      fwd(e - 1, Keep::Internals, true);
      bwd(e - 1);
      for (int i = e - 2; i >= b; --i) {
        fwd(i, Keep::Internals, true);
        bwd(i);
        free_ck(i);
      }
      if (e - 1 == b) free_ck(b);
    }
  }
  return out;
}

ScheduleCounts count(const Schedule& s) {
  ScheduleCounts c;
  for (const Action& a : s) {
    if (a.kind == Action::Kind::Forward) (a.recompute ? c.recomputes : c.forwards)++;
    if (a.kind == Action::Kind::Backward) c.backwards++;
  }
  return c;
}

std::string describe(const Action& a) {
  const std::string i = std::to_string(a.block);
  switch (a.kind) {
    case Action::Kind::Forward: {
      std::string what = a.recompute ? "recompute block " + i : "forward   block " + i;
      if (a.keep == Keep::Internals) return what + "  (keep internals)";
      if (a.keep == Keep::Boundary) return what + "  (keep input x" + i + " as checkpoint)";
      return what + "  (keep nothing)";
    }
    case Action::Kind::Backward: return "backward  block " + i;
    case Action::Kind::Free: return "free      checkpoint x" + i;
  }
  return "?";
}

}  // namespace remat
