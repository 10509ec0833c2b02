#include "cli/flags.h"

#include <omp.h>

#include <cmath>

#include "core/error.h"

namespace remat::cli {

void ModelFlags::add_to(CLI::App& app, const std::string& default_preset) {
  preset = default_preset;
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--preset", preset, "Model preset (" + names + "); other model flags override it")
      ->capture_default_str();
  app.add_option("--layers", L, "L: number of transformer blocks");
  app.add_option("--channels", C, "C: model width");
  app.add_option("--heads", NH, "NH: attention heads (must divide C)");
  app.add_option("--seq", T, "T: sequence length of a batch (also the block size unless --block-size)");
  app.add_option("--vocab", V, "V: vocabulary size (256 for byte-level text)");
  app.add_option("--block-size", block_size, "Longest sequence the model accepts (rows of wpe)");
  app.add_option("--dropout", dropout, "Dropout probability on embeddings, attention and residuals")
      ->capture_default_str();
  app.add_option("--attention", attention, "Attention kernel: naive (materialises T x T) or flash")
      ->check(CLI::IsMember({"naive", "flash"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads (default: all cores)");
}

GPTConfig ModelFlags::config() const {
  GPTConfig c = preset.empty() ? GPTConfig{} : remat::preset(preset);
  if (L != -1) c.L = L;
  if (C != -1) c.C = C;
  if (NH != -1) c.NH = NH;
  if (V != -1) c.V = V;
  if (T != -1) c.T = T;
  if (block_size != -1) c.T = block_size;
  c.dropout = dropout;
  c.attention = attention == "flash" ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive;
  c.validate();
  if (T != -1 && T > c.T)
    throw Error("config", "--seq " + std::to_string(T) + " is above the model's block size " + std::to_string(c.T),
                "use --seq <= " + std::to_string(c.T) + " or raise --block-size");
  return c;
}

void ModelFlags::apply_threads() const {
  if (threads < 0) throw Error("cli", "--threads must be positive", "e.g. --threads 2");
  if (threads > 0) omp_set_num_threads(threads);
}

size_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "k" || unit == "K" || unit == "KiB" || unit == "KB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB" || unit == "MB") mult = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "GiB" || unit == "GB") mult = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "T" || unit == "TiB" || unit == "TB") mult = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  if (used == 0 || mult == 0 || !(v > 0) || !std::isfinite(v))
    throw Error("cli", flag + " '" + text + "' is not a byte size", "write e.g. " + flag + " 512MiB or " + flag + " 2GiB");
  return size_t(v * mult);
}

}  // namespace remat::cli
