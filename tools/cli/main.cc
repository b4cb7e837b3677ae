// kjit: the command-line tool. Each command group lives in its own file and registers itself
// here; main parses, runs the chosen command and turns every failure into one
// "kjit: error: ..." line on stderr and a non-zero exit status.
#include "tools/cli/common.hpp"
#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

using kjit::cli::output;

/// Reports `message`: the first line is the error; any further lines (an NVRTC log) follow it,
/// indented, so `kjit ... 2>&1 | head -1` is always the reason.
void report(const std::string& full_message) {
  const std::string message(kjit::cli::strip_prefix(full_message));
  std::string head = kjit::cli::first_line(message);
  // An error that quotes a huge argument back stays readable: keep its start and say how much
  // was cut.
  constexpr size_t kMaxHead = 1200;
  const size_t full_head = head.size();
  if (full_head > kMaxHead) head = fmt::format("{}... ({} more characters)", head.substr(0, kMaxHead), full_head - kMaxHead);
  if (output().json) kjit::cli::print_json({{"error", head}});
  std::cerr << "kjit: error: " << head << '\n';
  size_t pos = full_head;
  while (pos < message.size()) {
    const size_t start = pos + 1;
    size_t end = message.find('\n', start);
    if (end == std::string::npos) end = message.size();
    if (end > start) std::cerr << "  " << message.substr(start, end - start) << '\n';
    pos = end;
  }
  std::cerr << std::flush;
}

/// CLI11 answers `kjit frobnicate` with "a subcommand is required"; name the word instead.
/// Returns the unknown command word (and the choices) or "" when the command path is fine.
std::string unknown_command(CLI::App& app, int argc, char** argv, std::string* choices) {
  CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;
    std::vector<CLI::App*> subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return "";
    CLI::App* next = nullptr;
    choices->clear();
    for (CLI::App* sub : subs) {
      if (sub->check_name(word)) next = sub;
      *choices += (choices->empty() ? "" : ", ") + sub->get_name();
    }
    if (!next) {
      // A command that takes positionals reads the word as one (`kjit tune decode`).
      if (!level->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty()) return "";
      return word;
    }
    level = next;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  // `kjit tune` measures in a copy of this executable started as a worker.
  kjit::tune::run_worker_if_requested();
  CLI::App app{"kjit: a JIT kernel-compilation runtime for CUDA. Inspect devices and kernel "
               "families, compile and precompile kernels into the disk cache, manage the cache "
               "and check the shipped ops on a GPU."};
  app.name("kjit");
  app.set_version_flag("--version", std::string("kjit ") + KJIT_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  std::vector<kjit::cli::Command> commands;
  kjit::cli::add_devices_command(app, commands);
  kjit::cli::add_kernels_command(app, commands);
  kjit::cli::add_compile_command(app, commands);
  kjit::cli::add_precompile_command(app, commands);
  kjit::cli::add_cache_commands(app, commands);
  kjit::cli::add_selftest_command(app, commands);
  kjit::cli::add_tune_command(app, commands);
  kjit::cli::add_remote_commands(app, commands);

  // Usage errors happen before CLI11 sets the --json flag; scripts that asked for JSON still
  // get their one object.
  bool wants_json = false;
  for (int i = 1; i < argc; ++i) wants_json = wants_json || std::string(argv[i]) == "--json";

  std::string choices;
  if (const std::string word = unknown_command(app, argc, argv, &choices); !word.empty()) {
    output().json = wants_json;
    report("unknown command '" + word + "' (commands: " + choices + "; see kjit --help)");
    return kjit::cli::kExitCannotRun;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version "fail" with exit code 0 and print to stdout.
    if (e.get_exit_code() == 0) {
      if (wants_json && dynamic_cast<const CLI::CallForVersion*>(&e) != nullptr) {
        kjit::cli::print_json({{"version", KJIT_VERSION}});
        return kjit::cli::kExitOk;
      }
      return app.exit(e);
    }
    output().json = wants_json;
    // Point at the help of the (sub)command that was being parsed: "kjit cache export --help".
    std::string help = "kjit";
    for (const CLI::App* level = &app; !level->get_subcommands().empty();) {
      level = level->get_subcommands().front();
      help += " " + level->get_name();
    }
    report(std::string(e.what()) + " (see " + help + " --help)");
    return kjit::cli::kExitCannotRun;
  }

  try {
    for (const kjit::cli::Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
    report("no command given (see kjit --help)");
    return kjit::cli::kExitCannotRun;
  } catch (const kjit::cli::NeedsGpu& e) {
    report(e.what());
    return kjit::cli::kExitCannotRun;
  } catch (const kjit::CacheError& e) {
    report(e.what());
    return kjit::cli::kExitCannotRun;
  } catch (const kjit::InvalidArgument& e) {
    report(e.what());
    return kjit::cli::kExitCannotRun;
  } catch (const kjit::Error& e) {
    report(e.what());
    return kjit::cli::kExitFailed;
  } catch (const std::exception& e) {
    report(e.what());
    return kjit::cli::kExitFailed;
  }
}
