#include "core/tensor_store.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"

namespace remat {

namespace {

namespace fs = std::filesystem;
constexpr const char* kC = "safetensors";
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kConfig = "config.json";
const std::string kResave = "the folder mixes files of different saves or downloads; re-download or re-save it";

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

enum class Kind { Missing, File, Dir, Other };
Kind kind_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Kind::Missing;
  return S_ISREG(st.st_mode) ? Kind::File : S_ISDIR(st.st_mode) ? Kind::Dir : Kind::Other;
}

// Parses a small JSON file, refusing syntax errors and objects that repeat a key (nlohmann would
// keep one silently). `what` names the file's role in messages.
nlohmann::json parse_json_file(const std::string& file, const std::string& what, const std::string& hint) {
  const std::string text = read_file(file);
  std::vector<std::set<std::string>> keys;  // the keys of each open object
  std::string dup;
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) keys.emplace_back();
    if (ev == E::object_end && !keys.empty()) keys.pop_back();
    if (ev == E::key && !keys.empty() && dup.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      dup = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's explanation without its "[json.exception...] parse error at ...: " prefix.
    std::string s = e.what();
    if (size_t b = s.find("] "); s.rfind("[json.exception.", 0) == 0 && b != std::string::npos) s = s.substr(b + 2);
    if (size_t c = s.find(": "); s.rfind("parse error", 0) == 0 && c != std::string::npos) s = s.substr(c + 2);
    std::string where;
    if (const auto* pe = dynamic_cast<const nlohmann::json::parse_error*>(&e)) where = " at byte " + std::to_string(pe->byte);
    throw Error(kC, what + " '" + file + "' is not valid JSON" + where + ": " + printable(s, 160, true), hint);
  }
  if (!dup.empty()) throw Error(kC, what + " '" + file + "' repeats the key " + quote_name(dup) + " in one object", hint);
  return j;
}

// A shard name from an index: a plain file name inside the folder.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

TensorStore::TensorStore(const std::string& path) : path_(path) {
  const Kind k = kind_of(path);
  if (k == Kind::Missing)
    throw Error(kC, "'" + path + "': no such file or folder",
                "give a .safetensors file or a Hugging Face model folder (config.json + model.safetensors)");
  if (k == Kind::Other)
    throw Error(kC, "'" + path + "' is neither a regular file nor a folder", "give a .safetensors file or a model folder");
  if (k == Kind::File) {
    files_.push_back(std::make_unique<SafetensorsReader>(path));
    for (const SafetensorsEntry& e : files_[0]->entries()) tensors_.emplace(e.name, Loc{files_[0].get(), &e});
    return;
  }

  folder_ = true;
  const std::string config = join(path, kConfig), single = join(path, kSingle), index = join(path, kIndex);
  const Kind ck = kind_of(config);
  if (ck != Kind::Missing) {
    config_ = parse_json_file(config, "config", "fix or re-download config.json");
    if (!config_.is_object())
      throw Error(kC, "config '" + config + "' is not a JSON object", "fix or re-download config.json");
    has_config_ = true;
  }

  if (kind_of(single) == Kind::File) {
    files_.push_back(std::make_unique<SafetensorsReader>(single));
    for (const SafetensorsEntry& e : files_[0]->entries()) tensors_.emplace(e.name, Loc{files_[0].get(), &e});
    return;
  }
  if (kind_of(index) != Kind::File)
    throw Error(kC, "'" + path + "' has neither " + kSingle + " nor " + kIndex,
                "is it a Hugging Face model folder with safetensors weights? (.bin checkpoints must be converted)");

  const std::string bad_index = "the index is corrupt; re-download it";
  const nlohmann::json j = parse_json_file(index, "index", bad_index);
  if (!j.is_object()) throw Error(kC, "index '" + index + "' is not a JSON object", bad_index);
  if (j.contains("metadata") && !j["metadata"].is_object())
    throw Error(kC, "index '" + index + "': \"metadata\" is not an object", bad_index);
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(kC, "index '" + index + "' has no \"weight_map\" object", bad_index);
  const nlohmann::json& wm = j["weight_map"];
  std::set<std::string> shards;
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    if (!it->is_string())
      throw Error(kC, "index '" + index + "' maps tensor " + quote_name(it.key()) + " to a non-string", bad_index);
    const std::string& s = it->get_ref<const std::string&>();
    if (!plain_file_name(s))
      throw Error(kC, "index '" + index + "' maps tensor " + quote_name(it.key()) + " to " + quote_name(s) + ", which is not a file name",
                  bad_index);
    shards.insert(s);
  }
  for (const std::string& s : shards) {
    const std::string file = join(path, s);
    if (kind_of(file) != Kind::File)
      throw Error(kC, "the index names " + quote_name(s) + ", which is not in '" + path + "'",
                  "the download is incomplete: fetch the missing shard");
    files_.push_back(std::make_unique<SafetensorsReader>(file));
    const SafetensorsReader* r = files_.back().get();
    for (const SafetensorsEntry& e : r->entries()) {
      if (!wm.contains(e.name))
        throw Error(kC, "shard '" + file + "' holds tensor " + quote_name(e.name) + ", which the index '" + index + "' does not list",
                    kResave);
      auto [at, inserted] = tensors_.emplace(e.name, Loc{r, &e});
      if (!inserted)
        throw Error(kC, "tensor " + quote_name(e.name) + " is in two shards of '" + path + "': '" + at->second.file->path() +
                            "' and '" + file + "'",
                    kResave);
    }
  }
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    const std::string& s = it->get_ref<const std::string&>();
    auto t = tensors_.find(it.key());
    if (t == tensors_.end())
      throw Error(kC, "the index '" + index + "' maps tensor " + quote_name(it.key()) + " to " + quote_name(s) + ", which does not hold it",
                  kResave);
    if (t->second.file->path() != join(path, s))
      throw Error(kC, "the index '" + index + "' maps tensor " + quote_name(it.key()) + " to " + quote_name(s) + ", but it is in '" +
                          t->second.file->path() + "'",
                  kResave);
  }
}

