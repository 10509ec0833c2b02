// Training checkpoints for `remat train --save-dir DIR --resume DIR`.
//
// A checkpoint is a folder DIR/step-000120/ (120 = optimizer steps done) holding
//  - weights.safetensors: the parameters (Hugging Face names, remat's config metadata: save_weights);
//  - adam_m.safetensors, adam_v.safetensors: the AdamW moments, under the parameters' names;
//  - state.json: {"format": "remat-checkpoint", "version": 2, "step": 120, "skipped": s,
//    "options": the run (RunConfig through its one codec, record.h: the model config with its
//    precision, the data and its split, the batch, the optimizer and its learning-rate schedule, the
//    seed, the strategy and a plan's schedule, policies and kernels per block)}. Version 1 files
//    (without the precision, the decay length and a plan's per-block choices) still load.
// Nothing else is needed to continue bit-identically: batches and dropout masks are pure functions of
// (seed, step) (BatchSampler::sample(step * accum + k), step_rng(seed, step, k)) and AdamW's bias
// correction uses the absolute step, so restoring the step restores the data position and the RNG.
//
// A checkpoint is written into DIR/.step-000120.tmp.<pid>/ (every file fsynced), which is then
// renamed to its final name and DIR fsynced: a step-NNN folder is always complete. Older
// checkpoints beyond the newest `keep` are deleted only after that rename.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model.h"
#include "train/run_config.h"

namespace remat {

constexpr int kCheckpointVersion = 2;

// "step-000120".
std::string checkpoint_name(int64_t step);

// The run as state.json's "options" holds it (data paths made absolute, so that --resume finds them
// from another working directory), and its inverse for a file of `version` (1 or 2): a field version
// 1 did not record takes its default, and the model's among them are listed in *unrecorded. Throws
// remat::Error naming `where` and the field that is wrong.
nlohmann::json run_config_json(const RunConfig& o);
RunConfig run_config_from_json(const nlohmann::json& options, int version, const std::string& where,
                               std::vector<std::string>* unrecorded = nullptr);

struct RunState {
  std::string dir;  // the step-NNN folder
  int version = kCheckpointVersion;
  int64_t step = 0;
  int64_t skipped = 0;
  RunConfig options;
  std::vector<std::string> unrecorded;  // fields of options the file's version does not record ("model.precision")
};

// Writes a complete checkpoint of (model, m, v, step) into save_dir (created if missing), then keeps
// only the newest `keep` checkpoints there. Returns the path of the new step-NNN folder.
std::string save_checkpoint(const std::string& save_dir, int64_t step, int64_t skipped, const Model& model,
                            const std::vector<Tensor>& m, const std::vector<Tensor>& v, const RunConfig& o,
                            int64_t keep);

// `path` is a step-NNN folder (it holds state.json) or a save dir: its newest complete checkpoint.
// Throws remat::Error when there is none.
std::string find_checkpoint(const std::string& path);

// Reads and checks state.json of the checkpoint folder `dir`.
RunState read_run_state(const std::string& dir);

// Loads the checkpoint's weights into `model` and its moments into m, v (shapes must match).
void load_checkpoint_tensors(const std::string& dir, Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v);

}  // namespace remat
