// remat: train GPT-style transformers on CPU with planned activation checkpointing.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/flags.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "remat: train GPT-style transformers on CPU with activation checkpointing.\n"
      "Store some activations, recompute the rest, and see to the byte what the trade costs."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Every subcommand's flags");
  remat::cli::add_train(app);
  remat::cli::add_bench(app);
  remat::cli::add_trace(app);
  remat::cli::add_plan(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "remat: [cli] %s (hint: run 'remat --help' or 'remat <command> --help')\n", e.what());
    return 2;
  } catch (const remat::Error& e) {
    std::fprintf(stderr, "remat: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remat: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
