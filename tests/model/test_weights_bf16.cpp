// BF16 weights on disk: save_weights(..., DType::BF16) writes each weight rounded to nearest even
// (one file, one folder file, or shards), load_weights reads back exactly those values on both
// architectures, a BF16 file of the wrong shapes is refused in one line, and a BF16 file laid out by
// another writer (hand-written header) loads.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/safetensors.h"
#include "core/tensor_store.h"
#include "model/weights.h"
#include "test_util.h"

namespace {

using namespace remat;
namespace fs = std::filesystem;
using nlohmann::json;
using remat::testing_util::error_of;

ModelConfig tiny(Arch a) {
  ModelConfig c;
  c.arch = a;
  if (a == Arch::GPT2) {
    c.L = 2; c.C = 32; c.NH = 2; c.T = 16; c.V = 40;
  } else {
    c.L = 2; c.C = 32; c.NH = 4; c.KVH = 2; c.hidden = 48; c.T = 24; c.V = 40;
    c.rope_theta = 500000.0f; c.norm_eps = 1e-6f;
  }
  return c;
}

// A model with random weights, plus values whose bf16 rounding is a tie or a carry: round-to-
// nearest-even is the only rounding that gives round_bf16 on all of them.
std::unique_ptr<Model> model_with_ties(Arch a, uint64_t seed) {
  auto m = make_model(tiny(a));
  m->init(seed);
  float* w = m->params()[0].value.data();
  w[0] = 1.0f + std::ldexp(1.0f, -8);           // tie, even below: 1
  w[1] = 1.0f + 3 * std::ldexp(1.0f, -8);       // tie, even above: 1 + 2^-6
  w[2] = -(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20));  // just above a tie: away from 0
  w[3] = std::bit_cast<float>(0x3F7FFFFFu);     // carries into the exponent: 1
  w[4] = std::ldexp(1.0f, -130) + std::ldexp(1.0f, -140);  // a bf16 denormal after rounding: 2^-130
  return m;
}

int64_t numel_total(const Model& m) {
  int64_t n = 0;
  for (const Param& p : m.params()) n += p.value.numel();
  return n;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Every weight of `b` is exactly round_bf16 of `a`'s (bit for bit).
void expect_bf16_of(const Model& a, const Model& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t k = 0; k < a.params().size(); ++k) {
    const Tensor &x = a.params()[k].value, &y = b.params()[k].value;
    ASSERT_EQ(x.shape(), y.shape()) << a.params()[k].name;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < x.numel(); ++i)
      if (std::bit_cast<uint32_t>(y.data()[i]) != std::bit_cast<uint32_t>(round_bf16(x.data()[i])) && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0) << a.params()[k].name << ": first at " << first;
  }
}

enum class Layout { File, Folder, Shards };
const char* layout_name(Layout l) { return l == Layout::File ? "File" : l == Layout::Folder ? "Folder" : "Shards"; }

class WeightsBf16 : public remat::testing_util::TempDirTest,
                    public ::testing::WithParamInterface<std::tuple<Arch, Layout>> {
 protected:
  Arch arch() const { return std::get<0>(GetParam()); }
  Layout layout() const { return std::get<1>(GetParam()); }
  std::string target() const { return layout() == Layout::File ? p("w.safetensors") : p("m"); }
};

