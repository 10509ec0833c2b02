// BatchSampler (dataset.h): (inputs, targets) batches of a dataset's windows, each a pure function
// of the seed, the step and the row.
#include "core/error.h"
#include "core/text.h"
#include "data/dataset.h"
#include "data/dataset_storage.h"

namespace remat::data {

using dataset_detail::kC;

namespace {

// splitmix64 finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

BatchSampler::BatchSampler(const TokenDataset& ds, int64_t B, int64_t T, uint64_t seed)
    : ds_(&ds), B_(B), T_(T), windows_(0), seed_(seed) {
  if (B < 1) throw Error(kC, "batch size " + std::to_string(B) + " must be at least 1", "e.g. --batch 8");
  if (T < 1) throw Error(kC, "sequence length " + std::to_string(T) + " must be at least 1", "e.g. --seq 128");
  if (ds.size() < uint64_t(T) + 1)
    throw Error(kC, "the dataset has " + with_commas(ds.size()) + " tokens, fewer than one window of T + 1 = " +
                        with_commas(uint64_t(T) + 1) + " tokens (T = " + std::to_string(T) + ")",
                "use a smaller --seq or a larger dataset");
  windows_ = int64_t((ds.size() - 1) / uint64_t(T));
}

uint64_t BatchSampler::window_start(uint64_t step, int64_t b) const {
  const uint64_t h = mix64(mix64(mix64(seed_) ^ step) ^ uint64_t(b));
  const uint64_t range = ds_->size() - uint64_t(T_);  // starts 0 .. n - T - 1
  return uint64_t((unsigned __int128)h * range >> 64);
}

void BatchSampler::fill_row(uint64_t start, int64_t b, int32_t* inputs, int32_t* targets) const {
  ds_->copy_window(size_t(start), size_t(T_), inputs + b * T_);
  ds_->copy_window(size_t(start) + 1, size_t(T_), targets + b * T_);
}

void BatchSampler::sample(uint64_t step, int32_t* inputs, int32_t* targets) const {
  for (int64_t b = 0; b < B_; ++b) fill_row(window_start(step, b), b, inputs, targets);
}

void BatchSampler::sequential(uint64_t index, int32_t* inputs, int32_t* targets) const {
  for (int64_t b = 0; b < B_; ++b) {
    const auto w = uint64_t(((unsigned __int128)index * uint64_t(B_) + uint64_t(b)) % uint64_t(windows_));
    fill_row(w * uint64_t(T_), b, inputs, targets);
  }
}

}  // namespace remat::data
