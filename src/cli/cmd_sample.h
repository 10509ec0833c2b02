// remat sample: load a model and continue a prompt (see cmd_sample.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace remat::cli {

// Registers `remat sample` on `root`.
void add_sample(CLI::App& root);

}  // namespace remat::cli
