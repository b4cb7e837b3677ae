// RemoteConfig: the KJIT_REMOTE* variables, read once (from RuntimeConfig::from_env). A malformed
// value is an InvalidArgument naming the variable: a typo must not silently turn the tier off.
#include <kjit/error.hpp>
#include <kjit/remote.hpp>
#include <kjit/runtime.hpp>

#include "cache/echo.hpp"
#include "cache/input_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kjit {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// A decimal number in [lo, hi], or nullopt.
std::optional<int64_t> whole_number(std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (text.empty()) return std::nullopt;
  for (char ch : text) {
    if (!std::isdigit(static_cast<unsigned char>(ch)) || v > (hi - (ch - '0')) / 10) return std::nullopt;
    v = v * 10 + (ch - '0');
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

/// A decimal integer in [lo, hi], or InvalidArgument naming `var`.
int64_t parse_int(std::string_view text, const char* var, int64_t lo, int64_t hi) {
  const std::optional<int64_t> v = whole_number(text, lo, hi);
  if (!v) {
    throw InvalidArgument(
        fmt::format("{}='{}' is not a whole number from {} to {}", var, cache::printable(text), lo, hi));
  }
  return *v;
}

[[noreturn]] void bad_url(const std::string& url, std::string_view why) {
  throw InvalidArgument(fmt::format("KJIT_REMOTE='{}' is not a Redis URL: {} (expected "
                                    "redis://[user:password@]host[:port][/db], with an IPv6 host in brackets "
                                    "(redis://[::1]:6379), or unix:///path/to.sock[?db=N])",
                                    cache::shown_url(url), why));
}

/// A number in [lo, hi] taken from the URL, or nullopt. The text is never echoed on its own: in
/// a malformed URL a "port" may be a password.
std::optional<int> url_number(std::string_view text, int lo, int hi) {
  const std::optional<int64_t> v = whole_number(text, lo, hi);
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

bool is_host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

/// An IPv6 literal as it stands in brackets: hex digits, ':' and '.' (an embedded IPv4), at
/// least two ':', and optionally a zone ("%eth0").
bool is_ipv6_literal(std::string_view text) {
  const size_t zone = text.find('%');
  const std::string_view addr = text.substr(0, zone);
  size_t colons = 0;
  for (char c : addr) {
    if (c == ':') ++colons;
    else if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  }
  if (colons < 2) return false;
  if (zone == std::string_view::npos) return true;
  const std::string_view name = text.substr(zone + 1);
  return !name.empty() && std::all_of(name.begin(), name.end(), is_host_char);
}

constexpr int kMaxDb = 1 << 20;

/// KJIT_REMOTE_TRUSTED_KEYS as set: its ':'-separated files. Trust must never be turned off by
/// a slip ("$A:$B" with both empty, a doubled or trailing ':'), so an empty or blank entry, or
/// a value that names no file, is an InvalidArgument rather than "trust nothing".
std::vector<std::string> parse_trusted_keys(std::string_view value) {
  constexpr const char* kForms = "it is one or more public key files separated by ':' (a.pub:b.pub); unset it to "
                                 "accept unsigned values";
  auto is_blank = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  if (std::all_of(value.begin(), value.end(), [&](char ch) { return ch == ':' || is_blank(ch); })) {
    throw InvalidArgument(
        fmt::format("KJIT_REMOTE_TRUSTED_KEYS='{}' is set but names no key file: {}", cache::printable(value), kForms));
  }
  std::vector<std::string> files;
  for (size_t start = 0;;) {
    size_t end = value.find(':', start);
    if (end == std::string_view::npos) end = value.size();
    const std::string_view file = value.substr(start, end - start);
    if (std::all_of(file.begin(), file.end(), is_blank)) {
      throw InvalidArgument(fmt::format("KJIT_REMOTE_TRUSTED_KEYS='{}': entry {} is empty: {}", cache::printable(value),
                                        files.size() + 1, kForms));
    }
    files.emplace_back(file);
    if (end == value.size()) break;
    start = end + 1;
  }
  return files;
}

}  // namespace

void RemoteConfig::parse_url(const std::string& text) {
  url = text;
  host.clear();
  user.clear();
  password.clear();
  socket_path.clear();
  port = 6379;
  db = 0;
  constexpr std::string_view kRedis = "redis://", kUnix = "unix://";
  for (char c : text) {
    if (std::iscntrl(static_cast<unsigned char>(c))) bad_url(text, "it holds a control character");
  }
  if (text.empty()) bad_url(text, "it is empty");
  if (std::isspace(static_cast<unsigned char>(text.front())) || std::isspace(static_cast<unsigned char>(text.back()))) {
    bad_url(text, "it begins or ends with a blank");
  }
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
      const std::optional<int> n = url_number(query.substr(3), 0, kMaxDb);
      if (!n) bad_url(text, fmt::format("db must be a whole number from 0 to {}", kMaxDb));
      db = *n;
    }
    return;
  }
  if (rest.substr(0, kRedis.size()) != kRedis) {
    if (rest.substr(0, 9) == "rediss://") {
      bad_url(text, "TLS (rediss://) is not supported by this build's hiredis; use a unix socket, a private "
                    "network or a local TLS proxy");
    }
    bad_url(text, "it must begin with redis:// or unix://");
  }
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
    if (slash + 1 < rest.size()) {
      const std::optional<int> n = url_number(rest.substr(slash + 1), 0, kMaxDb);
      if (!n) bad_url(text, fmt::format("the db after the '/' must be a whole number from 0 to {}", kMaxDb));
      db = *n;
    }
  }
  std::string_view port_text;
  bool has_port = false;
  if (!hostport.empty() && hostport.front() == '[') {
    // An IPv6 literal: [address] then optionally :port.
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) bad_url(text, "an IPv6 host's '[' has no ']'");
    host = std::string(hostport.substr(1, close - 1));
    if (!is_ipv6_literal(host)) bad_url(text, "what stands in brackets is not an IPv6 address");
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(text, "only ':port' may follow an IPv6 host's ']'");
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = hostport.find(':');
    if (colon != std::string_view::npos && hostport.find(':', colon + 1) != std::string_view::npos) {
      bad_url(text, "an IPv6 host goes in brackets (redis://[::1]:6379)");
    }
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      has_port = true;
      hostport = hostport.substr(0, colon);
    }
    if (hostport.empty()) bad_url(text, "no host");
    if (hostport.size() > 253) bad_url(text, "a host name is at most 253 characters");
    if (!std::all_of(hostport.begin(), hostport.end(), is_host_char)) {
      bad_url(text, "a host name is letters, digits, '.', '-' and '_'");
    }
    host = std::string(hostport);
  }
  if (has_port) {
    const std::optional<int> n = url_number(port_text, 1, 65535);
    if (!n) bad_url(text, "the port must be a whole number from 1 to 65535");
    port = *n;
  }
}

