#include "core/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include "core/atomic_file.h"
#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using remat::Category;
using remat::SafetensorsReader;
using remat::Tensor;

namespace {

using remat::testing_util::bytes_of;
using remat::testing_util::error_of;

class SafetensorsTest : public remat::testing_util::TempDirTest {
 protected:
  // A hand-rolled safetensors file: u64 header length, the header exactly as given, then data.
  std::string raw(const std::string& name, const std::string& header, const std::string& data) const {
    std::string bytes(8, '\0');
    uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    remat::write_file_atomic(p(name), bytes + header + data);
    return p(name);
  }
};


Tensor make(remat::Shape shape, const std::string& name, float base) {
  Tensor t = Tensor::empty(std::move(shape), Category::Parameter, name);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = base + 0.25f * float(i) - 1e-3f * float(i * i);
  return t;
}

}  // namespace

TEST(SafetensorsConvert, F16KnownBitPatterns) {
  using remat::f16_to_f32;
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3800), 0.5f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);                  // largest finite
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

TEST(SafetensorsConvert, BF16KnownBitPatterns) {
  using remat::bf16_to_f32;
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16_to_f32(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_to_f32(0xFF80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC0)));
}

TEST_F(SafetensorsTest, RoundtripSeveralTensors) {
  Tensor a = make({2, 3}, "a", 1.0f), s = make({}, "scalar", -7.5f), o = make({7}, "odd", 3.0f),
         c = make({3, 5, 1}, "cube", -2.0f), z = make({0, 4}, "zero", 0.0f), big = make({1000, 33}, "big", 0.1f);
  std::vector<std::pair<std::string, const Tensor*>> list = {
      {"h.0.attn.c_attn.weight", &a}, {"scalar", &s}, {"odd", &o}, {"cube", &c}, {"empty", &z}, {"big", &big}};
  remat::save_safetensors(p("m.safetensors"), list, {{"format", "pt"}, {"step", "42"}});
  EXPECT_EQ(fs::directory_iterator(dir_)->path().filename(), "m.safetensors");  // no temp left

  // Raw layout: header padded with spaces to a multiple of 8, starting with '{'.
  std::string file = remat::read_file(p("m.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(file[8], '{');
  EXPECT_EQ(file.size(), 8 + n + 4 * (6 + 1 + 7 + 15 + 0 + 33000));

  SafetensorsReader r(p("m.safetensors"));
  ASSERT_EQ(r.entries().size(), 6u);
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "42"}}));
  uint64_t expect_begin = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& e = r.entries()[i];
    EXPECT_EQ(e.name, list[i].first);  // header order = given order
    EXPECT_EQ(e.dtype, "F32");
    EXPECT_EQ(e.shape, list[i].second->shape());
    EXPECT_EQ(e.begin, expect_begin);
    EXPECT_EQ(e.end - e.begin, list[i].second->bytes());
    expect_begin = e.end;
    std::vector<float> out(size_t(e.numel()), -99.0f);
    r.read_f32(e, out);
    EXPECT_EQ(0, std::memcmp(out.data(), list[i].second->data(), out.size() * 4)) << e.name;
  }
  EXPECT_EQ(r.find("scalar")->shape, remat::Shape{});
  EXPECT_EQ(r.find("scalar")->numel(), 1);
  EXPECT_EQ(r.find("nope"), nullptr);
  Tensor back = r.read_tensor(r.at("cube"), Category::Parameter, "cube2");
  EXPECT_EQ(back.shape(), (remat::Shape{3, 5, 1}));
  EXPECT_EQ(back.data()[14], c.data()[14]);
  std::string msg = error_of([&] { r.at("wte.weight"); });
  EXPECT_NE(msg.find("no tensor named 'wte.weight'"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, OverwriteAndNoMetadata) {
  Tensor a = make({4}, "a", 1.0f);
  remat::save_safetensors(p("x.st"), {{"a", &a}}, {{"k", "v"}});
  a.data()[0] = 123.0f;
  remat::save_safetensors(p("x.st"), {{"a", &a}});
  SafetensorsReader r(p("x.st"));
  EXPECT_TRUE(r.metadata().empty());
  std::vector<float> out(4);
  r.read_f32(r.at("a"), out);
  EXPECT_EQ(out[0], 123.0f);
}

TEST_F(SafetensorsTest, HuggingFaceGpt2Layout) {
  // The layout of HF's gpt2 model.safetensors: metadata first, unpadded header, data stored in an
  // order different from the header order, a (1, 1, T, T) causal-mask buffer.
  const int V = 11, C = 4, T = 6;
  std::vector<float> wte(V * C), wpe(T * C), ln(C), attn(C * 3 * C), bias(T * T);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = 0.01f * float(i) - 0.2f;
  for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = -0.5f + 0.03f * float(i);
  for (size_t i = 0; i < ln.size(); ++i) ln[i] = 1.0f + float(i);
  for (size_t i = 0; i < attn.size(); ++i) attn[i] = float(i % 7) - 3.0f;
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) bias[i * T + j] = j <= i ? 1.0f : 0.0f;
  // Data order: h.0.attn.bias, h.0.attn.c_attn.weight, h.0.ln_1.weight, wpe.weight, wte.weight.
  std::string data = bytes_of(bias) + bytes_of(attn) + bytes_of(ln) + bytes_of(wpe) + bytes_of(wte);
  auto off = [](size_t b, size_t e) {
    std::string s = "[";
    return s + std::to_string(b) + ", " + std::to_string(e) + "]";
  };
  size_t o_bias = 0, o_attn = o_bias + bias.size() * 4, o_ln = o_attn + attn.size() * 4, o_wpe = o_ln + ln.size() * 4,
         o_wte = o_wpe + wpe.size() * 4, o_end = o_wte + wte.size() * 4;
  std::string header =
      "{\"__metadata__\": {\"format\": \"pt\"}, "
      "\"wte.weight\": {\"dtype\": \"F32\", \"shape\": [11, 4], \"data_offsets\": " + off(o_wte, o_end) + "}, "
      "\"wpe.weight\": {\"dtype\": \"F32\", \"shape\": [6, 4], \"data_offsets\": " + off(o_wpe, o_wte) + "}, "
      "\"h.0.ln_1.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": " + off(o_ln, o_wpe) + "}, "
      "\"h.0.attn.c_attn.weight\": {\"dtype\": \"F32\", \"shape\": [4, 12], \"data_offsets\": " + off(o_attn, o_ln) +
      "}, \"h.0.attn.bias\": {\"dtype\": \"F32\", \"shape\": [1, 1, 6, 6], \"data_offsets\": " + off(o_bias, o_attn) +
      "}}";
  ASSERT_NE(header.size() % 8, 0u) << "the test wants an unpadded header";
  SafetensorsReader r(raw("gpt2.safetensors", header, data));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  ASSERT_EQ(r.entries().size(), 5u);
  EXPECT_EQ(r.entries()[0].name, "wte.weight");
  EXPECT_EQ(r.entries()[4].name, "h.0.attn.bias");
  EXPECT_EQ(r.at("wte.weight").shape, (remat::Shape{V, C}));
  EXPECT_EQ(r.at("h.0.attn.c_attn.weight").shape, (remat::Shape{C, 3 * C}));
  EXPECT_EQ(r.at("h.0.attn.bias").shape, (remat::Shape{1, 1, T, T}));
  auto check = [&](const std::string& name, const std::vector<float>& want) {
    std::vector<float> got(want.size());
    r.read_f32(r.at(name), got);
    EXPECT_EQ(got, want) << name;
  };
  check("wte.weight", wte);
  check("wpe.weight", wpe);
  check("h.0.ln_1.weight", ln);
  check("h.0.attn.c_attn.weight", attn);
  check("h.0.attn.bias", bias);
}

