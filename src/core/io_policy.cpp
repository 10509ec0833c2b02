#include "core/io_policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_kind.h"

namespace remat {

namespace {

namespace fs = std::filesystem;

bool special(mode_t m) { return !S_ISREG(m) && !S_ISDIR(m); }

std::string q(const std::string& p) { return quote_name(p); }

// A path as compared: stat() of what it names (symlinks followed) and its absolute, resolved form
// (weakly_canonical: symlinks resolved as far as the path exists, no trailing slash).
struct Resolved {
  bool exists = false;
  struct stat st {};
  std::string canon;
};

Resolved resolve(const std::string& path) {
  Resolved r;
  if (IoPolicy::is_stdout(path)) {
    r.canon.assign(1, '-');
    return r;
  }
  r.exists = ::stat(path.c_str(), &r.st) == 0;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  fs::path c = fs::weakly_canonical(abs, ec);
  if (ec) c = abs;
  std::string s = c.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  r.canon = s;
  return r;
}

bool same(const Resolved& a, const Resolved& b) {
  if (a.exists && b.exists) return a.st.st_dev == b.st.st_dev && a.st.st_ino == b.st.st_ino;
  return a.canon == b.canon;
}

// Is `child` a path inside the existing folder `dir`?
bool inside(const Resolved& child, const Resolved& dir) {
  if (!dir.exists || !S_ISDIR(dir.st.st_mode) || child.canon == "-") return false;
  const std::string prefix = dir.canon == "/" ? "/" : dir.canon + "/";
  return child.canon.size() > prefix.size() && child.canon.compare(0, prefix.size(), prefix) == 0;
}

// /dev/stdout, /dev/fd/1, /proc/self/fd/2 and the like: this process's descriptors, not files.
bool names_a_descriptor(const std::string& path) {
  std::error_code ec;
  const std::string n = fs::absolute(path, ec).lexically_normal().string();
  if (n == "/dev/stdin" || n == "/dev/stdout" || n == "/dev/stderr") return true;
  for (const char* p : {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"})
    if (n.rfind(p, 0) == 0) return true;
  if (n.rfind("/proc/", 0) == 0) {  // /proc/<pid>/fd/N and /proc/<pid>/task/<tid>/fd/N
    const size_t fd = n.find("/fd/");
    return fd != std::string::npos && n.find_first_not_of("0123456789", 6) != 6;
  }
  return false;
}

// 1 or 2 when `r` is the regular file this process's stdout or stderr writes to (a shell's `>` or
// `2>>`), else 0: replacing it would truncate the user's log.
int redirected_to(const Resolved& r) {
  if (!r.exists || !S_ISREG(r.st.st_mode)) return 0;
  for (int fd : {1, 2}) {
    struct stat s {};
    if (::fstat(fd, &s) == 0 && S_ISREG(s.st_mode) && s.st_dev == r.st.st_dev && s.st_ino == r.st.st_ino) return fd;
  }
  return 0;
}

// Read-only for everyone (no write bit: refused even for root, who could write it) or not writable
// by this user (access() also sees read-only mounts).
bool read_only(const std::string& path, const struct stat& st) {
  if ((st.st_mode & 0222) == 0) return true;
  return ::access(path.c_str(), S_ISDIR(st.st_mode) ? (W_OK | X_OK) : W_OK) != 0;
}

std::string writable_hint(const std::string& path, bool dir) {
  return "make it writable (chmod u+w " + path + ") or choose another " + (dir ? "folder" : "path");
}

}  // namespace

IoPolicy& IoPolicy::input(const std::string& path, const std::string& flag, In kind) {
  if (!path.empty()) in_.push_back({path, flag, int(kind)});
  return *this;
}

IoPolicy& IoPolicy::output(const std::string& path, const std::string& flag, Out kind) {
  if (!path.empty()) out_.push_back({path, flag, int(kind)});
  return *this;
}

void IoPolicy::check() const {
  std::vector<Resolved> ri, ro;
  // Inputs: never open() a FIFO, socket or device (it blocks, or never ends).
  for (const Entry& e : in_) {
    ri.push_back(resolve(e.path));
    const Resolved& r = ri.back();
    if (r.exists && special(r.st.st_mode))
      throw Error("io", e.flag + " " + q(e.path) + " is " + kind_of(r.st.st_mode) + ", not a regular file",
                  "remat reads inputs from regular files only: save the stream to a file first");
  }
  for (const Entry& e : out_) ro.push_back(resolve(e.path));

  // Conflicts first: they name two flags, the most telling message.
  for (size_t o = 0; o < out_.size(); ++o) {
    for (size_t i = 0; i < in_.size(); ++i) {
      if (In(in_[i].kind) == In::Checkpoint) continue;  // --save-dir beside --resume is the usual case
      std::string both = out_[o].flag + " " + q(out_[o].path) + " is also the input " + in_[i].flag;
      if (out_[o].path != in_[i].path) both.append(" ").append(q(in_[i].path));
      if (same(ro[o], ri[i]))
        throw Error("io", both, "write " + out_[o].flag + " to another path: the input would be overwritten");
      if (inside(ro[o], ri[i]))
        throw Error("io",
                    out_[o].flag + " " + q(out_[o].path) + " is inside the input folder " + in_[i].flag + " " +
                        q(in_[i].path),
                    "write " + out_[o].flag + " outside that folder: it would replace or add to the files read from it");
      // An input inside an output folder that is a model folder written into (--save DIR).
      if (Out(out_[o].kind) == Out::FileOrFolder && inside(ri[i], ro[o]))
        throw Error("io",
                    in_[i].flag + " " + q(in_[i].path) + " is inside the folder " + out_[o].flag + " " +
                        q(out_[o].path) + " writes into",
                    "write " + out_[o].flag + " to another path: the input could be overwritten");
    }
    for (size_t k = 0; k < o; ++k)
      if (same(ro[o], ro[k]))
        throw Error("io", out_[k].flag + " and " + out_[o].flag + " are the same path " + q(out_[o].path),
                    "give each output its own path");
  }

  // Each output on its own.
  for (size_t o = 0; o < out_.size(); ++o) {
    const Entry& e = out_[o];
    const Resolved& r = ro[o];
    const Out kind = Out(e.kind);
    const std::string what = e.flag + " " + q(e.path);
    if (is_stdout(e.path)) {
      if (kind == Out::Stream) continue;
      throw Error("io", e.flag + " cannot write to stdout ('-')", "give a file name; ./- names a file called -");
    }
    const std::string stream_hint = kind == Out::Stream ? "use " + e.flag + " - to write to stdout, or give a regular file"
                                                        : "give the path of a regular file";
    if (names_a_descriptor(e.path))
      throw Error("io", what + " is a descriptor of this process, not a file", stream_hint);
    if (const int fd = redirected_to(r))
      throw Error("io", what + " is the file this process's " + (fd == 1 ? "stdout" : "stderr") + " goes to",
                  "it would be replaced: " + (kind == Out::Stream ? "use " + e.flag + " - for stdout, or " : std::string()) +
                      "give a file of its own");
    if (r.exists) {
      const mode_t m = r.st.st_mode;
      if (special(m)) throw Error("io", what + " is " + kind_of(m) + ", not a regular file", stream_hint);
      if (kind == Out::Folder && !S_ISDIR(m))
        throw Error("io", what + " is " + kind_of(m) + ", not a folder", "give a folder (created if missing)");
      if ((kind == Out::File || kind == Out::Stream) && S_ISDIR(m))
        throw Error("io", what + " is a directory, not a regular file",
                    "give a file name, e.g. " + (fs::path(e.path) / "out").string());
      if (read_only(r.canon, r.st))
        throw Error("io", what + " is read-only", writable_hint(e.path, S_ISDIR(m)));
      if (S_ISDIR(m)) continue;  // a folder written into: its own permissions were the question
    }
    // The folder that will hold it: the parent of the resolved path (a symlink's target is replaced).
    // A folder of outputs is created by the run, so its nearest existing ancestor is what counts.
    fs::path dir = fs::path(r.canon).parent_path();
    if (kind == Out::Folder && !r.exists)
      for (std::error_code ec; !dir.empty() && dir != dir.root_path() && !fs::exists(dir, ec);) dir = dir.parent_path();
    if (dir.empty()) dir = "/";
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) {
      const int err = errno;
      if (err == ENOENT)
        throw Error("io", "cannot write " + what + ": directory " + q(dir.string()) + " does not exist",
                    "create it first, e.g. mkdir -p " + dir.string());
      throw Error("io", "cannot write " + what + ": " + q(dir.string()) + ": " + std::strerror(err),
                  "give a path inside a folder");
    }
    if (!S_ISDIR(ds.st_mode))
      throw Error("io", "cannot write " + what + ": " + q(dir.string()) + " is " + kind_of(ds.st_mode) + ", not a folder",
                  "give a path inside a folder");
    if (read_only(dir.string(), ds))
      throw Error("io", "cannot write " + what + ": the folder " + q(dir.string()) + " is read-only",
                  writable_hint(dir.string(), true));
  }
}

}  // namespace remat
