// kjit's warning channel: one line on stderr per warning.

#include "cache/warn.hpp"

#include <fmt/format.h>

#include <cstdio>

namespace kjit {

void warn(std::string_view message) noexcept {
  try {
    // One formatted buffer, one fwrite: stderr is unbuffered, so piecewise printing could
    // interleave with other writers mid-line.
    const std::string line = fmt::format("kjit: warning: {}\n", message);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  } catch (...) {
    // Out of memory while formatting a warning: dropping the warning is the only safe choice.
  }
}

}  // namespace kjit
