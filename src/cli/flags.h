// Flags shared by the subcommands, spelled as the issues fix them so that scripts can rely on them.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "train/trainer.h"

namespace remat::cli {

struct ModelFlags {
  // kUnset: not given (the preset's value). Any given value is validated, -1 included.
  static constexpr int64_t kUnset = INT64_MIN;
  std::string preset, arch;
  int64_t L = kUnset, C = kUnset, NH = kUnset, KVH = kUnset, hidden = kUnset, T = kUnset, V = kUnset,
          block_size = kUnset;
  float rope_theta = -1;
  float dropout = 0;
  std::string attention = "naive";
  int threads = 0;
  CLI::Option* preset_option = nullptr;  // to tell an explicit --preset from the default
  // Registers --preset, --arch, --layers, --channels, --heads, --kv-heads, --hidden, --rope-theta,
  // --seq, --vocab, --block-size, --dropout, --attention, --threads on `app`.
  void add_to(CLI::App& app, const std::string& default_preset);
  // The config: preset, then explicit flags; --seq sets the block size unless --block-size is given.
  ModelConfig config() const;
  // The config for --init-from `path` (a .safetensors file or a model folder, see read_config; --heads
  // stands in for the head count of a LLaMA file without config.json): the architecture stored in
  // the file (unless --preset is given), then explicit flags; the block size is the file's unless --block-size is given, and --seq must
  // not exceed it.
  ModelConfig config_for_file(const std::string& path) const;
  // Sequence length used for batches.
  int64_t seq(const ModelConfig& c) const { return T != kUnset ? T : c.T; }
  void apply_threads() const;

 private:
  void apply(ModelConfig& c) const;  // the explicit architecture flags over c
};

// "2GiB", "1.5G", "512MiB", "64k", "1000000" -> bytes. Throws remat::Error on anything else.
size_t parse_bytes(const std::string& text, const std::string& flag);

// Rejects sizes whose byte counts would overflow (a config error instead of a crash), and, when
// host_bytes_per_param > 0, models whose parameters (times that many bytes each) exceed this
// machine's physical memory. `batch` is the micro-batch. Sizes come from a dry run of the model.
void check_sizes(const ModelConfig& c, int64_t batch, int64_t T, double host_bytes_per_param);
// Throws remat::Error("io") unless the directory that would hold `path` exists, so that a bad
// --save or --metrics-out fails before training rather than after it. An existing folder is refused,
// except for --save to a path not ending in .safetensors (a model folder, written into again).
void check_output_path(const std::string& path, const std::string& flag);

int cmd_train(CLI::App& app);
void add_train(CLI::App& root);
void add_bench(CLI::App& root);
void add_trace(CLI::App& root);
void add_plan(CLI::App& root);
void add_grads(CLI::App& root);

}  // namespace remat::cli
