#include "dist/comm.h"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace remat::dist {

namespace {
Comm g_world;
bool g_initialised = false;
// Collectives of each kind on a communicator of their own, so that each kind's order is the same on
// every rank however the kinds interleave: reductions of gradients, and gathers.
MPI_Comm g_reduce = MPI_COMM_NULL, g_gather = MPI_COMM_NULL;

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

// MPI's int counts and displacements of the chunks `off`.
struct Counts {
  std::vector<int> count, displ;
  explicit Counts(std::span<const int64_t> off) {
    for (size_t r = 0; r + 1 < off.size(); ++r) {
      REMAT_ASSERT(off[r + 1] <= INT_MAX, "dist: a tensor of more than 2^31 elements");
      count.push_back(int(off[r + 1] - off[r]));
      displ.push_back(int(off[r]));
    }
  }
};
}  // namespace

struct Pending::Impl {
  MPI_Request req = MPI_REQUEST_NULL;
  std::unique_ptr<Counts> send, recv;  // the counts an MPI_I* call reads until it completes
};

Pending::Pending() = default;
Pending::~Pending() {
  if (impl_) wait();
}
Pending::Pending(Pending&&) noexcept = default;
Pending& Pending::operator=(Pending&& o) noexcept {
  if (this != &o) {
    if (impl_) wait();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
bool Pending::test() {
  if (!impl_ || impl_->req == MPI_REQUEST_NULL) return true;
  int done = 0;
  MPI_Test(&impl_->req, &done, MPI_STATUS_IGNORE);
  return done != 0;
}
void Pending::wait() {
  if (impl_ && impl_->req != MPI_REQUEST_NULL) MPI_Wait(&impl_->req, MPI_STATUS_IGNORE);
}

void Comm::init(int* argc, char*** argv) {
  if (g_initialised || !launched_by_mpirun()) return;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);  // OpenMP threads never call MPI
  g_initialised = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  g_world.mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size_);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_reduce);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_gather);
}

void Comm::finalize() {
  if (g_initialised) {
    MPI_Comm_free(&g_reduce);
    MPI_Comm_free(&g_gather);
    MPI_Finalize();
  }
  g_initialised = false;
}

Comm& Comm::world() { return g_world; }

void Comm::abort(int status) const {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

void Comm::exit_together(int status) const {
  std::fflush(nullptr);
  if (mpi_) {
    MPI_Barrier(MPI_COMM_WORLD);
    finalize();
  }
  std::_Exit(status);
}

std::vector<std::string> Comm::allgather(const std::string& mine) const {
  if (!mpi_) return {mine};
  int len = int(mine.size());
  std::vector<int> lens(static_cast<size_t>(size_)), displ(static_cast<size_t>(size_));
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size_; ++r) displ[size_t(r)] = total, total += lens[size_t(r)];
  std::string all(size_t(total), '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displ.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.push_back(all.substr(size_t(displ[size_t(r)]), size_t(lens[size_t(r)])));
  return out;
}

std::vector<double> Comm::allgather(std::span<const double> mine) const {
  if (!mpi_) return {mine.begin(), mine.end()};
  std::vector<double> all(mine.size() * size_t(size_));
  MPI_Allgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, MPI_COMM_WORLD);
  return all;
}

int Comm::max(int v) const {
  if (!mpi_) return v;
  int out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

Pending Comm::all_to_all(const float* data, std::span<const int64_t> off, float* recv) const {
  Pending p;
  if (!mpi_) return p;
  p.impl_ = std::make_unique<Pending::Impl>();
  p.impl_->send = std::make_unique<Counts>(off);
  // This rank receives its own chunk from every rank, one after another.
  const int mine = int(off[size_t(rank_) + 1] - off[size_t(rank_)]);
  p.impl_->recv = std::make_unique<Counts>(off);
  for (int r = 0; r < size_; ++r) p.impl_->recv->count[size_t(r)] = mine, p.impl_->recv->displ[size_t(r)] = r * mine;
  MPI_Ialltoallv(data, p.impl_->send->count.data(), p.impl_->send->displ.data(), MPI_FLOAT, recv,
                 p.impl_->recv->count.data(), p.impl_->recv->displ.data(), MPI_FLOAT, g_reduce, &p.impl_->req);
  return p;
}

Pending Comm::all_gather_raw(void* data, std::span<const int64_t> off, bool words16) const {
  Pending p;
  if (!mpi_) return p;
  p.impl_ = std::make_unique<Pending::Impl>();
  p.impl_->recv = std::make_unique<Counts>(off);
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, p.impl_->recv->count.data(), p.impl_->recv->displ.data(),
                  words16 ? MPI_UINT16_T : MPI_FLOAT, g_gather, &p.impl_->req);
  return p;
}
Pending Comm::all_gather(float* data, std::span<const int64_t> off) const { return all_gather_raw(data, off, false); }
Pending Comm::all_gather(bf16* data, std::span<const int64_t> off) const { return all_gather_raw(data, off, true); }

void Comm::gather(const float* chunk, std::span<const int64_t> off, float* full) const {
  if (!mpi_) return;
  Counts c(off);
  MPI_Gatherv(chunk, c.count[size_t(rank_)], MPI_FLOAT, full, c.count.data(), c.displ.data(), MPI_FLOAT, 0,
              MPI_COMM_WORLD);
}

std::vector<int64_t> chunks(int64_t n, int N) {
  std::vector<int64_t> off(size_t(N) + 1);
  for (int r = 0; r <= N; ++r) off[size_t(r)] = n * r / N;
  return off;
}

}  // namespace remat::dist
