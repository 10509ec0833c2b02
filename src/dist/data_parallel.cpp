#include "dist/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/bf16.h"

namespace remat::dist {

struct DataParallel::Bucket {
  std::vector<size_t> params;  // indices into model.params()
  bool started = false, reduced = false;
  std::vector<Tensor> recv;    // per parameter: N copies of this rank's chunk
  std::vector<Pending> a2a, gather;
};

DataParallel::DataParallel(Model& model, const Comm& comm, Parallelism p) : model_(model), comm_(comm), p_(p) {
  REMAT_ASSERT(p.ranks >= 1 && (p.zero == 0 || p.zero == 1), "DataParallel: ranks >= 1, zero 0 or 1");
  emulated_ = comm.size() == 1 && p.ranks > 1 && p.as_rank < 0;
  REMAT_ASSERT(emulated_ || comm.size() == p.ranks || (p.as_rank >= 0 && p.as_rank < p.ranks),
               "DataParallel: one process per rank, or one process for all, or a dry run of one rank");
  losses_.assign(size_t(local_ranks()), 0.0);
  const auto& params = model.params();
  for (const Param& q : params) off_.push_back(chunks(q.value.numel(), p.ranks));
  if (emulated_) {
    for (const Param& q : params) sum_.push_back(Tensor::zeros(q.value.shape(), Category::Gradient, q.name + ".grad_sum"));
    return;
  }
  const int L = int(model.config().L);
  for (int i = 0; i <= L; ++i) buckets_.push_back(std::make_unique<Bucket>());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto split = model.split_name(params[i].name);
    buckets_[split ? size_t(split->first) : size_t(L)]->params.push_back(i);
  }
}

DataParallel::~DataParallel() = default;

int DataParallel::first_rank() const { return emulated_ ? 0 : comm_.rank(); }
int DataParallel::rank() const {
  REMAT_ASSERT(p_.as_rank < 0 || shape_only(), "DataParallel: as_rank prices a dry run, it cannot run a step");
  return p_.as_rank >= 0 ? p_.as_rank : comm_.rank();
}
int DataParallel::local_ranks() const { return emulated_ ? p_.ranks : 1; }
Shard DataParallel::shard() const {
  return p_.zero == 1 && !emulated_ ? Shard{rank(), p_.ranks} : Shard{};
}

void DataParallel::begin_rank(int local) {
  micro_ = 0;
  if (emulated_ && local > 0) model_.zero_grad();
}

void DataParallel::start(Bucket& b) {
  b.started = true;
  order_.push_back(&b);
  const int N = p_.ranks;
  for (size_t i : b.params) {
    Param& q = model_.params()[i];
    const std::vector<int64_t>& off = off_[i];
    const int64_t mine = off[size_t(rank()) + 1] - off[size_t(rank())];
    b.recv.push_back(Tensor::empty({int64_t(N) * mine}, Category::Workspace, q.name + ".reduce"));
    if (!shape_only()) b.a2a.push_back(comm_.all_to_all(q.grad.data(), off, b.recv.back().data()));
  }
}

void DataParallel::progress() {
  if (shape_only()) return;
  const int N = p_.ranks, r = comm_.rank();
  // In the order the buckets started, the same on every rank: so are the gathers posted.
  for (Bucket* bp : order_) {
    Bucket& b = *bp;
    if (b.reduced) continue;
    bool done = true;
    for (Pending& x : b.a2a) done = x.test() && done;
    if (!done) return;
    // This rank's chunk, summed in rank order: the same additions whatever MPI did.
    for (size_t k = 0; k < b.params.size(); ++k) {
      Param& q = model_.params()[b.params[k]];
      const std::vector<int64_t>& off = off_[b.params[k]];
      const int64_t lo = off[size_t(r)], n = off[size_t(r) + 1] - lo;
      float* dst = q.grad.data() + lo;
      const float* in = b.recv[k].data();
      std::copy(in, in + n, dst);
      for (int s = 1; s < N; ++s)
        for (int64_t j = 0; j < n; ++j) dst[j] += in[int64_t(s) * n + j];
      if (p_.zero == 0) b.gather.push_back(comm_.all_gather(q.grad.data(), off));
    }
    b.reduced = true;
  }
}

void DataParallel::after_action(const Action& a) {
  if (emulated_ || !p_.overlap || micro_ != p_.accum - 1) return;  // the last micro-batch completes the gradients
  if (a.kind == Action::Kind::Backward) start(*buckets_[size_t(a.block)]);
  progress();
}

void DataParallel::after_micro_batch() { ++micro_; }

