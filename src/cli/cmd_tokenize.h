// remat tokenize: text files to llm.c token files with a tokenizer (see cmd_tokenize.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace remat::cli {
void add_tokenize(CLI::App& root);
}  // namespace remat::cli
