#include "step/run_config.h"

#include <algorithm>
#include <cmath>

namespace remat {

double RunConfig::lr_at(int64_t step) const {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  const double span = std::max<int64_t>(1, decay_steps() - warmup);
  const double t = std::min(1.0, double(step - warmup) / span);
  const double min_lr = lr * min_lr_ratio;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * t));
}

}  // namespace remat
