// The Hugging Face safetensors format: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data buffer (offsets are relative to its start). The reader validates the whole header
// up front, in one linear pass, and reads tensor data on demand with pread, so opening a multi-GB
// file costs only its header. Errors are remat::Error with the "safetensors" prefix and the file
// name, naming the offending tensor or key.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace remat {

struct SafetensorsEntry {
  std::string name, dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
  int64_t numel() const { return shape_numel(shape); }
};

// Bytes per element of a safetensors dtype ("F32" -> 4), or 0 if the dtype is unknown.
size_t safetensors_dtype_size(const std::string& dtype);
// The safetensors name of a Tensor dtype: "F32", "BF16" (what save_safetensors writes for it).
const char* safetensors_dtype(DType d);

// IEEE half / bfloat16 bit patterns to float (exact).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);

class SafetensorsReader {
 public:
  // Opens and validates the file: header size, JSON, every entry's dtype, shape and data_offsets;
  // no duplicate tensor names, at most one "__metadata__" with string values, and the tensors
  // taken by offset tile the data buffer exactly (from 0 to the end of the file, no gap, no
  // overlap).
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // Entries in header order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // nullptr if there is no tensor of that name.
  const SafetensorsEntry* find(const std::string& name) const;
  // Like find() but throws a remat::Error naming the file and the missing tensor.
  const SafetensorsEntry& at(const std::string& name) const;
  // The "__metadata__" object (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

  // Reads one tensor as float, converting from F32, F16, BF16 or F64. `out` must hold exactly
  // numel elements. Thread-safe (pread).
  void read_f32(const SafetensorsEntry& e, std::span<float> out) const;
  // Reads a tensor into a new Tensor of the entry's shape.
  Tensor read_tensor(const SafetensorsEntry& e, Category cat, const std::string& name) const;

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& hint = "") const;
  void read_at(uint64_t offset, void* dst, size_t bytes) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0, data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::vector<size_t> index_;  // entries_ sorted by name
  std::map<std::string, std::string> metadata_;
};

// Writes tensors in the given order, each in its own dtype (an F32 tensor as "F32", a BF16 tensor as
// "BF16", its bits as they are), with 8-byte aligned data (the header is padded with spaces), through
// AtomicWriter. Names must be unique, non-empty and not "__metadata__"; tensors must hold memory
// (not shape-only).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace remat
