// Opening a safetensors file (safetensors.h): its header read and validated in one pass of
// nlohmann's SAX parser, then the tensors checked to tile the data buffer.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <tuple>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/safetensors.h"

namespace remat {

namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's limit
// printable(s) in double quotes, as a JSON key is written (quote_name, core/error.h, has the single ones).
// (Appends, not "\"" + std::string: GCC 12 warns -Wrestrict on the latter, a known false positive.)
std::string dq(const std::string& s) {
  std::string out(1, '"');
  out += printable(s);
  out += '"';
  return out;
}

// nlohmann's explanation of a parse error without its "[json.exception...]" and position prefix,
// on one line and short.
std::string json_error_detail(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("[json.exception.", 0) == 0) {
    size_t b = s.find("] ");
    if (b != std::string::npos) s = s.substr(b + 2);
  }
  if (s.rfind("parse error", 0) == 0) {
    size_t c = s.find(": ");
    if (c != std::string::npos) s = s.substr(c + 2);
  }
  return printable(s, 160, true);
}

// Builds the entries of a safetensors header from nlohmann's SAX events: one pass, no DOM, so a
// header of a million tensors costs a million small objects, not a tree of JSON values. The first
// problem found stops the parse; its message (untrusted text quoted with quote_name()) is kept in err.
class HeaderSax {
 public:
  HeaderSax(uint64_t buffer, std::vector<SafetensorsEntry>& entries, std::map<std::string, std::string>& metadata)
      : buffer_(buffer), entries_(entries), metadata_(metadata) {}

  std::string err, hint;

  // --- nlohmann SAX interface ---
  bool null() { return scalar("null"); }
  bool boolean(bool v) { return scalar(v ? "true" : "false"); }
  bool number_integer(int64_t v) { return scalar(std::to_string(v)); }
  bool number_unsigned(uint64_t v) {
    if (at_ == At::Shape && skip_ == 0) {
      if (v > (1ull << 48)) return fail(t() + ": \"shape\" entry " + std::to_string(v) + " is too large (limit 2^48)");
      cur_.shape.push_back(int64_t(v));
      return true;
    }
    if (at_ == At::Offsets && skip_ == 0) {
      if (noff_ == 2) return fail(t() + ": \"data_offsets\" must be [begin, end], got more than two numbers");
      off_[noff_++] = v;
      return true;
    }
    return scalar(std::to_string(v));
  }
  bool number_float(double, const std::string& s) { return scalar(s); }
  bool string(std::string& s) {
    if (skip_ == 0 && at_ == At::Meta) {
      metadata_.emplace(key_, s);  // key() already refused a duplicate
      return true;
    }
    if (skip_ == 0 && at_ == At::Entry && next_ == Next::Dtype) {
      cur_.dtype = s;
      return true;
    }
    return scalar("a string");
  }
  bool binary(nlohmann::json::binary_t&) { return scalar("binary data"); }
  bool start_object(size_t) { return open(true); }
  bool start_array(size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    if (skip_ > 0) return true;
    switch (at_) {
      case At::Root:
        if (k == "__metadata__") {
          if (meta_seen_) return fail("the header has two \"__metadata__\" objects", "the header is corrupt");
          meta_seen_ = true;
          is_meta_ = true;
        } else {
          if (k.empty()) return fail("a tensor has an empty name", "the header is corrupt");
          is_meta_ = false;
          cur_ = SafetensorsEntry{};
          cur_.name = k;
        }
        next_ = Next::RootValue;
        return true;
      case At::Meta:
        if (metadata_.count(k)) return fail("metadata key " + dq(k) + " appears twice", "the header is corrupt");
        key_ = k;
        return true;
      case At::Entry: {
        Next n = k == "dtype" ? Next::Dtype : k == "shape" ? Next::Shape : k == "data_offsets" ? Next::Offsets : Next::Unknown;
        if (n != Next::Unknown) {
          bool& seen = n == Next::Dtype ? has_dtype_ : n == Next::Shape ? has_shape_ : has_offsets_;
          if (seen) return fail(t() + ": \"" + k + "\" appears twice in its header entry", "the header is corrupt");
          seen = true;
        }
        next_ = n;  // unknown fields are skipped, as the reference implementation does
        return true;
      }
      default:
        return fail("internal: unexpected key");
    }
  }
  bool parse_error(size_t pos, const std::string& last, const nlohmann::json::exception& e) {
    if (err.empty())
      fail("header is not valid JSON at byte " + std::to_string(pos) + ": " + json_error_detail(e),
           "the header is corrupt, or this is not a safetensors file");
    return false;
  }

