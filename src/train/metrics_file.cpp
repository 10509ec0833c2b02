#include "train/metrics_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"

namespace remat {

namespace {

// The lines of `text` a resumed run keeps: complete lines (a partial last line is dropped) whose
// "step" is at most `step`. Lines that are not a JSON object with a step are kept (not ours to judge).
std::string lines_up_to(const std::string& text, int64_t step) {
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = text.substr(start, nl - start);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step)
      continue;
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace

MetricsFile::MetricsFile(const std::string& path, int64_t resume_step) : path_(path) {
  if (path.empty()) return;
  if (path == "-") {
    fd_ = 1;
    return;
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
  struct stat st {};
  if (resume_step > 0 && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    write_file_atomic(path, lines_up_to(read_file(path), resume_step));
    flags |= O_APPEND;
  } else {
    flags |= O_TRUNC;
  }
  fd_ = ::open(path.c_str(), flags, 0666);
  if (fd_ < 0) {
    const int err = errno;
    throw Error("io", "cannot open --metrics-out '" + path + "': " + std::strerror(err),
                "choose a writable location for --metrics-out");
  }
  own_fd_ = true;
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  good_ = end > 0 ? uint64_t(end) : 0;
}

MetricsFile::~MetricsFile() {
  if (own_fd_ && fd_ >= 0) ::close(fd_);
}

void MetricsFile::line(const std::string& l) {
  if (fd_ < 0) return;
  const std::string text = l + "\n";
  if (fd_ == 1) std::fflush(stdout);  // after what printf buffered
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n > 0) {
      done += size_t(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      err = n < 0 ? errno : EIO;
      break;
    }
  }
  if (err == 0) {
    good_ += text.size();
    return;
  }
  // Cut a partial line off, so that the file still parses line by line.
  if (own_fd_ && done > 0) (void)::ftruncate(fd_, off_t(good_));
  error_ = "writing --metrics-out '" + path_ + "' failed: " + std::strerror(err);
  hint_ = err == EFBIG ? "the file exceeds a size limit (ulimit -f)" : "free some disk space or write it elsewhere";
  if (own_fd_) ::close(fd_);
  fd_ = -1;
  std::fprintf(stderr, "remat: warning: %s; training goes on without metrics, and --save and checkpoints are "
                       "still written\n", error_.c_str());
}

void MetricsFile::check() const {
  if (!error_.empty()) throw Error("io", error_ + " (metrics stopped there; the run finished and saved)", hint_);
}

}  // namespace remat
