// Named tensors as Hugging Face lays them out on disk, read lazily:
//  - one .safetensors file;
//  - a folder with config.json and model.safetensors;
//  - a folder with config.json, model.safetensors.index.json
//      {"metadata": {...}, "weight_map": {"name": "model-00001-of-00002.safetensors", ...}}
//    and the shards it names.
// The constructor validates everything up front (every shard's header, the index against the
// shards' contents, config.json); tensor data is read on demand. When a folder holds both
// model.safetensors and an index, model.safetensors wins, as in transformers. Shards in the
// folder that the index does not name are ignored. Errors are one-line remat::Error naming the
// path, with a hint.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace remat {

class TensorStore {
 public:
  // A .safetensors file or a model folder.
  explicit TensorStore(const std::string& path);

  bool is_folder() const { return folder_; }
  const std::string& path() const { return path_; }
  // A folder with config.json.
  bool has_config() const { return has_config_; }
  // The parsed config.json; throws remat::Error if there is none.
  const nlohmann::json& config() const;
  // Every tensor, sorted by name.
  std::vector<std::string> names() const;
  // nullptr if there is no tensor of that name.
  const SafetensorsEntry* find(const std::string& name) const;
  // Like find() but throws a remat::Error naming the tensor and the path.
  const SafetensorsEntry& at(const std::string& name) const;
  // Reads a tensor as float (F32, F16, BF16 or F64); `out` must hold exactly numel elements.
  void read_f32(const std::string& name, std::span<float> out) const;
  // The "__metadata__" of the single file, or of the first shard by name.
  const std::map<std::string, std::string>& metadata() const;
  // The file holding a tensor (throws like at()).
  const std::string& file_of(const std::string& name) const;

 private:
  struct Loc {
    const SafetensorsReader* file;
    const SafetensorsEntry* entry;
  };
  const Loc& loc(const std::string& name) const;

  std::string path_;
  bool folder_ = false, has_config_ = false;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;  // the single file, or the shards by name
  std::map<std::string, Loc> tensors_;
};

// Writes a folder in the same layout, atomically file by file: each shard and the index through
// AtomicWriter, config.json last. One model.safetensors when the F32 total is <= max_shard_bytes
// (0 = never shard), else model-0000k-of-0000n.safetensors (tensors in the given order, a new shard
// when the next tensor would overflow the current one; a tensor larger than the limit gets a shard
// of its own) and model.safetensors.index.json ({"metadata": {"total_size": bytes}, "weight_map"}).
// Every file gets `metadata` as its __metadata__. Creates the folder if missing (its parent must
// exist). Once the new files are in place, removes what a previous save left that the new layout
// does not use: model.safetensors / model-*-of-*.safetensors files it does not name and, for a
// single-file save, a stale model.safetensors.index.json. Nothing else in the folder is touched.
void save_tensor_folder(const std::string& dir, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                        const nlohmann::json& config, size_t max_shard_bytes = 0,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace remat
