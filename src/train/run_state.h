// Training checkpoints for `remat train --save-dir DIR --resume DIR`.
//
// A checkpoint is a folder DIR/step-000120/ (120 = optimizer steps done) holding
//  - weights.safetensors: the parameters (Hugging Face names, remat's config metadata: save_weights);
//  - adam_m.safetensors, adam_v.safetensors: the AdamW moments, under the parameters' names;
//  - state.json: {"format": "remat-checkpoint", "version": 3, "step": 120, "skipped": s,
//    "identity": the run's id and the content fingerprints of its data and of the three files above
//    (CheckpointIdentity, through the record codec), "options": the run (RunConfig through its one
//    codec, record.h: the model config with its precision, the data and its split, the batch, the
//    optimizer and its learning-rate schedule, the seed, the strategy and a plan's schedule, policies
//    and kernels per block)}. The moments' files also carry the step and the run id in their
//    metadata, so a hand-edited step or a file from another run is refused at resume.
//    Version 1 files (without the precision, the decay length and a plan's per-block choices) and
//    version 2 files (without the identity) still load; nothing of theirs can be checked.
// Nothing else is needed to continue bit-identically: batches and dropout masks are pure functions of
// (seed, step) (BatchSampler::sample(step * accum + k), step_rng(seed, step, k)) and AdamW's bias
// correction uses the absolute step, so restoring the step restores the data position and the RNG.
//
// A checkpoint is written into DIR/.step-000120.tmp.<pid>/ (every file fsynced), which is then
// renamed to its final name and DIR fsynced: a step-NNN folder is always complete. Which folders a
// run may replace or delete is save_dir.h's to say.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "core/tensor.h"
#include "model/model.h"
#include "step/run_config.h"

namespace remat {

constexpr int kCheckpointVersion = 4;  // 4: the options record ranks, zero and tokenizer

class SaveDir;

// What a checkpoint records of who wrote it and from what: checked at resume.
struct CheckpointIdentity {
  std::string run;                       // the run's id (new_run_id), kept through its resumes
  Fingerprint train_data, val_data;      // the tokens trained and validated on (empty: --random-tokens)
  Fingerprint weights, adam_m, adam_v;   // the checkpoint's own files

  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("run", s.run), v("train_data", s.train_data), v("val_data", s.val_data);
    v("weights", s.weights), v("adam_m", s.adam_m), v("adam_v", s.adam_v);
  }
  bool operator==(const CheckpointIdentity&) const = default;
};

// "step-000120".
std::string checkpoint_name(int64_t step);
// The step of a "step-000120" name, or -1 for any other name.
int64_t checkpoint_step(const std::string& name);

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
  CheckpointIdentity identity;  // empty before version 3
  std::vector<std::string> unrecorded;  // fields of options the file's version does not record ("model.precision")
};

// Writes a complete checkpoint of (model, m, v, step) into the run's folder `dir`, recording `id`
// (its run and data; the files' fingerprints are filled in here). A folder of the same step is
// replaced only when it is the run's own. Returns the path of the new step-NNN folder. The caller
// prunes (SaveDir::prune).
std::string save_checkpoint(const SaveDir& dir, int64_t step, int64_t skipped, const Model& model,
                            const std::vector<Tensor>& m, const std::vector<Tensor>& v, const RunConfig& o,
                            const CheckpointIdentity& id);

// The run id a checkpoint folder's state.json records: "" for a version 1 or 2 checkpoint (none
// recorded), nullopt when `dir` holds no readable remat checkpoint state.
std::optional<std::string> checkpoint_run(const std::string& dir);

// `path` is a step-NNN folder (it holds state.json) or a save dir: its newest complete checkpoint.
// Throws remat::Error when there is none.
std::string find_checkpoint(const std::string& path);

// The weights file of the checkpoint `path` names, when it is a step-NNN folder or a save dir holding
// one (its newest), for commands that read a model (sample): nullopt for any other path (a
// .safetensors file, a Hugging Face folder), which they read as they are.
std::optional<std::string> checkpoint_weights(const std::string& path);

// Reads and checks state.json of the checkpoint folder `dir`.
RunState read_run_state(const std::string& dir);

// Loads the checkpoint's weights into `model` and its moments into m, v (shapes must match). A
// version 3 checkpoint's files must match the fingerprints and the step and run its state records;
// the moments must be finite, the second ones non-negative. Throws remat::Error naming the file.
void load_checkpoint_tensors(const RunState& st, Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v);

}  // namespace remat