const nlohmann::json& TensorStore::config() const {
  if (!has_config_)
    throw Error(kC, "'" + path_ + "' has no config.json",
                folder_ ? "a Hugging Face model folder has one next to its weights" : "a single .safetensors file has no config");
  return config_;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, loc] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsEntry* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.entry;
}

const TensorStore::Loc& TensorStore::loc(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw Error(kC, "'" + path_ + "' has no tensor named " + quote_name(name) + " (it has " + std::to_string(tensors_.size()) +
                        " tensors)",
                "is the checkpoint for this model?");
  return it->second;
}

const SafetensorsEntry& TensorStore::at(const std::string& name) const { return *loc(name).entry; }

const std::string& TensorStore::file_of(const std::string& name) const { return loc(name).file->path(); }

void TensorStore::read_f32(const std::string& name, std::span<float> out) const {
  const Loc& l = loc(name);
  l.file->read_f32(*l.entry, out);
}

const std::map<std::string, std::string>& TensorStore::metadata() const {
  static const std::map<std::string, std::string> none;
  return files_.empty() ? none : files_[0]->metadata();
}

void save_tensor_folder(const std::string& dir, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                        const nlohmann::json& config, size_t max_shard_bytes,
                        const std::map<std::string, std::string>& metadata) {
  if (dir.empty()) throw Error(kC, "cannot save a model folder with an empty path", "give a folder name");
  if (!config.is_object())
    throw Error(kC, "cannot save '" + dir + "': the config is not a JSON object", "pass the model's config as an object");
  // Validate every tensor before writing anything: a failure must not leave half a folder.
  std::set<std::string> seen;
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error(kC, "cannot save a tensor named '" + name + "' to '" + dir + "'", "use a non-empty, non-reserved name");
    if (!seen.insert(name).second) throw Error(kC, "cannot save '" + dir + "': tensor name '" + name + "' appears twice");
    if (!t || !t->defined()) throw Error(kC, "cannot save '" + dir + "': tensor '" + name + "' is undefined");
    total += t->bytes();
  }
  std::string config_text;
  try {
    config_text = config.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {
    throw Error(kC, "cannot save '" + dir + "': the config holds a string that is not valid UTF-8");
  }

  const Kind k = kind_of(dir);
  if (k == Kind::Missing) {
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      throw Error(kC, "cannot create the folder '" + dir + "': " + std::strerror(err),
                  err == ENOENT ? "its parent folder must exist" : "choose a writable location");
    }
  } else if (k != Kind::Dir) {
    throw Error(kC, "cannot save to '" + dir + "': it exists and is not a folder", "give a folder path");
  }

  // Shards, in the given order.
  std::vector<std::vector<std::pair<std::string, const Tensor*>>> shards(1);
  if (max_shard_bytes > 0 && total > max_shard_bytes) {
    uint64_t in_shard = 0;
    for (const auto& nt : tensors) {
      if (!shards.back().empty() && in_shard + nt.second->bytes() > max_shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(nt);
      in_shard += nt.second->bytes();
    }
  } else {
    shards[0] = tensors;
  }
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors(join(dir, kSingle), shards[0], metadata);
    written.insert(kSingle);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      save_safetensors(join(dir, name), shards[i], metadata);
      written.insert(name);
      for (const auto& nt : shards[i]) weight_map[nt.first] = name;
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
    std::string text;
    try {
      text = index.dump(2) + "\n";
    } catch (const nlohmann::json::exception&) {
      throw Error(kC, "cannot save '" + dir + "': a tensor name is not valid UTF-8");
    }
    write_file_atomic(join(dir, kIndex), text);
    written.insert(kIndex);
  }
  write_file_atomic(join(dir, kConfig), config_text);

  // Remove what a previous save left and this layout does not use: first a stale index (so no
  // index ever names removed shards), then the weight files.
  auto remove = [&](const std::string& file) {
    if (std::remove(file.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      throw Error(kC, "saved '" + dir + "' but cannot remove the stale '" + file + "': " + std::strerror(err),
                  "delete it by hand: the folder would otherwise mix two saves");
    }
  };
  if (!written.count(kIndex) && kind_of(join(dir, kIndex)) == Kind::File) remove(join(dir, kIndex));
  std::error_code ec;
  std::vector<std::string> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ec2;
    if (written.count(name) || !it->is_regular_file(ec2)) continue;
    if (name == kSingle || ::fnmatch("model-*-of-*.safetensors", name.c_str(), 0) == 0) stale.push_back(name);
  }
  if (ec) throw Error(kC, "saved '" + dir + "' but cannot list it to remove stale shards: " + ec.message());
  for (const std::string& name : stale) remove(join(dir, name));
}

}  // namespace remat
