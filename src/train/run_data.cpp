#include "train/run_data.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/text.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer.h"
#include "train/trainer.h"

namespace remat {

namespace {
// Byte-level text (a text file or the built-in corpus) through `t`: the ids `remat tokenize` would
// write for it as one document, encoded on every thread.
data::TokenDataset tokenized(const data::TokenDataset& text, const tok::Tokenizer& t) {
  std::string bytes(text.size(), '\0');
  for (size_t i = 0; i < text.size(); ++i) bytes[i] = char(text[i]);
  std::vector<uint32_t> ids;
  {
    const std::vector<int32_t> out = tok::encode_document(t, bytes);
    ids.assign(out.begin(), out.end());
  }
  return data::TokenDataset::from_tokens(ids, text.description() + " through " + t.name() + ": " +
                                                  with_commas(ids.size()) + " tokens",
                                         false);
}
}  // namespace

// (train, validation): the last val_fraction of the data validates (views of one mapping), or, with
// val_data, all of the data trains and val_data validates.
std::pair<data::TokenDataset, data::TokenDataset> load_split(const TrainOptions& o, int64_t T,
                                                             const tok::Tokenizer* tokenizer) {
  data::TokenDataset all;
  if (o.random_tokens > 0) {
    std::vector<uint16_t> t(size_t(o.random_tokens));
    std::mt19937_64 gen(o.seed);
    for (auto& x : t) x = uint16_t(gen() % uint64_t(o.model.V));
    all = data::TokenDataset::from_tokens(t, "random tokens (V=" + std::to_string(o.model.V) + ")", false);
  } else {
    all = data::TokenDataset::load(o.data, data::parse_format(o.data_format));
  }
  if (o.random_tokens > 0) tokenizer = nullptr;
  if (tokenizer) {
    tok::check_fits(*tokenizer, o.model.V);
    if (all.byte_level()) all = tokenized(all, *tokenizer);
  }
  all.check_vocab(o.model.V);
  if (o.val_data.empty() || o.random_tokens > 0) return all.split(o.val_fraction, T);

  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(o.val_data, ec))
    throw Error("data", "--val-data '" + o.val_data + "' does not exist",
                "check the path, or omit --val-data to validate on the last --val-fraction of the training data");
  if (!o.data.empty() && fs::exists(o.data, ec) && fs::equivalent(o.data, o.val_data, ec))
    throw Error("data", "--val-data '" + o.val_data + "' is the training data file '" + o.data + "'",
                "give held-out data (nanoGPT's val.bin), or omit --val-data to split off the last --val-fraction");
  data::TokenDataset val = data::TokenDataset::load(o.val_data, data::parse_format(o.data_format));
  if (tokenizer && val.byte_level()) val = tokenized(val, *tokenizer);
  if (val.byte_level() != all.byte_level())
    throw Error("data",
                "--val-data " + val.description() + " is " + (val.byte_level() ? "byte-level text" : "token ids") +
                    " but the training data " + all.description() + " is " +
                    (all.byte_level() ? "byte-level text" : "token ids"),
                "validate on data of the same kind, or force one reading with --data-format");
  val.check_vocab(o.model.V);
  const uint64_t need = uint64_t(T) + 1;
  for (const auto* d : {&all, &val})
    if (d->size() < need)
      throw Error("data",
                  std::string(d == &val ? "--val-data " : "the training data ") + d->description() + " holds " +
                      std::to_string(d->size()) + " tokens, fewer than one window of T + 1 = " + std::to_string(need),
                  "use a smaller --seq or more data");
  return {std::move(all), std::move(val)};
}

DataFootprint data_footprint(const TrainOptions& o) {
  Allocator& a = Allocator::global();
  const size_t before = a.active(Category::Data), mapped_before = data::TokenDataset::live_mapped_bytes();
  std::unique_ptr<tok::Tokenizer> t;
  if (!tok::is_bytes(o.tokenizer) && o.random_tokens == 0) t = tok::load_tokenizer(o.tokenizer);
  const auto data = load_split(o, std::max<int64_t>(o.seq, 1), t.get());  // no --seq (plan): any window
  return {a.active(Category::Data) - before, data::TokenDataset::live_mapped_bytes() - mapped_before};
}

size_t data_bytes_for(const TrainOptions& o) { return data_footprint(o).accounted; }

}  // namespace remat
