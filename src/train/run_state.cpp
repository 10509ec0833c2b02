#include "train/run_state.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "model/weights.h"
#include "core/record.h"
#include "train/save_dir.h"
#include "core/signal_point.h"

namespace remat {

namespace fs = std::filesystem;

namespace {

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

// Whether `j` is a state.json object of remat's ("format": "remat-checkpoint", a string).
bool is_checkpoint_state(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  const auto f = j.find("format");
  return f != j.end() && f->is_string() && f->get<std::string>() == "remat-checkpoint";
}

// A whole number field of state.json, 0 .. `most`: a JSON integer, not a float (1e308 would not
// convert) nor a string.
int64_t count_field(const nlohmann::json& j, const char* key, const std::string& where, int64_t most = INT64_MAX) {
  const auto it = j.find(key);
  if (it == j.end() || !(it->is_number_integer() || it->is_number_unsigned()))
    throw Error("checkpoint", "'" + where + "': field \"" + key + "\" is missing or not a whole number",
                "the checkpoint is damaged or from another program; use another one");
  const bool fits = it->is_number_unsigned() ? it->get<uint64_t>() <= uint64_t(most)
                                             : it->get<int64_t>() >= 0 && it->get<int64_t>() <= most;
  if (!fits)
    throw Error("checkpoint", "'" + where + "': field \"" + key + "\" is " + it->dump() + ", outside 0.." +
                                  std::to_string(most),
                "the checkpoint is damaged; use another one");
  return it->is_number_unsigned() ? int64_t(it->get<uint64_t>()) : it->get<int64_t>();
}

void save_tensors(const std::string& path, const Model& model, const std::vector<Tensor>& t,
                  const std::map<std::string, std::string>& meta) {
  std::vector<std::pair<std::string, const Tensor*>> list;
  const auto& params = model.params();
  for (size_t i = 0; i < params.size(); ++i) list.emplace_back(params[i].name, &t[i]);
  save_safetensors(path, list, meta);
}

// `second`: AdamW's second moments, which are never negative.
void load_tensors(const std::string& path, const Model& model, std::vector<Tensor>& t, const RunState& st,
                  bool second) {
  SafetensorsReader r(path);
  if (st.version >= 3) {
    const auto& md = r.metadata();
    auto at = [&](const char* k) {
      const auto it = md.find(k);
      return it == md.end() ? std::string("(none)") : it->second;
    };
    if (at("remat.step") != std::to_string(st.step) || at("remat.run") != st.identity.run)
      throw Error("checkpoint", quote_name(path) + " belongs to step " + at("remat.step") + " of run " +
                                    at("remat.run") + ", but its state.json says step " + std::to_string(st.step) +
                                    " of run " + st.identity.run,
                  "the checkpoint was edited or mixed with another one's files; resume from another checkpoint");
  }
  const auto& params = model.params();
  if (r.entries().size() != params.size())
    throw Error("checkpoint", "'" + path + "' holds " + std::to_string(r.entries().size()) + " tensors, the model has " +
                                  std::to_string(params.size()) + " parameters",
                "the checkpoint is damaged; use another one");
  for (size_t i = 0; i < params.size(); ++i) {
    const SafetensorsEntry& e = r.at(params[i].name);
    if (e.shape != t[i].shape())
      throw Error("checkpoint", "'" + path + "': tensor '" + e.name + "' has the wrong shape",
                  "the checkpoint is damaged; use another one");
    r.read_f32(e, t[i].span());
    for (const float x : t[i].span())
      if (!std::isfinite(x) || (second && x < 0.f))
        throw Error("checkpoint", quote_name(path) + ": tensor " + quote_name(e.name) + " holds " +
                                      (std::isfinite(x) ? "a negative second moment" : "a non-finite value") +
                                      ", which AdamW never writes",
                    "the checkpoint is damaged; resume from another one");
  }
}

// A data path as saved: absolute, so that --resume finds it from another working directory.
std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : abs.string();
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char b[40];
  std::snprintf(b, sizeof b, "step-%06lld", (long long)step);
  return b;
}

nlohmann::json run_config_json(const RunConfig& o) {
  RunConfig c = o;
  c.data = absolute_path(o.data);
  c.val_data = absolute_path(o.val_data);
  if (o.tokenizer != "bytes") c.tokenizer = absolute_path(o.tokenizer);
  return record::to_json(c);
}

RunConfig run_config_from_json(const nlohmann::json& options, int version, const std::string& where,
                               std::vector<std::string>* unrecorded) {
  nlohmann::json j = options;
  if (version == 1 && j.is_object()) {
    // Version 1 did not record these: they take their defaults, and the caller the command line's.
    const RunConfig d;
    const nlohmann::json now = record::to_json(d);
    for (const char* key : {"lr_decay_steps", "schedule", "block_policy", "block_attention"})
      if (!j.contains(key)) j[key] = now[key];
    if (j.contains("model") && j["model"].is_object())
      for (const char* key : {"precision", "fp32_residual"})
        if (!j["model"].contains(key)) {
          j["model"][key] = now["model"][key];
          if (unrecorded) unrecorded->push_back(std::string("model.") + key);
        }
  }
  if (version <= 3 && j.is_object()) {
    // Versions up to 3 ran in one process (one rank, no sharding) and read text as bytes.
    const RunConfig d;
    const nlohmann::json now = record::to_json(d);
    for (const char* key : {"ranks", "zero", "tokenizer"})
      if (!j.contains(key)) j[key] = now[key];
  }
  RunConfig c;
  try {
    record::from_json(j, c);
  } catch (const record::FieldError& e) {
    throw Error("checkpoint", "'" + where + "': options field \"" + e.path + "\" " + e.what(),
                "the checkpoint is damaged or from another program; use another one");
  }
  try {
    c.model.validate();
  } catch (const Error& e) {
    throw Error("checkpoint", "'" + where + "' holds an invalid model: " + e.what(), "use another checkpoint");
  }
  return c;
}

std::string save_checkpoint(const SaveDir& owner, int64_t step, int64_t skipped, const Model& model,
                            const std::vector<Tensor>& m, const std::vector<Tensor>& v, const RunConfig& o,
                            const CheckpointIdentity& identity) {
  std::error_code ec;
  const std::string& save_dir = owner.dir();
  const std::string name = checkpoint_name(step);
  const std::string final_dir = (fs::path(save_dir) / name).string();
  const std::string tmp = (fs::path(save_dir) / ("." + name + ".tmp." + std::to_string(::getpid()))).string();
  if (fs::exists(fs::symlink_status(final_dir, ec)) && !owner.owns(final_dir))
    throw Error("io", "cannot write the checkpoint " + quote_name(final_dir) + ": that name is taken by something "
                      "that is not this run's checkpoint",
                "move it away, or choose another --save-dir");
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    throw Error("io", "cannot create '" + tmp + "': " + ec.message(), "choose a writable location for --save-dir");
  try {
    CheckpointIdentity id = identity;
    const std::map<std::string, std::string> meta{
        {"remat.format", "adamw-moments"}, {"remat.step", std::to_string(step)}, {"remat.run", id.run}};
    const std::string w = (fs::path(tmp) / "weights.safetensors").string();
    const std::string am = (fs::path(tmp) / "adam_m.safetensors").string();
    const std::string av = (fs::path(tmp) / "adam_v.safetensors").string();
    save_weights(model, w);
    save_tensors(am, model, m, meta);
    save_tensors(av, model, v, meta);
    id.weights = fingerprint_file(w, "checkpoint file");
    id.adam_m = fingerprint_file(am, "checkpoint file");
    id.adam_v = fingerprint_file(av, "checkpoint file");
    signal_point("save");
    nlohmann::json state = {{"format", "remat-checkpoint"},
                            {"version", kCheckpointVersion},
                            {"step", step},
                            {"skipped", skipped},
                            {"identity", record::to_json(id)},
                            {"options", run_config_json(o)}};
    write_file_atomic((fs::path(tmp) / "state.json").string(), state.dump(2) + "\n");
    fsync_dir(tmp);
    // A folder of the same step (this run's: checked above) is moved aside first: rename() cannot
    // replace a non-empty folder.
    std::string old;
    if (fs::exists(final_dir, ec)) {
      old = (fs::path(save_dir) / ("." + name + ".old." + std::to_string(::getpid()))).string();
      fs::remove_all(old, ec);
      fs::rename(final_dir, old);
    }
    fs::rename(tmp, final_dir);
    fsync_dir(save_dir);
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw Error("io", "writing the checkpoint '" + final_dir + "' failed: " + e.code().message(),
                "free some disk space or choose another --save-dir");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return final_dir;
}

std::optional<std::string> checkpoint_run(const std::string& dir) {
  std::error_code ec;
  const fs::path state = fs::path(dir) / "state.json";
  if (!fs::is_regular_file(state, ec)) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(state.string()));
    if (!is_checkpoint_state(j)) return std::nullopt;
    if (!j.contains("identity")) return std::string();
    const nlohmann::json& id = j.at("identity");
    if (!id.is_object() || !id.contains("run") || !id.at("run").is_string()) return std::nullopt;
    return id.at("run").get<std::string>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int64_t checkpoint_step(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t s = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || s > (INT64_MAX - 9) / 10) return -1;
    s = s * 10 + (name[i] - '0');
  }
  return s;
}

