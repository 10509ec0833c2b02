// The run's data: what it trains and validates on, and what that holds in the allocator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "data/dataset.h"

namespace remat {

struct TrainOptions;
namespace tok {
class Tokenizer;
}

// (train, validation): the last val_fraction of the data validates (views of one mapping), or, with
// val_data, all of the data trains and val_data validates. Refuses (remat::Error "data") a val_data
// that is missing, is the training file, is of another kind, or holds less than one window of T + 1.
// Byte-level text data goes through `tokenizer` when one is given (the run's, from o.tokenizer): the
// ids `remat tokenize` writes for it.
std::pair<data::TokenDataset, data::TokenDataset> load_split(const TrainOptions& o, int64_t T,
                                                             const tok::Tokenizer* tokenizer);

// What the options' training data (and its tokenizer) will hold, by loading them as the trainer
// does: in the allocator (Category::Data), and mapped from token files (resident as the sampler
// touches them, outside the allocator).
struct DataFootprint {
  size_t accounted = 0, mapped = 0;
};
DataFootprint data_footprint(const TrainOptions& o);
// data_footprint(o).accounted.
size_t data_bytes_for(const TrainOptions& o);

}  // namespace remat
