#include "train/save_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "train/run_state.h"

namespace remat {

namespace fs = std::filesystem;

namespace {

// The pid of a ".step-000120.tmp.<pid>" or ".step-000120.old.<pid>" name (remat's temporaries), or -1.
long temp_pid_of(const std::string& name) {
  if (name.size() < 7 || name.compare(0, 6, ".step-") != 0) return -1;
  size_t at = name.rfind(".tmp.");
  if (at == std::string::npos) at = name.rfind(".old.");
  if (at == std::string::npos || at + 5 >= name.size()) return -1;
  long pid = 0;
  for (size_t i = at + 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// The pid holding a flock on the file open as `fd`, from /proc/locks ("1: FLOCK ADVISORY WRITE <pid>
// <major>:<minor>:<inode> 0 EOF"), or -1 when it cannot be told.
long lock_holder(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  FILE* f = std::fopen("/proc/locks", "r");
  if (!f) return -1;
  long found = -1;
  char line[256];
  while (found < 0 && std::fgets(line, sizeof line, f)) {
    char kind[16], mode[16], access[16];
    long pid = 0;
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    if (std::sscanf(line, "%*[^:]: %15s %15s %15s %ld %x:%x:%llu", kind, mode, access, &pid, &maj, &min, &ino) == 7 &&
        std::strcmp(kind, "FLOCK") == 0 && ino == (unsigned long long)st.st_ino && maj == major(st.st_dev) &&
        min == minor(st.st_dev))
      found = pid;
  }
  std::fclose(f);
  return found;
}

struct Entry {
  int64_t step;
  fs::path path;
  std::optional<std::string> run;  // nullopt: not a remat checkpoint
};

// The step-NNNNNN entries of `dir`, by step.
std::vector<Entry> step_entries(const std::string& dir) {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = checkpoint_step(e.path().filename().string());
    if (s < 0) continue;
    std::optional<std::string> run;
    if (e.is_directory(ec) && !e.is_symlink(ec)) run = checkpoint_run(e.path().string());
    out.push_back({s, e.path(), run});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return out;
}

}  // namespace

std::string new_run_id() {
  std::random_device rd;
  char b[40];
  std::snprintf(b, sizeof b, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return b;
}

SaveDir::SaveDir(std::string dir, std::string run, int64_t resumed_step, bool legacy_resume)
    : dir_(std::move(dir)), run_(std::move(run)), legacy_(legacy_resume) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_, ec))
    throw Error("io", "cannot create the checkpoint folder " + quote_name(dir_) + (ec ? ": " + ec.message() : ""),
                "choose a writable location for --save-dir");
  // The lock first, so that what is checked below cannot change under us. It is taken on the folder
  // itself: nothing is added to the user's folder, and the kernel drops it when the process ends.
  lock_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0) {
    const int err = errno;
    throw Error("io", "cannot open the checkpoint folder " + quote_name(dir_) + ": " + std::strerror(err),
                "choose a readable and writable --save-dir");
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const long pid = lock_holder(lock_fd_);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw Error("checkpoint", "another remat run" + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
                                  " is writing checkpoints to " + quote_name(dir_),
                "wait for it to finish, or give this run another --save-dir");
  }

  const std::string where = "--save-dir " + quote_name(dir_);
  for (const Entry& e : step_entries(dir_)) {
    const std::string name = quote_name(e.path.filename().string());
    if (!e.run)
      throw Error("checkpoint", where + " holds " + name + ", which is not a remat checkpoint; remat names its "
                                        "checkpoints so, and would take it for one",
                  "move it out of the folder, or choose another --save-dir");
    if (resumed_step < 0)
      throw Error("checkpoint", where + " holds the checkpoints of another run (" + name +
                                    "); a new run would mix its checkpoints with them",
                  "continue that run with --resume " + shell_quoted(dir_) +
                      ", or give this run an empty --save-dir");
    if (!owns(e.path.string()))
      throw Error("checkpoint", where + " holds the checkpoints of another run (" + name + ")",
                  "resume into the folder the checkpoint came from, or give this run an empty --save-dir");
    if (e.step > resumed_step)
      throw Error("checkpoint", where + " holds a later checkpoint of this run (" + name + ") than step " +
                                    std::to_string(resumed_step) + ", the one resumed; it would be overwritten",
                  "resume from the newest (--resume " + shell_quoted(dir_) +
                      "), or give --save-dir another folder for this branch of the run");
  }
}

SaveDir::~SaveDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

bool SaveDir::owns(const std::string& path) const {
  const std::optional<std::string> r = checkpoint_run(path);
  return r && (*r == run_ || (legacy_ && r->empty()));
}

void SaveDir::prune(int64_t keep) const {
  std::error_code ec;
  std::vector<fs::path> mine;
  for (const Entry& e : step_entries(dir_))
    if (e.run && (*e.run == run_ || (legacy_ && e.run->empty()))) mine.push_back(e.path);
  for (size_t i = 0; i + size_t(std::max<int64_t>(keep, 1)) < mine.size(); ++i) fs::remove_all(mine[i], ec);
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const long pid = temp_pid_of(e.path().filename().string());
    if (pid > 0 && pid != long(::getpid()) && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

}  // namespace remat
