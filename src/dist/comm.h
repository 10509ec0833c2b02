// The processes of one run. Under mpirun (Open MPI), MPI's world; otherwise this process alone, and
// remat runs exactly as without MPI (MPI is a dependency, never a requirement to run). Everything
// above this layer speaks to the other ranks only through it; nothing below the trainer knows ranks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace remat::dist {

// A non-blocking collective in flight (an MPI_Request; nothing for a process alone).
class Pending {
 public:
  Pending();
  ~Pending();  // waits: a collective is never abandoned with its buffers
  Pending(Pending&&) noexcept;
  Pending& operator=(Pending&&) noexcept;
  bool test();  // done (and progresses MPI)
  void wait();

 private:
  friend class Comm;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Comm {
 public:
  // Initialises MPI when this process was started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE or a
  // PMIx rank in the environment); else the world is this process alone. Call once, first thing.
  static void init(int* argc, char*** argv);
  static void finalize();
  static Comm& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool mpi() const { return mpi_; }

  // Ends every rank of the run at once (MPI_Abort), after this rank printed its message: a failure
  // on one rank never leaves the others waiting in a collective.
  [[noreturn]] void abort(int status) const;

  // Ends this process with `status` once every rank gets here (a stopped run: rank 0 may still be
  // writing its checkpoint, which an early exit would have mpirun kill), finalising MPI.
  [[noreturn]] void exit_together(int status) const;

  // Every rank's string, in rank order (the run-description check at start).
  std::vector<std::string> allgather(const std::string& mine) const;
  // Every rank's doubles (the same count on each), in rank order.
  std::vector<double> allgather(std::span<const double> mine) const;
  int max(int v) const;  // over ranks (blocking)

  // Each rank's chunk `r` of `data` (chunk r is [off[r], off[r+1])) goes to rank r: `recv` gets N
  // copies of this rank's chunk, in rank order (a reduce-scatter whose sum the caller does, in rank
  // order, so that the bits never depend on MPI's algorithm).
  Pending all_to_all(const float* data, std::span<const int64_t> off, float* recv) const;
  // Every rank's chunk of `data` (in place) to every rank; fp32, or bf16 (moved as 16-bit words).
  Pending all_gather(float* data, std::span<const int64_t> off) const;
  Pending all_gather(bf16* data, std::span<const int64_t> off) const;
  // Chunks of `data` onto rank 0's `full` (ignored elsewhere); blocking.
  void gather(const float* chunk, std::span<const int64_t> off, float* full) const;

 private:
  Pending all_gather_raw(void* data, std::span<const int64_t> off, bool words16) const;
  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
};

// The bounds of N near-equal chunks of n elements: off[r] = n * r / N, off[N] = n.
std::vector<int64_t> chunks(int64_t n, int N);

}  // namespace remat::dist
