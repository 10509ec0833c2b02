// remat grads: one forward + backward of a model on the first B windows of a token file, for
// agreement checks against another implementation (bench/check_llama_peer.py). Store-everything,
// dropout off. Prints one JSON line {"loss": mean cross-entropy over B*T, "tokens": B*T} and writes
// every parameter's gradient (Hugging Face names, F32) to a .safetensors file.
#include <cstdio>
#include <vector>

#include "core/process_memory.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/io_policy.h"
#include "core/safetensors.h"
#include "data/dataset.h"
#include "model/weights.h"
#include "step/step.h"

namespace remat::cli {

namespace {
struct GradsFlags {
  std::string init_from, data, data_format = "auto", out, attention = "naive";
  int64_t batch = 1, seq = 0, heads = 0;
  int64_t threads = ModelFlags::kUnset;
};
}  // namespace

void add_grads(CLI::App& root) {
  auto flags = std::make_shared<GradsFlags>();
  CLI::App* app = root.add_subcommand(
      "grads", "One forward/backward on the first --batch windows of --data; print the loss, write the gradients");
  GradsFlags& f = *flags;
  add_shared(*app, "--init-from", f.init_from, "its weights (required)");
  add_shared(*app, "--data", f.data, "required; row b of the batch is tokens [b*T, b*T+T), targets shifted by one");
  add_shared(*app, "--data-format", f.data_format);
  add_shared(*app, "--batch", f.batch, "one forward and backward over them");
  add_shared(*app, "--seq", f.seq, "default: the model's block size");
  add_shared(*app, "--out", f.out, "the gradients (.safetensors, F32, the parameters' names; required)");
  add_shared(*app, "--attention", f.attention)->check(CLI::IsMember({"naive", "flash", "auto"}));
  add_shared(*app, "--heads", f.heads, "for a LLaMA .safetensors file without config.json");
  add_shared(*app, "--threads", f.threads);
  app->callback([flags, app]() {
    GradsFlags& f = *flags;
    const char* usage = "remat grads --init-from MODEL --data TOKENS --batch B --seq T --out GRADS.safetensors";
    if (f.init_from.empty()) throw Error("cli", "remat grads needs --init-from", usage);
    if (f.data.empty()) throw Error("cli", "remat grads needs --data", usage);
    if (f.out.empty()) throw Error("cli", "remat grads needs --out", usage);
    refuse_auto_attention(f.attention, "grads");
    if (app->get_option("--threads")->count() > 0) check_threads(f.threads);
    ModelFlags threads;
    threads.threads = f.threads;
    threads.apply_threads();
    if (f.batch <= 0) throw Error("cli", "--batch must be positive, got " + std::to_string(f.batch), "e.g. --batch 2");
    if (app->get_option("--seq")->count() > 0 && f.seq <= 0)  // 0 would silently mean the block size
      throw Error("cli", "--seq must be positive, got " + std::to_string(f.seq),
                  "e.g. --seq 64, or omit it for the model's block size");
    // Before anything is read: --out must not replace the weights or the data (core/io_policy.h).
    IoPolicy()
        .input(f.init_from, "--init-from", IoPolicy::In::Model)
        .input(f.data, "--data")
        .output(f.out, "--out")
        .check();

    ModelConfig cfg = read_config(f.init_from, f.heads);
    cfg.dropout = 0;
    cfg.attention = f.attention == "flash" ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive;
    const int64_t T = f.seq != 0 ? f.seq : cfg.T, B = f.batch;
    if (T <= 0) throw Error("cli", "--seq must be positive, got " + std::to_string(T), "e.g. --seq 64");
    if (T > cfg.T)
      throw Error("config", "--seq " + std::to_string(T) + " is above the " + std::to_string(cfg.T) + " positions of '" +
                                f.init_from + "'",
                  "use --seq <= " + std::to_string(cfg.T));
    check_sizes(cfg, B, T, 8.0);

    const data::TokenDataset ds = data::TokenDataset::load(f.data, data::parse_format(f.data_format));
    ds.check_vocab(cfg.V);
    if (ds.size() < size_t(B * T + 1))
      throw Error("data",
                  ds.description() + " holds " + std::to_string(ds.size()) + " tokens, fewer than B*T+1 = " +
                      std::to_string(B * T + 1),
                  "use a smaller --batch or --seq, or more data");
    const data::BatchSampler sampler(ds, B, T, 0);
    std::vector<int32_t> inputs(size_t(B * T)), targets(size_t(B * T));
    sampler.sequential(0, inputs.data(), targets.data());

    auto model = make_model(cfg);
    load_weights(*model, f.init_from);
    model->zero_grad();
    StepOptions so;
    so.schedule = make_schedule(parse_strategy("none", int(cfg.L), false), int(cfg.L));
    const MicroBatch mb{inputs, targets, B, T};
    const float loss = forward_backward(*model, mb, double(B * T), StepRng{0, false}, so, nullptr);

    std::vector<std::pair<std::string, const Tensor*>> grads;
    for (const Param& p : model->params()) grads.emplace_back(p.name, &p.grad);
    save_safetensors(f.out, grads, {{"format", "pt"}, {"remat.loss", std::to_string(loss)}});
    std::printf("{\"loss\": %.9g, \"tokens\": %lld}\n", double(loss), (long long)(B * T));
    std::fflush(stdout);
    std::fprintf(stderr, "remat grads: %s\n", command_process_line().c_str());  // stdout is the JSON
  });
}

}  // namespace remat::cli
