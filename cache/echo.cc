// Text from outside as messages show it (echo.hpp): escaped, bounded, credentials removed.
#include "cache/echo.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kjit::cache {
namespace {

/// The escaped form of control byte `c`.
std::string escape(unsigned char c) {
  switch (c) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return fmt::format("\\x{:02x}", c);
  }
}

/// The length of the UTF-8 character that begins with `lead` (1 for a byte that begins none).
size_t utf8_length(unsigned char lead) {
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  if (lead >= 0xe0) return lead <= 0xef ? 3 : 1;
  if (lead >= 0xc2) return 2;
  return 1;
}

bool is_scheme_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-';
}

bool all_digits(std::string_view s) {
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

/// `query` (after its '?') with every parameter's value but db's replaced by "***".
std::string redact_query(std::string_view query) {
  std::string out;
  for (size_t at = 0; at <= query.size();) {
    size_t end = query.find('&', at);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view param = query.substr(at, end - at);
    const size_t eq = param.find('=');
    if (at > 0) out += '&';
    if (eq == std::string_view::npos) {
      out += param.empty() ? "" : "***";
    } else {
      out += param.substr(0, eq);
      out += param.substr(0, eq) == "db" ? std::string(param.substr(eq)) : std::string("=***");
    }
    at = end + 1;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    std::string piece;
    size_t used = 1;
    if (c < 0x20 || c == 0x7f) {
      piece = escape(c);
    } else {
      used = std::min(utf8_length(c), text.size() - i);
      piece = std::string(text.substr(i, used));
    }
    if (out.size() + piece.size() > max_bytes) {
      return fmt::format("{}… ({} bytes)", out, text.size());
    }
    out += piece;
    i += used;
  }
  return out;
}

std::string redact_url(std::string_view url) {
  // The scheme and its separators: leading blanks, letters and the like, then ':' and up to
  // two '/', however many of them the URL has. Credentials start after them.
  size_t start = 0;
  while (start < url.size() && (url[start] == ' ' || url[start] == '\t')) ++start;
  size_t scheme_end = start;
  while (scheme_end < url.size() && is_scheme_char(url[scheme_end])) ++scheme_end;
  size_t sep = scheme_end;
  if (sep < url.size() && url[sep] == ':') ++sep;
  for (int n = 0; n < 2 && sep < url.size() && url[sep] == '/'; ++n) ++sep;
  // A URL without a separator has no scheme: whatever comes first may be a credential.
  start = sep > scheme_end ? sep : 0;

  std::string out;
  size_t rest = start;
  if (const size_t at = url.rfind('@'); at != std::string_view::npos && at >= start) {
    out = std::string(url.substr(0, start)) + "***";
    rest = at;
  } else {
    // No '@': a port that is not a number may be a password given without a host.
    size_t end = url.find_first_of("/?#", start);
    if (end == std::string_view::npos) end = url.size();
    const std::string_view authority = url.substr(start, end - start);
    const size_t bracket = authority.rfind(']');
    const size_t colon = authority.rfind(':');
    out = std::string(url.substr(0, start));
    if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket) &&
        !all_digits(authority.substr(colon + 1))) {
      out += std::string(authority.substr(0, colon + 1)) + "***";
      rest = end;
    }
  }
  const std::string_view tail = url.substr(rest);
  if (const size_t q = tail.find('?'); q != std::string_view::npos) {
    out += std::string(tail.substr(0, q + 1)) + redact_query(tail.substr(q + 1));
  } else {
    out += tail;
  }
  return out;
}

std::string shown_path(std::string_view path) { return printable(path, kMaxEchoPathBytes); }

std::string shown_url(std::string_view url) { return printable(redact_url(url)); }

}  // namespace kjit::cache
