#pragma once
/// \file warn.hpp
/// kjit's one warning channel. Every layer (cache/, runtime/, the ops, the CLI) reports problems
/// it survives through kjit::warn, so they all look alike ("kjit: warning: …" on stderr), arrive
/// as whole lines, and can be redirected in one place later. cache/ is the lowest layer, which
/// is why the channel lives here: everything above may include it.

#include <string_view>

namespace kjit {

/// Writes "kjit: warning: <message>\n" to stderr in one call (so lines from concurrent threads
/// and processes do not interleave). `message` names what went wrong and where (a path, a key,
/// a variable), without the "kjit: warning: " prefix or a trailing newline. Never throws.
void warn(std::string_view message) noexcept;

}  // namespace kjit
