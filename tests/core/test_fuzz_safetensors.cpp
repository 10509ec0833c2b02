// A seeded, bounded fuzz test of SafetensorsReader: valid files (several tensors of F32, BF16, F16
// and F64, with metadata) are mutated thousands of times, byte-wise and structurally, and every
// result must be either refused with a one-line remat::Error or accepted and consistent: the header
// is valid JSON without duplicate keys, the reader's entries are exactly its tensors, the tensors
// tile the data buffer and every one reads back the bytes the file holds at its offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "test_util.h"

using remat::SafetensorsReader;

namespace {

struct Spec {
  std::string name, dtype;
  remat::Shape shape;
};

struct Seed {
  std::string bytes;
  std::vector<Spec> tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

std::string u64le(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
uint64_t read_u64(const std::string& b) {
  uint64_t v = 0;
  std::memcpy(&v, b.data(), 8);
  return v;
}

// A valid file: data in `tensors` order, header entries in `header_order`, random data bytes.
Seed make_seed(std::vector<Spec> tensors, const std::vector<size_t>& header_order,
               std::map<std::string, std::string> metadata, bool metadata_first, size_t pad, std::mt19937_64& rng) {
  std::vector<std::pair<uint64_t, uint64_t>> offs;
  std::string data;
  for (const Spec& t : tensors) {
    const uint64_t bytes = uint64_t(remat::shape_numel(t.shape)) * remat::safetensors_dtype_size(t.dtype);
    offs.emplace_back(data.size(), data.size() + bytes);
    for (uint64_t i = 0; i < bytes; ++i) data += char(rng() & 0xff);
  }
  auto meta_json = [&] {
    std::string m = "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      m += (first ? "" : ",");
      m += nlohmann::json(k).dump() + ":" + nlohmann::json(v).dump();
      first = false;
    }
    return m + "}";
  };
  std::string h = "{";
  bool first = true;
  if (!metadata.empty() && metadata_first) {
    h += meta_json();
    first = false;
  }
  Seed s;
  for (size_t i : header_order) {
    const Spec& t = tensors[i];
    h += first ? "" : ", ";
    first = false;
    h += nlohmann::json(t.name).dump() + ": {\"dtype\": \"" + t.dtype + "\", \"shape\": " + nlohmann::json(t.shape).dump() +
         ", \"data_offsets\": [" + std::to_string(offs[i].first) + ", " + std::to_string(offs[i].second) + "]}";
    s.tensors.push_back(t);
  }
  if (!metadata.empty() && !metadata_first) h += (first ? "" : ",") + meta_json();
  h += "}";
  h.append(pad, ' ');
  s.bytes = u64le(h.size()) + h + data;
  s.metadata = std::move(metadata);
  return s;
}

// Decodes n elements of `dtype` at p exactly as the format defines them.
std::vector<float> decode(const std::string& dtype, const char* p, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == "F32") {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else if (dtype == "F64") {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = float(d);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = dtype == "F16" ? remat::f16_to_f32(h) : remat::bf16_to_f32(h);
    }
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// Parses a header with nlohmann's DOM parser, recording whether any object repeats a key.
nlohmann::json parse_reference(const std::string& text, bool& duplicate) {
  std::vector<std::set<std::string>> keys;
  duplicate = false;
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) keys.emplace_back();
    if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) duplicate = true;
    if (ev == E::object_end && !keys.empty()) keys.pop_back();
    return true;
  };
  return nlohmann::json::parse(text, cb);
}