void DataParallel::end_rank(int local, double loss_sum) {
  losses_[size_t(local)] = loss_sum;
  if (!emulated_) return;
  auto& params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (shape_only()) continue;
    float* s = sum_[i].data();
    const float* g = params[i].grad.data();
    const int64_t n = params[i].grad.numel();
    if (local == 0)
      std::copy(g, g + n, s);
    else
      for (int64_t j = 0; j < n; ++j) s[j] += g[j];
  }
}

void DataParallel::after_backward() {
  if (emulated_) {
    if (shape_only()) return;
    auto& params = model_.params();
    for (size_t i = 0; i < params.size(); ++i) std::copy(sum_[i].data(), sum_[i].data() + sum_[i].numel(), params[i].grad.data());
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_)
    if (!b->started) start(*b);
  if (!shape_only()) {
    for (auto& b : buckets_)
      for (Pending& x : b->a2a) x.wait();
    progress();
    for (auto& b : buckets_)
      for (Pending& x : b->gather) x.wait();
  }
  wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& b : buckets_) {  // the receive buffers end here, at the same point in every run
    b->recv.clear();
    b->a2a.clear();
    b->gather.clear();
    b->started = b->reduced = false;
  }
  order_.clear();
}

void DataParallel::after_update() {
  if (emulated_ || p_.zero == 0 || shape_only()) return;
  // Every rank's updated chunk of every parameter, then each bf16 copy from its whole master (the
  // rank's own chunk was rounded by the update: the same rounding).
  std::vector<Pending> gathers;
  auto& params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) gathers.push_back(comm_.all_gather(params[i].value.data(), off_[i]));
  for (Pending& g : gathers) g.wait();
  for (Param& q : model_.params())
    if (q.lowp.defined()) kernels::to_bf16_parallel(q.lowp.data_bf16(), q.value.data(), q.value.numel());
}

double DataParallel::grad_norm() const {
  const auto& params = model_.params();
  const int N = p_.ranks;
  if (shape_only()) return 0;
  auto chunk_sq = [&](size_t i, int r) {  // the sum of squares of chunk r of parameter i's gradient
    const std::vector<int64_t>& off = off_[i];
    return kernels::sum_squares(
        params[i].grad.cspan().subspan(size_t(off[size_t(r)]), size_t(off[size_t(r) + 1] - off[size_t(r)])));
  };
  // Under ZeRO-1 a rank holds only its chunks reduced: every rank's are gathered ([rank][param]).
  std::vector<double> all;
  const bool gathered = p_.zero == 1 && !emulated_;
  if (gathered) {
    std::vector<double> mine;
    for (size_t i = 0; i < params.size(); ++i) mine.push_back(chunk_sq(i, comm_.rank()));
    all = comm_.allgather(mine);
  }
  double sq = 0;
  for (size_t i = 0; i < params.size(); ++i)
    for (int r = 0; r < N; ++r) sq += gathered ? all[size_t(r) * params.size() + i] : chunk_sq(i, r);
  return std::sqrt(sq);
}

double DataParallel::loss_sum() const {
  const std::vector<double> all = emulated_ ? losses_ : comm_.allgather(std::span<const double>(losses_));
  double s = 0;
  for (double l : all) s += l;
  return s;
}

void DataParallel::gather_moments(const std::vector<Tensor>& shard, std::vector<Tensor>* full) const {
  const auto& params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& q = params[i];
    if (comm_.rank() == 0) full->push_back(Tensor::empty(q.value.shape(), Category::OptimizerState, shard[i].name() + ".gathered"));
    comm_.gather(shard[i].data(), off_[i], comm_.rank() == 0 ? full->back().data() : nullptr);
  }
}

void DataParallel::cut_moments(const std::vector<Tensor>& full, Shard s, std::vector<Tensor>* shard) {
  for (size_t i = 0; i < full.size(); ++i) {
    const int64_t n = full[i].numel(), lo = s.lo(n);
    std::copy(full[i].data() + lo, full[i].data() + s.hi(n), (*shard)[i].data());
  }
}

RankShare rank_share_to_plan(int ranks, int zero, int64_t rank_accum, bool overlap) {
  RankShare r;
  if (ranks <= 1) return r;
  const Parallelism par{ranks, zero, rank_accum, overlap, ranks - 1};
  r.make_extension = [par](Model& m) -> std::unique_ptr<StepExtension> {
    return std::make_unique<DataParallel>(m, Comm::world(), par);
  };
  if (zero == 1) r.optimizer_shard = Shard{ranks - 1, ranks};
  return r;
}

}  // namespace remat::dist
