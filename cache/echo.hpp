#pragma once
/// \file echo.hpp
/// Text from outside (an environment variable, a path, a host name, a server's reply) as a
/// message shows it. A message quotes such text back so the reader sees what was wrong, but
/// the text may hold a line break that splits the one-line message, an escape sequence that
/// rewrites the terminal, a megabyte of junk, or a password. Every message that echoes a value
/// goes through printable() (a path: shown_path()); every message that echoes a Redis URL goes
/// through shown_url().

#include <cstddef>
#include <string>
#include <string_view>

namespace kjit::cache {

/// The most bytes of a value printable() keeps by default.
inline constexpr size_t kMaxEchoBytes = 200;
/// The most bytes of a path shown_path() keeps: PATH_MAX, since no longer path can be opened.
inline constexpr size_t kMaxEchoPathBytes = 4096;

/// `text` with every control character (bytes 0x00-0x1f and 0x7f) escaped as C writes it
/// (\n, \r, \t, else \xHH), cut after `max_bytes` bytes of its escaped form (never inside an
/// escape or a UTF-8 character) and then marked "… (N bytes)", N being the length of `text`.
/// Other bytes, UTF-8 included, are kept as they are.
std::string printable(std::string_view text, size_t max_bytes = kMaxEchoBytes);

/// A Redis URL without its credentials, whatever its shape, malformed ones included: what
/// stands before the last '@' of the part after the scheme ("redis://", "redis//", "redis:/", a
/// blank before it, any scheme) is replaced by "***"; without an '@', a port that is not a
/// number ("redis://:secret") is; and so is the value of every query parameter but db.
/// `redis://user:pw@host:1/0` → `redis://***@host:1/0`. Nothing is escaped or cut.
std::string redact_url(std::string_view url);

/// printable(path, kMaxEchoPathBytes): a file name is shown whole unless it cannot be one.
std::string shown_path(std::string_view path);

/// printable(redact_url(url)): what a message shows of a KJIT_REMOTE value.
std::string shown_url(std::string_view url);

}  // namespace kjit::cache
