#include "cli/flags.h"

#include <omp.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include <thread>

#include "core/allocator.h"
#include "core/error.h"
#include "model/weights.h"
#include "planner/planner.h"

namespace remat::cli {

void ModelFlags::add_to(CLI::App& app, const std::string& default_preset) {
  app_ = &app;
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  preset_option = add_shared(app, "--preset", preset, names);
  REMAT_ASSERT(preset == default_preset, "the default preset is flag_table.h's");
  add_shared(app, "--arch", arch);
  add_shared(app, "--layers", L);
  add_shared(app, "--channels", C);
  add_shared(app, "--heads", NH);
  add_shared(app, "--kv-heads", KVH);
  add_shared(app, "--hidden", hidden);
  add_shared(app, "--rope-theta", rope_theta);
  add_shared(app, "--seq", T);
  add_shared(app, "--vocab", V);
  add_shared(app, "--block-size", block_size);
  add_shared(app, "--dropout", dropout);
  add_shared(app, "--attention", attention)->check(CLI::IsMember({"naive", "flash", "auto"}));
  add_shared(app, "--precision", precision);
  add_shared_switch(app, "--fp32-residual", fp32_residual);
  add_shared(app, "--threads", threads);
}

bool ModelFlags::given(const std::string& flag) const {
  const CLI::Option* o = app_ ? app_->get_option_no_throw(flag) : nullptr;
  return o && o->count() > 0;
}

void ModelFlags::check_given() const {
  // A flag given with the sentinel itself (e.g. --layers -9223372036854775808) is not "unset".
  for (const auto& [flag, v] : {std::pair<const char*, int64_t>{"--layers", L}, {"--channels", C}, {"--heads", NH},
                                {"--kv-heads", KVH}, {"--hidden", hidden}, {"--seq", T}, {"--vocab", V},
                                {"--block-size", block_size}})
    if (given(flag) && v == kUnset)
      throw Error("config", std::string(flag) + " must be positive, got " + std::to_string(v),
                  std::string("pass ") + flag + " 1 or more");
  // Explicit values that 0 would otherwise turn into a default, or that another flag would be blamed for.
  if (block_size != kUnset && block_size <= 0)
    throw Error("config", "--block-size must be positive, got " + std::to_string(block_size),
                "e.g. --block-size 256, or omit it to use --seq (or the preset's)");
  if (T != kUnset && T <= 0)
    throw Error("config", "--seq must be positive, got " + std::to_string(T), "pass --seq 1 or more");
  if (KVH != kUnset && KVH <= 0)
    throw Error("config", "--kv-heads must be positive, got " + std::to_string(KVH),
                "e.g. --kv-heads 2, or omit it for as many key/value heads as --heads");
  if (hidden != kUnset && hidden <= 0)
    throw Error("config", "--hidden must be positive, got " + std::to_string(hidden),
                "e.g. --hidden 704, or omit it for the architecture's default MLP width");
  if (given("--rope-theta") && !(rope_theta >= ConfigLimits::kMinRopeTheta && rope_theta <= ConfigLimits::kMaxRopeTheta))
    throw Error("config", "--rope-theta must be a positive number from 1 to 1e10, got " + shell_quoted(app_->get_option("--rope-theta")->results().back()),
                "LLaMA uses 10000, LLaMA 3 500000");
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
  if (given("--rope-theta")) {
    if (c.arch != Arch::Llama)
      throw Error("config", "--rope-theta is for LLaMA's rotary embeddings; " + std::string(arch_name(c.arch)) +
                                " has learned positions",
                  "drop --rope-theta, or use --arch llama (or a llama-* preset)");
    c.rope_theta = rope_theta;
  }
  if (V != kUnset) c.V = V;
  c.dropout = dropout;
  if (!allow_auto_attention) refuse_auto_attention(attention, app_->get_name());
  c.attention = attention == "flash" ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive;
  c.precision = parse_precision(precision);
  c.fp32_residual = fp32_residual;
}

DType parse_precision(const std::string& text, const std::string& flag) {
  if (text == "fp32" || text == "f32" || text == "float32") return DType::F32;
  if (text == "bf16" || text == "bfloat16") return DType::BF16;
  if (text == "fp16" || text == "f16" || text == "float16" || text == "half")
    throw Error("config", flag + " " + text + " is not supported: remat trains and saves in fp32 or bf16",
                "use " + flag + " bf16 (fp32's exponent range, so no loss scaling is needed)");
  throw Error("config", "unknown " + flag + " '" + text + "'", "use " + flag + " fp32 or " + flag + " bf16");
}

void ModelFlags::add_shape_from(CLI::App& app) {
  add_shared(app, "--init-from", shape_from,
             "its shape only, as remat train --init-from reads it; no weights are read. Model flags given beside it "
             "override the file's");
}

ModelConfig ModelFlags::config() const {
  if (!shape_from.empty()) return config_for_file(shape_from);
  check_given();
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
  check_given();
  const ModelConfig fc = read_config(path, NH != kUnset ? NH : 0);
  const bool preset_given = preset_option && preset_option->count() > 0;
  // The weights fix the architecture; another --arch would be reported as some other flag's fault.
  if (!arch.empty() && !preset_given && parse_arch(arch) != fc.arch)
    throw Error("config",
                "--arch " + arch + " contradicts --init-from '" + printable(path) + "', which holds a " +
                    arch_name(fc.arch) + " model",
                "drop --arch: --init-from takes the architecture from the weights");
  ModelConfig c = preset_given ? remat::preset(preset) : fc;
  apply(c);
  c.T = block_size != kUnset ? block_size : fc.T;
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
    // The blocks are alike: one- and two-block models give the rest by extrapolation, in doubles (a
    // chain of 100000 blocks is checked as fast as one).
    auto count = [&](int64_t L, double& p, double& a) {
      ModelConfig one = c;
      one.L = L;
      const auto m = planner::shape_only_model(one);
      p = double(m->num_params());
      const auto tr = planner::trace_step(*m, std::max<int64_t>(batch, 1), std::max<int64_t>(T, 1));
      a = double(tr.embed.kept_bytes() + tr.head.kept_bytes());
      for (const auto& b : tr.blocks) a += double(b.kept_bytes());
    };
    double p1 = 0, a1 = 0, p2 = 0, a2 = 0;
    count(1, p1, a1);
    if (c.L > 1) count(2, p2, a2);
    params = c.L > 1 ? p1 + double(c.L - 1) * (p2 - p1) : p1;
    activations = c.L > 1 ? a1 + double(c.L - 1) * (a2 - a1) : a1;
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

int64_t max_threads() {
  const int64_t hw = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  return std::min<int64_t>(1024, 4 * hw);
}

void check_threads(int64_t n, const std::string& flag) {
  const int64_t hw = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  if (n < 1)
    throw Error("cli", flag + " must be at least 1, got " + std::to_string(n),
                "e.g. " + flag + " " + std::to_string(hw) + ", or omit it to use all cores");
  if (n > max_threads())
    throw Error("cli",
                flag + " " + std::to_string(n) + " is above " + std::to_string(max_threads()) + " (4x the " +
                    std::to_string(hw) + " hardware threads of this machine)",
                "e.g. " + flag + " " + std::to_string(hw) + ", or omit it to use all cores");
}

void ModelFlags::apply_threads() const {
  if (threads == kUnset && !given("--threads")) return;
  check_threads(threads);
  omp_set_num_threads(int(threads));
}

std::string ModelFlags::command_line(int64_t seq) const {
  const auto quoted = shell_quoted;
  // The preset only when given: train's default is the same (kDefaultPreset).
  std::string s = given("--preset") ? " --preset " + quoted(preset) : "";
  if (!shape_from.empty()) s += " --init-from " + quoted(shape_from);
  for (const char* flag : {"--arch", "--layers", "--channels", "--heads", "--kv-heads", "--hidden", "--rope-theta",
                           "--vocab", "--block-size", "--dropout", "--attention", "--precision"}) {
    const CLI::Option* o = app_ ? app_->get_option_no_throw(flag) : nullptr;
    if (o && o->count() > 0 && !o->results().empty() && !(std::string(flag) == "--attention" && attention_auto()))
      s += std::string(" ") + flag + " " + quoted(o->results().back());
  }
  if (fp32_residual) s += " --fp32-residual";
  return s + " --seq " + std::to_string(seq);
}

uint64_t parse_seed(const std::string& text, const std::string& flag) {
  const std::string hint = "e.g. " + flag + " 1337 (0 to 9223372036854775807)";
  if (text.empty()) throw Error("cli", flag + " is empty", hint);
  if (text[0] == '-')
    throw Error("cli", flag + " " + text + " is negative; seeds are 0 to 2^63-1", hint);
  uint64_t v = 0;
  for (char ch : text) {
    if (!std::isdigit(static_cast<unsigned char>(ch)))
      throw Error("cli", flag + " '" + text + "' is not a whole number", hint);
    const uint64_t d = uint64_t(ch - '0');
    if (v > (uint64_t(INT64_MAX) - d) / 10)
      throw Error("cli", flag + " " + text + " is above 2^63-1 = 9223372036854775807", hint);
    v = v * 10 + d;
  }
  return v;
}

CLI::Option* add_seed_option(CLI::App& app, uint64_t& seed, std::string_view here) {
  const SharedFlag& f = shared_flag("--seed");
  CLI::Option* o = app.add_option_function<std::string>(
      "--seed", [&seed](const std::string& v) { seed = parse_seed(v, "--seed"); }, shared_help(f, here));
  finish_shared(o, f, app.get_name());
  return o;
}

void refuse_auto_attention(const std::string& attention, const std::string& command) {
  if (attention == "auto")
    throw Error("cli", "--attention auto lets the planner choose the kernel, and remat " + command + " makes no plan",
                "give --attention naive or flash (auto is for remat train --budget and remat plan)");
}

const SharedFlag& shared_flag(std::string_view name) {
  const SharedFlag* f = find_shared_flag(name);
  REMAT_ASSERT(f, ("flag " + std::string(name) + " is not in cli/flag_table.h").c_str());
  return *f;
}

std::string shared_help(const SharedFlag& f, std::string_view here) {
  std::string s(f.help);
  if (!here.empty()) s += std::string(kHere) + std::string(here);
  return s;
}

namespace {
// The type CLI11 gave each shared option (INT, UINT, FLOAT, TEXT) before its table name replaced it.
std::map<const CLI::Option*, std::string>& value_kinds() {
  static std::map<const CLI::Option*, std::string> m;
  return m;
}
}  // namespace

std::string value_kind(const CLI::Option* o) {
  auto it = value_kinds().find(o);
  const std::string type = it != value_kinds().end() ? it->second : o->get_type_name();
  return type.substr(0, type.find(':'));
}

void finish_shared(CLI::Option* o, const SharedFlag& f, std::string_view command) {
  value_kinds()[o] = o->get_type_name();
  if (!f.arg.empty()) o->type_name(std::string(f.arg));
  const std::string_view d = default_in(f, command);
  if (d.empty()) return;
  if (o->get_items_expected_max() > 1) {  // a list: its default is the table's words, one item each
    std::vector<std::string> items;
    std::istringstream in{std::string(d)};
    for (std::string w; in >> w;) items.push_back(w);
    o->run_callback_for_default()->default_val(items);
    o->default_str(std::string(d));
  } else {
    o->run_callback_for_default()->default_val(std::string(d));
  }
}

CLI::Option* add_shared_switch(CLI::App& app, std::string_view name, bool& var, std::string_view here) {
  const SharedFlag& f = shared_flag(name);
  REMAT_ASSERT(f.arg.empty(), "a shared flag that takes an argument: add_shared");
  return app.add_flag(std::string(name), var, shared_help(f, here));
}

const char* const kByteUnitsHelp = REMAT_BYTE_UNITS;

size_t parse_bytes(const std::string& text, const std::string& flag) {
  const std::string example = "write e.g. " + flag + " 512MiB or " + flag + " 3GiB; " + kByteUnitsHelp;
  const std::string shown = flag + " '" + text + "'";
  size_t i = 0, n = text.size();
  auto space = [&](size_t k) { return k < n && std::isspace(static_cast<unsigned char>(text[k])); };
  auto digit = [&](size_t k) { return k < n && std::isdigit(static_cast<unsigned char>(text[k])); };
  while (space(i)) ++i;
  while (n > i && space(n - 1)) --n;
  if (i == n) throw Error("cli", flag + " is empty", example);
  if (text[i] == '-') throw Error("cli", shown + " is negative: a byte size must be positive", example);
  if (text[i] == '+') ++i;
  // The number: digits[.digits][e[+-]digits], read exactly into a long double.
  const size_t num_begin = i;
  while (digit(i)) ++i;
  size_t int_end = i;
  if (i < n && text[i] == '.') {
    ++i;
    while (digit(i)) ++i;
  }
  const bool has_digits = int_end > num_begin || i > int_end + 1;
  if (!has_digits) throw Error("cli", shown + " is not a byte size", example);
  if (i < n && (text[i] == 'e' || text[i] == 'E') &&
      (digit(i + 1) || ((i + 1 < n && (text[i + 1] == '+' || text[i + 1] == '-')) && digit(i + 2)))) {
    i += 2;
    while (digit(i)) ++i;
  }
  const std::string number = text.substr(num_begin, i - num_begin);
  while (space(i)) ++i;
  std::string unit;
  for (size_t k = i; k < n; ++k) unit += char(std::tolower(static_cast<unsigned char>(text[k])));
  long double mult = 0;
  const char* prefixes = "kmgt";
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (const char* p = unit.size() <= 3 ? std::strchr(prefixes, unit[0]) : nullptr; p && *p) {
    const int power = int(p - prefixes) + 1;
    const std::string rest = unit.substr(1);
    if (rest.empty() || rest == "ib") mult = std::pow(1024.0L, power);
    else if (rest == "b") mult = std::pow(1000.0L, power);
  }
  if (mult == 0)
    throw Error("cli", shown + " has an unknown unit '" + text.substr(i, n - i) + "'", example);
  const long double v = std::strtold(number.c_str(), nullptr);
  const long double bytes = v * mult;
  const long double max_bytes = std::ldexp(1.0L, 62);
  if (!std::isfinite(bytes) || bytes > max_bytes)
    throw Error("cli", shown + " is larger than any machine (more than 2^62 bytes)", example);
  if (bytes == 0) throw Error("cli", shown + " is zero: a byte size must be positive",
                              flag == "--memory-limit" ? "omit --memory-limit for no limit; " + example : example);
  if (bytes < 1 || (mult == 1 && bytes != std::floor(bytes)))
    throw Error("cli", shown + " is a fraction of a byte",
                "did you mean " + flag + " " + number + "GiB? " + example);
  return size_t(std::llround(bytes));
}

}  // namespace remat::cli