TEST_P(WeightsBf16, SaveThenLoadGivesTheBf16RoundingOfEveryWeight) {
  auto a = model_with_ties(arch(), 11);
  // Snapshot of the fp32 masters: saving must not touch them.
  std::vector<std::vector<float>> before;
  for (const Param& p : a->params()) before.emplace_back(p.value.data(), p.value.data() + p.value.numel());

  const int64_t bf16_bytes = 2 * numel_total(*a);
  // Sharded: three shards at bf16's size (the fp32 size would need five or six).
  const size_t limit = layout() == Layout::Shards ? size_t(bf16_bytes / 3 + bf16_bytes / 10) : kDefaultShardBytes;
  const size_t live_before = Allocator::global().active(Category::Workspace);
  save_weights(*a, target(), limit, DType::BF16);
  EXPECT_EQ(Allocator::global().active(Category::Workspace), live_before) << "the bf16 copy is released";
  for (size_t k = 0; k < before.size(); ++k)
    EXPECT_EQ(std::memcmp(before[k].data(), a->params()[k].value.data(), before[k].size() * 4), 0) << k;

  // On disk: every tensor BF16, the data half of fp32's.
  const TensorStore s(target());
  int64_t data = 0;
  for (const std::string& n : s.names()) {
    EXPECT_EQ(s.at(n).dtype, "BF16") << n;
    data += int64_t(s.at(n).end - s.at(n).begin);
  }
  EXPECT_EQ(s.names().size(), a->params().size());
  EXPECT_EQ(data, bf16_bytes);
  if (layout() != Layout::File) {
    EXPECT_EQ(json::parse(slurp(p("m/config.json")))["torch_dtype"], "bfloat16");
    EXPECT_EQ(fs::exists(p("m/model.safetensors")), layout() == Layout::Folder);
  }
  if (layout() == Layout::Shards) {
    const json index = json::parse(slurp(p("m/model.safetensors.index.json")));
    EXPECT_EQ(index["metadata"]["total_size"], bf16_bytes);
    std::set<std::string> shards;
    for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
    EXPECT_EQ(shards, (std::set<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"}));
  }

  // Loaded the way the CLI does (config from the file, a fresh model with other weights).
  const ModelConfig c = read_config(target());
  EXPECT_EQ(c.describe(), tiny(arch()).describe());
  auto b = make_model(c);
  b->init(99);
  load_weights(*b, target());
  expect_bf16_of(*a, *b);
  // The ties went to even, the denormal was kept.
  const float* w = b->params()[0].value.data();
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[1], 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(w[2], -(1.0f + std::ldexp(1.0f, -7)));
  EXPECT_EQ(w[3], 1.0f);
  EXPECT_EQ(w[4], std::ldexp(1.0f, -130));

  // Saved again as BF16 from the loaded model: the same bytes (bf16 values are fixed points).
  if (layout() == Layout::File) {
    save_weights(*b, p("again.safetensors"), limit, DType::BF16);
    EXPECT_EQ(slurp(p("again.safetensors")), slurp(target()));
  }
}

TEST_P(WeightsBf16, DefaultStaysF32AndExact) {
  auto a = model_with_ties(arch(), 12);
  const int64_t f32_bytes = 4 * numel_total(*a);
  save_weights(*a, target(), layout() == Layout::Shards ? size_t(f32_bytes / 3 + f32_bytes / 10) : kDefaultShardBytes);
  const TensorStore s(target());
  for (const std::string& n : s.names()) EXPECT_EQ(s.at(n).dtype, "F32") << n;
  if (layout() != Layout::File) {
    EXPECT_EQ(json::parse(slurp(p("m/config.json")))["torch_dtype"], "float32");
  }
  auto b = make_model(read_config(target()));
  load_weights(*b, target());
  for (size_t k = 0; k < a->params().size(); ++k)
    EXPECT_EQ(std::memcmp(a->params()[k].value.data(), b->params()[k].value.data(), a->params()[k].value.bytes()), 0);
}

// A BF16 file for a wider MLP than the model's: one line naming the dtype, the tensor, the file
// holding it (the shard, when sharded), both shapes and a hint.
TEST_P(WeightsBf16, WrongShapesAreRefusedNamingTheTensorAndBothShapes) {
  ModelConfig wide = tiny(arch());
  wide.hidden = 64;
  auto a = make_model(wide);
  a->init(5);
  const int64_t bytes = 2 * numel_total(*a);
  save_weights(*a, target(), layout() == Layout::Shards ? size_t(bytes / 3 + bytes / 10) : kDefaultShardBytes,
               DType::BF16);
  if (layout() != Layout::File) fs::remove(p("m/config.json"));  // else config.json refuses it first
  auto b = make_model(tiny(arch()));
  const std::string e = error_of([&] { load_weights(*b, target()); });
  const std::string t = arch() == Arch::GPT2 ? "h.0.mlp.c_fc.weight" : "model.layers.0.mlp.gate_proj.weight";
  const std::string file = layout() == Layout::File ? target() : TensorStore(target()).file_of(t);
  Shape have, expect;
  for (const Param& q : a->params())
    if (q.name == t) have = q.value.shape();
  for (const Param& q : b->params())
    if (q.name == t) expect = q.value.shape();
  ASSERT_NE(have, expect);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(e.rfind("[weights] BF16 tensor '" + t + "' in '" + file + "' has shape " + shape_str(have), 0), 0u) << e;
  EXPECT_NE(e.find("expects " + shape_str(expect)), std::string::npos) << e;
  EXPECT_NE(e.find(b->config().describe()), std::string::npos) << e;
  EXPECT_NE(e.find("(hint: "), std::string::npos) << e;
  EXPECT_NE(e.find("--hidden"), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(All, WeightsBf16,
                         ::testing::Combine(::testing::Values(Arch::GPT2, Arch::Llama),
                                            ::testing::Values(Layout::File, Layout::Folder, Layout::Shards)),
                         [](const auto& info) {
                           return std::string(arch_name(std::get<0>(info.param))) + layout_name(std::get<1>(info.param));
                         });

// ---- a BF16 file as another writer lays it out ----

// Deterministic finite bf16 bit patterns, both signs, every exponent but inf/NaN's.
uint16_t pattern(uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  uint16_t b = uint16_t(x);
  if ((b & 0x7F80) == 0x7F80) b &= 0xBFFF;  // exponent 255 -> 127: finite
  return b;
}

struct Blob {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
};

// A safetensors file written by hand, not by save_safetensors: the header's entries in `order`
// sorted by name, the data in the reverse order, "__metadata__" last, and the data starting at an odd
// offset (the header is not padded to 8 bytes; an odd length is made so with a space).
void write_foreign(const std::string& path, const std::vector<Blob>& blobs) {
  std::vector<uint64_t> begin(blobs.size());
  uint64_t off = 0;
  for (size_t k = blobs.size(); k-- > 0;) {
    begin[k] = off;
    off += blobs[k].bytes.size();
  }
  std::vector<size_t> order(blobs.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return blobs[x].name < blobs[y].name; });
  std::string h = "{";
  for (size_t k : order) {
    const Blob& b = blobs[k];
    std::string shape;
    for (size_t i = 0; i < b.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(b.shape[i]);
    h += "\"" + b.name + "\": {\"shape\": [" + shape + "], \"dtype\": \"" + b.dtype + "\", \"data_offsets\": [" +
         std::to_string(begin[k]) + ", " + std::to_string(begin[k] + b.bytes.size()) + "]}, ";
  }
  h += "\"__metadata__\": {\"format\": \"pt\"}}";
  if (h.size() % 2 == 0) h += ' ';
  std::string file(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(file.data(), &n, 8);
  file += h;
  for (size_t k = blobs.size(); k-- > 0;) file += blobs[k].bytes;
  write_file_atomic(path, file);
}

class WeightsBf16Foreign : public remat::testing_util::TempDirTest, public ::testing::WithParamInterface<Arch> {};

TEST_P(WeightsBf16Foreign, HandWrittenBf16FileLoadsExactly) {
  const Arch a = GetParam();
  auto ref = make_model(tiny(a));  // names and shapes only
  std::vector<Blob> blobs;
  std::vector<std::vector<uint16_t>> bits;
  uint64_t seed = 0;
  for (const Param& q : ref->params()) {
    std::vector<uint16_t> v(size_t(q.value.numel()));
    for (auto& x : v) x = pattern(seed++);
    blobs.push_back({(a == Arch::GPT2 ? "transformer." : "") + q.name, "BF16", q.value.shape(),
                     std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2)});
    bits.push_back(std::move(v));
  }
  // Buffers a Hugging Face checkpoint carries beside the weights, which the loader skips.
  for (int64_t l = 0; l < tiny(a).L; ++l) {
    if (a == Arch::GPT2)
      blobs.push_back({"transformer.h." + std::to_string(l) + ".attn.bias", "BF16", {1, 1, 16, 16}, std::string(512, '\0')});
    else
      blobs.push_back({"model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq", "F32", {4}, std::string(16, '\0')});
  }
  const std::string path = p("foreign.safetensors");
  write_foreign(path, blobs);
  // The data starts at an odd offset (unaligned bf16).
  EXPECT_EQ(slurp(path).size() % 2, 1u);

  auto m = make_model(tiny(a));
  m->init(1);
  load_weights(*m, path);
  for (size_t k = 0; k < bits.size(); ++k) {
    const Tensor& t = m->params()[k].value;
    int64_t bad = 0;
    for (int64_t i = 0; i < t.numel(); ++i) bad += std::bit_cast<uint32_t>(t.data()[i]) != uint32_t(bits[k][size_t(i)]) << 16;
    EXPECT_EQ(bad, 0) << m->params()[k].name;
  }
  // And saved back as BF16 by remat: the same bits, in remat's layout.
  save_weights(*m, p("back.safetensors"), kDefaultShardBytes, DType::BF16);
  SafetensorsReader r(p("back.safetensors"));
  for (size_t k = 0; k < bits.size(); ++k) {
    const SafetensorsEntry& e = r.at(m->params()[k].name);
    EXPECT_EQ(e.dtype, "BF16");
    std::vector<float> out(size_t(e.numel()));
    r.read_f32(e, out);
    for (size_t i = 0; i < out.size(); ++i)
      if (std::bit_cast<uint32_t>(out[i]) != uint32_t(bits[k][i]) << 16) {
        ADD_FAILURE() << e.name << " element " << i;
        break;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Both, WeightsBf16Foreign, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

}  // namespace
