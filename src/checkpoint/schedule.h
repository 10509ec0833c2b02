// Strategies as schedules. A strategy over a chain of L blocks x_{i+1} = f_i(x_i) is a list of
// actions (as in rotor and Revolve): one executor runs any list, the tracer prints it, and the
// planner prices it (memory by simulation, FLOPs by counting). `none`, `all`, `block`, `sqrt`,
// `uniform:K` and `segments:a,b,c` are different lists, not different code paths.
#pragma once
#include <string>
#include <vector>

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
};

using Schedule = std::vector<Action>;

struct StrategySpec {
  std::string name;           // "none", "all", "block", "sqrt", "uniform", "segments"
  std::vector<int> segments;  // segment lengths (sum L); empty for none/all
  bool recompute_last = false;
  // How a checkpointed segment of n > 1 blocks is replayed before its backward:
  //  - false (default): keep only the block inputs, then replay each block with its internals just
  //    before its backward. Peak K|x| + max_k L_k|x| + one block's internals; 2n-1 block replays.
  //  - true: keep every block's internals during the one replay (Chen et al.'s +33%): n replays,
  //    but up to L_k blocks' internals in flight.
  bool replay_internals = false;
  std::string label() const;       // "uniform:3", "segments:3,4,5 (replay internals)", ...
  std::string base_label() const;  // a valid --recompute value: "uniform:3", "segments:3,4,5" 
};

// Parses --recompute (none | all | block | sqrt | uniform:K | segments:a,b,...) for a chain of L
// blocks. Throws remat::Error with a hint on anything malformed.
StrategySpec parse_strategy(const std::string& text, int L, bool recompute_last, bool replay_internals = false);

// Near-equal partition of L into K segments (longer ones first).
std::vector<int> uniform_segments(int L, int K);

// The action list of one training step (forward phase, then backward phase). The head
// (final norm, LM head, loss) runs between the two and is not part of the chain.
Schedule make_schedule(const StrategySpec& s, int L);

// Counts of block forwards in a schedule.
struct ScheduleCounts {
  int forwards = 0, recomputes = 0, backwards = 0;
};
ScheduleCounts count(const Schedule& s);

// "forward 0 [checkpoint]" / "recompute 3" / "backward 3" / "free checkpoint 0": one line per action.
std::string describe(const Action& a);

}  // namespace remat
