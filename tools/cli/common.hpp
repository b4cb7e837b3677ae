#pragma once
/// \file common.hpp
/// What the `kjit` command groups share: how a command registers itself, the output rules
/// (human text, or exactly one JSON object on stdout with --json), parsing of targets, parameters
/// and byte counts, the default precompile targets and the strict disk cache the CLI insists on.

#include <kjit/device.hpp>
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include "runtime/internal/cache.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#ifndef KJIT_VERSION
#define KJIT_VERSION "unknown"
#endif

namespace kjit::cli {

/// Exit codes of every command.
inline constexpr int kExitOk = 0;
/// The command ran and something it checked failed (a compile, a cache entry, a selftest).
inline constexpr int kExitFailed = 1;
/// The command could not run: bad arguments, an unusable cache, no GPU for `selftest` or `tune`.
inline constexpr int kExitCannotRun = 2;

/// A command that measures or runs on a GPU was started where there is none; main reports
/// what() and exits kExitCannotRun, the same for every such command.
class NeedsGpu : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "no CUDA device: <command> needs a GPU (<why the driver is unavailable>)" when this machine
/// has no usable GPU, "" when it has one: the one wording of that refusal across the CLI.
std::string missing_gpu(const std::string& command);

/// Throws NeedsGpu with missing_gpu(command) unless this machine has a GPU.
void require_gpu(const std::string& command);

/// One (sub)command: the CLI11 app it parses into and what runs when it was chosen. `run`
/// returns the exit code; it may throw kjit::Error or std::exception (main reports them).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// Each command group adds its subcommands to `root` and its Commands to `out`.
void add_devices_command(CLI::App& root, std::vector<Command>& out);
void add_kernels_command(CLI::App& root, std::vector<Command>& out);
void add_compile_command(CLI::App& root, std::vector<Command>& out);
void add_precompile_command(CLI::App& root, std::vector<Command>& out);
void add_cache_commands(CLI::App& root, std::vector<Command>& out);
/// `kjit cache explain` (tools/cli/cache_explain.cc), added to the `cache` group.
void add_cache_explain_command(CLI::App& cache, std::vector<Command>& out);
void add_selftest_command(CLI::App& root, std::vector<Command>& out);
void add_tune_command(CLI::App& root, std::vector<Command>& out);
void add_remote_commands(CLI::App& root, std::vector<Command>& out);

/// The output mode of this invocation. `json` is bound to every command's --json flag.
struct OutputState {
  bool json = false;
  bool json_written = false;  ///< the one JSON object has gone out; main must not add another
};
OutputState& output();

/// Adds the --json flag (bound to output().json) to `command`.
void add_json_flag(CLI::App* command);

/// A CLI11 check that refuses an empty value (`--arch ""`), which would otherwise read as the
/// option's default.
const CLI::Validator& non_empty();

/// Writes `value` as the invocation's one JSON object (pretty-printed, then a newline) to stdout.
void print_json(const nlohmann::json& value);

/// The first line of `text` (error messages may carry an NVRTC log below their first line),
/// without the library's own "kjit: " prefix (the CLI adds "kjit: error: ").
std::string first_line(std::string_view text);
/// `text` without a leading "kjit: ".
std::string_view strip_prefix(std::string_view text);

/// Parses family `family`'s "key=value" words into a ParamMap. Throws InvalidArgument, naming the
/// family, for a word without '=' or with an empty key, or a key given twice.
ParamMap parse_params(std::string_view family, const std::vector<std::string>& words);
/// The blank-separated words of `text` ("head_dim=128 rows=8" → {"head_dim=128", "rows=8"}): how
/// an entry's template_args read back as parse_params words.
std::vector<std::string> split_words(std::string_view text);
/// "head_dim=128 style=neox" (ParamMap order, i.e. sorted by key).
std::string format_params(const ParamMap& params);
nlohmann::json params_json(const ParamMap& params);

/// "1.5 MiB", "312 B".
std::string human_bytes(uint64_t bytes);

/// Parses each --arch value (Target::parse), dropping repeats while keeping the order.
std::vector<Target> parse_targets(const std::vector<std::string>& texts);
/// The targets of this machine's GPUs (one per distinct arch, device order), or sm_90a and sm_89
/// when there is no driver or no device.
std::vector<Target> default_targets();

/// Opens the disk cache the environment names (RuntimeConfig::from_env) in strict mode: throws
/// CacheError naming the path when it cannot be created or written. The CLI never falls back to
/// memory-only caching silently.
cache::DiskCache open_cache_strict(const RuntimeConfig& config);
/// Opens the disk cache the environment names for inspection (DiskCache::open_for_reading):
/// a missing folder is an empty cache and stays missing; a read-only one can be listed.
cache::DiskCache open_cache_for_reading(const RuntimeConfig& config);

/// `kjit precompile --shard i/N`: builder `index` of `count` takes the keys whose value mod
/// `count` is `index`, so N builders cover a set exactly once with no coordinator.
struct FleetShard {
  uint64_t index = 0;
  uint64_t count = 1;
  /// Whether the key (32 hex digits) is this shard's: its low 64 bits mod `count`.
  bool has(const std::string& key_hex) const;
};
/// Parses "i/N" (0 <= i < N). Throws InvalidArgument naming --shard.
FleetShard parse_shard(const std::string& text);
/// For `kjit precompile --remote`: a function that publishes the disk cache entry of a key to the
/// remote tier the environment names (SET NX, signed with KJIT_REMOTE_SIGNING_KEY) and returns
/// whether the tier holds it now (written, or there already). Throws InvalidArgument when
/// KJIT_REMOTE is unset or this host may not write.
std::function<bool(const std::string& key_hex)> fleet_publisher(const RuntimeConfig& config);

/// Name of a CompiledProgram origin: "disk", "compiled", "remote".
const char* origin_name(CompiledProgram::Origin origin);
/// The per-kernel report of a compiled program (name, lowered name, registers, spills, smem).
nlohmann::json kernels_json(const std::vector<KernelInfo>& kernels);

}  // namespace kjit::cli
