#include "checkpoint/schedule.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "core/error.h"

namespace remat {

std::string StrategySpec::label() const {
  if (name == "actions") {
    int ck = 0;
    for (const Action& a : actions) ck += a.kind == Action::Kind::Forward && a.keep == Keep::Boundary && !a.recompute;
    const int re = count(actions).recomputes;
    return "plan (" + std::to_string(ck) + " checkpoint" + (ck == 1 ? "" : "s") + ", " + std::to_string(re) +
           " block recompute" + (re == 1 ? "" : "s") + ")";
  }
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
  if (name == "actions") return "actions:" + encode_schedule(actions);
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
    int64_t sum = 0;  // each length is at most 10^6: a long list cannot overflow 64 bits, but it can 32
    while (std::getline(ss, item, ',')) {
      s.segments.push_back(parse_positive(item, "segments:..."));
      sum += s.segments.back();
      if (sum > L)
        throw Error("recompute",
                    "segment lengths " + tail.substr(0, 60) + (tail.size() > 60 ? "..." : "") + " sum to more than the " +
                        std::to_string(L) + " layers of the model",
                    "make the lengths sum to " + std::to_string(L));
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
  if (head == "actions" && colon != std::string::npos) {
    s.name = "actions";
    s.actions = decode_schedule(tail);
    validate_schedule(s.actions, L);
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

  if (s.name == "actions") return s.actions;
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

std::string encode_schedule(const Schedule& s) {
  std::string out;
  for (const Action& a : s) {
    if (!out.empty()) out += ',';
    const std::string i = std::to_string(a.block);
    switch (a.kind) {
      case Action::Kind::Forward:
        out += (a.recompute ? "r" : "f") + i + (a.keep == Keep::Internals ? "i" : a.keep == Keep::Boundary ? "c" : "n");
        break;
      case Action::Kind::Backward: out += "b" + i; break;
      case Action::Kind::Free: out += "x" + i; break;
    }
  }
  return out;
}

Schedule decode_schedule(const std::string& text) {
  const std::string hint =
      "actions are f<i><k> (forward), r<i><k> (recompute), b<i> (backward), x<i> (free checkpoint x_i) with "
      "k = i (internals), c (checkpoint) or n (nothing), comma-separated, as remat plan --out writes them";
  Schedule out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string tok = text.substr(pos, end - pos);
    const std::string shown = "action " + std::to_string(out.size() + 1) + " '" + tok.substr(0, 20) + "'";
    if (tok.size() < 2) throw Error("recompute", shown + " is not an action", hint);
    Action a{Action::Kind::Forward, 0, Keep::Nothing, false};
    const char k = tok[0];
    size_t digits_end = tok.size();
    if (k == 'f' || k == 'r') {
      a.recompute = k == 'r';
      const char keep = tok.back();
      if (keep == 'i') a.keep = Keep::Internals;
      else if (keep == 'c') a.keep = Keep::Boundary;
      else if (keep == 'n') a.keep = Keep::Nothing;
      else throw Error("recompute", shown + " ends in '" + std::string(1, keep) + "', not i, c or n", hint);
      --digits_end;
    } else if (k == 'b') {
      a.kind = Action::Kind::Backward;
    } else if (k == 'x') {
      a.kind = Action::Kind::Free;
    } else {
      throw Error("recompute", shown + " starts with '" + std::string(1, k) + "', not f, r, b or x", hint);
    }
    const std::string num = tok.substr(1, digits_end - 1);
    if (num.empty() || num.size() > 7 || num.find_first_not_of("0123456789") != std::string::npos)
      throw Error("recompute", shown + " has no block number", hint);
    a.block = std::stoi(num);
    out.push_back(a);
    pos = end + 1;
  }
  return out;
}

void validate_schedule(const Schedule& s, int L) {
  const std::string hint = "the schedule does not fit a chain of " + std::to_string(L) +
                           " blocks: plan again for this model (remat plan ... --out)";
  std::vector<char> boundary(size_t(std::max(L, 0)), 0), tape(size_t(std::max(L, 0)), 0);
  int cur = 0;  // the block whose input is the current tensor (-1: none)
  int next_forward = 0, next_backward = L - 1;
  bool forward_phase = true;
  for (size_t k = 0; k < s.size(); ++k) {
    const Action& a = s[k];
    const std::string where = "action " + std::to_string(k + 1) + " (" + describe(a) + ")";
    auto bad = [&](const std::string& why) { throw Error("recompute", where + ": " + why, hint); };
    if (a.block < 0 || a.block >= L) bad("block " + std::to_string(a.block) + " is not in 0.." + std::to_string(L - 1));
    const size_t i = size_t(a.block);
    const bool fwd_phase_action = a.kind == Action::Kind::Forward && !a.recompute;
    if (forward_phase && !fwd_phase_action) {
      if (next_forward != L) bad("the forward phase stops at block " + std::to_string(next_forward) + " of " + std::to_string(L));
      forward_phase = false;
      cur = -1;  // the head consumed x_L
    }
    if (!forward_phase && fwd_phase_action) bad("a first forward after the forward phase (should it be a recompute?)");
    switch (a.kind) {
      case Action::Kind::Forward:
        if (forward_phase && a.block != next_forward)
          bad("the forward phase must run block " + std::to_string(next_forward) + " next");
        if (cur != a.block && !boundary[i]) bad("its input x" + std::to_string(a.block) + " is neither current nor a checkpoint");
        if (a.keep == Keep::Boundary) {
          if (boundary[i]) bad("x" + std::to_string(a.block) + " is already a checkpoint");
          boundary[i] = 1;
        }
        if (a.keep == Keep::Internals) {
          if (tape[i]) bad("block " + std::to_string(a.block) + "'s internals are already recorded");
          tape[i] = 1;
        }
        if (forward_phase) ++next_forward;
        cur = a.block + 1;
        break;
      case Action::Kind::Backward:
        if (a.block != next_backward)
          bad(next_backward < 0 ? "every block is already backpropagated"
                                : "the next backward must be block " + std::to_string(next_backward));
        if (!tape[i]) bad("block " + std::to_string(a.block) + "'s internals are not recorded");
        tape[i] = 0;
        --next_backward;
        cur = -1;
        break;
      case Action::Kind::Free:
        if (!boundary[i]) bad("x" + std::to_string(a.block) + " is not a checkpoint");
        boundary[i] = 0;
        break;
    }
  }
  if (forward_phase && next_forward != L)
    throw Error("recompute", "the schedule's forward phase stops at block " + std::to_string(next_forward) + " of " + std::to_string(L), hint);
  if (next_backward >= 0)
    throw Error("recompute", "the schedule ends before block " + std::to_string(next_backward) + "'s backward", hint);
  for (int i = 0; i < L; ++i)
    if (boundary[size_t(i)])
      throw Error("recompute", "the schedule ends with checkpoint x" + std::to_string(i) + " still held (no free)", hint);
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

std::optional<StrategySpec> named_strategy(const Schedule& s, int L) {
  std::vector<std::string> names{"none", "all", "block"};
  for (int K = 1; K < L; ++K) names.push_back("uniform:" + std::to_string(K));
  for (const std::string& n : names)
    for (int last = 0; last < 2; ++last)
      for (int internals = 0; internals < 2; ++internals) {
        const StrategySpec spec = parse_strategy(n, L, last, internals);
        if (make_schedule(spec, L) == s) return spec;
      }
  return std::nullopt;
}

}  // namespace remat

nlohmann::json remat::record::Codec<remat::Action>::encode(const remat::Action& a) { return encode_schedule({a}); }

remat::Action remat::record::Codec<remat::Action>::decode(const nlohmann::json& j) {
  if (!j.is_string()) throw std::invalid_argument("must be an action such as \"f0c\", got " + j.dump());
  try {
    const Schedule s = decode_schedule(j.get<std::string>());
    if (s.size() != 1) throw std::invalid_argument("must be one action, got " + j.dump());
    return s[0];
  } catch (const Error& e) {
    throw std::invalid_argument(e.what());
  }
}
