// RemoteConfig: the KJIT_REMOTE* variables, read once (from RuntimeConfig::from_env). A malformed
// value is an InvalidArgument naming the variable: a typo must not silently turn the tier off.
#include <kjit/error.hpp>
#include <kjit/remote.hpp>
#include <kjit/runtime.hpp>

#include "cache/input_file.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace kjit {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// A decimal integer in [lo, hi], or InvalidArgument naming `var`.
int64_t parse_int(std::string_view text, const char* var, int64_t lo, int64_t hi) {
  int64_t v = 0;
  bool ok = !text.empty();
  for (char ch : text) {
    if (!std::isdigit(static_cast<unsigned char>(ch)) || v > (hi - (ch - '0')) / 10) {
      ok = false;
      break;
    }
    v = v * 10 + (ch - '0');
  }
  if (!ok || v < lo || v > hi) {
    throw InvalidArgument(fmt::format("{}='{}' is not a whole number from {} to {}", var, text, lo, hi));
  }
  return v;
}

[[noreturn]] void bad_url(const std::string& url, const char* why) {
  throw InvalidArgument(fmt::format("KJIT_REMOTE='{}' is not a Redis URL: {} (expected "
                                    "redis://[user:password@]host[:port][/db] or unix:///path/to.sock[?db=N])",
                                    url, why));
}

}  // namespace

void RemoteConfig::parse_url(const std::string& text) {
  url = text;
  host.clear();
  socket_path.clear();
  port = 6379;
  db = 0;
  constexpr std::string_view kRedis = "redis://", kUnix = "unix://";
  std::string_view rest(text);
  if (rest.substr(0, kUnix.size()) == kUnix) {
    rest.remove_prefix(kUnix.size());
    std::string_view query;
    if (size_t q = rest.find('?'); q != std::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest[0] != '/') bad_url(text, "a unix socket path must be absolute (unix:///run/redis.sock)");
    socket_path = std::string(rest);
    if (!query.empty()) {
      if (query.substr(0, 3) != "db=") bad_url(text, "the only query parameter is db=N");
      db = static_cast<int>(parse_int(query.substr(3), "KJIT_REMOTE (db)", 0, 1 << 20));
    }
    return;
  }
  if (rest.substr(0, kRedis.size()) != kRedis) bad_url(text, "unknown scheme");
  rest.remove_prefix(kRedis.size());
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view auth = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = auth.find(':');
    if (colon == std::string_view::npos) {
      password = std::string(auth);  // redis://password@host, as redis-cli -u reads it
    } else {
      user = std::string(auth.substr(0, colon));
      password = std::string(auth.substr(colon + 1));
    }
  }
  std::string_view hostport = rest;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    if (slash + 1 < rest.size()) db = static_cast<int>(parse_int(rest.substr(slash + 1), "KJIT_REMOTE (db)", 0, 1 << 20));
  }
  if (size_t colon = hostport.rfind(':'); colon != std::string_view::npos && hostport.find(']') == std::string_view::npos) {
    port = static_cast<int>(parse_int(hostport.substr(colon + 1), "KJIT_REMOTE (port)", 1, 65535));
    hostport = hostport.substr(0, colon);
  }
  if (hostport.empty()) bad_url(text, "no host");
  host = std::string(hostport);
}

std::string RemoteConfig::display() const {
  if (!socket_path.empty()) return fmt::format("unix://{}?db={}", socket_path, db);
  return fmt::format("redis://{}:{}/{}", host, port, db);
}

RemoteConfig RemoteConfig::from_env() {
  RemoteConfig c;
  const std::string url = env("KJIT_REMOTE");
  if (url.empty()) return c;
  c.parse_url(url);
  if (std::string file = env("KJIT_REMOTE_PASSWORD_FILE"); !file.empty()) {
    // read_input_file refuses a FIFO or a folder by its path, before anything would block on it.
    std::istringstream in(cache::read_input_file(file, "KJIT_REMOTE_PASSWORD_FILE", 1 << 20));
    std::string line;
    if (!std::getline(in, line)) throw InvalidArgument(fmt::format("KJIT_REMOTE_PASSWORD_FILE='{}' is empty", file));
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    c.password = line;
  }
  if (std::string ns = env("KJIT_REMOTE_NAMESPACE"); !ns.empty()) {
    // Braces would break the hash tags that keep one entry's keys in one cluster slot.
    if (ns.find_first_of("{} \t\n") != std::string::npos) {
      throw InvalidArgument(fmt::format("KJIT_REMOTE_NAMESPACE='{}' may not contain braces or blanks", ns));
    }
    c.ns = ns;
  }
  if (std::string mode = env("KJIT_REMOTE_MODE"); !mode.empty()) {
    if (mode == "rw") {
      c.mode = RemoteMode::kReadWrite;
    } else if (mode == "ro") {
      c.mode = RemoteMode::kReadOnly;
    } else {
      throw InvalidArgument(fmt::format("KJIT_REMOTE_MODE='{}' is not rw or ro", mode));
    }
  }
  auto number = [](const char* var, int64_t lo, int64_t hi, auto& field) {
    if (std::string v = env(var); !v.empty()) {
      field = static_cast<std::remove_reference_t<decltype(field)>>(parse_int(v, var, lo, hi));
    }
  };
  number("KJIT_REMOTE_CONNECT_TIMEOUT_MS", 1, 600000, c.connect_timeout_ms);
  number("KJIT_REMOTE_TIMEOUT_MS", 1, 600000, c.op_timeout_ms);
  number("KJIT_REMOTE_COOLDOWN_MS", 0, 86400000, c.cooldown_ms);
  number("KJIT_REMOTE_LEASE_MS", 10, 86400000, c.lease_ms);
  number("KJIT_REMOTE_MAX_WAIT_MS", 1, 86400000, c.max_wait_ms);
  number("KJIT_REMOTE_TTL_S", 1, int64_t{1} << 40, c.ttl_s);
  number("KJIT_REMOTE_FAILURE_TTL_S", 1, int64_t{1} << 40, c.failure_ttl_s);
  if (std::string cap = env("KJIT_REMOTE_MAX_VALUE_BYTES"); !cap.empty()) {
    c.max_value_bytes = RuntimeConfig::parse_bytes(cap, "KJIT_REMOTE_MAX_VALUE_BYTES");
  }
  c.signing_key_file = env("KJIT_REMOTE_SIGNING_KEY");
  const std::string trusted = env("KJIT_REMOTE_TRUSTED_KEYS");
  for (size_t start = 0; start <= trusted.size() && !trusted.empty();) {
    size_t end = trusted.find(':', start);
    if (end == std::string::npos) end = trusted.size();
    if (end > start) c.trusted_key_files.push_back(trusted.substr(start, end - start));
    start = end + 1;
  }
  return c;
}

}  // namespace kjit
