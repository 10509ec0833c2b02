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

// The step of a "step-000120" name, or -1.
int64_t step_of(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t s = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || s > (INT64_MAX - 9) / 10) return -1;
    s = s * 10 + (name[i] - '0');
  }
  return s;
}

// The pid of a ".step-000120.tmp.<pid>" name, or -1.
long tmp_pid_of(const std::string& name) {
  if (name.empty() || name[0] != '.') return -1;
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at + 5 >= name.size()) return -1;
  long pid = 0;
  for (size_t i = at + 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error("checkpoint", "'" + where + "': field \"" + key + "\" is missing or has the wrong type",
                "the checkpoint is damaged or from another program; use another one");
  }
}

void save_tensors(const std::string& path, const Model& model, const std::vector<Tensor>& t) {
  std::vector<std::pair<std::string, const Tensor*>> list;
  const auto& params = model.params();
  for (size_t i = 0; i < params.size(); ++i) list.emplace_back(params[i].name, &t[i]);
  save_safetensors(path, list, {{"remat.format", "adamw-moments"}});
}

void load_tensors(const std::string& path, const Model& model, std::vector<Tensor>& t) {
  SafetensorsReader r(path);
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

double RunConfig::lr_at(int64_t step) const {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  const double span = std::max<int64_t>(1, decay_steps() - warmup);
  const double t = std::min(1.0, double(step - warmup) / span);
  const double min_lr = lr * min_lr_ratio;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * t));
}

nlohmann::json run_config_json(const RunConfig& o) {
  RunConfig c = o;
  c.data = absolute_path(o.data);
  c.val_data = absolute_path(o.val_data);
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

std::string save_checkpoint(const std::string& save_dir, int64_t step, int64_t skipped, const Model& model,
                            const std::vector<Tensor>& m, const std::vector<Tensor>& v, const RunConfig& o,
                            int64_t keep) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (!fs::is_directory(save_dir))
    throw Error("io", "cannot create the checkpoint folder '" + save_dir + "'" + (ec ? ": " + ec.message() : ""),
                "choose a writable location for --save-dir");
  const std::string name = checkpoint_name(step);
  const std::string final_dir = (fs::path(save_dir) / name).string();
  const std::string tmp = (fs::path(save_dir) / ("." + name + ".tmp." + std::to_string(::getpid()))).string();
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    throw Error("io", "cannot create '" + tmp + "': " + ec.message(), "choose a writable location for --save-dir");
  try {
    save_weights(model, (fs::path(tmp) / "weights.safetensors").string());
    save_tensors((fs::path(tmp) / "adam_m.safetensors").string(), model, m);
    save_tensors((fs::path(tmp) / "adam_v.safetensors").string(), model, v);
    nlohmann::json state = {{"format", "remat-checkpoint"},
                            {"version", kCheckpointVersion},
                            {"step", step},
                            {"skipped", skipped},
                            {"options", run_config_json(o)}};
    write_file_atomic((fs::path(tmp) / "state.json").string(), state.dump(2) + "\n");
    fsync_dir(tmp);
    // A folder of the same step (a rerun) is moved aside first: rename() cannot replace a non-empty folder.
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
  // The new checkpoint is complete: prune the old ones, and the leftovers of dead processes.
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const auto& e : fs::directory_iterator(save_dir, ec)) {
    const std::string n = e.path().filename().string();
    const int64_t s = step_of(n);
    if (s >= 0 && e.is_directory(ec)) steps.emplace_back(s, e.path());
    const long pid = tmp_pid_of(n);
    if (pid > 0 && pid != long(::getpid()) && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + size_t(std::max<int64_t>(keep, 1)) < steps.size(); ++i) fs::remove_all(steps[i].second, ec);
  return final_dir;
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
    const int64_t s = step_of(e.path().filename().string());
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

RunState read_run_state(const std::string& dir) {
  const std::string where = (fs::path(dir) / "state.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(where));
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint", "'" + where + "' is not valid JSON", "the checkpoint is damaged; use another one");
  }
  if (!j.is_object() || j.value("format", std::string()) != "remat-checkpoint")
    throw Error("checkpoint", "'" + where + "' is not a remat checkpoint state", "give a folder written by --save-dir");
  const int version = field<int>(j, "version", where);
  if (version < 1 || version > kCheckpointVersion)
    throw Error("checkpoint", "'" + where + "' has format version " + std::to_string(version) +
                                  ", this remat reads versions 1 to " + std::to_string(kCheckpointVersion),
                "resume it with the remat that wrote it");
  RunState s;
  s.dir = dir;
  s.step = field<int64_t>(j, "step", where);
  s.skipped = j.contains("skipped") ? field<int64_t>(j, "skipped", where) : 0;
  if (s.step < 0) throw Error("checkpoint", "'" + where + "': negative step", "the checkpoint is damaged");
  if (!j.contains("options")) throw Error("checkpoint", "'" + where + "' has no \"options\"", "the checkpoint is damaged");
  s.version = version;
  s.options = run_config_from_json(j.at("options"), version, where, &s.unrecorded);
  return s;
}

void load_checkpoint_tensors(const std::string& dir, Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v) {
  load_weights(model, (fs::path(dir) / "weights.safetensors").string());
  load_tensors((fs::path(dir) / "adam_m.safetensors").string(), model, m);
  load_tensors((fs::path(dir) / "adam_v.safetensors").string(), model, v);
}

}  // namespace remat
