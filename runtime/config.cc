#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace kjit {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// "512M", "2G", "1048576": bytes with an optional binary K/M/G/T suffix.
uint64_t parse_bytes(const std::string& text, const char* variable) {
  size_t pos = 0;
  unsigned long long value = 0;
  // stoull accepts "-1" (and wraps it); a byte count starts with a digit.
  const bool starts_with_digit = !text.empty() && std::isdigit(static_cast<unsigned char>(text[0]));
  try {
    if (starts_with_digit) value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    pos = std::string::npos;
  }
  if (!starts_with_digit || pos == std::string::npos || pos == 0) {
    throw InvalidArgument(fmt::format("{}='{}' is not a byte count (e.g. 536870912, 512M, 2G)", variable, text));
  }
  std::string suffix = text.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  int shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix.size() == 1 && std::toupper(suffix[0]) == 'K') shift = 10;
  else if (suffix.size() == 1 && std::toupper(suffix[0]) == 'M') shift = 20;
  else if (suffix.size() == 1 && std::toupper(suffix[0]) == 'G') shift = 30;
  else if (suffix.size() == 1 && std::toupper(suffix[0]) == 'T') shift = 40;
  else throw InvalidArgument(fmt::format("{}='{}': unknown suffix '{}' (use K, M, G or T)", variable, text, suffix));
  if (shift > 0 && value > (~0ull >> shift)) {
    throw InvalidArgument(fmt::format("{}='{}' is more bytes than 64 bits hold", variable, text));
  }
  return static_cast<uint64_t>(value) << shift;
}

bool truthy(const std::string& v) { return !v.empty() && v != "0" && v != "false" && v != "off"; }

}  // namespace

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
  return c;
}

}  // namespace kjit
