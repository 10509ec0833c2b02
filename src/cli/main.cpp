// remat: train GPT-style transformers on CPU with planned activation checkpointing.
#include <CLI/CLI.hpp>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/process_memory.h"
#include "cli/cmd_calibrate.h"
#include "cli/cmd_sample.h"
#include "cli/cmd_tokenize.h"
#include "cli/flags.h"
#include "cli/numbers.h"
#include "core/error.h"
#include "core/threads.h"
#include "dist/comm.h"

#ifndef REMAT_VERSION
#define REMAT_VERSION "unknown"
#endif

namespace {

// OpenMP threads that wait under contention (issue #11). At the end of every parallel region and at
// every barrier, libgomp's idle threads spin before they sleep: 300,000 iterations by default, about
// 3 ms. Alone on the machine that is what keeps a step of many short regions fast, but beside one
// other busy process on 2 cores the spinning threads take the cores from the ones with work, and
// `remat train` ran 5x to 30x slower. OMP_WAIT_POLICY=passive (sleep at once, as PyTorch's peer
// ../shared/peers/run.sh runs) keeps the speed under contention but halves it alone, where every
// region then pays for a futex wake-up. A short spin keeps both: GOMP_SPINCOUNT=10000 (about 0.1 ms
// here, the role PyTorch's CPU launcher gives KMP_BLOCKTIME=1 ms for Intel's OpenMP) is as fast as
// the default alone and about twice as fast beside a busy process. bench/bench_contention.sh
// measures every setting; the README's "Contention" has the table.
//
// libgomp reads its environment once, in its own initialiser, before main() (and before any
// constructor of this binary, which depends on it), so setenv() here is too late for this process.
// When the user has set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (their setting always wins),
// remat re-executes itself at once, with the default set: the same process (pid, so signals and the
// exit status reach the caller as before), the same argv, stdin/stdout/stderr and the rest of the
// environment. The re-executed image knows itself by the marker variable beside the default, so it
// never re-executes again; it removes both, so that the environment it passes on is the user's. It
// prints nothing. If the re-exec fails (no /proc), remat runs on with libgomp's default.
constexpr const char* kWaitPolicyVar = "OMP_WAIT_POLICY";
constexpr const char* kSpinCountVar = "GOMP_SPINCOUNT";
constexpr const char* kSpinCountDefault = "10000";
constexpr const char* kDefaultedMarker = "REMAT_OPENMP_DEFAULTED";

// How the OpenMP wait policy in force was chosen, for `remat --version`.
std::string g_wait_policy = "libgomp's default (the re-exec that sets remat's default failed)";

void default_openmp_wait_policy(char** argv) {
  if (std::getenv(kDefaultedMarker)) {
    const char* n = std::getenv(kSpinCountVar);
    const bool reexecuted = n && std::string(n) == kSpinCountDefault && !std::getenv(kWaitPolicyVar);
    ::unsetenv(kDefaultedMarker);
    if (reexecuted) {  // libgomp has read the default
      remat::threads::set_default_wait_policy(true);
      g_wait_policy = std::string(kSpinCountVar) + "=" + kSpinCountDefault +
                      ": idle threads spin briefly, then sleep, and train, bench and sample run on the cores other "
                      "busy processes leave (remat's default; set " + kWaitPolicyVar + " or " + kSpinCountVar +
                      " to choose another)";
      ::unsetenv(kSpinCountVar);
      return;
    }
  }
  const char* policy = std::getenv(kWaitPolicyVar);
  const char* spin = std::getenv(kSpinCountVar);
  if (policy || spin) {
    g_wait_policy = "as set in the environment:";
    if (policy) g_wait_policy += std::string(" ") + kWaitPolicyVar + "=" + remat::printable(policy);
    if (spin) g_wait_policy += std::string(" ") + kSpinCountVar + "=" + remat::printable(spin);
    return;
  }
  if (::setenv(kSpinCountVar, kSpinCountDefault, 1) == 0 && ::setenv(kDefaultedMarker, "1", 1) == 0)
    ::execv("/proc/self/exe", argv);  // returns only on failure
  ::unsetenv(kDefaultedMarker);
  ::unsetenv(kSpinCountVar);
}

std::string version_text() {
  std::string s = "remat " REMAT_VERSION;
#if defined(__clang__)
  s += "\ncompiler: clang " __clang_version__;
#elif defined(__GNUC__)
  s += "\ncompiler: g++ " __VERSION__;
#endif
  s += "\nC++ standard: " + std::to_string(__cplusplus);
  if (const dnnl_version_t* v = dnnl_version())
    s += "\noneDNN: " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         (v->cpu_runtime == DNNL_RUNTIME_OMP ? " (OpenMP)" : "");
  s += "\nOpenMP wait policy: " + g_wait_policy;
  return s;
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions: "stesp" -> "steps" is 1).
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string strip_dashes(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == '-') ++i;
  return s.substr(i);
}

