// fp32 Tensor: a shape and refcounted storage from the accounting allocator. No views, no strides:
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
  Storage(size_t numel, Category cat, std::string name);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * sizeof(float); }
  Category category() const { return cat_; }
  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  bool shape_only() const { return shape_only_; }
  void retag(Category to);

 private:
  float* data_ = nullptr;
  Allocator* dry_ = nullptr;  // counts this shape-only storage (a DryRunAccount's), if any
  size_t numel_ = 0;
  Category cat_;
  std::string name_;
  uint64_t id_;
  bool shape_only_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage.
  static Tensor empty(Shape shape, Category cat, std::string name);
  static Tensor zeros(Shape shape, Category cat, std::string name);

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
  const std::string& name() const { return storage_->name(); }
  Category category() const { return storage_->category(); }
  // Identity of the underlying storage: the key of gradients on the tape.
  uint64_t id() const { return storage_ ? storage_->id() : 0; }
  // Moves this tensor's bytes to another category in the accountant.
  void retag(Category to) { storage_->retag(to); }
  // A fresh copy (new storage) with the given category and name.
  Tensor clone(Category cat, std::string name) const;
  // Same storage, new shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
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
