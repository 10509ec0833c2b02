// A --save-dir belongs to one run. Checkpoints (run_state.h) record the run's identity, a random id
// made when the run starts and kept through every resume, and remat acts on a folder only as that
// run's owner:
//  - a new run refuses a folder that holds any step-NNNNNN entry (another run's checkpoints, or
//    anything else by that name): continuing it is --resume's job, and names that collide with
//    remat's could be taken for checkpoints or deleted;
//  - a resumed run refuses a folder holding another run's checkpoints, anything named step-NNNNNN
//    that is not a checkpoint, or a later checkpoint of its own run (resuming from an older step
//    would overwrite it: resume from the newest, or branch into another --save-dir);
//  - --keep deletes only this run's checkpoints, never anything else;
//  - an exclusive lock (flock on the folder itself, released by the kernel when the process ends,
//    even killed) keeps a second run out of the folder while one is writing there.
// Checkpoints from remat versions that recorded no identity (state.json versions 1 and 2) count as
// another run's, except for a run resumed from one of them in the same folder, which takes them as
// its own (it cannot tell otherwise, and refusing would strand them).
#pragma once
#include <cstdint>
#include <string>

namespace remat {

// A new run's identity: 32 hex digits from the system's random source.
std::string new_run_id();

class SaveDir {
 public:
  // Takes `dir` for the run `run` (created if missing, then locked). resumed_step is the step the run
  // resumes from (-1: a new run), legacy_resume says the checkpoint it resumes recorded no identity.
  // Throws remat::Error naming what is in the way and how to go on.
  SaveDir(std::string dir, std::string run, int64_t resumed_step, bool legacy_resume);
  ~SaveDir();
  SaveDir(const SaveDir&) = delete;
  SaveDir& operator=(const SaveDir&) = delete;

  const std::string& dir() const { return dir_; }
  // Whether the checkpoint folder `path` (DIR/step-NNNNNN) is this run's.
  bool owns(const std::string& path) const;
  // After a checkpoint was written: deletes this run's checkpoints beyond the newest `keep`, and the
  // temporaries of remat processes that no longer exist. Nothing else in the folder is touched.
  void prune(int64_t keep) const;

 private:
  std::string dir_, run_;
  bool legacy_ = false;
  int lock_fd_ = -1;
};

}  // namespace remat
