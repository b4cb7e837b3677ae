// Helpers the kjit command groups share (see common.hpp).
#include "tools/cli/common.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/compiler.hpp"
#include "runtime/internal/fleet.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <iostream>

namespace kjit::cli {

OutputState& output() {
  static OutputState state;
  return state;
}

void add_json_flag(CLI::App* command) {
  command->add_flag("--json", output().json,
                    "Print exactly one JSON object on stdout (progress and warnings go to stderr)");
}

void print_json(const nlohmann::json& value) {
  // One object per invocation: a second one would make stdout unparsable for scripts.
  if (output().json_written) return;
  // Arguments and paths echoed into the object need not be UTF-8: replace bad bytes (U+FFFD)
  // rather than throw, so the one object always goes out.
  const std::string text = value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  output().json_written = true;
  std::cout << text << '\n' << std::flush;
}

std::string_view strip_prefix(std::string_view text) {
  constexpr std::string_view kPrefix = "kjit: ";
  if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
  return text;
}

std::string first_line(std::string_view text) {
  text = strip_prefix(text);
  const size_t end = text.find('\n');
  return std::string(end == std::string_view::npos ? text : text.substr(0, end));
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos) words.emplace_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return words;
}

ParamMap parse_params(std::string_view family, const std::vector<std::string>& words) {
  ParamMap params;
  for (const std::string& word : words) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InvalidArgument(fmt::format("{}: parameter '{}' is not key=value (e.g. head_dim=128)", family, word));
    }
    std::string key = word.substr(0, eq);
    if (!params.emplace(key, word.substr(eq + 1)).second) {
      throw InvalidArgument(fmt::format("{}: parameter '{}' is given twice", family, key));
    }
  }
  return params;
}

std::string format_params(const ParamMap& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    if (!out.empty()) out += ' ';
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

nlohmann::json params_json(const ParamMap& params) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : params) out[key] = value;
  return out;
}

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string missing_gpu(const std::string& command) {
  if (driver_available() && device_count() > 0) return "";
  return fmt::format("no CUDA device: {} needs a GPU ({})", command,
                     driver_available() ? "the driver lists no device" : driver_unavailable_reason());
}

void require_gpu(const std::string& command) {
  if (std::string why = missing_gpu(command); !why.empty()) throw NeedsGpu(why);
}

std::vector<Target> parse_targets(const std::vector<std::string>& texts) {
  std::vector<Target> targets;
  for (const std::string& text : texts) {
    const Target target = Target::parse(text);
    bool seen = false;
    for (const Target& t : targets) seen = seen || t == target;
    if (!seen) targets.push_back(target);
  }
  return targets;
}

std::vector<Target> default_targets() {
  std::vector<Target> targets;
  const int count = device_count();
  for (int i = 0; i < count; ++i) {
    const Target target = device_info(i).target();
    bool seen = false;
    for (const Target& t : targets) seen = seen || t == target;
    if (!seen) targets.push_back(target);
  }
  if (!targets.empty()) return targets;
  // Without a GPU (an image build, CI): the device target KJIT_ARCH names, else the common
  // datacenter archs, Hopper and Ada.
  const std::string_view arch = kjit::detail::kjit_arch();
  if (!arch.empty()) return {kjit::detail::parse_kjit_arch(arch)};
  return {Target::parse("sm_90a"), Target::parse("sm_89")};
}

cache::DiskCache open_cache_strict(const RuntimeConfig& config) {
  if (config.cache_dir.empty()) {
    throw CacheError("no cache directory: set KJIT_CACHE_DIR (or XDG_CACHE_HOME or HOME)");
  }
  try {
    return cache::DiskCache(config.cache_dir, config.cache_max_bytes, /*strict=*/true);
  } catch (const std::exception& e) {
    // The user has to be able to act on one line: make sure it names the directory.
    const std::string why = first_line(e.what());
    if (why.find(config.cache_dir) != std::string::npos) throw CacheError(why);
    throw CacheError(fmt::format("cache directory {} is unusable: {}", config.cache_dir, why));
  }
}

const CLI::Validator& non_empty() {
  static const CLI::Validator check(
      [](std::string& value) { return value.empty() ? std::string("an empty value is not allowed") : std::string(); },
      "", "non-empty");
  return check;
}

cache::DiskCache open_cache_for_reading(const RuntimeConfig& config) {
  if (config.cache_dir.empty()) {
    throw CacheError("no cache directory: set KJIT_CACHE_DIR (or XDG_CACHE_HOME or HOME)");
  }
  return cache::DiskCache::open_for_reading(config.cache_dir, config.cache_max_bytes);
}

const char* origin_name(CompiledProgram::Origin origin) {
  switch (origin) {
    case CompiledProgram::Origin::kDisk: return "disk";
    case CompiledProgram::Origin::kCompiled: return "compiled";
    case CompiledProgram::Origin::kRemote: return "remote";
  }
  return "unknown";
}

nlohmann::json kernels_json(const std::vector<KernelInfo>& kernels) {
  nlohmann::json out = nlohmann::json::array();
  for (const KernelInfo& k : kernels) {
    out.push_back({{"name_expression", k.name_expression},
                   {"lowered_name", k.lowered_name},
                   {"registers", k.registers},
                   {"spill_bytes", k.spill_bytes},
                   {"static_smem", k.static_smem}});
  }
  return out;
}

}  // namespace kjit::cli