TEST_F(SafetensorsTest, ReadsF16BF16F64) {
  std::vector<uint16_t> h = {0x3C00, 0xC000, 0x0001, 0x7BFF}, b = {0x3F80, 0x4049, 0xC000};
  std::vector<double> d = {0.1, -1e10};
  std::string header =
      "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]},"
      "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[14,30]},"
      "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[30,38]}}";
  SafetensorsReader r(raw("mixed.st", header, bytes_of(h) + bytes_of(b) + bytes_of(d) + std::string(8, '\0')));
  std::vector<float> out(4);
  r.read_f32(r.at("h"), out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f}));
  out.resize(3);
  r.read_f32(r.at("b"), out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 3.140625f, -2.0f}));
  out.resize(2);
  r.read_f32(r.at("d"), out);
  EXPECT_EQ(out, (std::vector<float>{0.1f, -1e10f}));
  out.resize(1);
  std::string msg = error_of([&] { r.read_f32(r.at("i"), out); });
  EXPECT_NE(msg.find("tensor 'i' has dtype I64"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, LargeF16TensorCrossesChunks) {
  const size_t n = (1 << 16) * 2 + 17;
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = uint16_t(0x3C00 + (i % 1024));  // 1 + k/1024
  std::string header = "{\"x\":{\"dtype\":\"F16\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[0," +
                       std::to_string(2 * n) + "]}}";
  SafetensorsReader r(raw("big.st", header, bytes_of(h)));
  std::vector<float> out(n);
  r.read_f32(r.at("x"), out);
  for (size_t i : {size_t(0), size_t(1023), size_t(65536), n - 1}) EXPECT_EQ(out[i], 1.0f + float(i % 1024) / 1024);
}

TEST_F(SafetensorsTest, MalformedFiles) {
  struct Case {
    std::string bytes, want;
  };
  auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  const std::string good_entry = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  auto with = [&](const std::string& header, size_t data_bytes = 16) {
    return u64(header.size()) + header + std::string(data_bytes, '\0');
  };
  std::vector<Case> cases = {
      {"abcde", "file is only 5 bytes"},
      {u64(200ull << 20) + "{}", "absurd"},
      {u64(100) + "{\"t\":{\"dtype\"", "truncated header"},
      {with("{\"t\": {oops}}"), "not valid JSON"},
      {with("[1, 2, 3]"), "not a JSON object"},
      {with("{\"t\": [1]}"), "header entry is not an object"},
      {with("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}"), "missing \"dtype\""},
      {with("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}"), "missing \"shape\""},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}"), "missing \"data_offsets\""},
      {with("{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}"), "unsupported dtype 'Q4'"},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}"), "non-negative integers"},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}"), "outside the data buffer"},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,4]}}"), "outside the data buffer"},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}"), "span 12 bytes"},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}"), "must be [begin, end]"},
      {with("{\"t\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}"), "needs more bytes"},
      {with("{" + good_entry + ",\"__metadata__\":{\"a\":1}}"), "metadata value of \"a\" is not a string"},
      {with("{" + good_entry + ",\"__metadata__\":[]}"), "\"__metadata__\" is not an object"},
      {with("{" + good_entry + "}", 4), "needs more bytes"},  // data buffer cut short
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = p("bad" + std::to_string(i) + ".safetensors");
    remat::write_file_atomic(path, cases[i].bytes);
    std::string msg = error_of([&] { SafetensorsReader r(path); });
    EXPECT_NE(msg.find(cases[i].want), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_NE(msg.find("[safetensors] '" + path + "'"), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "case " << i << " is not one line: " << msg;
  }
}