std::string find_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw Error("checkpoint", "--resume '" + path + "' is not a folder",
                "give the --save-dir of the run, or one of its step-NNNNNN folders");
  if (fs::exists(fs::path(path) / "state.json", ec)) return path;
  int64_t best = -1;
  std::string found;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const int64_t s = checkpoint_step(e.path().filename().string());
    if (s > best && fs::exists(e.path() / "state.json", ec)) {
      best = s;
      found = e.path().string();
    }
  }
  if (found.empty())
    throw Error("checkpoint", "no checkpoint in '" + path + "' (no step-NNNNNN folder with a state.json)",
                "--save-dir DIR --save-every N writes them; give that DIR or one of its step folders");
  return found;
}

std::optional<std::string> checkpoint_weights(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return std::nullopt;
  bool has = fs::exists(fs::path(path) / "state.json", ec);
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (has) break;
    has = checkpoint_step(e.path().filename().string()) >= 0 && fs::exists(e.path() / "state.json", ec);
  }
  if (!has) return std::nullopt;
  return (fs::path(find_checkpoint(path)) / "weights.safetensors").string();
}

RunState read_run_state(const std::string& dir) {
  const std::string where = (fs::path(dir) / "state.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(where));
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint", "'" + where + "' is not valid JSON", "the checkpoint is damaged; use another one");
  }
  if (!is_checkpoint_state(j))
    throw Error("checkpoint", "'" + where + "' is not a remat checkpoint state", "give a folder written by --save-dir");
  const int version = int(count_field(j, "version", where, 1000000));
  if (version < 1 || version > kCheckpointVersion)
    throw Error("checkpoint", "'" + where + "' has format version " + std::to_string(version) +
                                  ", this remat reads versions 1 to " + std::to_string(kCheckpointVersion),
                "resume it with the remat that wrote it");
  RunState s;
  s.dir = dir;
  s.step = count_field(j, "step", where);
  s.skipped = j.contains("skipped") ? count_field(j, "skipped", where) : 0;
  if (s.skipped > s.step)
    throw Error("checkpoint", "'" + where + "': " + std::to_string(s.skipped) + " skipped steps of " +
                                  std::to_string(s.step),
                "the checkpoint is damaged; use another one");
  if (!j.contains("options")) throw Error("checkpoint", "'" + where + "' has no \"options\"", "the checkpoint is damaged");
  s.version = version;
  s.options = run_config_from_json(j.at("options"), version, where, &s.unrecorded);
  if (version >= 3) {
    if (!j.contains("identity"))
      throw Error("checkpoint", "'" + where + "' has no \"identity\"", "the checkpoint is damaged; use another one");
    try {
      record::from_json(j.at("identity"), s.identity);
    } catch (const record::FieldError& e) {
      throw Error("checkpoint", "'" + where + "': identity field \"" + e.path + "\" " + e.what(),
                  "the checkpoint is damaged or from another program; use another one");
    }
    if (s.identity.run.empty())
      throw Error("checkpoint", "'" + where + "' records no run id", "the checkpoint is damaged; use another one");
  }
  return s;
}

void load_checkpoint_tensors(const RunState& st, Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v) {
  const std::string w = (fs::path(st.dir) / "weights.safetensors").string();
  const std::string am = (fs::path(st.dir) / "adam_m.safetensors").string();
  const std::string av = (fs::path(st.dir) / "adam_v.safetensors").string();
  if (st.version >= 3)
    for (const auto& [path, want] : {std::pair{w, st.identity.weights}, {am, st.identity.adam_m}, {av, st.identity.adam_v}}) {
      const Fingerprint have = fingerprint_file(path, "checkpoint file");
      if (have != want)
        throw Error("checkpoint", quote_name(path) + " is not the file its checkpoint wrote (" + have.describe() +
                                      "; state.json records " + want.describe() + ")",
                    "the file was replaced or damaged; resume from another checkpoint");
    }
  load_weights(model, w);
  load_tensors(am, model, m, st, false);
  load_tensors(av, model, v, st, true);
}

}  // namespace remat
