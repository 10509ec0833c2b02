// remat tokenize: text files to an llm.c token file (tokenizer/token_file.h), which remat train
// --data reads. Progress with an ETA on stderr; the summary on stdout.
#include "cli/cmd_tokenize.h"

#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "core/error.h"
#include "core/io_policy.h"
#include "core/text.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer.h"

namespace remat::cli {

namespace {
struct TokenizeFlags {
  std::string tokenizer, out, val_out;
  std::vector<std::string> in;
  double val_fraction = 0;
  int64_t threads = ModelFlags::kUnset;
};

// train.bin -> val.bin; data.bin -> data_val.bin.
std::string default_val_path(const std::string& out) {
  const size_t slash = out.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t t = out.rfind("train");
  if (t != std::string::npos && t >= base) return out.substr(0, t) + "val" + out.substr(t + 5);
  const size_t dot = out.find_last_of('.');
  const size_t at = dot == std::string::npos || dot < base ? out.size() : dot;
  return out.substr(0, at) + "_val" + out.substr(at);
}

std::string mb(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MB", double(bytes) / 1e6);
  return b;
}
}  // namespace

void add_tokenize(CLI::App& root) {
  auto flags = std::make_shared<TokenizeFlags>();
  CLI::App* app = root.add_subcommand("tokenize", "Turn text files into an llm.c token file with a tokenizer");
  TokenizeFlags& f = *flags;
  add_shared(*app, "--tokenizer", f.tokenizer, "required");
  app->add_option("--in", f.in, "Text files, each one document (required)")->expected(1, -1);
  add_shared(*app, "--out", f.out, "the llm.c token file (required)");
  add_shared(*app, "--val-fraction", f.val_fraction, "in a second file, --val-out (default 0: one file, all of the text)");
  app->add_option("--val-out", f.val_out, "The validation token file (default: --out with train -> val, or _val)");
  add_shared(*app, "--threads", f.threads, "the same output at any count");
  app->callback([flags, app]() {
    TokenizeFlags& f = *flags;
    const char* usage = "remat tokenize --tokenizer T --in FILE... --out train.bin [--val-fraction F]";
    if (f.tokenizer.empty()) throw Error("cli", "remat tokenize needs --tokenizer", usage);
    if (f.in.empty()) throw Error("cli", "remat tokenize needs --in", usage);
    if (f.out.empty()) throw Error("cli", "remat tokenize needs --out", usage);
    if (!(f.val_fraction >= 0 && f.val_fraction < 1))
      throw Error("cli", "--val-fraction must be at least 0 and below 1, got " + std::to_string(f.val_fraction),
                  "e.g. --val-fraction 0.1");
    if (app->get_option("--threads")->count() > 0) check_threads(f.threads);
    ModelFlags threads;
    threads.threads = f.threads;
    threads.apply_threads();
    if (f.val_fraction > 0 && f.val_out.empty()) f.val_out = default_val_path(f.out);
    IoPolicy policy;
    if (f.tokenizer != "bytes") policy.input(f.tokenizer, "--tokenizer", IoPolicy::In::Model);
    for (const auto& in : f.in) policy.input(in, "--in");
    policy.output(f.out, "--out");
    if (f.val_fraction > 0) policy.output(f.val_out, "--val-out");
    policy.check();

    const auto tok = tok::load_tokenizer(f.tokenizer);
    tok::TokenizeOptions opt;
    opt.val_fraction = f.val_fraction;
    double last = -1;
    opt.progress = [&](const tok::TokenizeProgress& p) {
      if (p.seconds - last < 2 || p.bytes_done >= p.bytes_total) return;
      last = p.seconds;
      const double rate = double(p.bytes_done) / std::max(p.seconds, 1e-9);
      std::fprintf(stderr, "tokenize: %s of %s (%.0f%%), %.2f MB/s, %s tokens, ETA %.0f s\n", mb(p.bytes_done).c_str(),
                   mb(p.bytes_total).c_str(), 100.0 * double(p.bytes_done) / double(std::max<uint64_t>(p.bytes_total, 1)),
                   rate / 1e6, with_commas(p.tokens).c_str(), double(p.bytes_total - p.bytes_done) / std::max(rate, 1.0));
    };
    const auto t0 = omp_get_wtime();
    const tok::TokenizeResult r = tok::tokenize_files(*tok, f.in, f.out, f.val_out, opt);
    const double secs = omp_get_wtime() - t0;
    std::printf("tokenized %s with %s in %.2f s (%.2f MB/s, %d threads)\n", mb(r.bytes).c_str(), tok->name().c_str(),
                secs, double(r.bytes) / 1e6 / std::max(secs, 1e-9), omp_get_max_threads());
    std::printf("wrote %s: llm.c v%d, %s tokens\n", quote_name(f.out).c_str(), r.version,
                with_commas(r.train_tokens).c_str());
    if (f.val_fraction > 0)
      std::printf("wrote %s: llm.c v%d, %s tokens\n", quote_name(f.val_out).c_str(), r.version,
                  with_commas(r.val_tokens).c_str());
  });
}

}  // namespace remat::cli
