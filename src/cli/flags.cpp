#include "cli/flags.h"

#include <omp.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"
#include "model/weights.h"
#include "planner/planner.h"

namespace remat::cli {

void ModelFlags::add_to(CLI::App& app, const std::string& default_preset) {
  preset = default_preset;
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  preset_option = app.add_option("--preset", preset, "Model preset (" + names + "); other model flags override it")
                      ->capture_default_str();
  app.add_option("--arch", arch, "Architecture: gpt2 or llama (default: the preset's)");
  app.add_option("--layers", L, "L: number of transformer blocks");
  app.add_option("--channels", C, "C: model width");
  app.add_option("--heads", NH, "NH: attention heads (must divide C)");
  app.add_option("--kv-heads", KVH, "KVH: key/value heads of grouped-query attention (LLaMA; must divide --heads)");
  app.add_option("--hidden", hidden, "MLP hidden size (default: GPT-2 4C, LLaMA about 8C/3)");
  app.add_option("--rope-theta", rope_theta, "LLaMA's rotary embedding base (default 10000)");
  app.add_option("--seq", T, "T: sequence length of a batch (also the block size unless --block-size)");
  app.add_option("--vocab", V, "V: vocabulary size (256 for byte-level text)");
  app.add_option("--block-size", block_size, "Longest sequence the model accepts (GPT-2's wpe rows, LLaMA's positions)");
  app.add_option("--dropout", dropout, "Dropout probability on embeddings, attention and residuals")
      ->capture_default_str();
  app.add_option("--attention", attention, "Attention kernel: naive (materialises T x T) or flash")
      ->check(CLI::IsMember({"naive", "flash"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads (default: all cores)");
}

void ModelFlags::apply(ModelConfig& c) const {
  if (!arch.empty()) {
    const Arch a = parse_arch(arch);
    if (a != c.arch) c.hidden = 0;  // the other architecture's default MLP width
    c.arch = a;
  }
  if (L != kUnset) c.L = L;
  if (C != kUnset) c.C = C;
  if (NH != kUnset) c.NH = NH;
  if (KVH != kUnset) c.KVH = KVH;
  else if (NH != kUnset && NH > 0 && c.KVH > 0 && NH % c.KVH != 0) c.KVH = 0;  // the preset's KVH no longer divides
  if (hidden != kUnset) c.hidden = hidden;
  else if (C != kUnset) c.hidden = 0;  // the MLP width follows the channels
  if (rope_theta != -1) c.rope_theta = rope_theta;
  if (V != kUnset) c.V = V;
  c.dropout = dropout;
  c.attention = attention == "flash" ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive;
}

ModelConfig ModelFlags::config() const {
  ModelConfig c = preset.empty() ? ModelConfig{} : remat::preset(preset);
  apply(c);
  if (T != kUnset) c.T = T;
  if (block_size != kUnset) c.T = block_size;
  c.validate();
  if (T != kUnset && T > c.T)
    throw Error("config", "--seq " + std::to_string(T) + " is above the model's block size " + std::to_string(c.T),
                "use --seq <= " + std::to_string(c.T) + " or raise --block-size");
  return c;
}

ModelConfig ModelFlags::config_for_file(const std::string& path) const {
  const ModelConfig fc = read_config(path, NH != kUnset ? NH : 0);
  ModelConfig c = preset_option && preset_option->count() > 0 ? remat::preset(preset) : fc;
  apply(c);
  c.T = block_size != kUnset ? block_size : fc.T;
  if (T != kUnset && T <= 0)
    throw Error("config", "--seq must be positive, got " + std::to_string(T), "pass --seq 1 or more");
  if (T != kUnset && T > c.T)
    throw Error("config",
                "--seq " + std::to_string(T) + " is above the block size " + std::to_string(c.T) +
                    (block_size != kUnset ? " (--block-size)" : " of '" + path + "'"),
                "use --seq <= " + std::to_string(c.T));
  c.validate();
  return c;
}

void check_sizes(const ModelConfig& c, int64_t batch, int64_t T, double host_bytes_per_param) {
  if (c.L > 100000)
    throw Error("config", c.describe() + " has " + std::to_string(c.L) + " blocks: absurdly large, more than remat plans or runs (100000)",
                "check --layers for a typo");
  double params = 0, activations = 0;
  try {
    // The model's own parameter shapes, and the dry run's saved tensors of one micro-batch
    // (store-everything): shape arithmetic that throws on overflow instead of wrapping.
    const auto m = planner::shape_only_model(c);
    params = double(m->num_params());
    const auto tr = planner::trace_step(*m, std::max<int64_t>(batch, 1), std::max<int64_t>(T, 1));
    activations = double(tr.embed.kept_bytes() + tr.head.kept_bytes());
    for (const auto& b : tr.blocks) activations += double(b.kept_bytes());
  } catch (const Error& e) {
    throw Error("config", c.describe() + " at batch " + std::to_string(batch) + ", seq " + std::to_string(T) +
                              " is absurdly large: " + e.what(),
                "check --layers/--channels/--seq/--vocab/--batch for a typo");
  }
  const double limit = std::ldexp(1.0, 60);  // 1 EiB: far beyond any machine, far below 2^63
  if (16.0 * params > limit || activations > limit) {
    char what[160];
    std::snprintf(what, sizeof what, " is absurdly large (%.3g GiB of parameters, %.3g GiB of activations)",
                  4.0 * params / 1073741824.0, activations / 1073741824.0);
    throw Error("config", c.describe() + " at batch " + std::to_string(batch) + ", seq " + std::to_string(T) + what,
                "check --layers/--channels/--seq/--vocab/--batch for a typo");
  }
  if (host_bytes_per_param > 0) {
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    const double need = params * host_bytes_per_param;
    if (ram > 0 && need > ram)
      throw Error("config",
                  c.describe() + " has " + std::to_string(int64_t(params)) + " parameters; with gradients" +
                      (host_bytes_per_param > 8 ? " and AdamW state" : "") + " they need " +
                      format_bytes(size_t(need)) + ", more than this machine's " + format_bytes(size_t(ram)) + " of memory",
                  "use a smaller model (--layers, --channels, --vocab, --block-size); `remat plan` prices any size");
  }
}

void check_output_path(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  std::error_code ec;
  const fs::path p(path);
  const bool folder_ok = flag == "--save" && !(path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0);
  if (fs::is_directory(p, ec) && folder_ok) return;  // a model folder, saved into again
  if (fs::is_directory(p, ec))
    throw Error("io", flag + " '" + path + "' is a directory", "give a file name, e.g. " + (p / "out").string());
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::exists(dir, ec))
    throw Error("io", "cannot write " + flag + " '" + path + "': directory '" + dir.string() + "' does not exist",
                "create it first, e.g. mkdir -p " + dir.string());
  if (!fs::is_directory(dir, ec))
    throw Error("io", "cannot write " + flag + " '" + path + "': '" + dir.string() + "' is not a directory",
                "give a path inside a directory");
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
