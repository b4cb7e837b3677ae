// Per-entry hit counts: the append-only log and its folded totals (see hits.hpp).
#include "cache/hits.hpp"

#include "cache/file_util.hpp"
#include "cache/warn.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace kjit::cache {
namespace {

constexpr size_t kLineBytes = 32 + 1 + 10 + 1;  // key, blank, 10-digit seconds, newline
/// A log larger than this is not read (a hits.log gone wild must not exhaust memory); it is
/// folded away by the next `ls`/`prune` that may write.
constexpr uint64_t kMaxLogBytes = 256ull << 20;

std::string log_path(const std::string& dir) { return dir + "/hits.log"; }
std::string totals_path(const std::string& dir) { return dir + "/hits.json"; }

void add(HitTable& table, const Key& key, uint64_t hits, int64_t last) {
  HitCount& c = table[key];
  c.hits += hits;
  c.last_unix = std::max(c.last_unix, last);
}

/// Adds the log lines in `text` to `table`; damaged lines are skipped.
void add_log(HitTable& table, std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) break;  // a line still being written (or torn): skip
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    Key key;
    if (line.size() < 34 || line[32] != ' ' || !Key::from_hex(line.substr(0, 32), &key)) continue;
    int64_t t = 0;
    bool ok = line.size() > 33 && line.size() <= 33 + 18;
    for (size_t i = 33; ok && i < line.size(); ++i) {
      ok = line[i] >= '0' && line[i] <= '9';
      t = t * 10 + (line[i] - '0');
    }
    if (ok) add(table, key, 1, t);
  }
}

/// The totals in hits.json; a damaged file is warned about (once per process) and reads as empty.
HitTable read_totals(const std::string& dir) {
  HitTable table;
  std::string text;
  const int err = detail::read_file(totals_path(dir), kMaxLogBytes, detail::kReadNoFollow, &text);
  if (err == ENOENT || err == detail::kNotRegularFile) return table;  // the latter warned by open_regular
  nlohmann::json j = err == 0 ? nlohmann::json::parse(text, nullptr, false) : nlohmann::json();
  bool ok = j.is_object() && j.value("version", 0) == 1 && j.contains("entries") && j["entries"].is_object();
  if (ok) {
    for (auto it = j["entries"].begin(); it != j["entries"].end(); ++it) {
      Key key;
      const nlohmann::json& v = it.value();
      if (!Key::from_hex(it.key(), &key) || !v.is_array() || v.size() != 2 || !v[0].is_number_unsigned() ||
          !v[1].is_number_integer()) {
        ok = false;
        break;
      }
      add(table, key, v[0].get<uint64_t>(), v[1].get<int64_t>());
    }
  }
  if (!ok) {
    static std::once_flag once;
    std::call_once(once, [&] {
      warn(fmt::format("hit counts in {} are damaged ({}); counting afresh", totals_path(dir),
                       err != 0 ? detail::errno_text(err) : "not a hits.json of version 1"));
    });
    table.clear();
  }
  return table;
}

int write_totals(const std::string& dir, const HitTable& table) {
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [key, c] : table) entries[key.hex()] = {c.hits, c.last_unix};
  const nlohmann::json j = {{"version", 1}, {"entries", std::move(entries)}};
  return detail::write_file_atomic(totals_path(dir), j.dump());
}

std::string read_fd(int fd) {
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || text.size() + static_cast<size_t>(n) > kMaxLogBytes) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace

void record_hit(const std::string& dir, const Key& key, int64_t now_unix) noexcept {
  try {
    char line[kLineBytes + 8];
    const std::string hex = key.hex();
    const int n = std::snprintf(line, sizeof line, "%s %010lld\n", hex.c_str(), static_cast<long long>(now_unix));
    if (n <= 0 || static_cast<size_t>(n) >= sizeof line) return;
    (void)detail::append_line(log_path(dir), std::string_view(line, static_cast<size_t>(n)));
  } catch (...) {
  }
}

HitTable read_hits(const std::string& dir, bool fold, const HitTable* keep) {
  int fd = -1;
  if (fold) (void)detail::open_regular(log_path(dir), O_RDWR | O_NOFOLLOW, &fd);
  const bool folding = fd >= 0 && ::access(dir.c_str(), W_OK) == 0;
  if (!folding) {
    if (fd >= 0) ::close(fd);
    (void)detail::open_regular(log_path(dir), O_RDONLY | O_NOFOLLOW, &fd);
  }
  if (fd >= 0) {
    while (::flock(fd, folding ? LOCK_EX : LOCK_SH) != 0 && errno == EINTR) {
    }
  }
  HitTable table = read_totals(dir);
  if (fd >= 0) add_log(table, read_fd(fd));
  if (keep != nullptr) {
    for (auto it = table.begin(); it != table.end();) it = keep->count(it->first) ? std::next(it) : table.erase(it);
  }
  if (folding && write_totals(dir, table) == 0) {
    // Only after the totals are safely renamed into place: a failure leaves the log to fold later.
    while (::ftruncate(fd, 0) != 0 && errno == EINTR) {
    }
  }
  if (fd >= 0) ::close(fd);
  return table;
}

void clear_hits(const std::string& dir) noexcept {
  int fd = -1;
  if (detail::open_regular(log_path(dir), O_RDWR | O_NOFOLLOW, &fd) == 0) {
    while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    ::unlink(totals_path(dir).c_str());
    while (::ftruncate(fd, 0) != 0 && errno == EINTR) {
    }
    ::close(fd);
  } else {
    ::unlink(totals_path(dir).c_str());
  }
}

}  // namespace kjit::cache
