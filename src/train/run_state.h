// Training checkpoints for `remat train --save-dir DIR --resume DIR`.
//
// A checkpoint is a folder DIR/step-000120/ (120 = optimizer steps done) holding
//  - weights.safetensors: the parameters (Hugging Face names, remat's config metadata: save_weights);
//  - adam_m.safetensors, adam_v.safetensors: the AdamW moments, under the parameters' names;
//  - state.json: {"format": "remat-checkpoint", "version": 1, "step": 120, "skipped": s,
//    "options": the TrainOptions that determine the run (model config, batch, micro_batch, seq, lr
//    schedule, seed, strategy/policy strings, data path and format, the validation split: val_data
//    or val_fraction)}.
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

namespace remat {

struct TrainOptions;

constexpr int kCheckpointVersion = 1;

// "step-000120".
std::string checkpoint_name(int64_t step);

// The options that define a run (see the header comment), and their inverse: the fields found in `j`
// are set in `o`, the others are left as they are. Throws remat::Error naming a bad field.
nlohmann::json options_to_json(const TrainOptions& o);
void options_from_json(const nlohmann::json& j, TrainOptions& o, const std::string& where);
nlohmann::json model_config_to_json(const ModelConfig& c);
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where);

struct RunState {
  std::string dir;  // the step-NNN folder
  int64_t step = 0;
  int64_t skipped = 0;
  nlohmann::json options;
};

// Writes a complete checkpoint of (model, m, v, step) into save_dir (created if missing), then keeps
// only the newest `keep` checkpoints there. Returns the path of the new step-NNN folder.
std::string save_checkpoint(const std::string& save_dir, int64_t step, int64_t skipped, const Model& model,
                            const std::vector<Tensor>& m, const std::vector<Tensor>& v, const TrainOptions& o,
                            int64_t keep);

// `path` is a step-NNN folder (it holds state.json) or a save dir: its newest complete checkpoint.
// Throws remat::Error when there is none.
std::string find_checkpoint(const std::string& path);

// Reads and checks state.json of the checkpoint folder `dir`.
RunState read_run_state(const std::string& dir);

// Loads the checkpoint's weights into `model` and its moments into m, v (shapes must match).
void load_checkpoint_tensors(const std::string& dir, Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v);

}  // namespace remat
