#include "core/tensor.h"

#include <atomic>
#include <cstring>

#include "core/error.h"

namespace remat {

namespace {
std::atomic<uint64_t> next_id{1};
thread_local bool t_shape_only = false;
thread_local Allocator* t_dry = nullptr;
}  // namespace

bool shape_only() { return t_shape_only; }
ShapeOnlyScope::ShapeOnlyScope() : prev_(t_shape_only) { t_shape_only = true; }
ShapeOnlyScope::~ShapeOnlyScope() { t_shape_only = prev_; }
DryRunAccount::DryRunAccount(Allocator& a) : prev_(t_dry) { t_dry = &a; }
DryRunAccount::~DryRunAccount() { t_dry = prev_; }
Allocator& accountant() { return t_dry ? *t_dry : Allocator::global(); }

std::string shape_str(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    REMAT_ASSERT(d >= 0, "negative dimension");
    if (d != 0 && n > (int64_t(1) << 60) / d)
      throw Error("shape", "tensor shape " + shape_str(s) + " has more elements than remat can address",
                  "check the model and batch sizes for a typo");
    n *= d;
  }
  return n;
}

Storage::Storage(size_t numel, Category cat, std::string name, DType dtype)
    : numel_(numel), cat_(cat), name_(std::move(name)), id_(next_id.fetch_add(1)), dtype_(dtype),
      shape_only_(t_shape_only) {
  if (!shape_only_) {
    data_ = Allocator::global().allocate(bytes(), cat_, name_, dtype_);
  } else if (t_dry) {
    t_dry->account(bytes(), cat_, name_, dtype_);
    dry_ = t_dry;
  }
}

Storage::~Storage() {
  if (!evicted_) evict();
}

void Storage::evict() {
  REMAT_ASSERT(!evicted_, "Storage::evict: evicted already");
  if (!shape_only_) Allocator::global().release(data_, bytes(), cat_, name_, dtype_);
  else if (dry_) dry_->unaccount(bytes(), cat_, name_, dtype_);
  data_ = nullptr;
  evicted_ = true;
}

void Storage::restore() {
  REMAT_ASSERT(evicted_, "Storage::restore: resident already");
  if (!shape_only_) data_ = Allocator::global().allocate(bytes(), cat_, name_, dtype_);
  else if (dry_) dry_->account(bytes(), cat_, name_, dtype_);
  evicted_ = false;
}

void Storage::retag(Category to) {
  if (evicted_) {}  // nothing counted under the old category
  else if (!shape_only_) Allocator::global().retag(bytes(), cat_, to, name_, dtype_);
  else if (dry_) dry_->retag(bytes(), cat_, to, name_, dtype_);
  cat_ = to;
}

void Storage::wrong_access(DType want) const {
  if (evicted_)
    throw Error("tensor", "'" + name_ + "' was read while evicted (its bytes given back)",
                "this is a bug in remat: please report it with the command that ran");
  throw Error("tensor", "'" + name_ + "' holds " + dtype_name(dtype_) + " but was read as " + dtype_name(want),
              "this is a bug in remat: please report it with the command that ran");
}

Tensor Tensor::empty(Shape shape, Category cat, std::string name, DType dtype) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(size_t(shape_numel(shape)), cat, std::move(name), dtype);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::zeros(Shape shape, Category cat, std::string name, DType dtype) {
  Tensor t = empty(std::move(shape), cat, std::move(name), dtype);
  if (!t.shape_only()) std::memset(t.storage_->raw(), 0, t.bytes());  // +0.0 in both dtypes
  return t;
}

Tensor Tensor::clone(Category cat, std::string name) const {
  Tensor t = empty(shape_, cat, std::move(name), dtype());
  if (!t.shape_only() && !shape_only()) std::memcpy(t.storage_->raw(), storage_->raw(), bytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  REMAT_ASSERT(shape_numel(shape) == numel(), "reshape must keep the number of elements");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::fill(float v) {
  if (shape_only()) return;
  if (is_bf16()) {
    const bf16 h = float_to_bf16(v);
    bf16* p = data_bf16();
    for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = h;
    return;
  }
  float* p = data();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
}

}  // namespace remat
