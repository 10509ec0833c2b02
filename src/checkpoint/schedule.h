// Strategies as schedules. A strategy over a chain of L blocks x_{i+1} = f_i(x_i) is a list of
// actions (as in rotor and Revolve): one executor runs any list, the tracer prints it, and the
// planner prices it (memory by simulation, FLOPs by counting). `none`, `all`, `block`, `sqrt`,
// `uniform:K` and `segments:a,b,c` are different lists, not different code paths.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/record_fwd.h"

namespace remat {

enum class Keep {
  Internals,  // record the block's tape: everything its backward needs
  Boundary,   // keep only the block's input x_i, as a checkpoint
  Nothing,    // keep nothing (a pass-through on the way to something else)
};

struct Action {
  enum class Kind { Forward, Backward, Free } kind;
  int block = 0;
  Keep keep = Keep::Nothing;  // Forward only
  bool recompute = false;     // Forward only: part of the backward phase
  bool operator==(const Action&) const = default;
};

using Schedule = std::vector<Action>;
}  // namespace remat
// In files, an action is its encode_schedule token ("f0c"); a schedule is an array of them.
template <>
struct remat::record::Codec<remat::Action> {
  static nlohmann::json encode(const remat::Action& a);
  static remat::Action decode(const nlohmann::json& j);  // throws std::invalid_argument
};
namespace remat {

struct StrategySpec {
  std::string name;           // "none", "all", "block", "sqrt", "uniform", "segments", "actions"
  std::vector<int> segments;  // segment lengths (sum L); empty for none/all
  bool recompute_last = false;
  // How a checkpointed segment of n > 1 blocks is replayed before its backward:
  //  - false (default): keep only the block inputs, then replay each block with its internals just
  //    before its backward. Peak K|x| + max_k L_k|x| + one block's internals; 2n-1 block replays.
  //  - true: keep every block's internals during the one replay (Chen et al.'s +33%): n replays,
  //    but up to L_k blocks' internals in flight.
  bool replay_internals = false;
  // "actions": any valid schedule, spelled action by action (a plan's, see encode_schedule).
  std::vector<Action> actions;
  std::string label() const;       // "uniform:3", "segments:3,4,5 (replay internals)", "plan (2 checkpoints, ...)"
  std::string base_label() const;  // a valid --recompute value: "uniform:3", "segments:3,4,5", "actions:..."
};

// Parses --recompute (none | all | block | sqrt | uniform:K | segments:a,b,... | actions:...) for a
// chain of L blocks. Throws remat::Error with a hint on anything malformed, and on an action list
// that is not a valid schedule for L (validate_schedule).
StrategySpec parse_strategy(const std::string& text, int L, bool recompute_last, bool replay_internals = false);

// The textbook strategy (none, all, block or uniform:K, with its --recompute-last and --segment-replay)
// whose schedule is `s`, if any.
std::optional<StrategySpec> named_strategy(const Schedule& s, int L);

// Near-equal partition of L into K segments (longer ones first).
std::vector<int> uniform_segments(int L, int K);

// The action list of one training step (forward phase, then backward phase). The head
// (final norm, LM head, loss) runs between the two and is not part of the chain.
Schedule make_schedule(const StrategySpec& s, int L);

// A schedule as text, one token per action, comma-separated: f<i><k> a forward of block i in the
// forward phase, r<i><k> a forward in the backward phase (a recompute), k = i (keep internals),
// c (keep the input x_i as a checkpoint) or n (keep nothing); b<i> block i's backward; x<i> frees
// the checkpoint x_i. "f0c,f1i,b1,r0i,b0,x0" is uniform:1 over two blocks with its tail stored.
std::string encode_schedule(const Schedule& s);
// The inverse of encode_schedule. Throws remat::Error naming the first malformed token.
Schedule decode_schedule(const std::string& text);

// Throws remat::Error naming the first action the executor could not run over a chain of L blocks:
// the forward phase must run blocks 0..L-1 once each, in order; every forward needs its input (the
// output of the previous forward, or a checkpoint); backwards run L-1..0 once each, each on internals
// recorded since; a free needs its checkpoint; nothing may be left held at the end.
void validate_schedule(const Schedule& s, int L);

// Counts of block forwards in a schedule.
struct ScheduleCounts {
  int forwards = 0, recomputes = 0, backwards = 0;
};
ScheduleCounts count(const Schedule& s);

// "forward 0 [checkpoint]" / "recompute 3" / "backward 3" / "free checkpoint 0": one line per action.
std::string describe(const Action& a);

}  // namespace remat
