// Flags shared by the subcommands, spelled as the issues fix them so that scripts can rely on them.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/flag_table.h"
#include "core/text.h"
#include "train/trainer.h"

namespace remat::cli {

// The model train, bench, plan and trace build when no --preset is given: one default, so that their
// commands paste into each other.
inline constexpr const char* kDefaultPreset = "shakespeare";

struct ModelFlags {
  // kUnset: not given (the preset's value). Any given value is validated, -1 included.
  static constexpr int64_t kUnset = INT64_MIN;
  std::string preset, arch;
  int64_t L = kUnset, C = kUnset, NH = kUnset, KVH = kUnset, hidden = kUnset, T = kUnset, V = kUnset,
          block_size = kUnset;
  float rope_theta = 10000.0f;  // used only when --rope-theta is given
  float dropout = 0;
  std::string attention = "naive";
  std::string precision = "fp32";  // --precision fp32 | bf16
  bool fp32_residual = false;
  int64_t threads = kUnset;  // kUnset: OpenMP's default (all cores)
  CLI::Option* preset_option = nullptr;  // to tell an explicit --preset from the default
  // Set before add_to by the commands that plan (plan, train): --attention also takes `auto`, the
  // planner's choice between naive and flash. config() then holds naive, the kernel to plan from.
  bool allow_auto_attention = false;
  bool attention_auto() const { return attention == "auto"; }
  // Registers --preset, --arch, --layers, --channels, --heads, --kv-heads, --hidden, --rope-theta,
  // --seq, --vocab, --block-size, --dropout, --attention, --precision, --fp32-residual, --threads on `app`.
  void add_to(CLI::App& app, const std::string& default_preset);
  // For the commands that take a model's shape, not its weights (plan, bench, trace, calibrate):
  // registers --init-from FILE|FOLDER, after which config() is config_for_file(that path).
  void add_shape_from(CLI::App& app);
  std::string shape_from;
  // The config: preset, then explicit flags; --seq sets the block size unless --block-size is given.
  // With add_shape_from's --init-from given: config_for_file(it).
  ModelConfig config() const;
  // The config for --init-from `path` (a .safetensors file or a model folder, see read_config; --heads
  // stands in for the head count of a LLaMA file without config.json): the architecture stored in
  // the file (unless --preset is given), then explicit flags; the block size is the file's unless --block-size is given, and --seq must
  // not exceed it.
  ModelConfig config_for_file(const std::string& path) const;
  // Sequence length used for batches.
  int64_t seq(const ModelConfig& c) const { return T != kUnset ? T : c.T; }
  // Sets OpenMP's thread count from --threads (1 .. max_threads()), or leaves OpenMP's default.
  void apply_threads() const;
  // The model flags of a `remat train` command that builds this model at sequence length `seq`:
  // " --preset P" when given (train's default preset is the same), every other model flag given, as
  // typed (--threads and --attention auto excepted), and " --seq T".
  std::string command_line(int64_t seq) const;
  // Was `flag` given on the command line (add_to's app)?
  bool given(const std::string& flag) const;

 private:
  void apply(ModelConfig& c) const;  // the explicit architecture flags over c
  void check_given() const;          // explicit values that no config can mean (--block-size 0, ...)
  CLI::App* app_ = nullptr;
};

// The most --threads accepts: 4x this machine's hardware threads, at most 1024.
int64_t max_threads();
// --attention auto in a command that makes no plan (`command`, e.g. "grads"): remat::Error("cli").
void refuse_auto_attention(const std::string& attention, const std::string& command);

// The table's entry for a shared flag (flag_table.h); a name missing from it is a programming error.
const SharedFlag& shared_flag(std::string_view name);
// Its help text in `app`'s subcommand: the table's meaning, then "; here: " and `here` when given.
std::string shared_help(const SharedFlag& f, std::string_view here);
// What an option's value is, INT, UINT, FLOAT or TEXT, whatever name its argument shows in --help.
std::string value_kind(const CLI::Option* o);
// Shows the table's argument name and, when the subcommand has one, sets its default (the variable too).
void finish_shared(CLI::Option* o, const SharedFlag& f, std::string_view command);

// Registers the shared flag `name` on `app` from the table (flag_table.h): its argument, its help (with
// `here`, what it does in this subcommand) and its default, which also sets `var`.
template <class T>
CLI::Option* add_shared(CLI::App& app, std::string_view name, T& var, std::string_view here = {}) {
  const SharedFlag& f = shared_flag(name);
  CLI::Option* o = app.add_option(std::string(name), var, shared_help(f, here));
  finish_shared(o, f, app.get_name());
  return o;
}
// A shared switch (no argument; off unless given).
CLI::Option* add_shared_switch(CLI::App& app, std::string_view name, bool& var, std::string_view here = {});

// --threads N: throws remat::Error("cli") unless 1 <= N <= max_threads().
void check_threads(int64_t n, const std::string& flag = "--threads");

// A seed as typed: decimal digits, 0 .. 2^63-1. Throws remat::Error naming `flag` otherwise
// (negative numbers, signs, garbage, values above 2^63-1).
uint64_t parse_seed(const std::string& text, const std::string& flag);
// Registers --seed (flag_table.h), parsed with parse_seed into `seed`, which takes the table's default.
CLI::Option* add_seed_option(CLI::App& app, uint64_t& seed, std::string_view here = {});

// shell_quoted (core/text.h): an option's value for a pasted command line.
using remat::shell_quoted;

// --precision's (or --save-dtype's) text: fp32 or bf16; fp16 is refused (not supported), as is anything else.
DType parse_precision(const std::string& text, const std::string& flag = "--precision");

// A byte count as typed for --memory-limit and --budget. A number (digits, an optional fraction and
// an optional exponent: 1.5, 3e9), optional spaces, then an optional unit, case-insensitive:
//   B or none: bytes;
//   K, M, G, T and KiB, MiB, GiB, TiB: binary, 2^10, 2^20, 2^30, 2^40 (3g = 3GiB = 3 x 2^30 bytes);
//   kB, MB, GB, TB: decimal, 10^3, 10^6, 10^9, 10^12 (3GB = 3 x 10^9 bytes).
// Fractions of the unit round to the nearest byte (1.5G). Throws remat::Error("cli") naming `flag`,
// with an example, for: an empty text, garbage, a sign, 0, a fraction of a byte (0.5: did you mean
// 0.5GiB?), and more than 2^62 bytes (larger than any machine).
size_t parse_bytes(const std::string& text, const std::string& flag);
// The units parse_bytes accepts, for --help texts.
extern const char* const kByteUnitsHelp;

// Rejects sizes whose byte counts would overflow (a config error instead of a crash), and, when
// host_bytes_per_param > 0, models whose parameters (times that many bytes each) exceed this
// machine's physical memory. `batch` is the micro-batch. Sizes come from a dry run of the model.
void check_sizes(const ModelConfig& c, int64_t batch, int64_t T, double host_bytes_per_param);

int cmd_train(CLI::App& app);
void add_train(CLI::App& root);
void add_bench(CLI::App& root);
void add_trace(CLI::App& root);
void add_plan(CLI::App& root);
void add_grads(CLI::App& root);

}  // namespace remat::cli