// An accepted file must be consistent with its bytes. Returns "" or what is wrong.
std::string check_accepted(const SafetensorsReader& r, const std::string& bytes) {
  if (bytes.size() < 8) return "accepted a file shorter than 8 bytes";
  const uint64_t n = read_u64(bytes);
  if (n > bytes.size() - 8) return "accepted a header longer than the file";
  const uint64_t buffer = bytes.size() - 8 - n;
  bool dup = false;
  nlohmann::json h;
  try {
    h = parse_reference(bytes.substr(8, n), dup);
  } catch (const std::exception& e) {
    return std::string("accepted a header that nlohmann refuses: ") + e.what();
  }
  if (dup) return "accepted a header with a duplicate key";
  if (!h.is_object()) return "accepted a header that is not an object";
  size_t tensors = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return "accepted a non-object __metadata__";
      if (it->size() != r.metadata().size()) return "metadata size differs";
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return "accepted a non-string metadata value";
        auto f = r.metadata().find(m.key());
        if (f == r.metadata().end() || f->second != m->get<std::string>()) return "metadata differs at " + m.key();
      }
      continue;
    }
    ++tensors;
    const remat::SafetensorsEntry* e = r.find(it.key());
    if (!e) return "tensor '" + it.key() + "' of the header is missing from the reader";
    const nlohmann::json& v = *it;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      return "accepted an incomplete entry";
    if (v["dtype"] != e->dtype) return "dtype differs for " + e->name;
    const nlohmann::json& o = v["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned() ||
        o[0].get<uint64_t>() != e->begin || o[1].get<uint64_t>() != e->end)
      return "data_offsets differ for " + e->name;
    const nlohmann::json& s = v["shape"];
    if (!s.is_array() || s.size() != e->shape.size()) return "shape differs for " + e->name;
    for (size_t d = 0; d < s.size(); ++d)
      if (!s[d].is_number_unsigned() || s[d].get<uint64_t>() != uint64_t(e->shape[d])) return "shape differs for " + e->name;
  }
  if (tensors != r.entries().size()) return "the reader has more entries than the header";

  // The tensors, by offset, tile [0, buffer) exactly and their sizes match their shapes.
  std::vector<const remat::SafetensorsEntry*> by_off;
  for (const auto& e : r.entries()) by_off.push_back(&e);
  std::sort(by_off.begin(), by_off.end(), [](auto a, auto b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  uint64_t pos = 0;
  for (const auto* e : by_off) {
    if (e->begin != pos) return "offsets are not contiguous at " + e->name;
    if (e->end < e->begin || e->end > buffer) return "offsets out of bounds at " + e->name;
    const size_t es = remat::safetensors_dtype_size(e->dtype);
    if (es == 0 || uint64_t(e->numel()) * es != e->end - e->begin) return "size mismatch at " + e->name;
    pos = e->end;
  }
  if (pos != buffer) return "the tensors do not end at the end of the file";

  // Every float tensor reads back the bytes at its offsets.
  for (const auto& e : r.entries()) {
    if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16" && e.dtype != "F64") continue;
    std::vector<float> got(size_t(e.numel()), -1.0f);
    try {
      r.read_f32(e, got);
    } catch (const std::exception& ex) {
      return "read_f32 of accepted tensor " + e.name + " threw: " + ex.what();
    }
    if (!same_bits(got, decode(e.dtype, bytes.data() + 8 + n + e.begin, got.size()))) return "data differs at " + e.name;
  }
  return "";
}

// No fsync, and a fresh file each time: truncating a file in place makes ext4 flush it on close
// (auto_da_alloc), which costs milliseconds per file.
void write_raw(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

class FuzzSafetensors : public remat::testing_util::TempDirTest {};

}  // namespace

TEST_F(FuzzSafetensors, MutatedFilesAreRefusedOrConsistent) {
  std::mt19937_64 rng(0x5afe7e45u);
  auto uni = [&](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };  // [lo, hi]

  // --- Seeds ---
  std::vector<Seed> seeds;
  seeds.push_back(make_seed({{"wte.weight", "F32", {5, 4}},
                             {"h.0.attn.c_attn.weight", "BF16", {4, 12}},
                             {"h.0.ln_1.bias", "F16", {4}},
                             {"scalar", "F32", {}},
                             {"h.0.mlp.c_proj.weight", "F16", {3, 2, 2}}},
                            {0, 1, 2, 3, 4}, {{"format", "pt"}, {"step", "12"}}, true, 3, rng));
  seeds.push_back(make_seed({{"a", "BF16", {7}}, {"b", "F32", {2, 3}}, {"empty", "F16", {0, 5}}, {"c", "F64", {2}}},
                            {2, 0, 3, 1}, {{"k", "v"}}, false, 0, rng));
  seeds.push_back(make_seed({{"model.embed_tokens.weight", "F16", {6, 2}},
                             {"model.layers.0.self_attn.q_proj.weight", "F32", {2, 2}},
                             {"model.norm.weight", "BF16", {2}},
                             {"lm_head.weight", "F32", {6, 2}}},
                            {3, 1, 0, 2}, {}, true, 5, rng));
  seeds.push_back(make_seed({{"x", "F32", {1}}}, {0}, {{"format", "pt"}, {"note", "caf\xc3\xa9"}}, true, 0, rng));

  const std::string path = p("f.safetensors");
  // Unmutated seeds round-trip exactly.
  for (size_t si = 0; si < seeds.size(); ++si) {
    const Seed& s = seeds[si];
    write_raw(path, s.bytes);
    SafetensorsReader r(path);
    ASSERT_EQ(r.entries().size(), s.tensors.size()) << "seed " << si;
    EXPECT_EQ(r.metadata(), s.metadata) << "seed " << si;
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      EXPECT_EQ(r.entries()[i].name, s.tensors[i].name) << "seed " << si;
      EXPECT_EQ(r.entries()[i].dtype, s.tensors[i].dtype) << "seed " << si;
      EXPECT_EQ(r.entries()[i].shape, s.tensors[i].shape) << "seed " << si;
    }
    EXPECT_EQ(check_accepted(r, s.bytes), "") << "seed " << si;
  }

  // --- Mutations ---
  auto header_of = [](const std::string& b, std::string& h, std::string& data) {
    if (b.size() < 8) return false;
    const uint64_t n = read_u64(b);
    if (n > b.size() - 8) return false;
    h = b.substr(8, n);
    data = b.substr(8 + n);
    return true;
  };
  const std::vector<std::string> numbers = {"0", "1", "2", "3", "4", "7", "8", "12", "16", "-1", "-0", "1.5", "8.0",
                                            "1e3", "4294967296", "281474976710657", "18446744073709551615",
                                            "18446744073709551616", "99999999999999999999999", "1e999", "[]", "\"8\"", "null"};
  const std::vector<std::string> junk = {"{", "}", "[", "]", ",", ":", "\"", "\\", " ", "0", "-", "e", "\xff", "\xc3",
                                         std::string(1, '\0'), "\"__metadata__\":{}", "\"x\":1", "\n", "\\u0000"};
  const std::vector<std::string> dtypes = {"F32", "F16", "BF16", "F64", "I64", "U8", "BOOL", "Q4", ""};

  const int iters = [] {
    const char* e = std::getenv("REMAT_FUZZ_ITERS");
    return e ? std::atoi(e) : 12000;
  }();
  int tried = 0, refused = 0, accepted = 0, data_only = 0;
  for (int it = 0; it < iters; ++it) {
    const Seed& seed = seeds[rng() % seeds.size()];
    std::string b = seed.bytes;
    bool header_touched = false;
    const int rounds = int(uni(1, 3));
    for (int m = 0; m < rounds; ++m) {
      std::string h, data;
      const bool have = header_of(b, h, data);
      const int kind = int(rng() % 14);
      const uint64_t data_start = have ? 8 + h.size() : b.size();
      if (kind == 0 || kind == 1 || !have) {  // flip a byte or a bit, anywhere (mostly in the data)
        if (b.empty()) continue;
        const size_t at = (rng() % 2 && data_start < b.size()) ? size_t(uni(data_start, b.size() - 1)) : size_t(rng() % b.size());
        if (at < data_start) header_touched = true;
        b[at] = kind == 0 ? char(rng() & 0xff) : char(b[at] ^ (1 << (rng() % 8)));
        continue;
      }
      header_touched = true;
      if (kind == 2) {  // truncate or extend the file
        if (rng() % 2) b.resize(size_t(rng() % (b.size() + 1)));
        else b.append(size_t(uni(1, 9)), char(rng() & 0xff));
        continue;
      }
      if (kind == 3) {  // edit the header length
        const uint64_t n = h.size();
        const uint64_t choices[] = {n + uni(1, 8), n - std::min<uint64_t>(n, uni(1, 8)), 0, rng(), b.size(),
                                    uint64_t(100) << 20, (uint64_t(100) << 20) + 1};
        const uint64_t v = choices[rng() % 7];
        std::memcpy(b.data(), &v, 8);
        continue;
      }
      // Structural edits of the JSON text; the length is fixed up unless told otherwise.
      if (kind == 4) {  // replace a number (a shape entry or an offset) with another token
        std::vector<size_t> starts;
        for (size_t i = 0; i < h.size(); ++i)
          if (std::isdigit(static_cast<unsigned char>(h[i])) && (i == 0 || !std::isdigit(static_cast<unsigned char>(h[i - 1]))))
            starts.push_back(i);
        if (starts.empty()) continue;
        const size_t s0 = starts[rng() % starts.size()];
        size_t e0 = s0;
        while (e0 < h.size() && std::isdigit(static_cast<unsigned char>(h[e0]))) ++e0;
        std::string repl = numbers[rng() % numbers.size()];
        if (rng() % 3 == 0) repl = std::to_string(std::strtoull(h.substr(s0, e0 - s0).c_str(), nullptr, 10) + uni(1, 8));
        h.replace(s0, e0 - s0, repl);
      } else if (kind == 5 || kind == 6) {  // duplicate a tensor entry (or __metadata__), maybe with new offsets
        const size_t close = h.rfind('}');
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(h);
        } catch (...) {
          continue;
        }
        if (!j.is_object() || j.empty() || close == std::string::npos) continue;
        auto e = std::next(j.begin(), long(rng() % j.size()));
        nlohmann::json v = *e;
        if (kind == 6 && v.is_object() && v.contains("data_offsets")) {
          const uint64_t end = data.size();
          v["data_offsets"] = {end, end};  // a zero-byte alias at the end, or a clash
          if (v.contains("shape")) v["shape"] = {0};
        }
        h.insert(close, "," + nlohmann::json(e.key()).dump() + ":" + v.dump());
      } else if (kind == 7) {  // alias or swap two tensors' data_offsets
        std::vector<size_t> at;
        for (size_t pos = h.find("\"data_offsets\""); pos != std::string::npos; pos = h.find("\"data_offsets\"", pos + 1))
          at.push_back(pos);
        if (at.size() < 2) continue;
        const size_t i = rng() % at.size(), k = rng() % at.size();
        auto arr = [&](size_t pos) {
          const size_t a = h.find('[', pos), z = h.find(']', pos);
          return std::make_pair(a, z);
        };
        auto [ai, zi] = arr(at[i]);
        auto [ak, zk] = arr(at[k]);
        if (ai == std::string::npos || zi == std::string::npos || ak == std::string::npos || zk == std::string::npos) continue;
        const std::string src = h.substr(ak, zk - ak + 1);
        if (rng() % 2 == 0 && i != k) {  // swap: rewrite the later one first so positions stay valid
          const std::string dst = h.substr(ai, zi - ai + 1);
          if (ai > ak) {
            h.replace(ai, zi - ai + 1, src);
            h.replace(ak, zk - ak + 1, dst);
          } else {
            h.replace(ak, zk - ak + 1, dst);
            h.replace(ai, zi - ai + 1, src);
          }
        } else {
          h.replace(ai, zi - ai + 1, src);
        }
      } else if (kind == 8) {  // insert junk
        const size_t at = size_t(rng() % (h.size() + 1));
        h.insert(at, junk[rng() % junk.size()]);
      } else if (kind == 9) {  // delete a range
        if (h.empty()) continue;
        const size_t at = size_t(rng() % h.size());
        h.erase(at, size_t(uni(1, 6)));
      } else if (kind == 10) {  // change a dtype
        const size_t pos = h.find("\"dtype\": \"", size_t(rng() % (h.size() + 1)));
        if (pos == std::string::npos) continue;
        const size_t a = pos + 10, z = h.find('"', a);
        if (z == std::string::npos) continue;
        h.replace(a, z - a, dtypes[rng() % dtypes.size()]);
      } else if (kind == 11) {  // grow or shrink the data buffer
        if (rng() % 2) data.append(size_t(uni(1, 8)), '\0');
        else data.resize(data.size() - std::min<size_t>(data.size(), size_t(uni(1, 8))));
      } else {  // 12: tensor i becomes a perfect alias of tensor k; 13: tensor i moves to the end
        nlohmann::ordered_json j;
        try {
          j = nlohmann::ordered_json::parse(h);
        } catch (...) {
          continue;
        }
        std::vector<std::string> names;
        if (j.is_object())
          for (auto e = j.begin(); e != j.end(); ++e)
            if (e.key() != "__metadata__" && e->is_object() && e->contains("data_offsets")) names.push_back(e.key());
        if (names.empty()) continue;
        const std::string& a = names[rng() % names.size()];
        if (kind == 12) {
          j[a] = j[names[rng() % names.size()]];
        } else {
          nlohmann::ordered_json& o = j[a]["data_offsets"];
          if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned()) continue;
          const uint64_t size = o[1].get<uint64_t>() - std::min(o[0].get<uint64_t>(), o[1].get<uint64_t>());
          if (size > 4096) continue;
          o = {uint64_t(data.size()), uint64_t(data.size()) + size};
          data.append(size_t(size), char(rng() & 0xff));
        }
        h = j.dump();
      }
      const uint64_t len = rng() % 8 == 0 ? read_u64(b) : h.size();
      b = u64le(len) + h + data;
    }

    write_raw(path, b);
    ++tried;
    try {
      SafetensorsReader r(path);
      const std::string why = check_accepted(r, b);
      if (!why.empty()) {
        ADD_FAILURE() << "iteration " << it << ": " << why;
        continue;
      }
      ++accepted;
      if (!header_touched) ++data_only;
    } catch (const remat::Error& e) {
      ++refused;
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "iteration " << it << ": " << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << "iteration " << it << ": " << msg;
      EXPECT_EQ(msg.find("json.exception"), std::string::npos) << "iteration " << it << ": " << msg;
      // A file whose header was left alone (only data bytes changed) is always accepted.
      EXPECT_TRUE(header_touched) << "iteration " << it << ": refused a file with an intact header: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << it << ": non-remat exception: " << e.what();
    }
  }
  std::printf("safetensors fuzz: %d tried, %d refused, %d accepted and round-tripped (%d with only data bytes changed)\n",
              tried, refused, accepted, data_only);
  EXPECT_EQ(tried, refused + accepted);
  EXPECT_GT(refused, tried / 4);       // the mutations mostly break the header
  EXPECT_GT(accepted - data_only, 10);  // and some structural edits stay valid
}