// Every spelling of the options of `app` ("--steps", "-h"), help flags included.
std::vector<std::string> flag_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

const CLI::Option* find_flag(const CLI::App* app, const std::string& name) {
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& l : o->get_lnames())
      if ("--" + l == name) return o;
    for (const std::string& s : o->get_snames())
      if ("-" + s == name) return o;
  }
  return nullptr;
}

// Close spellings of `typed` among `names`: the nearest by edit distance when close enough for the
// length, else the one name `typed` is a prefix of.
std::vector<std::string> suggestions(const std::string& typed, const std::vector<std::string>& names) {
  const std::string t = strip_dashes(typed);
  if (t.empty()) return {};
  const size_t limit = t.size() <= 3 ? 1 : t.size() <= 8 ? 2 : 3;
  size_t best = limit + 1;
  std::vector<std::string> out;
  for (const std::string& n : names) {
    const std::string bare = strip_dashes(n);
    if (bare.size() == 1 && t.size() > 2) continue;  // no short flag for a long typo
    const size_t d = edit_distance(t, bare);
    if (d > limit) continue;
    if (d < best) {
      best = d;
      out = {n};
    } else if (d == best && std::find(out.begin(), out.end(), n) == out.end()) {
      out.push_back(n);
    }
  }
  if (!out.empty()) return out;
  if (t.size() >= 3) {
    for (const std::string& n : names)
      if (strip_dashes(n).rfind(t, 0) == 0) out.push_back(n);
    if (out.size() == 1) return out;
  }
  return {};
}

// Other programs' spellings of remat's flags (nanoGPT, Hugging Face, llm.c): too far from remat's for
// the edit distance, but what the user meant.
std::string known_alias(const std::string& typed, const std::string& command) {
  std::string t = strip_dashes(typed);
  std::replace(t.begin(), t.end(), '_', '-');
  // Flags that bench and calibrate once spelled as train's, with another meaning (cli/flag_table.h).
  static const std::tuple<const char*, const char*, const char*> kRenamed[] = {
      {"bench", "steps", "--timed-steps"}, {"bench", "warmup", "--untimed-steps"}, {"calibrate", "warmup", "--untimed-rounds"}};
  for (const auto& [cmd, from, to] : kRenamed)
    if (command == cmd && t == from) return to;
  static const std::pair<const char*, const char*> kAliases[] = {
      {"learning-rate", "--lr"},   {"max-lr", "--lr"},           {"n-layer", "--layers"},     {"n-layers", "--layers"},
      {"num-layers", "--layers"},  {"num-hidden-layers", "--layers"}, {"n-embd", "--channels"}, {"hidden-size", "--channels"},
      {"n-head", "--heads"},       {"num-heads", "--heads"},     {"num-attention-heads", "--heads"},
      {"batch-size", "--batch"},   {"max-iters", "--steps"},     {"max-steps", "--steps"},    {"iters", "--steps"},
      {"seq-len", "--seq"},        {"sequence-length", "--seq"}, {"context-length", "--seq"}, {"vocab-size", "--vocab"}};
  for (const auto& [from, to] : kAliases)
    if (t == from) return to;
  return "";
}

bool looks_like_number(const std::string& s) {
  if (s.size() < 2 || s[0] != '-') return false;
  return std::isdigit(static_cast<unsigned char>(s[1])) || s[1] == '.';
}

