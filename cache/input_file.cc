// Files a person named, refused with one message (see input_file.hpp).
#include "cache/input_file.hpp"

#include "cache/echo.hpp"
#include "cache/file_util.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace kjit::cache {

std::string read_input_file(const std::string& path, const char* what, uint64_t max_bytes) {
  const std::string shown = shown_path(path);
  // A stat opens nothing. read_file opens regular files only, so a swap after this check still
  // cannot block (it then fails with kNotRegularFile, warned by open_regular).
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec) throw InvalidArgument(fmt::format("cannot read {} {}: {}", what, shown, ec.message()));
  if (st.type() == std::filesystem::file_type::directory) {
    throw InvalidArgument(fmt::format("{} {} is a folder, not a file", what, shown));
  }
  if (st.type() != std::filesystem::file_type::regular) {
    throw InvalidArgument(fmt::format("{} {} is not a regular file (a FIFO, socket or device)", what, shown));
  }
  std::string bytes;
  const int err = detail::read_file(path, max_bytes, detail::kReadPlain, &bytes);
  if (err == EFBIG) {
    throw InvalidArgument(
        fmt::format("{} {} is larger than the {} MiB kjit reads for a {}", what, shown, max_bytes >> 20, what));
  }
  if (err != 0) throw InvalidArgument(fmt::format("cannot read {} {}: {}", what, shown, detail::errno_text(err)));
  return bytes;
}

}  // namespace kjit::cache
