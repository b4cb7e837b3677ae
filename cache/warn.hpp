#pragma once
/// \file warn.hpp
/// The cache's one way to complain: a line on stderr. The cache is an optimization, so its
/// problems are reported and survived rather than thrown.

#include <string_view>

namespace kjit::cache::detail {

/// Writes "kjit: warning: <message>\n" to stderr in one call (so lines from concurrent threads
/// and processes do not interleave). Never throws.
void warn(std::string_view message) noexcept;

}  // namespace kjit::cache::detail