TEST_F(SafetensorsTest, WrongDestinationSize) {
  Tensor a = make({2, 3}, "a", 0.0f);
  remat::save_safetensors(p("a.st"), {{"wte.weight", &a}});
  SafetensorsReader r(p("a.st"));
  std::vector<float> out(5);
  std::string msg = error_of([&] { r.read_f32(r.at("wte.weight"), out); });
  EXPECT_NE(msg.find("tensor 'wte.weight' has shape (2, 3) (6 elements)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 5 elements"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, MissingFileAndDirectory) {
  std::string msg = error_of([&] { SafetensorsReader r(p("none.safetensors")); });
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
  msg = error_of([&] { SafetensorsReader r(dir_.string()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, SaveErrors) {
  Tensor a = make({2}, "a", 0.0f), undefined;
  std::string msg = error_of([&] { remat::save_safetensors(p("x"), {{"a", &a}, {"a", &a}}); });
  EXPECT_NE(msg.find("'a' appears twice"), std::string::npos) << msg;
  msg = error_of([&] { remat::save_safetensors(p("x"), {{"__metadata__", &a}}); });
  EXPECT_NE(msg.find("'__metadata__'"), std::string::npos) << msg;
  msg = error_of([&] { remat::save_safetensors(p("x"), {{"u", &undefined}}); });
  EXPECT_NE(msg.find("'u' is undefined"), std::string::npos) << msg;
  msg = error_of([&] { remat::save_safetensors(p("no/dir/x"), {{"a", &a}}); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(dir_));
}