std::string RemoteConfig::display() const {
  if (!socket_path.empty()) return fmt::format("unix://{}?db={}", cache::shown_path(socket_path), db);
  const std::string shown = cache::printable(host);
  return host.find(':') != std::string::npos ? fmt::format("redis://[{}]:{}/{}", shown, port, db)
                                             : fmt::format("redis://{}:{}/{}", shown, port, db);
}

RemoteConfig RemoteConfig::from_env() {
  RemoteConfig c;
  // The keys also sign and check OCI images of the cache (`kjit cache export|import --oci`),
  // which need no tier: read whether or not KJIT_REMOTE is set.
  c.signing_key_file = env("KJIT_REMOTE_SIGNING_KEY");
  if (const char* trusted = std::getenv("KJIT_REMOTE_TRUSTED_KEYS")) c.trusted_key_files = parse_trusted_keys(trusted);
  const std::string url = env("KJIT_REMOTE");
  if (url.empty()) return c;
  c.parse_url(url);
  if (std::string file = env("KJIT_REMOTE_PASSWORD_FILE"); !file.empty()) {
    // read_input_file refuses a FIFO or a folder by its path, before anything would block on it.
    std::istringstream in(cache::read_input_file(file, "KJIT_REMOTE_PASSWORD_FILE", 1 << 20));
    std::string line;
    if (!std::getline(in, line)) throw InvalidArgument(fmt::format("KJIT_REMOTE_PASSWORD_FILE='{}' is empty", cache::shown_path(file)));
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    c.password = line;
  }
  if (std::string ns = env("KJIT_REMOTE_NAMESPACE"); !ns.empty()) {
    // Braces would break the hash tags that keep one entry's keys in one cluster slot.
    if (std::any_of(ns.begin(), ns.end(), [](char ch) {
          return ch == '{' || ch == '}' || std::isspace(static_cast<unsigned char>(ch)) ||
                 std::iscntrl(static_cast<unsigned char>(ch));
        })) {
      throw InvalidArgument(fmt::format("KJIT_REMOTE_NAMESPACE='{}' may not contain braces or blanks",
                                        cache::printable(ns)));
    }
    c.ns = ns;
  }
  if (std::string mode = env("KJIT_REMOTE_MODE"); !mode.empty()) {
    if (mode == "rw") {
      c.mode = RemoteMode::kReadWrite;
    } else if (mode == "ro") {
      c.mode = RemoteMode::kReadOnly;
    } else {
      throw InvalidArgument(fmt::format("KJIT_REMOTE_MODE='{}' is not rw or ro", cache::printable(mode)));
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
  return c;
}

}  // namespace kjit
