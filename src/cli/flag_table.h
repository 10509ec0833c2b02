// The one table of the flags that more than one subcommand takes: each flag's argument, meaning and
// default, written once, so that `--seed` or `--batch` means the same thing, with the same default,
// in train, bench, plan, trace, calibrate, sample, grads and tokenize. Subcommands register these
// flags with add_shared (flags.h), which takes the help text, the argument's name and the default
// from here (the default also sets the variable: a struct's initialiser cannot drift from --help).
// A subcommand may add what the flag does there after "; here: ", never another meaning.
// CliFlags.EveryFlagMeansOneThingInEverySubcommand reads every subcommand's --help against this
// table: a flag two subcommands share must be here, with its text, argument and default.
//
// Header-only data, so that the tests read the same table the binary registers.
#pragma once
#include <array>
#include <string_view>

namespace remat::cli {

struct SharedFlag {
  std::string_view name;
  std::string_view arg;   // the argument's name in --help ("" for a switch, which takes none)
  std::string_view help;  // what the flag means, in every subcommand that takes it
  std::string_view dflt;  // the default, as --help shows it after '=' ("": none shown; the help says what)
  // Subcommands whose default differs, each "command=default" (";" between), for a reason the
  // subcommand's help gives; "" for none.
  std::string_view others = "";
};

// The default of `f` in subcommand `command`.
constexpr std::string_view default_in(const SharedFlag& f, std::string_view command) {
  std::string_view rest = f.others;
  while (!rest.empty()) {
    size_t end = rest.find(';');
    std::string_view item = rest.substr(0, end);
    size_t eq = item.find('=');
    if (item.substr(0, eq) == command) return item.substr(eq + 1);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  return f.dflt;
}

// The byte units of --budget and --memory-limit (cli/flags.h parse_bytes), for help texts.
#define REMAT_BYTE_UNITS \
  "K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024 (3G = 3GiB), kB/MB/GB/TB powers of 1000 (3GB = 3e9 bytes)"

// The separator between the table's meaning and a subcommand's own words.
inline constexpr std::string_view kHere = "; here: ";

inline constexpr std::array kSharedFlags = {
    // The model (ModelFlags: train, bench, plan, trace, calibrate; sample and grads read files).
    SharedFlag{"--preset", "NAME", "Model preset; other model flags override it", "shakespeare"},
    SharedFlag{"--arch", "gpt2|llama", "Architecture (default: the preset's, or the --init-from file's)", ""},
    SharedFlag{"--layers", "L", "Number of transformer blocks", ""},
    SharedFlag{"--channels", "C", "Model width", ""},
    SharedFlag{"--heads", "NH", "Attention heads (must divide C)", ""},
    SharedFlag{"--kv-heads", "KVH", "Key/value heads of grouped-query attention (LLaMA; must divide --heads)", ""},
    SharedFlag{"--hidden", "N", "MLP hidden size (default: GPT-2 4C, LLaMA about 8C/3)", ""},
    SharedFlag{"--rope-theta", "THETA", "LLaMA's rotary embedding base (default 10000; LLaMA only)", ""},
    SharedFlag{"--seq", "T", "Sequence length of a batch (also the block size unless --block-size)", ""},
    SharedFlag{"--vocab", "V", "Vocabulary size (256 for byte-level text)", ""},
    SharedFlag{"--block-size", "N", "Longest sequence the model accepts (GPT-2's wpe rows, LLaMA's positions)", ""},
    SharedFlag{"--dropout", "P", "Dropout probability on embeddings, attention and residuals", "0"},
    SharedFlag{"--attention", "KERNEL",
               "Attention kernel: naive (materialises T x T), flash, or auto (train --budget and plan: the planner "
               "chooses, per plan; refused elsewhere)",
               "naive"},
    SharedFlag{"--precision", "fp32|bf16",
               "fp32, or bf16: bf16 activations and matmuls over fp32 master weights, gradients and optimizer state "
               "(Megatron's recipe)",
               "fp32"},
    SharedFlag{"--fp32-residual", "",
               "With --precision bf16: keep the residual stream and block boundaries in fp32 (Megatron's "
               "--fp32-residual-connection)",
               ""},
    SharedFlag{"--threads", "N",
               "OpenMP threads, 1 to 4x this machine's hardware threads (default: all cores, fewer while other "
               "processes keep some busy)",
               ""},
    SharedFlag{"--init-from", "FILE|DIR",
               "A model: a .safetensors file (remat's --save or a Hugging Face file), a model folder (config.json "
               "beside the weights), or a training checkpoint (a --save-dir: its newest step, or a step-NNNNNN folder)",
               ""},
    // The batch and the run.
    SharedFlag{"--batch", "B", "Sequences per optimizer step", "8"},
    SharedFlag{"--micro-batch", "b", "Sequences per forward; B/b micro-steps accumulate gradients (default: b = B)", ""},
    SharedFlag{"--seed", "SEED",
               "Seed of every random draw (initial weights, batches, dropout, sampled tokens), 0 to 2^63-1: the same "
               "seed gives the same run",
               "1337"},
    SharedFlag{"--data", "FILE",
               "Data: a text file (byte-level, or through --tokenizer), a raw uint16 .bin token file (nanoGPT) or an "
               "llm.c token file (v1 uint16, v2 uint32)",
               ""},
    SharedFlag{"--data-format", "FORMAT",
               "How to read the data: auto (llm.c files by their magic, other *.bin as raw uint16, the rest as text), "
               "text, u16, llmc",
               "auto"},
    SharedFlag{"--val-fraction", "F", "The fraction of the data held out at its end for validation, 0 to 1", "0.1",
               "tokenize=0"},
    SharedFlag{"--tokenizer", "FILE|DIR|bytes",
               "A tokenizer: a model folder, tokenizer.json, vocab.json (+ merges.txt), tokenizer.model, or 'bytes'",
               ""},
    // Strategies and plans.
    SharedFlag{"--recompute", "STRATEGY",
               "Checkpoint strategy: none | all | block | sqrt | uniform:K | segments:a,b,... (Chen et al. 2016's "
               "segments; none stores everything)",
               "none", "bench=none all block sqrt;plan="},
    SharedFlag{"--recompute-last", "", "Also recompute the last segment (the textbook count)", ""},
    SharedFlag{"--segment-replay", "MODE",
               "How a checkpointed segment is replayed: boundaries (keep block inputs, then each block's internals "
               "just before its backward: least memory) or internals (keep every block's internals in the one "
               "replay: least compute)",
               "boundaries"},
    SharedFlag{"--policy", "POLICY",
               "Selective recomputation inside stored blocks, a preset of the model: none | selective (drop the "
               "attention scores) | gelu | norms (GPT-2) | swiglu | norms (LLaMA)",
               "none"},
    SharedFlag{"--plan", "FILE",
               "A plan file (remat plan ... --budget SIZE --out FILE), used for the model, batch, micro-batch and seq "
               "it was made for",
               ""},
    SharedFlag{"--budget", "SIZE",
               "Byte budget of the process: its peak resident memory, the whole training step (parameters, gradients, "
               "AdamW state, data, activations, their gradients, transients, workspace) with the runtime beside it "
               "(binary, libraries, OpenMP, oneDNN, token files), e.g. 2GiB; " REMAT_BYTE_UNITS,
               ""},
    SharedFlag{"--step-budget", "SIZE",
               "Byte budget of the whole training step alone, as the accounting allocator counts it (the same on "
               "every machine; --budget adds the runtime), e.g. 1.5GiB; " REMAT_BYTE_UNITS,
               ""},
    SharedFlag{"--calibration", "FILE",
               "A calibration of this machine (remat calibrate --out FILE), made for this model, micro-batch, seq and "
               "thread count: time from it instead of from FLOPs",
               ""},
    SharedFlag{"--clock", "CLOCK",
               "What to time: wall (seconds as they pass) or cpu (the process's CPU time, every thread's: steadier on "
               "a loaded machine)",
               "wall"},
    SharedFlag{"--ranks", "N", "Data-parallel ranks the batch is split over (under mpirun: the process count)", ""},
    SharedFlag{"--zero", "STAGE",
               "ZeRO stage (Rajbhandari et al. 2020): 0 replicates AdamW's state on every rank, 1 shards it over the "
               "ranks, 3 shards the parameters and gradients too",
               ""},
    // Output.
    SharedFlag{"--out", "FILE", "The file this command writes (atomically)", ""},
    SharedFlag{"--svg", "FILE", "Also draw a picture to this SVG file (atomically)", ""},
    SharedFlag{"--json", "", "Print JSON instead of the table", ""},
    SharedFlag{"--quiet", "", "Print only the result: no progress, no tables (errors still print)", ""},
};

// The table's entry for `name`, or nullptr.
constexpr const SharedFlag* find_shared_flag(std::string_view name) {
  for (const SharedFlag& f : kSharedFlags)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace remat::cli