// A leftover argument of `remat <command>`: an unknown flag, or a value that no flag takes.
int report_extra(const CLI::App& root, const CLI::App* sub, const std::vector<std::string>& extras, int argc,
                 char** argv) {
  const std::string cmd = "remat " + sub->get_name();
  // After a bare '--', CLI11 reads everything as values: a flag there is not unknown, it is stranded.
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      if (i + 1 < argc && std::find(extras.begin(), extras.end(), argv[i + 1]) != extras.end()) {
        std::fprintf(stderr,
                     "remat: [cli] unexpected argument '%s' after '--' for '%s' (hint: '--' ends the flags, so what "
                     "follows is not read as one; drop the '--')\n",
                     remat::printable(argv[i + 1]).c_str(), cmd.c_str());
        return 2;
      }
      break;
    }
  for (const std::string& e : extras) {
    if (e.size() < 2 || e[0] != '-' || looks_like_number(e)) continue;
    const std::string name = e.substr(0, e.find('='));
    std::string hint, owners;
    for (const CLI::App* other : root.get_subcommands({}))
      if (other != sub && find_flag(other, name))
        owners += (owners.empty() ? "'remat " : ", 'remat ") + other->get_name() + "'";
    const std::string alias = known_alias(name, sub->get_name());
    const auto close = alias.size() && find_flag(sub, alias) ? std::vector<std::string>{alias}
                       : owners.empty()                      ? suggestions(name, flag_names(sub))
                                                             : std::vector<std::string>{};
    if (!close.empty()) {
      hint = "did you mean ";
      for (size_t i = 0; i < close.size(); ++i) hint += (i ? (i + 1 == close.size() ? " or " : ", ") : "") + close[i];
      hint += "?";
      if (!owners.empty()) hint += " (" + name + " is a flag of " + owners + ")";
    } else {
      hint = owners.empty() ? "run '" + cmd + " --help'"
                            : name + " is a flag of " + owners + "; run '" + cmd + " --help' for this command's flags";
    }
    std::fprintf(stderr, "remat: [cli] unknown flag %s for '%s' (hint: %s)\n", name.c_str(), cmd.c_str(), hint.c_str());
    return 2;
  }
  // Only values left: say which flag they follow, if any.
  const std::string& stray = extras.front();
  std::string hint = cmd + " takes only --flags (and their values); run '" + cmd + " --help'";
  auto option_at = [&](int k) -> const CLI::Option* {
    if (k < 1) return nullptr;
    const std::string a = argv[k];
    return a.size() > 1 && a[0] == '-' && !looks_like_number(a) ? find_flag(sub, a.substr(0, a.find('='))) : nullptr;
  };
  for (int i = 2; i < argc; ++i) {
    if (argv[i] != stray) continue;
    const std::string prev = argv[i - 1];
    if (const CLI::Option* o = option_at(i - 1); o && o->get_items_expected_max() == 0) {
      hint = prev + " is a switch and takes no value; drop '" + stray + "'";
    } else if (const CLI::Option* o2 = option_at(i - 2);
               o2 && !option_at(i - 1) && prev.find('=') == std::string::npos && o2->get_items_expected_max() == 1) {
      hint = std::string(argv[i - 2]) + " takes one value (" + prev + "); quote a value with spaces, or drop '" +
             stray + "'";
    } else if (const CLI::Option* o3 = option_at(i - 1); o3 && prev.find('=') != std::string::npos) {
      hint = prev.substr(0, prev.find('=')) + " takes one value; quote a value with spaces, or drop '" + stray + "'";
    }
    break;
  }
  std::fprintf(stderr, "remat: [cli] unexpected argument '%s' for '%s' (hint: %s)\n", stray.c_str(), cmd.c_str(),
               hint.c_str());
  return 2;
}

// --help and --version through stdout, whose writes are checked (CLI11 writes to std::cout).
int print_help(const CLI::App& app, const CLI::Error& e) {
  std::ostringstream out;
  const int code = app.exit(e, out, std::cerr);
  std::fputs(out.str().c_str(), stdout);
  return remat::cli::finish_stdout(code);
}

}  // namespace

namespace {
int run(int argc, char** argv);
}

// Under mpirun each rank runs the command; a rank that fails ends every rank, after its message, so
// that no rank waits forever in a collective.
int main(int argc, char** argv) {
  remat::fix_malloc_thresholds();  // before any library mallocs (core/process_memory.h)
  default_openmp_wait_policy(argv);  // may re-execute this process: before MPI is initialised
  remat::dist::Comm::init(&argc, &argv);
  remat::dist::Comm& world = remat::dist::Comm::world();
  remat::note_process_start();
  if (world.rank() != 0 && !std::freopen("/dev/null", "w", stdout))  // rank 0 prints; errors stay on stderr
    std::fprintf(stderr, "remat: rank %d: cannot silence stdout\n", world.rank());
  const int status = run(argc, argv);
  if ((status == 1 || status == 2) && world.size() > 1) world.abort(status);  // an error: every rank stops
  remat::dist::Comm::finalize();
  return status;
}

