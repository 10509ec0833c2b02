// remat train: trains a GPT on the built-in corpus (or --data) and prints the memory/compute report.
#include <cstdio>

#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "model/weights.h"
#include "train/report.h"

namespace remat::cli {

namespace {
struct TrainFlags {
  ModelFlags model;
  TrainOptions o;
  std::string memory_limit;
  bool no_progress = false;
  std::string report_json;
};
}  // namespace

void add_train(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* app = root.add_subcommand("train", "Train a GPT and print the memory/compute report");
  TrainFlags& f = *flags;
  f.model.add_to(*app, "shakespeare");
  app->add_option("--data", f.o.data, "Training data: a text file (byte-level), a raw uint16 .bin token "
                                      "file (nanoGPT) or an llm.c token file (v1 uint16, v2 uint32); default: the "
                                      "built-in Shakespeare corpus");
  app->add_option("--data-format", f.o.data_format, "How to read --data: auto (llm.c files by their magic, other "
                                                    "*.bin as raw uint16, the rest as byte-level text), text, u16, "
                                                    "llmc")->capture_default_str();
  app->add_option("--steps", f.o.steps, "Optimizer steps")->capture_default_str();
  app->add_option("--batch", f.o.batch, "B: sequences per optimizer step")->capture_default_str();
  app->add_option("--micro-batch", f.o.micro_batch, "b: sequences per forward; B/b micro-steps accumulate gradients "
                                                     "(default: b = B)");
  app->add_option("--lr", f.o.lr, "Peak learning rate (warmup, then cosine to lr/10)")->capture_default_str();
  app->add_option("--warmup", f.o.warmup, "Warmup steps")->capture_default_str();
  app->add_option("--weight-decay", f.o.weight_decay, "AdamW weight decay (2-D weights only)")->capture_default_str();
  app->add_option("--clip", f.o.clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  app->add_option("--seed", f.o.seed, "Seed for init, batches and dropout")->capture_default_str();
  app->add_option("--eval-every", f.o.eval_every, "Validate every N steps (0: only at the end)")->capture_default_str();
  app->add_option("--eval-batches", f.o.eval_batches, "Batches per validation")->capture_default_str();
  app->add_option("--sample-tokens", f.o.sample_tokens, "Tokens to sample at the end (0: none)")->capture_default_str();
  app->add_option("--save", f.o.save, "Write the weights to this .safetensors file (atomically)");
  app->add_option("--init-from", f.o.init_from, "Start from weights in a .safetensors file (a Hugging Face GPT-2 "
                                                "model.safetensors loads as it is); the architecture comes from the file "
                                                "unless --preset or model flags say otherwise, the block size unless "
                                                "--block-size does");
  app->add_option("--metrics-out", f.o.metrics_out, "Write metrics as JSON lines (step, loss, val_loss, lr, "
                                                    "tokens_per_s, peak_activation_bytes)");
  app->add_option("--recompute", f.o.recompute, "Checkpoint strategy: none | all | block | sqrt | uniform:K | "
                                                "segments:a,b,...")->capture_default_str();
  app->add_flag("--recompute-last", f.o.recompute_last, "Also recompute the last segment (the textbook count)");
  app->add_option_function<std::string>("--segment-replay", [&f](const std::string& v) {
    f.o.replay_internals = v == "internals";
  }, "How a checkpointed segment is replayed: boundaries (keep block inputs, then each block's internals just before its backward: least memory) or internals (keep every block's internals in the one replay: least compute)")->check(CLI::IsMember({"boundaries", "internals"}));
  app->add_option("--policy", f.o.policy, "Selective recomputation inside stored blocks, a preset of the "
                                          "model: none | selective (drop the attention scores) | gelu | norms "
                                          "(GPT-2) | swiglu | norms (LLaMA)")->capture_default_str();
  app->add_option("--save-only", f.o.save_only, "Keep only these named block tensors (comma-separated names "
                                                "within a block, as the report's block table lists them); rebuild "
                                                "the rest that one op can rebuild");
  app->add_option("--save-all-but", f.o.save_all_but, "Drop these named block tensors and rebuild them in "
                                                      "backward (names within a block, as the report lists them)");
  app->add_flag("--determinism-check", f.o.check_determinism,
                "Compare every recomputed tensor with the original forward; fail on the first difference");
  app->add_flag("--debug-break-replay", f.o.break_replay,
                "Debugging: draw a fresh dropout stream on recompute (the spec's section 9 failure)");
  app->add_option("--memory-limit", f.memory_limit, "Hard limit on all accounted bytes (e.g. 2GiB)");
  app->add_flag("--no-progress", f.no_progress, "No progress line on stderr");
  app->add_option("--report-json", f.report_json, "Also write the report as JSON to this file");
  app->callback([flags]() {
    TrainFlags& f = *flags;
    f.model.apply_threads();
    // With --init-from, the architecture and block size come from the file unless flags say otherwise.
    f.o.model = f.o.init_from.empty() ? f.model.config() : f.model.config_for_file(f.o.init_from);
    f.o.seq = f.model.seq(f.o.model);
    check_sizes(f.o.model, f.o.micro_batch > 0 ? f.o.micro_batch : f.o.batch, f.o.seq, 16.0);
    // Fail now, not after the whole run, when an output cannot be written.
    check_output_path(f.o.save, "--save");
    check_output_path(f.o.metrics_out, "--metrics-out");
    check_output_path(f.report_json, "--report-json");
    if (!f.memory_limit.empty()) f.o.memory_limit = parse_bytes(f.memory_limit, "--memory-limit");
    f.o.progress = !f.no_progress;
    Trainer t(f.o);
    std::printf("remat train: %s, %lld params, dropout %.2f, attention %s\n", f.o.model.describe().c_str(),
                (long long)t.model().num_params(), f.o.model.dropout,
                autograd::attention_kind_name(f.o.model.attention));
    std::printf("data: %s\n", t.data_description().c_str());
    std::printf("strategy %s, policy %s, batch %lld = %lld micro-batch(es) of %lld, seq %lld, %lld steps\n",
                t.strategy().label().c_str(), t.policy().label().c_str(), (long long)f.o.batch,
                (long long)(f.o.batch / (f.o.micro_batch ? f.o.micro_batch : f.o.batch)),
                (long long)(f.o.micro_batch ? f.o.micro_batch : f.o.batch), (long long)f.o.seq, (long long)f.o.steps);
    std::fflush(stdout);
    TrainSummary s = t.run();
    std::printf("val loss %.4f -> %.4f nats/token; last step %.0f tokens/s\n", s.first_val, s.last_val, s.tokens_per_s);
    if (!s.sample.empty()) std::printf("sample:\n%s\n", s.sample.c_str());
    ReportInput ri{&t.model(), f.o.micro_batch ? f.o.micro_batch : f.o.batch, f.o.seq,
                   f.o.batch / (f.o.micro_batch ? f.o.micro_batch : f.o.batch), t.strategy(), s.measure,
                   t.policy().keeps_all() ? nullptr : &t.policy(), t.policy().label()};
    std::printf("%s", memory_report(ri).c_str());
    if (!f.report_json.empty()) {
      nlohmann::json j = report_json(ri);
      j["val_loss_first"] = s.first_val;
      j["val_loss_last"] = s.last_val;
      j["tokens_per_s"] = s.tokens_per_s;
      write_file_atomic(f.report_json, j.dump(2) + "\n");
    }
    if (!f.o.save.empty()) std::printf("weights written to %s\n", f.o.save.c_str());
  });
}

}  // namespace remat::cli
