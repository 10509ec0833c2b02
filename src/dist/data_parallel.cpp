#include "dist/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/bf16.h"

namespace remat::dist {

struct DataParallel::Bucket {
  std::vector<size_t> params;  // indices into model.params()
  bool started = false, reduced = false;
  bool gathered = false;       // ZeRO-3: the parameters whole, or on their way (fetch)
  std::vector<Tensor> recv;    // per parameter: N copies of this rank's chunk
  std::vector<Pending> a2a, gather, fetch;
};

namespace {
void evict_if_resident(Tensor& t) {
  if (t.defined() && t.resident()) t.evict();
}
// `N` copies of a chunk of `n`, one per rank, summed in rank order into `dst`: the same additions
// whatever MPI did.
void sum_in_rank_order(const float* in, int N, int64_t n, float* dst) {
  std::copy(in, in + n, dst);
  for (int s = 1; s < N; ++s)
    for (int64_t j = 0; j < n; ++j) dst[j] += in[int64_t(s) * n + j];
}
}  // namespace

DataParallel::DataParallel(Model& model, const Comm& comm, Parallelism p) : model_(model), comm_(comm), p_(p) {
  REMAT_ASSERT(p.ranks >= 1 && (p.zero == 0 || p.zero == 1 || p.zero == 3), "DataParallel: ranks >= 1, zero 0, 1 or 3");
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
  if (zero3()) chunks_ = make_parameter_chunks(model, shard());
}

DataParallel::~DataParallel() = default;

int DataParallel::first_rank() const { return emulated_ ? 0 : comm_.rank(); }
int DataParallel::rank() const {
  REMAT_ASSERT(p_.as_rank < 0 || shape_only(), "DataParallel: as_rank prices a dry run, it cannot run a step");
  return p_.as_rank >= 0 ? p_.as_rank : comm_.rank();
}
int DataParallel::local_ranks() const { return emulated_ ? p_.ranks : 1; }
Shard DataParallel::shard() const {
  return (p_.zero == 1 || p_.zero == 3) && !emulated_ ? Shard{rank(), p_.ranks} : Shard{};
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
      sum_in_rank_order(b.recv[k].data(), N, n, q.grad.data() + lo);
      if (p_.zero == 0) b.gather.push_back(comm_.all_gather(q.grad.data(), off));
    }
    b.reduced = true;
  }
}

std::vector<Tensor*> DataParallel::gathered_tensors(Param& q, bool rest) {
  std::vector<Tensor*> out;
  if (rest || !q.lowp.defined()) out.push_back(&q.value);  // the embedding reads its master
  if (q.lowp.defined()) out.push_back(&q.lowp);            // a matmul reads its bf16 copy
  return out;
}

void DataParallel::gather(Bucket& b, bool count) {
  if (b.gathered) return;
  b.gathered = true;
  const bool rest = &b == buckets_.back().get();
  const size_t r = size_t(rank());
  for (size_t i : b.params) {
    Param& q = model_.params()[i];
    const std::vector<int64_t>& off = off_[i];
    const int64_t lo = off[r], len = off[r + 1] - lo, n = q.value.numel();
    for (Tensor* t : gathered_tensors(q, rest)) {
      t->restore();
      if (count) gathered_bytes_ += int64_t(t->bytes() / size_t(n)) * (n - len);
      if (shape_only()) continue;
      if (t->is_bf16()) {
        std::memcpy(t->data_bf16() + lo, chunks_[i].lowp.data_bf16(), size_t(len) * sizeof(bf16));
        b.fetch.push_back(comm_.all_gather(t->data_bf16(), off));
      } else {
        std::memcpy(t->data() + lo, chunks_[i].value.data(), size_t(len) * sizeof(float));
        b.fetch.push_back(comm_.all_gather(t->data(), off));
      }
    }
  }
  if (count) ++gathers_;
}

void DataParallel::wait(Bucket& b) {
  for (Pending& x : b.fetch) x.wait();
  b.fetch.clear();
}

void DataParallel::free(Bucket& b) {
  if (!b.gathered) return;
  wait(b);  // a gather in flight writes into the buffers until it completes
  const bool rest = &b == buckets_.back().get();
  for (size_t i : b.params)
    for (Tensor* t : gathered_tensors(model_.params()[i], rest)) t->evict();
  b.gathered = false;
}

void DataParallel::before_step(const Schedule& schedule) {
  if (!zero3()) return;
  schedule_ = schedule;
  pc_ = 0;
  gathers_ = gathered_bytes_ = 0;
  gather_wait_s_ = 0;
  auto& params = model_.params();
  if (whole_) {  // after the start, a resume or unshard(): this rank's chunks, then nothing whole
    const size_t r = size_t(rank());
    for (size_t i = 0; i < params.size(); ++i) {
      Param& q = params[i];
      const int64_t lo = off_[i][r], len = off_[i][r + 1] - lo;
      if (!shape_only()) {
        std::memcpy(chunks_[i].value.data(), q.value.data() + lo, size_t(len) * sizeof(float));
        if (q.lowp.defined()) std::memcpy(chunks_[i].lowp.data_bf16(), q.lowp.data_bf16() + lo, size_t(len) * sizeof(bf16));
      }
      evict_if_resident(q.value);
      evict_if_resident(q.lowp);
      evict_if_resident(q.grad);
    }
    whole_ = false;
  }
  // The embedding and the head, for the whole step, and their gradients.
  Bucket& rest = *buckets_.back();
  gather(rest, false);
  wait(rest);
  restore_grads(rest);
}

void DataParallel::restore_grads(Bucket& b) {
  for (size_t i : b.params) {
    Tensor& g = model_.params()[i].grad;
    if (g.resident()) continue;
    g.restore();
    if (!shape_only()) std::memset(g.data(), 0, g.bytes());
  }
}

