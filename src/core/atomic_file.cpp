#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_kind.h"

namespace remat {

namespace {

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string errno_str(int err) { return std::strerror(err); }

// A hint for the usual causes of a failed open/write.
std::string hint_for(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return "free some disk space or write to another location";
    case EACCES:
    case EPERM:
    case EROFS: return "choose a writable location or fix the permissions";
    case ENOENT: return "create the directory first, e.g. mkdir -p";
    case EFBIG: return "the file exceeds a size limit (ulimit -f) or the file system's maximum";
    default: return "";
  }
}

// `path` with symlinks resolved (the file a write should replace); `path` itself when it is not a link.
std::string resolve_link(const std::string& path) {
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return path;
  std::error_code ec;
  const std::filesystem::path r = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : r.string();
}

// Removes `<path>.tmp.<pid>` and `<path>.tmp.<pid>.<n>` files whose process no longer exists.
void remove_stale_temps(const std::string& path) {
  const std::string dir = dir_of(path);
  const size_t slash = path.find_last_of('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = 0;
    size_t i = prefix.size();
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && pid < 100000000; ++i) pid = pid * 10 + (name[i] - '0');
    if (i == prefix.size() || pid <= 0) continue;
    if (i < name.size()) {  // only ".<n>" may follow the pid
      if (name[i] != '.' || i + 1 == name.size()) continue;
      bool digits = true;
      for (size_t k = i + 1; k < name.size(); ++k) digits = digits && name[k] >= '0' && name[k] <= '9';
      if (!digits) continue;
    }
    if (pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) (void)::unlinkat(::dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

}  // namespace

AtomicWriter::AtomicWriter(const std::string& requested) : path_(resolve_link(requested)) {
  const std::string& path = path_;
  if (path.empty()) throw Error("io", "cannot write a file with an empty path", "pass a file name");
  const std::string dir = dir_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error("io", "cannot write '" + path + "': directory '" + dir + "' does not exist",
                "create it first, e.g. mkdir -p " + dir);
  if (!S_ISDIR(st.st_mode))
    throw Error("io", "cannot write '" + path + "': '" + dir + "' is not a directory");
  bool target_exists = ::stat(path.c_str(), &st) == 0;
  if (target_exists && S_ISDIR(st.st_mode))
    throw Error("io", "cannot write '" + path + "': it is a directory", "give a file name");
  if (target_exists && !S_ISREG(st.st_mode))
    throw Error("io", "cannot write '" + path + "': it is " + kind_of(st.st_mode) + ", not a regular file",
                "give the path of a regular file");
  remove_stale_temps(path);

  const std::string base = path + ".tmp." + std::to_string(::getpid());
  int fd = -1, err = 0;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp_ = attempt == 0 ? base : base + "." + std::to_string(attempt);
    fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    err = errno;
    if (fd < 0 && err != EEXIST) break;
  }
  if (fd < 0) {
    tmp_.clear();
    throw Error("io", "cannot create a file in '" + dir + "' to write '" + path + "': " + errno_str(err),
                hint_for(err));
  }
  if (target_exists) (void)::fchmod(fd, st.st_mode & 07777);  // keep the target's permissions
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    tmp_.clear();
    throw Error("io", "cannot open '" + path + "' for writing: " + errno_str(err));
  }
}

AtomicWriter::~AtomicWriter() {
  if (!committed_) cleanup();
}

void AtomicWriter::cleanup() noexcept {
  if (f_) {
    std::fclose(f_);
    f_ = nullptr;
  }
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
}

void AtomicWriter::fail(const std::string& what, int err) {
  cleanup();
  throw Error("io", what + " '" + path_ + "' failed: " + errno_str(err), hint_for(err));
}

void AtomicWriter::write(const void* data, size_t bytes) {
  if (committed_) throw Error("io", "write to '" + path_ + "' after commit()");
  if (!f_) throw Error("io", "write to '" + path_ + "' after an earlier failure");
  if (bytes == 0) return;
  errno = 0;
  if (std::fwrite(data, 1, bytes, f_) != bytes) fail("writing", errno ? errno : EIO);
  written_ += bytes;
}

void AtomicWriter::overwrite(uint64_t offset, const void* data, size_t bytes) {
  if (committed_ || !f_) throw Error("io", "overwrite in '" + path_ + "' after commit() or a failure");
  if (offset > written_ || bytes > written_ - offset)
    throw Error("io", "overwrite past the end of what was written to '" + path_ + "'");
  errno = 0;
  if (std::fflush(f_) != 0) fail("writing", errno ? errno : EIO);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(::fileno(f_), p, bytes, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing", n < 0 ? errno : EIO);
    p += n, offset += uint64_t(n), bytes -= size_t(n);
  }
}

void AtomicWriter::commit() {
  if (committed_) throw Error("io", "commit() of '" + path_ + "' called twice");
  if (!f_) throw Error("io", "commit() of '" + path_ + "' after an earlier failure");
  errno = 0;
  if (std::fflush(f_) != 0) fail("writing", errno ? errno : EIO);
  if (::fsync(::fileno(f_)) != 0) fail("syncing", errno);
  FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) fail("closing", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("renaming the temporary file onto", errno);
  tmp_.clear();
  committed_ = true;
  // Make the rename itself durable. Failure here is not fatal: the data is complete and in place.
  int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  if (path == "-") {  // stdout, for the outputs IoPolicy lets stream (Out::Stream)
    std::fflush(stdout);
    errno = 0;
    if (std::fwrite(contents.data(), 1, contents.size(), stdout) != contents.size() || std::fflush(stdout) != 0) {
      const int err = errno ? errno : EIO;
      throw Error("io", "writing to stdout failed: " + errno_str(err), hint_for(err));
    }
    return;
  }
  AtomicWriter w(path);
  w.write(contents);
  w.commit();
}

uint64_t regular_file_size(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw Error("io", "cannot read " + what + " '" + path + "': no such file", "check the path");
    throw Error("io", "cannot read " + what + " '" + path + "': " + errno_str(err), hint_for(err));
  }
  if (S_ISDIR(st.st_mode))
    throw Error("io", "cannot read " + what + " '" + path + "': it is a directory, not a file",
                "give the path of a file inside it");
  if (!S_ISREG(st.st_mode))
    throw Error("io", "cannot read " + what + " '" + path + "': not a regular file");
  return uint64_t(st.st_size);
}

std::string read_file(const std::string& path) {
  uint64_t size = regular_file_size(path);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    int err = errno;
    throw Error("io", "cannot open '" + path + "': " + errno_str(err), hint_for(err));
  }
  std::string out(size, '\0');
  size_t got = size ? std::fread(out.data(), 1, size, f) : 0;
  bool err = std::ferror(f);
  std::fclose(f);
  if (err || got != size)
    throw Error("io", "reading '" + path + "' failed after " + std::to_string(got) + " of " +
                          std::to_string(size) + " bytes",
                "was the file modified while being read?");
  return out;
}

}  // namespace remat