namespace {
int run(int argc, char** argv) {
  remat::cli::check_stdout_writes();
  CLI::App app{
      "remat: train GPT-style transformers on CPU with activation checkpointing.\n"
      "Store some activations, recompute the rest, and see to the byte what the trade costs."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Every subcommand's flags");
  app.set_version_flag("--version", version_text(),
                       "Print remat's version, compiler, oneDNN version and OpenMP wait policy, and exit");
  remat::cli::add_train(app);
  remat::cli::add_bench(app);
  remat::cli::add_trace(app);
  remat::cli::add_plan(app);
  remat::cli::add_grads(app);
  remat::cli::add_sample(app);
  remat::cli::add_calibrate(app);
  remat::cli::add_tokenize(app);
  remat::cli::make_numbers_strict(app);  // once, for every numeric option of every command
  try {
    remat::cli::check_environment();
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return print_help(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return print_help(app, e);
  } catch (const CLI::CallForVersion& e) {
    return print_help(app, e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty()) {
      // CLI11 reports "A subcommand is required" even for `remat frobnicate`: name what was typed.
      std::string commands;
      for (const CLI::App* s : app.get_subcommands({})) commands += (commands.empty() ? "" : ", ") + s->get_name();
      if (argc < 2)
        std::fprintf(stderr, "remat: [cli] no command given (hint: use one of %s; run 'remat --help')\n",
                     commands.c_str());
      else
        std::fprintf(stderr, "remat: [cli] unknown %s '%s' (hint: use one of %s; run 'remat --help')\n",
                     argv[1][0] == '-' ? "option" : "command", argv[1], commands.c_str());
      return 2;
    }
    const CLI::App* sub = app.get_subcommands().front();
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      std::vector<std::string> extras = sub->remaining();
      for (const std::string& x : app.remaining()) extras.push_back(x);
      if (!extras.empty()) return report_extra(app, sub, extras, argc, argv);
    }
    const std::string what = e.what();
    if (const auto sep = what.find('\x1f'); sep != std::string::npos) {  // numbers.cpp: "--flag: what\x1fhint"
      const auto colon = what.find(": ");
      const std::string head = colon < sep ? what.substr(0, colon) + " " + what.substr(colon + 2, sep - colon - 2)
                                           : what.substr(0, sep);
      std::fprintf(stderr, "remat: [cli] %s (hint: %s)\n", head.c_str(), what.substr(sep + 1).c_str());
      return 2;
    }
    const auto required = what.find(": 1 required ");
    if (required != std::string::npos && what.find(" missing") != std::string::npos) {  // CLI11: "--steps: 1 required INT missing"
      const std::string flag = what.substr(0, required);
      std::fprintf(stderr, "remat: [cli] %s needs a value (hint: e.g. %s VALUE; run 'remat %s --help')\n", flag.c_str(),
                   flag.c_str(), sub->get_name().c_str());
      return 2;
    }
    const auto at_most = what.find(": At Most 1 required but received ");
    if (at_most != std::string::npos) {  // CLI11's words for a flag given twice
      std::fprintf(stderr, "remat: [cli] %s is given more than once (hint: pass each flag once)\n",
                   what.substr(0, at_most).c_str());
      return 2;
    }
    std::fprintf(stderr, "remat: [cli] %s (hint: run 'remat %s --help')\n", what.c_str(), sub->get_name().c_str());
    return 2;
  } catch (const remat::Error& e) {
    std::fprintf(stderr, "remat: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "remat: [memory] out of host memory (hint: use a smaller model, --batch or --seq)\n");
    return 1;
  } catch (const std::length_error& e) {
    std::fprintf(stderr, "remat: [memory] a size is too large (%s) (hint: use a smaller model, --batch or --seq)\n",
                 e.what());
    return 1;
  } catch (const dnnl::error& e) {
    if (const std::string hint = remat::cli::onednn_isa_hint(); !hint.empty()) {
      std::fprintf(stderr, "remat: [onednn] %s (hint: %s)\n", e.what(), hint.c_str());
      return 1;
    }
    std::fprintf(stderr, "remat: error: oneDNN: %s (hint: this is unexpected; please report it with the command line)\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remat: error: %s (hint: this is unexpected; please report it with the command line)\n",
                 e.what());
    return 1;
  }
  return remat::cli::finish_stdout(0);
}
}  // namespace
