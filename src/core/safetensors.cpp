#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

using ojson = nlohmann::ordered_json;
constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's limit
constexpr const char* kC = "safetensors";

// One line, at most ~160 characters: nlohmann's messages can quote large parts of the input.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

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

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

void SafetensorsReader::fail(const std::string& what, const std::string& hint) const {
  throw Error(kC, "'" + path_ + "': " + what, hint);
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  file_size_ = regular_file_size(path, "safetensors file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error("io", "cannot open safetensors file '" + path + "': " + std::strerror(errno));
  try {
    const std::string not_st = "the file is incomplete (interrupted download or write?) or not a safetensors file";
    if (file_size_ < 8)
      fail("file is only " + std::to_string(file_size_) +
               " bytes; a safetensors file starts with an 8-byte header length", not_st);
    uint64_t n = 0;
    read_at(0, &n, 8);
    if (n > kMaxHeader)
      fail("header length " + std::to_string(n) + " bytes is absurd (limit 100 MB)", not_st);
    if (8 + n > file_size_)
      fail("truncated header: the header length says " + std::to_string(n) + " bytes but only " +
               std::to_string(file_size_ - 8) + " bytes follow the 8-byte length field", not_st);
    data_start_ = 8 + n;
    const uint64_t buffer = file_size_ - data_start_;
    std::string text(n, '\0');
    read_at(8, text.data(), n);
    if (n == 0 || text[0] != '{') fail("header is not a JSON object (it must start with '{')", not_st);

    ojson h;
    try {
      h = ojson::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("header is not valid JSON: " + one_line(e.what()), not_st);
    }
    if (!h.is_object()) fail("header is not a JSON object");

    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string& name = it.key();
      const ojson& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) fail("\"__metadata__\" is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string()) fail("metadata value of \"" + m.key() + "\" is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      const std::string t = "tensor '" + name + "'";
      if (!v.is_object()) fail(t + ": header entry is not an object");
      for (const char* key : {"dtype", "shape", "data_offsets"})
        if (!v.contains(key)) fail(t + ": missing \"" + key + "\" in its header entry");
      SafetensorsEntry e;
      e.name = name;
      if (!v["dtype"].is_string()) fail(t + ": \"dtype\" is not a string");
      e.dtype = v["dtype"].get<std::string>();
      const size_t esize = safetensors_dtype_size(e.dtype);
      if (esize == 0) fail(t + ": unsupported dtype '" + e.dtype + "'", "remat reads F32, F16, BF16 and F64");
      const ojson& s = v["shape"];
      if (!s.is_array()) fail(t + ": \"shape\" is not an array");
      uint64_t numel = 1;
      for (const ojson& d : s) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 48))
          fail(t + ": \"shape\" must hold non-negative integers, got " + one_line(s.dump()));
        uint64_t dim = d.get<uint64_t>();
        if (__builtin_mul_overflow(numel, dim, &numel)) fail(t + ": shape " + s.dump() + " overflows");
        e.shape.push_back(int64_t(dim));
      }
      const ojson& o = v["data_offsets"];
      if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
        fail(t + ": \"data_offsets\" must be [begin, end], got " + one_line(o.dump()));
      e.begin = o[0].get<uint64_t>();
      e.end = o[1].get<uint64_t>();
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(numel, uint64_t(esize), &bytes) || bytes > buffer)
        fail(t + ": shape " + shape_str(e.shape) + " of " + e.dtype + " needs more bytes than the data buffer (" +
                 std::to_string(buffer) + " bytes)",
             "the file is truncated");
      if (e.begin > e.end || e.end > buffer)
        fail(t + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                 "] lie outside the data buffer (" + std::to_string(buffer) + " bytes)",
             "the file is truncated or its header is corrupt");
      if (e.end - e.begin != bytes)
        fail(t + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] span " +
             std::to_string(e.end - e.begin) + " bytes but shape " + shape_str(e.shape) + " of " + e.dtype +
             " needs " + std::to_string(bytes));
      index_[name] = entries_.size();
      entries_.push_back(std::move(e));
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
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
  ojson h = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error(kC, "cannot save a tensor named '" + name + "' to '" + path + "'", "use a non-empty, non-reserved name");
    if (!seen.insert(name).second)
      throw Error(kC, "cannot save '" + path + "': tensor name '" + name + "' appears twice");
    if (!t || !t->defined()) throw Error(kC, "cannot save '" + path + "': tensor '" + name + "' is undefined");
    const uint64_t bytes = uint64_t(t->numel()) * 4;
    h[name] = ojson{{"dtype", "F32"}, {"shape", t->shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(kC, "cannot save '" + path + "': " + one_line(e.what()), "tensor names and metadata must be UTF-8");
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // 8-byte aligned data, as the reference does
  const uint64_t n = header.size();
  AtomicWriter w(path);
  w.write(&n, 8);
  w.write(header);
  for (const auto& [name, t] : tensors) w.write(t->data(), t->bytes());
  w.commit();
}

}  // namespace remat
