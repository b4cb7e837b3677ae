#pragma once
/// \file input_file.hpp
/// Reading a file a person named on a command line or in the API (a warm-up manifest, a bundle,
/// a tuning report, a shapes file). Unlike the cache's own files, which fail quietly into misses
/// (file_util.hpp), a named file that cannot be read is the caller's mistake: it is refused with
/// one message that names what the file was for, its path and the reason.

#include <cstdint>
#include <string>

namespace kjit::cache {

/// The bytes of the regular file at `path`, read whole; `what` names its role in messages
/// ("manifest", "bundle", "tune report"). Throws InvalidArgument, one line naming `what`, `path`
/// and the reason, for a missing or unreadable file ("cannot read <what> <path>: <strerror>"), a
/// folder ("... is a folder, not a file"), a FIFO, socket or device ("... is not a regular file
/// (a FIFO, socket or device)") and a file larger than `max_bytes`. The kind is checked by path
/// before anything is opened: opening or reading a FIFO would block, and the cache's own readers
/// would warn about it before this refusal, a second message for one mistake.
std::string read_input_file(const std::string& path, const char* what, uint64_t max_bytes);

}  // namespace kjit::cache