  bool done() const { return done_; }

 private:
  enum class At { Top, Root, Meta, Entry, Shape, Offsets };
  enum class Next { RootValue, Dtype, Shape, Offsets, Unknown };

  std::string t() const { return "tensor " + quote_name(cur_.name); }
  bool fail(const std::string& what, const std::string& h = "") {
    if (err.empty()) {
      err = what;
      hint = h;
    }
    return false;
  }

  // Any value that is not an object, array or a value handled above.
  bool scalar(const std::string& what) {
    if (skip_ > 0) return true;
    switch (at_) {
      case At::Top: return fail("header is not a JSON object");
      case At::Root:
        return is_meta_ ? fail("\"__metadata__\" is not an object") : fail(t() + ": header entry is not an object");
      case At::Meta: return fail("metadata value of " + dq(key_) + " is not a string (got " + printable(what, 40) + ")");
      case At::Entry:
        switch (next_) {
          case Next::Dtype: return fail(t() + ": \"dtype\" is not a string (got " + printable(what, 40) + ")");
          case Next::Shape: return fail(t() + ": \"shape\" is not an array (got " + printable(what, 40) + ")");
          case Next::Offsets: return fail(t() + ": \"data_offsets\" must be [begin, end], got " + printable(what, 40));
          default: return true;  // an unknown field's value
        }
      case At::Shape:
        return fail(t() + ": \"shape\" must hold non-negative integers, got " + printable(what, 40));
      case At::Offsets:
        return fail(t() + ": \"data_offsets\" must be [begin, end] of unsigned integers, got " + printable(what, 40));
    }
    return false;
  }

