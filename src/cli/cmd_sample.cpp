// remat sample: load a model (a .safetensors file or a model folder, as train --init-from does) and
// continue a prompt with temperature and top-k sampling, deterministic given --seed.
//  - Byte-level models (V <= 256): the prompt's bytes are its tokens (--prompt), and the output is
//    text, whatever data the model was trained on.
//  - Other vocabularies: remat has no tokenizer; the prompt is --prompt-tokens 1,2,3 and the output
//    is token ids, one line, separated by spaces.
// stdout holds the prompt followed by its continuation, streamed as it is drawn; notes go to stderr.
#include "core/process_memory.h"
#include "cli/cmd_sample.h"

#include <omp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "core/error.h"
#include "core/threads.h"
#include "model/sample.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/run_state.h"

namespace remat::cli {

namespace {

struct SampleFlags {
  std::string init_from, prompt, prompt_tokens, tokenizer;
  SampleOptions so;
  uint64_t seed = 1337;
  int64_t heads = 0;
  int64_t threads = 0;
};

// "1, 2,3" -> {1, 2, 3}; ids must be whole numbers in [0, V).
std::vector<int32_t> parse_token_list(const std::string& text, int64_t V) {
  const std::string hint = "give comma-separated token ids below " + std::to_string(V) + ", e.g. --prompt-tokens 1,2,3";
  std::vector<int32_t> ids;
  size_t i = 0;
  while (true) {
    while (i < text.size() && text[i] == ' ') ++i;
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    size_t k = j;
    while (k < text.size() && text[k] == ' ') ++k;
    if (j == i || j - i > 12 || (k < text.size() && text[k] != ','))
      throw Error("cli", "--prompt-tokens '" + printable(text) + "' is not a list of token ids", hint);
    const long long id = std::stoll(text.substr(i, j - i));
    if (id >= V)
      throw Error("cli", "--prompt-tokens: token " + std::to_string(id) + " is outside the model's vocabulary 0.." +
                             std::to_string(V - 1),
                  hint);
    ids.push_back(int32_t(id));
    if (k == text.size()) break;
    i = k + 1;
  }
  return ids;
}

}  // namespace

// The most tokens one `remat sample` generates: the output of a byte-level model at that length is
// 10 MB, and far past any use of a CPU-trained model (a larger count is a typo).
constexpr int64_t kMaxTokens = 10'000'000;

void add_sample(CLI::App& root) {
  auto flags = std::make_shared<SampleFlags>();
  CLI::App* app = root.add_subcommand(
      "sample", "Continue a prompt with a trained model: text for byte-level models, token ids otherwise");
  SampleFlags& f = *flags;
  add_shared(*app, "--init-from", f.init_from, "the model to sample (required)");
  app->add_option("--prompt", f.prompt,
                  "Text to continue, encoded with the model's tokenizer (its folder's, or --tokenizer), or as bytes "
                  "for a byte-level model (default: a newline)");
  add_shared(*app, "--tokenizer", f.tokenizer, "encodes the prompt and decodes the output (default: the --init-from folder's own, if it has one)");
  app->add_option("--prompt-tokens", f.prompt_tokens,
                  "The prompt as comma-separated token ids (1,2,3), for any vocabulary; required for models "
                  "that are not byte-level (remat has no tokenizer)");
  f.so.tokens = 200;
  app->add_option("--tokens", f.so.tokens, "Tokens to generate")->capture_default_str();
  app->add_option("--temperature", f.so.temperature,
                  "Divides the logits before the softmax: below 1 is more conservative, above 1 more random; 0 "
                  "always takes the most likely token")
      ->capture_default_str();
  app->add_option("--top-k", f.so.top_k, "Draw only among the K most likely tokens (0: the whole vocabulary)")
      ->capture_default_str();
  add_seed_option(*app, f.seed);
  add_shared(*app, "--heads", f.heads, "for a LLaMA .safetensors file without config.json");
  add_shared(*app, "--threads", f.threads);
  app->callback([flags, app]() {
    SampleFlags& f = *flags;
    const char* usage = "remat sample --init-from MODEL --prompt 'ROMEO:' --tokens 200 [--temperature 0.8] [--top-k 40]";
    if (f.init_from.empty()) throw Error("cli", "remat sample needs --init-from", usage);
    if (app->get_option("--threads")->count() > 0) {
      check_threads(f.threads);
      omp_set_num_threads(int(f.threads));
    }
    threads::enable_unless_fixed(app->get_option("--threads")->count() > 0, stderr);
    const bool text_prompt = app->get_option("--prompt")->count() > 0;
    const bool id_prompt = app->get_option("--prompt-tokens")->count() > 0;
    if (text_prompt && id_prompt)
      throw Error("cli", "--prompt and --prompt-tokens cannot be combined", "give the prompt one way");
    if (f.heads < 0) throw Error("cli", "--heads must be positive, got " + std::to_string(f.heads), "e.g. --heads 32");
    f.so.seed = f.seed;
    // Options that need no model first, then the model's config (cheap: no weights read).
    if (f.so.top_k < 0)
      throw Error("cli", "--top-k must be between 0 (the whole vocabulary) and the model's vocabulary size, got " + std::to_string(f.so.top_k),
                  "e.g. --top-k 40");
    if (f.so.tokens > kMaxTokens)
      throw Error("cli", "--tokens " + std::to_string(f.so.tokens) + " is above " + std::to_string(kMaxTokens),
                  "e.g. --tokens 200; generate more in several runs");
    if (f.so.tokens < 0 || !(f.so.temperature >= 0)) check_sample_options(f.so, INT64_MAX);
    // A training checkpoint (a step folder, or the save dir: its newest) is read through its weights
    // file, which records the model's config.
    if (const std::optional<std::string> w = checkpoint_weights(f.init_from)) f.init_from = *w;
    ModelConfig cfg = read_config(f.init_from, f.heads);
    // --heads stands in for a head count the file lacks; one the file has is not overridden.
    if (f.heads > 0 && cfg.NH != f.heads)
      throw Error("cli",
                  "--heads " + std::to_string(f.heads) + " contradicts '" + printable(f.init_from) + "', which has " +
                      std::to_string(cfg.NH) + " heads",
                  "drop --heads: it is only for a LLaMA .safetensors file without config.json");
    cfg.dropout = 0;
    check_sample_options(f.so, cfg.V);
    // The model's own tokenizer (its folder's), or --tokenizer; --tokenizer bytes reads bytes.
    std::unique_ptr<tok::Tokenizer> tokenizer;
    const bool tokenizer_given = app->get_option("--tokenizer")->count() > 0;
    if (tokenizer_given && f.tokenizer.empty())
      throw Error("cli", "--tokenizer is empty", "give a model folder or tokenizer file, or 'bytes'");
    if (tokenizer_given && f.tokenizer != "bytes") {
      tokenizer = tok::load_tokenizer(f.tokenizer);
    } else if (!tokenizer_given && !byte_level(cfg)) {
      if (const std::optional<std::string> t = tok::model_tokenizer(f.init_from)) tokenizer = tok::load_tokenizer(*t);
    }
    if (tokenizer) {
      tok::check_fits(*tokenizer, cfg.V);
      f.so.vocab = tokenizer->vocab_size();  // ids the tokenizer can decode
    }
    if (tokenizer && !id_prompt) {
      const std::string text = text_prompt ? f.prompt : std::string("\n");
      if (text.empty())
        throw Error("cli", "--prompt is empty", "give some text to continue, e.g. --prompt 'ROMEO:'");
      const std::vector<int32_t> ids = tokenizer->encode(text);
      if (!ids.empty()) f.prompt_tokens = [&] {
        std::string list;
        for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
        return list;
      }();
    }
    const bool bytes = byte_level(cfg) && !tokenizer;

    std::vector<int32_t> prompt;
    if (tokenizer && !id_prompt && f.prompt_tokens.empty())
      prompt = {tokenizer->document_start().value_or(0)};  // a text the tokenizer gives no ids for
    else if (id_prompt || tokenizer) {
      prompt = parse_token_list(f.prompt_tokens, cfg.V);
    } else {
      if (!bytes)
        throw Error("cli",
                    "'" + printable(f.init_from) + "' has a vocabulary of " + std::to_string(cfg.V) +
                        " tokens, not bytes, and no tokenizer came with it" +
                        (text_prompt ? ", so it cannot read --prompt" : ""),
                    "give its tokenizer with --tokenizer FILE_OR_FOLDER, or the prompt as token ids, e.g. "
                    "--prompt-tokens 1,2,3 (the output is token ids too)");
      const std::string text = text_prompt ? f.prompt : std::string("\n");
      if (text.empty())
        throw Error("cli", "--prompt is empty", "give some text to continue, e.g. --prompt 'ROMEO:' (or leave "
                                                 "--prompt out to start from a newline)");
      for (size_t i = 0; i < text.size(); ++i) {
        const int32_t b = int32_t(static_cast<unsigned char>(text[i]));
        if (b >= cfg.V)
          throw Error("cli", "--prompt byte " + std::to_string(i) + " is " + std::to_string(b) +
                                 ", outside the model's vocabulary 0.." + std::to_string(cfg.V - 1),
                      "use only characters the model was trained on");
        prompt.push_back(b);
      }
    }
    if (int64_t(prompt.size()) > cfg.T)
      std::fprintf(stderr,
                   "remat sample: note: the prompt has %zu tokens, more than the block size %lld: the model sees "
                   "only its last %lld (the context is always cropped to the block size)\n",
                   prompt.size(), (long long)cfg.T, (long long)cfg.T);

    check_sizes(cfg, 1, cfg.T, 8.0);
    auto model = make_model(cfg);
    load_weights(*model, f.init_from);
    const size_t weights_bytes = Allocator::global().active_total(), loading_peak = Allocator::global().peak_total();
    const size_t generation = generation_bytes(*model, int64_t(prompt.size()), f.so.tokens);

    // The prompt as it was given, then each token as it is drawn.
    std::vector<int32_t> drawn = prompt;  // with a tokenizer: the text so far, decoded whole each time
    std::string shown;
    if (tokenizer) {
      shown = tokenizer->decode(drawn);
      std::fwrite(shown.data(), 1, shown.size(), stdout);
    } else if (bytes && !id_prompt) {
      std::fwrite(f.prompt.data(), 1, text_prompt ? f.prompt.size() : 0, stdout);
      if (!text_prompt) std::fputc('\n', stdout);
    } else if (bytes) {
      std::fputs(bytes_text(prompt).c_str(), stdout);
    } else {
      for (size_t i = 0; i < prompt.size(); ++i) std::printf("%s%d", i ? " " : "", prompt[i]);
    }
    std::fflush(stdout);
    ByteText text;
    generate(*model, prompt, f.so, [&](int32_t tok) {
      if (tokenizer) {  // a token may end inside a character, or change how the text before it reads
        drawn.push_back(tok);
        const std::string t = tokenizer->decode(drawn);
        if (t.size() > shown.size() && t.compare(0, shown.size(), shown) == 0) {
          std::fwrite(t.data() + shown.size(), 1, t.size() - shown.size(), stdout);
          shown = t;
        }
      } else if (bytes)
        std::fputs(text.push(tok).c_str(), stdout);
      else
        std::printf(" %d", tok);
      std::fflush(stdout);
    });
    if (bytes) std::fputs(text.finish().c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // The process beside its prediction: the weights and the generation's dry run (its key/value cache
    // and largest forward), with the runtime beside them.
    // The loading's own peak (the file's buffers) may be the higher.
    const size_t predicted = predicted_process(process_fixed(0), std::max(loading_peak, weights_bytes + generation));
    std::fprintf(stderr, "remat sample: %s\n", command_process_line(predicted).c_str());
  });
}

}  // namespace remat::cli
