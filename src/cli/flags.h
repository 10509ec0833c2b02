// Flags shared by the subcommands, spelled as the issues fix them so that scripts can rely on them.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "train/trainer.h"

namespace remat::cli {

struct ModelFlags {
  std::string preset;
  int64_t L = -1, C = -1, NH = -1, T = -1, V = -1, block_size = -1;
  float dropout = 0;
  std::string attention = "naive";
  int threads = 0;
  // Registers --preset, --layers, --channels, --heads, --seq, --vocab, --block-size, --dropout,
  // --attention, --threads on `app`.
  void add_to(CLI::App& app, const std::string& default_preset);
  // The config: preset, then explicit flags; --seq sets the block size unless --block-size is given.
  GPTConfig config() const;
  // Sequence length used for batches.
  int64_t seq(const GPTConfig& c) const { return T > 0 ? T : c.T; }
  void apply_threads() const;
};

// "2GiB", "1.5G", "512MiB", "64k", "1000000" -> bytes. Throws remat::Error on anything else.
size_t parse_bytes(const std::string& text, const std::string& flag);

int cmd_train(CLI::App& app);
void add_train(CLI::App& root);
void add_bench(CLI::App& root);
void add_trace(CLI::App& root);
void add_plan(CLI::App& root);

}  // namespace remat::cli
