#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include "cache/echo.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>

namespace kjit {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool truthy(const std::string& v) { return !v.empty() && v != "0" && v != "false" && v != "off"; }

/// The whole number `name` holds, in [lo, hi]; `fallback` when unset. Throws InvalidArgument
/// naming the variable, its text and the range otherwise.
int env_int(const char* name, int lo, int hi, int fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  int64_t n = 0;
  bool ok = v.size() <= 9;
  for (char c : v) ok = ok && std::isdigit(static_cast<unsigned char>(c));
  if (ok) n = std::stoll(v);
  if (!ok || n < lo || n > hi) throw InvalidArgument(fmt::format("{}='{}' is not a whole number in {}..{}", name, v, lo, hi));
  return static_cast<int>(n);
}

}  // namespace

uint64_t RuntimeConfig::parse_bytes(std::string_view text, std::string_view what) {
  auto bad = [&](const char* why) {
    return InvalidArgument(fmt::format("{}='{}' is not a byte count: {} (e.g. 536870912, 512M, 2G, 1GiB)", what,
                                       cache::printable(text), why));
  };
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) throw bad("more bytes than 64 bits hold");
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) throw bad("it must start with a digit");
  std::string suffix;
  for (; i < text.size(); ++i) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  int shift = 0;
  if (!suffix.empty() && suffix != "B") {
    const std::string rest = suffix.substr(1);
    if (!rest.empty() && rest != "B" && rest != "IB") throw bad("unknown suffix (use K, M, G or T, optionally + B or iB)");
    switch (suffix[0]) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: throw bad("unknown suffix (use K, M, G or T, optionally + B or iB)");
    }
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) throw bad("more bytes than 64 bits hold");
  return value << shift;
}

JitMode RuntimeConfig::parse_jit_mode(std::string_view text, std::string_view what) {
  if (text == "1" || text == "true") return JitMode::kOn;
  if (text == "0" || text == "false") return JitMode::kOff;
  for (const EnumName<JitMode>& row : kJitModeNames) {
    if (text == row.name) return row.value;
  }
  std::string modes;  // "on, warn, async or off"
  for (size_t i = 0; i < std::size(kJitModeNames); ++i) {
    modes += i == 0 ? "" : i + 1 < std::size(kJitModeNames) ? ", " : " or ";
    modes += kJitModeNames[i].name;
  }
  throw InvalidArgument(fmt::format("{}='{}' is not {}", what, cache::printable(text), modes));
}

const char* jit_mode_name(JitMode mode) noexcept { return enum_name(kJitModeNames, mode); }

RuntimeConfig RuntimeConfig::from_env() {
  RuntimeConfig c;
  if (std::string dir = env("KJIT_CACHE_DIR"); !dir.empty()) {
    c.cache_dir = dir;
  } else if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    c.cache_dir = xdg + "/kjit";
  } else if (std::string home = env("HOME"); !home.empty()) {
    c.cache_dir = home + "/.cache/kjit";
  } else {
    c.cache_dir = "/tmp/kjit-cache";
  }
  c.disk_cache = !truthy(env("KJIT_CACHE_DISABLE"));
  if (std::string cap = env("KJIT_CACHE_MAX_BYTES"); !cap.empty()) {
    c.cache_max_bytes = parse_bytes(cap, "KJIT_CACHE_MAX_BYTES");
  }
  c.kernel_dir = env("KJIT_KERNEL_DIR");
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (std::string home = env(var); !home.empty()) {
      c.cuda_home = home;
      break;
    }
  }
  c.verbose = truthy(env("KJIT_VERBOSE"));
  c.attention_variant = env("KJIT_ATTN_VARIANT");
  c.record_path = env("KJIT_RECORD");
  if (std::string jit = env("KJIT_JIT"); !jit.empty()) c.jit = parse_jit_mode(jit, "KJIT_JIT");
  c.background_threads = env_int("KJIT_JIT_THREADS", 1, 16, c.background_threads);
  c.background_queue = env_int("KJIT_JIT_QUEUE", 1, 4096, c.background_queue);
  c.nvtx = truthy(env("KJIT_NVTX"));
  if (std::string tuning = env("KJIT_TUNING"); !tuning.empty()) {
    if (tuning == "off" || tuning == "0" || tuning == "false") {
      c.tuning = false;
    } else if (tuning != "on" && tuning != "1" && tuning != "true") {
      throw InvalidArgument(fmt::format("KJIT_TUNING='{}' is not on or off", cache::printable(tuning)));
    }
  }
  c.remote = RemoteConfig::from_env();
  if (c.record_path == kRecordRemote && !c.remote.enabled()) {
    throw InvalidArgument("KJIT_RECORD=remote: records into the fleet tier, but KJIT_REMOTE is not set");
  }
  return c;
}

}  // namespace kjit
