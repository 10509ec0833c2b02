#include "core/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"

namespace remat {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr const char* kC = "safetensors";

}  // namespace

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13))  // inf / nan (payload kept)
                            : (sign | ((exp + 112) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(uint16_t b) { return bf16_to_float(bf16{b}); }

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::kCount: break;
  }
  REMAT_ASSERT(false, "unknown dtype");
  return "";
}

void SafetensorsReader::fail(const std::string& what, const std::string& hint) const {
  throw Error(kC, "'" + path_ + "': " + what, hint);
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  auto it = std::lower_bound(index_.begin(), index_.end(), name,
                             [&](size_t i, const std::string& n) { return entries_[i].name < n; });
  return it == index_.end() || entries_[*it].name != name ? nullptr : &entries_[*it];
}

const SafetensorsEntry& SafetensorsReader::at(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) fail("no tensor named '" + name + "' (the file has " + std::to_string(entries_.size()) + " tensors)");
  return *e;
}

void SafetensorsReader::read_at(uint64_t offset, void* dst, size_t bytes) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t r = ::pread(fd_, p, bytes, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(std::string("read failed: ") + std::strerror(errno));
    if (r == 0) fail("unexpected end of file at byte " + std::to_string(offset), "was the file truncated while open?");
    p += r;
    offset += uint64_t(r);
    bytes -= size_t(r);
  }
}

void SafetensorsReader::read_f32(const SafetensorsEntry& e, std::span<float> out) const {
  const uint64_t n = uint64_t(e.numel());
  if (out.size() != n)
    fail("tensor '" + e.name + "' has shape " + shape_str(e.shape) + " (" + std::to_string(n) +
             " elements) but the destination holds " + std::to_string(out.size()) + " elements",
         "does the model config match the file?");
  const uint64_t off = data_start_ + e.begin;
  if (e.dtype == "F32") {
    read_at(off, out.data(), n * 4);
    return;
  }
  const bool f16 = e.dtype == "F16", bf16 = e.dtype == "BF16", f64 = e.dtype == "F64";
  if (!f16 && !bf16 && !f64)
    fail("tensor '" + e.name + "' has dtype " + e.dtype + ", which cannot be read as float",
         "remat reads F32, F16, BF16 and F64 tensors");
  const size_t esize = f64 ? 8 : 2;
  constexpr size_t kChunk = 1 << 16;  // elements per read
  std::vector<unsigned char> buf(kChunk * esize);
  for (uint64_t i = 0; i < n; i += kChunk) {
    const size_t m = size_t(std::min<uint64_t>(kChunk, n - i));
    read_at(off + i * esize, buf.data(), m * esize);
    for (size_t j = 0; j < m; ++j) {
      if (f64) {
        double d;
        std::memcpy(&d, &buf[j * 8], 8);
        out[i + j] = float(d);
      } else {
        uint16_t h;
        std::memcpy(&h, &buf[j * 2], 2);
        out[i + j] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
  }
}

Tensor SafetensorsReader::read_tensor(const SafetensorsEntry& e, Category cat, const std::string& name) const {
  Tensor t = Tensor::empty(e.shape, cat, name);
  read_f32(e, t.span());
  return t;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // The header is assembled as text, in the given order, in linear time (an ordered_json object
  // would search its keys on every insertion).
  auto json_str = [&](const std::string& s) {
    try {
      return nlohmann::json(s).dump();
    } catch (const nlohmann::json::exception& e) {
      throw Error(kC, "cannot save '" + path + "': " + quote_name(s) + " is not valid UTF-8",
                  "tensor names and metadata must be UTF-8");
    }
  };
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      header += json_str(k) + ':' + json_str(v);
    }
    header += '}';
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error(kC, "cannot save a tensor named '" + name + "' to '" + path + "'", "use a non-empty, non-reserved name");
    if (!seen.insert(name).second)
      throw Error(kC, "cannot save '" + path + "': tensor name '" + name + "' appears twice");
    if (!t || !t->defined()) throw Error(kC, "cannot save '" + path + "': tensor '" + name + "' is undefined");
    if (t->shape_only())
      throw Error(kC, "cannot save '" + path + "': tensor '" + name + "' is shape-only (it holds no data)",
                  "this is a bug in remat: please report it with the command that ran");
    const uint64_t bytes = t->bytes();
    if (header.size() > 1) header += ',';
    header += json_str(name) + ":{\"dtype\":\"" + safetensors_dtype(t->dtype()) + "\",\"shape\":[";
    for (size_t i = 0; i < t->shape().size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t->shape()[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + ',' + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // 8-byte aligned data, as the reference does
  const uint64_t n = header.size();
  AtomicWriter w(path);
  w.write(&n, 8);
  w.write(header);
  for (const auto& [name, t] : tensors) {
    if (t->is_bf16()) w.write(t->data_bf16(), t->bytes());
    else w.write(t->data(), t->bytes());
  }
  w.commit();
}

}  // namespace remat
