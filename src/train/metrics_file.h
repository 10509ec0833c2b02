// --metrics-out: one JSON line per step, written and flushed as it comes, so the file can be tailed.
//  - "-" writes the lines to stdout.
//  - A resumed run (resume_step > 0) first rewrites the file atomically keeping only the lines of
//    steps <= resume_step (the interrupted run may have logged steps past its last checkpoint, which
//    the resumed run logs again), then appends.
//  - The file never ends in a partial line: a failed write is cut back to the last complete line.
#pragma once
#include <cstdint>
#include <string>

namespace remat {

class MetricsFile {
 public:
  // Nothing is written for an empty path. Throws remat::Error("io") when the file cannot be opened
  // or rewritten.
  MetricsFile(const std::string& path, int64_t resume_step);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Appends `l` and a newline. A failed write does not stop the run: metrics are the least valuable
  // output, and stopping would lose the weights. It is reported at once on stderr, metrics stop, and
  // check() throws it after the run has saved what it was asked to save.
  void line(const std::string& l);
  // Throws the write failure, if any.
  void check() const;

 private:
  std::string path_;
  int fd_ = -1;
  bool own_fd_ = false;
  uint64_t good_ = 0;  // bytes of complete lines in the file
  std::string error_, hint_;
};

}  // namespace remat
