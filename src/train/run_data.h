// The run's data: what it trains and validates on, and what that holds in the allocator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "data/dataset.h"

namespace remat {

struct TrainOptions;

// (train, validation): the last val_fraction of the data validates (views of one mapping), or, with
// val_data, all of the data trains and val_data validates. Refuses (remat::Error "data") a val_data
// that is missing, is the training file, is of another kind, or holds less than one window of T + 1.
std::pair<data::TokenDataset, data::TokenDataset> load_split(const TrainOptions& o, int64_t T);

// What the options' training data will hold in the allocator (Category::Data), by loading it.
size_t data_bytes_for(const TrainOptions& o);

}  // namespace remat