  bool open(bool object) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    switch (at_) {
      case At::Top:
        if (!object) return fail("header is not a JSON object");
        at_ = At::Root;
        return true;
      case At::Root:
        if (is_meta_) {
          if (!object) return fail("\"__metadata__\" is not an object");
          at_ = At::Meta;
        } else {
          if (!object) return fail(t() + ": header entry is not an object");
          at_ = At::Entry;
          has_dtype_ = has_shape_ = has_offsets_ = false;
        }
        return true;
      case At::Meta:
        return scalar(object ? "an object" : "an array");
      case At::Entry:
        if (next_ == Next::Unknown) {
          skip_ = 1;
          return true;
        }
        if (object || next_ == Next::Dtype) return scalar(object ? "an object" : "an array");
        at_ = next_ == Next::Shape ? At::Shape : At::Offsets;
        noff_ = 0;
        return true;
      case At::Shape:
      case At::Offsets:
        return scalar(object ? "an object" : "an array");
    }
    return false;
  }

  bool close() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    switch (at_) {
      case At::Root: at_ = At::Top; done_ = true; return true;
      case At::Meta: at_ = At::Root; return true;
      case At::Entry: at_ = At::Root; return finish_entry();
      case At::Shape: at_ = At::Entry; return true;
      case At::Offsets:
        if (noff_ != 2)
          return fail(t() + ": \"data_offsets\" must be [begin, end], got " + std::to_string(noff_) + " number(s)");
        at_ = At::Entry;
        return true;
      default: return fail("internal: unbalanced JSON");
    }
  }

  bool finish_entry() {
    SafetensorsEntry& e = cur_;
    if (!has_dtype_) return fail(t() + ": missing \"dtype\" in its header entry");
    if (!has_shape_) return fail(t() + ": missing \"shape\" in its header entry");
    if (!has_offsets_) return fail(t() + ": missing \"data_offsets\" in its header entry");
    const size_t esize = safetensors_dtype_size(e.dtype);
    if (esize == 0)
      return fail(t() + ": unsupported dtype " + quote_name(e.dtype), "remat reads F32, F16, BF16 and F64");
    uint64_t numel = 1;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel))
        return fail(t() + ": shape " + shape_str(e.shape) + " overflows (more than 2^64 elements)", "the header is corrupt");
    e.begin = off_[0];
    e.end = off_[1];
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(esize), &bytes) || bytes > buffer_)
      return fail(t() + ": shape " + shape_str(e.shape) + " of " + e.dtype + " needs more bytes than the data buffer (" +
                      std::to_string(buffer_) + " bytes)",
                  "the file is truncated");
    if (e.begin > e.end || e.end > buffer_)
      return fail(t() + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      "] lie outside the data buffer (" + std::to_string(buffer_) + " bytes)",
                  "the file is truncated or its header is corrupt");
    if (e.end - e.begin != bytes)
      return fail(t() + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] span " +
                  std::to_string(e.end - e.begin) + " bytes but shape " + shape_str(e.shape) + " of " + e.dtype +
                  " needs " + std::to_string(bytes));
    entries_.push_back(std::move(e));
    return true;
  }

  const uint64_t buffer_;
  std::vector<SafetensorsEntry>& entries_;
  std::map<std::string, std::string>& metadata_;
  At at_ = At::Top;
  Next next_ = Next::RootValue;
  int64_t skip_ = 0;  // > 0: inside the value of an unknown field, at this nesting depth
  bool done_ = false, meta_seen_ = false, is_meta_ = false;
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  std::string key_;  // the current metadata key
  SafetensorsEntry cur_;
  uint64_t off_[2] = {0, 0};
  int noff_ = 0;
};

}  // namespace

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
    std::unique_ptr<char[]> text(new char[n]);  // uninitialised: up to 100 MB, overwritten at once
    read_at(8, text.get(), n);
    if (n == 0 || text[0] != '{') fail("header is not a JSON object (it must start with '{')", not_st);

    // One pass over the header (linear in its size), building the entries as it goes.
    HeaderSax sax(buffer, entries_, metadata_);
    bool ok = false;
    try {
      ok = nlohmann::json::sax_parse(text.get(), text.get() + n, &sax);
    } catch (const nlohmann::json::exception& e) {  // not expected from a SAX parse; kept one-line
      fail("header is not valid JSON: " + json_error_detail(e), not_st);
    }
    if (!sax.err.empty()) fail(sax.err, sax.hint);
    if (!ok || !sax.done()) fail("header is not valid JSON", not_st);

    // Names are unique. index_ lists the entries by name, for find().
    {
      std::vector<std::pair<std::string_view, size_t>> by_name(entries_.size());
      for (size_t i = 0; i < by_name.size(); ++i) by_name[i] = {entries_[i].name, i};
      std::sort(by_name.begin(), by_name.end());
      index_.resize(by_name.size());
      for (size_t k = 0; k < by_name.size(); ++k) {
        if (k > 0 && by_name[k].first == by_name[k - 1].first)
          fail("tensor " + quote_name(std::string(by_name[k].first)) + " appears twice in the header",
               "the header is corrupt");
        index_[k] = by_name[k].second;
      }
    }

    // The tensors, taken by offset, must tile the data buffer exactly: no gap, no overlap (two
    // names sharing bytes would load the same weights twice), nothing after the last one.
    std::vector<std::tuple<uint64_t, uint64_t, size_t>> order(entries_.size());  // (begin, end, index)
    for (size_t i = 0; i < order.size(); ++i) order[i] = {entries_[i].begin, entries_[i].end, i};
    std::sort(order.begin(), order.end());
    const std::string corrupt = "the header is corrupt: data_offsets must cover the data buffer exactly, without gaps or overlaps";
    uint64_t pos = 0;
    const SafetensorsEntry* prev = nullptr;
    auto span = [](const SafetensorsEntry& e) {
      std::string s(1, '[');
      s += std::to_string(e.begin);
      s += ", ";
      s += std::to_string(e.end);
      s += ']';
      return s;
    };
    for (const auto& o : order) {
      const SafetensorsEntry& e = entries_[std::get<2>(o)];
      if (e.begin < pos)
        fail("tensor " + quote_name(e.name) + " at data_offsets " + span(e) + " overlaps tensor " + quote_name(prev->name) +
                 " at " + span(*prev), corrupt);
      if (e.begin > pos)
        fail(prev ? "a gap of " + std::to_string(e.begin - pos) + " bytes between tensor " + quote_name(prev->name) +
                        " at data_offsets " + span(*prev) + " and tensor " + quote_name(e.name) + " at " + span(e)
                  : "the first tensor by offset, " + quote_name(e.name) + ", starts at byte " + std::to_string(e.begin) +
                        " of the data buffer, not 0",
             corrupt);
      pos = e.end;
      prev = &e;
    }
    if (pos != buffer)
      fail("the tensors cover " + std::to_string(pos) + " bytes but the data buffer holds " + std::to_string(buffer) +
               " (" + std::to_string(buffer - pos) + " bytes after the last tensor)",
           "the file has trailing bytes or its header is corrupt");
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}


}  // namespace remat
