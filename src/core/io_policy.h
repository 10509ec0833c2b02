// One output policy for every subcommand ("never clobber"). A command declares the files and folders
// it reads and writes, each with the flag that named it, and calls check() before any work and
// before it creates anything. check() refuses, in one remat::Error("io") naming the flags and the
// path:
//  - an input that is a FIFO, socket or device (opening one could block forever); a regular file, a
//    folder where one is expected, or a symlink to either is fine; a missing input is left to the
//    reader, whose message is more specific;
//  - an output that is an input: the same file (same st_dev/st_ino, so symlinks and hard links
//    count), the same path once resolved, or a path inside an input folder (a model folder's files);
//  - two outputs that are the same file;
//  - an output that is a folder where a file is expected (or a file where a folder is), a device,
//    FIFO or socket, /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, or the file this
//    process's stdout or stderr is redirected to. Outputs of kind Stream take "-" for stdout instead;
//  - an output that cannot be written: a read-only file or folder (no write bit, even for root), a
//    missing or read-only parent folder.
// Lives in core so that the CLI, the trainer and unit tests share it. It creates nothing.
#pragma once
#include <string>
#include <vector>

namespace remat {

class IoPolicy {
 public:
  enum class In {
    File,        // a file that is read (--data, --plan, --calibration)
    Model,       // a .safetensors file or a model folder: every file inside a folder is read (--init-from)
    Checkpoint,  // a folder the run continues from (--resume); new checkpoints may be written beside it
  };
  enum class Out {
    File,          // a file, replaced atomically
    Stream,        // a file, or "-" for stdout (--metrics-out, --report-json)
    FileOrFolder,  // a file, or an existing model folder written into again (train --save)
    Folder,        // a folder of outputs, created by the run if missing (--save-dir)
  };

  // Empty paths (a flag not given) are ignored.
  IoPolicy& input(const std::string& path, const std::string& flag, In kind = In::File);
  IoPolicy& output(const std::string& path, const std::string& flag, Out kind = Out::File);
  // Throws remat::Error("io") on the first problem; returns when every path is fine.
  void check() const;

  // "-": the standard output, for an output of kind Stream.
  static bool is_stdout(const std::string& path) { return path == "-"; }

 private:
  struct Entry {
    std::string path, flag;
    int kind;
  };
  std::vector<Entry> in_, out_;
};

}  // namespace remat
