// The fallback log (see fallback_log.hpp).
#include "cache/fallback_log.hpp"

#include "cache/file_util.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

namespace kjit::cache {
namespace {

/// A log larger than this is not read: `kjit cache explain` must not exhaust memory on a log gone wild.
constexpr uint64_t kMaxLogBytes = 64ull << 20;

std::string log_path(const std::string& root) { return root + "/fallbacks.log"; }

/// The next blank-separated word of `line` from `*at`, moving `*at` past it and one blank (past
/// the end of `line` when it was the last word); empty past the end.
std::string_view word(std::string_view line, size_t* at) {
  if (*at >= line.size()) {
    *at = line.size() + 1;
    return {};
  }
  const size_t end = std::min(line.find(' ', *at), line.size());
  const std::string_view w = line.substr(*at, end - *at);
  *at = end + 1;
  return w;
}

}  // namespace

void record_fallback(const std::string& root, const FallbackRecord& r) noexcept {
  try {
    if (r.family.find_first_of(" \n") != std::string::npos || r.params.find('\n') != std::string::npos) return;
    const std::string line =
        fmt::format("{} {} {} {} {}\n", r.missing.hex(), r.fallback.hex(), r.unix, r.family, r.params);
    (void)detail::append_line(log_path(root), line);
  } catch (...) {
  }
}

std::vector<FallbackRecord> read_fallbacks(const std::string& root, const Key& missing) {
  std::vector<FallbackRecord> out;
  std::string text;
  if (detail::read_file(log_path(root), kMaxLogBytes, detail::kReadNoFollow, &text) != 0) return out;
  const std::string want = missing.hex();
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // a line still being written (or torn): skip
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.compare(0, want.size(), want) != 0) continue;
    FallbackRecord r;
    size_t at = 0;
    const std::string_view m = word(line, &at), f = word(line, &at), t = word(line, &at), family = word(line, &at);
    if (!Key::from_hex(m, &r.missing) || !Key::from_hex(f, &r.fallback) || t.empty() || t.size() > 18 ||
        family.empty() || at > line.size()) {
      continue;
    }
    bool digits = true;
    for (char c : t) {
      digits = digits && c >= '0' && c <= '9';
      r.unix = r.unix * 10 + (c - '0');
    }
    if (!digits) continue;
    r.family = std::string(family);
    r.params = std::string(line.substr(at));
    out.push_back(std::move(r));
  }
  return out;
}

void clear_fallbacks(const std::string& root) noexcept {
  int fd = -1;
  if (detail::open_regular(log_path(root), O_RDWR | O_NOFOLLOW, &fd) != 0) return;
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  while (::ftruncate(fd, 0) != 0 && errno == EINTR) {
  }
  ::close(fd);
}

}  // namespace kjit::cache
