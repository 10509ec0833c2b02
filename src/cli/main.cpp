// remat: train GPT-style transformers on CPU with planned activation checkpointing.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>
#include <string>

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
  remat::cli::add_grads(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty()) {
      // CLI11 reports "A subcommand is required" even for `remat frobnicate`: name what was typed.
      std::string commands;
      for (const CLI::App* s : app.get_subcommands({})) commands += (commands.empty() ? "" : ", ") + s->get_name();
      if (argc < 2)
        std::fprintf(stderr, "remat: [cli] no command given (hint: use one of %s; run 'remat --help')\n",
                     commands.c_str());
      else
        std::fprintf(stderr, "remat: [cli] unknown %s '%s' (hint: use one of %s; run 'remat --help')\n",
                     argv[1][0] == '-' ? "option" : "command", argv[1], commands.c_str());
      return 2;
    }
    const std::string what = e.what();
    const auto at_most = what.find(": At Most 1 required but received ");
    if (at_most != std::string::npos) {  // CLI11's words for a flag given twice
      std::fprintf(stderr, "remat: [cli] %s is given more than once (hint: pass each flag once)\n",
                   what.substr(0, at_most).c_str());
      return 2;
    }
    std::fprintf(stderr, "remat: [cli] %s (hint: run 'remat --help' or 'remat <command> --help')\n", what.c_str());
    return 2;
  } catch (const remat::Error& e) {
    std::fprintf(stderr, "remat: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "remat: [memory] out of host memory (hint: use a smaller model, --batch or --seq)\n");
    return 1;
  } catch (const std::length_error& e) {
    std::fprintf(stderr, "remat: [memory] a size is too large (%s) (hint: use a smaller model, --batch or --seq)\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remat: error: %s (hint: this is unexpected; please report it with the command line)\n",
                 e.what());
    return 1;
  }
  return 0;
}
