// remat calibrate: measure this machine's per-block costs for the planner's time model (see
// cmd_calibrate.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace remat::cli {
void add_calibrate(CLI::App& root);
}  // namespace remat::cli
