// Tensor: a shape, a dtype (core/dtype.h: fp32 by default, bf16 for activations and the matmul copy of
// the weights under --precision bf16) and refcounted storage from the accounting allocator. No views, no strides:
// kernels take contiguous spans, and one storage is one named, categorised allocation, so every
// byte the engine holds can be attributed. Copying a Tensor shares the storage.
//
// Shape-only mode (ShapeOnlyScope): storages created on this thread get a name, a category, a size
// and an identity but no memory, and ops skip their kernels. The planner runs the model's real
// forward code this way (a "dry run") to learn what every op saves, its bytes and its FLOPs, from the
// same code that trains -- at any model size, since nothing is allocated. Under a DryRunAccount the
// shape-only storages are also counted, by an allocator of the caller's (bookkeeping only), so that a
// dry run of a whole training step measures what the real step would allocate, category by category.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"

namespace remat {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// True while a ShapeOnlyScope is active on this thread.
bool shape_only();
class ShapeOnlyScope {
 public:
  ShapeOnlyScope();
  ~ShapeOnlyScope();
  ShapeOnlyScope(const ShapeOnlyScope&) = delete;
  ShapeOnlyScope& operator=(const ShapeOnlyScope&) = delete;

 private:
  bool prev_;
};

// Shape-only storages made on this thread while it lives are counted by `a` (Allocator::account /
// unaccount, from their creation to their destruction), and accountant() is `a`.
class DryRunAccount {
 public:
  explicit DryRunAccount(Allocator& a);
  ~DryRunAccount();
  DryRunAccount(const DryRunAccount&) = delete;
  DryRunAccount& operator=(const DryRunAccount&) = delete;

 private:
  Allocator* prev_;
};
// The allocator that counts this thread's tensors: a DryRunAccount's, else Allocator::global().
Allocator& accountant();

class Storage {
 public:
  Storage(size_t numel, Category cat, std::string name, DType dtype = DType::F32);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Typed access; asking for the wrong dtype, or for an evicted storage's bytes, throws remat::Error
  // (a kernel of one precision handed a tensor of the other is a bug to name, not memory to misread).
  float* data() { check(DType::F32); return static_cast<float*>(data_); }
  const float* data() const { check(DType::F32); return static_cast<const float*>(data_); }
  bf16* data_bf16() { check(DType::BF16); return static_cast<bf16*>(data_); }
  const bf16* data_bf16() const { check(DType::BF16); return static_cast<const bf16*>(data_); }
  void* raw() { return data_; }
  const void* raw() const { return data_; }
  DType dtype() const { return dtype_; }
  size_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * dtype_size(dtype_); }
  Category category() const { return cat_; }
  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  bool shape_only() const { return shape_only_; }
  void retag(Category to);
  // Gives the bytes back to the allocator (or, in a dry run, to its count) and keeps the rest: name,
  // category, size and identity, so that every Tensor and tape binding of this storage stays valid.
  // ZeRO-3 holds a parameter's whole value only while a block runs (dist/data_parallel.h). Reading an
  // evicted storage throws. restore() takes the bytes again, uninitialised.
  void evict();
  void restore();
  bool resident() const { return !evicted_; }

 private:
  void check(DType want) const {
    if (dtype_ != want || (evicted_ && !shape_only_)) [[unlikely]] wrong_access(want);
  }
  [[noreturn]] void wrong_access(DType want) const;
  void* data_ = nullptr;
  Allocator* dry_ = nullptr;  // counts this shape-only storage (a DryRunAccount's), if any
  size_t numel_ = 0;
  Category cat_;
  std::string name_;
  uint64_t id_;
  DType dtype_ = DType::F32;
  bool shape_only_ = false;
  bool evicted_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage.
  static Tensor empty(Shape shape, Category cat, std::string name, DType dtype = DType::F32);
  static Tensor zeros(Shape shape, Category cat, std::string name, DType dtype = DType::F32);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return storage_ ? int64_t(storage_->numel()) : 0; }
  size_t bytes() const { return storage_ ? storage_->bytes() : 0; }
  float* data() { return storage_->data(); }
  const float* data() const { return storage_->data(); }
  std::span<float> span() { return {storage_->data(), storage_->numel()}; }
  std::span<const float> span() const { return {storage_->data(), storage_->numel()}; }
  std::span<const float> cspan() const { return span(); }
  DType dtype() const { return storage_ ? storage_->dtype() : DType::F32; }
  bool is_bf16() const { return dtype() == DType::BF16; }
  bf16* data_bf16() { return storage_->data_bf16(); }
  const bf16* data_bf16() const { return storage_->data_bf16(); }
  std::span<bf16> bspan() { return {storage_->data_bf16(), storage_->numel()}; }
  std::span<const bf16> bspan() const { return {storage_->data_bf16(), storage_->numel()}; }
  std::span<const bf16> cbspan() const { return bspan(); }
  const std::string& name() const { return storage_->name(); }
  Category category() const { return storage_->category(); }
  // Identity of the underlying storage: the key of gradients on the tape.
  uint64_t id() const { return storage_ ? storage_->id() : 0; }
  // Moves this tensor's bytes to another category in the accountant.
  void retag(Category to) { storage_->retag(to); }
  // Storage::evict / restore / resident: the bytes given back and taken again, the identity kept.
  void evict() { storage_->evict(); }
  void restore() { storage_->restore(); }
  bool resident() const { return storage_ && storage_->resident(); }
  // A fresh copy (new storage, same dtype) with the given category and name.
  Tensor clone(Category cat, std::string name) const;
  // Same storage, new shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
  // Every element = v (rounded to bf16 in a bf16 tensor).
  void fill(float v);
  long use_count() const { return storage_.use_count(); }
  // A shape-only tensor (made under ShapeOnlyScope): data() is null.
  bool shape_only() const { return storage_ && storage_->shape_only(); }

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
};

using Tensors = std::vector<Tensor>;

}  // namespace remat