void DataParallel::before_action(const Action& a) {
  if (!zero3() || a.kind == Action::Kind::Free) return;
  Bucket& b = *buckets_[size_t(a.block)];
  gather(b, true);
  for (size_t k = pc_ + 1; k < schedule_.size() && p_.overlap; ++k) {  // the next action's block, on its way meanwhile
    const Action& n = schedule_[k];
    if (n.kind == Action::Kind::Free) continue;
    gather(*buckets_[size_t(n.block)], true);
    break;
  }
  const auto t0 = std::chrono::steady_clock::now();
  wait(b);
  gather_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.kind == Action::Kind::Backward) restore_grads(b);
}

void DataParallel::finish(Bucket& b) {
  const int N = p_.ranks;
  const size_t r = size_t(rank());
  if (!shape_only())
    for (Pending& x : b.a2a) x.wait();
  for (size_t k = 0; k < b.params.size(); ++k) {
    Param& q = model_.params()[b.params[k]];
    if (!shape_only()) {  // this rank's chunk, summed in rank order, as progress() sums it
      const int64_t n = off_[b.params[k]][r + 1] - off_[b.params[k]][r];
      sum_in_rank_order(b.recv[k].data(), N, n, chunks_[b.params[k]].grad.data());
    }
    q.grad.evict();
  }
  b.recv.clear();
  b.a2a.clear();
  b.reduced = true;
}

void DataParallel::after_action(const Action& a) {
  if (zero3()) {
    const size_t here = pc_++;
    if (a.kind == Action::Kind::Free) return;
    Bucket& b = *buckets_[size_t(a.block)];
    // The schedule's next use of this block in the micro-batch, and whether it comes next (frees of
    // checkpoints between use no parameters), as planner::zero3_gathers counts them.
    bool used_again = false, adjacent = true;
    for (size_t k = here + 1; k < schedule_.size() && !used_again; ++k) {
      if (schedule_[k].kind == Action::Kind::Free) continue;
      used_again = schedule_[k].block == a.block;
      adjacent = adjacent && used_again;
    }
    const bool replay = a.kind == Action::Kind::Forward && a.recompute;
    if (!used_again || !(adjacent || (replay && p_.hold))) free(b);
    if (micro_ != p_.accum - 1 || a.kind != Action::Kind::Backward || !p_.overlap) return;
    // The block's reduction starts; the one before it, started one backward ago, ends here: at a
    // point of the schedule, so that the gradients freed and the buffers held are the same in every
    // run and in the dry run.
    for (Bucket* o : order_)
      if (!o->reduced) finish(*o);
    start(b);
    return;
  }
  if (emulated_ || !p_.overlap || micro_ != p_.accum - 1) return;  // the last micro-batch completes the gradients
  if (a.kind == Action::Kind::Backward) start(*buckets_[size_t(a.block)]);
  progress();
}

void DataParallel::after_micro_batch() {
  ++micro_;
  if (!zero3()) return;
  pc_ = 0;
  for (size_t i = 0; i + 1 < buckets_.size(); ++i) free(*buckets_[i]);
}

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
  if (zero3()) {
    for (Bucket* b : order_)
      if (!b->reduced) finish(*b);
    for (auto& b : buckets_) free(*b);
  } else if (!shape_only()) {
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

std::vector<Param>* DataParallel::parameter_chunks() { return zero3() ? &chunks_ : nullptr; }

void DataParallel::unshard() {
  if (!zero3() || whole_) return;
  std::vector<Pending> gathers;
  auto& params = model_.params();
  const size_t r = size_t(comm_.rank());
  for (size_t i = 0; i < params.size(); ++i) {
    Param& q = params[i];
    const int64_t lo = off_[i][r], len = off_[i][r + 1] - lo;
    if (!q.value.resident()) q.value.restore();
    std::memcpy(q.value.data() + lo, chunks_[i].value.data(), size_t(len) * sizeof(float));
    gathers.push_back(comm_.all_gather(q.value.data(), off_[i]));
    if (q.lowp.defined()) {
      if (!q.lowp.resident()) q.lowp.restore();
      std::memcpy(q.lowp.data_bf16() + lo, chunks_[i].lowp.data_bf16(), size_t(len) * sizeof(bf16));
      gathers.push_back(comm_.all_gather(q.lowp.data_bf16(), off_[i]));
    }
  }
  for (Pending& g : gathers) g.wait();
  whole_ = true;
}

void DataParallel::after_update() {
  if (emulated_ || p_.zero != 1 || shape_only()) return;
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
    if (zero3()) return kernels::sum_squares(chunks_[i].grad.cspan());  // r is this rank
    const std::vector<int64_t>& off = off_[i];
    return kernels::sum_squares(
        params[i].grad.cspan().subspan(size_t(off[size_t(r)]), size_t(off[size_t(r) + 1] - off[size_t(r)])));
  };
  // Under ZeRO-1 a rank holds only its chunks reduced: every rank's are gathered ([rank][param]).
  std::vector<double> all;
  const bool gathered = p_.zero != 0 && !emulated_;
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

RankShare rank_share_to_plan(int ranks, int zero, int64_t rank_accum, bool overlap, bool hold) {
  RankShare r;
  if (ranks <= 1) return r;
  const Parallelism par{ranks, zero, rank_accum, overlap, ranks - 1, hold};
  r.make_extension = [par](Model& m) -> std::unique_ptr<StepExtension> {
    return std::make_unique<DataParallel>(m, Comm::world(), par);
  };
  if (zero != 0) r.optimizer_shard = Shard{ranks - 1, ranks};
  r.dry_run_each = true;
  return r;
}

}  // namespace remat::dist
