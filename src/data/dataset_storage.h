// What dataset.cpp and dataset_file.cpp share: the storage a dataset and its split views hold (a
// file mapping or an accounted buffer), the count of mapped bytes it keeps, and the component name
// of their messages. Internal to those files.
#pragma once
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "core/allocator.h"
#include "data/dataset.h"

namespace remat::data {

namespace dataset_detail {

inline constexpr const char* kC = "data";

// Bytes of all live token-file mappings (TokenDataset::live_mapped_bytes); defined in dataset.cpp.
extern std::atomic<size_t> g_mapped_bytes;

}  // namespace dataset_detail

// The bytes a dataset and its split views share: a read-only file mapping (not allocator-
// accounted) or a buffer from the accounting allocator (Category::Data).
struct TokenDataset::Storage {
  void* base = nullptr;
  size_t bytes = 0;
  bool mapped = false;
  std::string name;  // allocation name of a buffer

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (!base) return;
    if (mapped) {
      ::munmap(base, bytes);
      dataset_detail::g_mapped_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    } else {
      Allocator::global().release(base, bytes, Category::Data, name);
    }
  }
};

}  // namespace remat::data
