// Crash-safe file writes and plain file reads. A file written through AtomicWriter is either the
// old version or the complete new one, never a torn mix: bytes go to `<path>.tmp.<pid>` in the same
// directory, and commit() flushes, fsyncs, renames over the target and fsyncs the directory.
// All failures are user errors: remat::Error with the "io" prefix, naming the path and the cause.
//  - A symlink target is followed: its target file is replaced atomically and the link stays a link.
//  - An existing target that is not a regular file (a device, FIFO, socket) is refused, never
//    renamed over.
//  - Temporary files of the same target left by dead processes (`<path>.tmp.<pid>[.n]` whose pid no
//    longer exists) are removed when the target is written next.
//  - Write errors, EFBIG past `ulimit -f` included (when SIGXFSZ is ignored, as remat train does),
//    are thrown as remat::Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace remat {

class AtomicWriter {
 public:
  // Creates the temporary file next to `path`. Throws if the directory is missing or not writable.
  explicit AtomicWriter(const std::string& path);
  // Without a successful commit(), closes and removes the temporary file; the target is untouched.
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  // Appends bytes (buffered). Throws on I/O errors such as a full disk.
  void write(const void* data, size_t bytes);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Replaces bytes already written at `offset` (a header whose counts are known only at the end).
  // Throws unless [offset, offset + bytes) was written before.
  void overwrite(uint64_t offset, const void* data, size_t bytes);
  // Makes the new contents durable and visible at `path`. At most once; throws on failure (the
  // temporary file is removed and the target keeps its previous contents).
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  void fail(const std::string& what, int err);  // cleans up, then throws
  void cleanup() noexcept;

  std::string path_, tmp_;
  FILE* f_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Atomically replaces `path` with `contents`. "-" writes them to stdout instead: only outputs that
// IoPolicy (core/io_policy.h) checked as Out::Stream get there.
void write_file_atomic(const std::string& path, std::string_view contents);

// Reads a whole (small) file. Throws remat::Error("io") for a missing file, a directory, or a read
// error.
std::string read_file(const std::string& path);

// Size of a regular file in bytes, with the same errors as read_file. `what` names the file's role
// in messages ("token file", "checkpoint").
uint64_t regular_file_size(const std::string& path, const std::string& what = "file");

}  // namespace remat
