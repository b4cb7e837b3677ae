// The toolkit memo's record: its body format, load and save (toolkit_memo.hpp).
#include "runtime/toolkit_memo.hpp"

#include "cache/le_bytes.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <ctime>

namespace kjit::detail {
namespace {

using cache::put_le;

constexpr std::string_view kMagic = "KJITTKMM";
/// Records are kilobytes; a larger file is not one of ours and is not read into memory.
constexpr uint64_t kMaxRecordBytes = uint64_t{16} << 20;

std::atomic<int64_t> min_age_ns{int64_t{2'000'000'000}};

}  // namespace

int64_t realtime_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

bool stamp_is_settled(const FileStamp& s, int64_t read_start_ns) {
  // Timestamps come from a coarse clock (a kernel tick, or seconds on some filesystems): a file
  // changed just before it was read can change again with the same mtime and ctime.
  const int64_t last_change = std::max(s.mtime_ns, s.ctime_ns);
  return (s.regular || s.directory) && last_change <= read_start_ns - min_age_ns.load(std::memory_order_relaxed);
}

int64_t set_toolkit_memo_min_age_ns(int64_t ns) { return min_age_ns.exchange(ns); }

std::string encode_memo(const MemoRecord& record) {
  std::string body;
  put_memo_str(body, memo_library());
  put_le(body, record.toolkit_dirs.size(), 4);
  for (const std::string& d : record.toolkit_dirs) put_memo_str(body, d);
  put_le(body, record.closures.size(), 4);
  for (const MemoClosure& c : record.closures) {
    put_memo_str(body, c.root);
    put_le(body, c.files.size(), 4);
    for (const auto& [path, xxh3] : c.files) {
      put_memo_str(body, path);
      put_memo_str(body, xxh3);
    }
    put_le(body, c.names.size(), 4);
    for (const std::string& n : c.names) put_memo_str(body, n);
    put_le(body, c.checks.size(), 4);
    for (const auto& [path, stamp] : c.checks) {
      put_memo_str(body, path);
      put_memo_stamp(body, stamp);
    }
  }
  return frame_memo(kMagic, kMemoVersion, body);
}

std::optional<MemoRecord> decode_memo(std::string_view bytes) {
  const std::optional<std::string_view> body = unframe_memo(bytes, kMagic, kMemoVersion);
  if (!body) return std::nullopt;
  MemoReader r(*body);
  if (r.view() != memo_library()) return std::nullopt;
  MemoRecord out;
  out.toolkit_dirs.resize(r.count(4));
  for (std::string& d : out.toolkit_dirs) d = r.str();
  out.closures.resize(r.count(16));
  for (MemoClosure& c : out.closures) {
    c.root = r.str();
    c.files.resize(r.count(8));
    for (auto& [path, xxh3] : c.files) {
      path = r.str();
      xxh3 = r.str();
    }
    c.names.resize(r.count(4));
    for (std::string& n : c.names) n = r.str();
    c.checks.resize(r.count(5));
    for (auto& [path, stamp] : c.checks) {
      path = r.str();
      stamp = r.stamp();
    }
    if (!r.ok()) return std::nullopt;
  }
  if (!r.ok() || !r.at_end()) return std::nullopt;
  return out;
}

std::string memo_record_path(const std::string& memo_dir, const std::vector<std::string>& dirs) {
  // Length-prefixed, so no two lists of directories serialize alike.
  std::string id;
  for (const std::string& d : dirs) put_memo_str(id, d);
  const XXH128_hash_t h = XXH3_128bits(id.data(), id.size());
  return fmt::format("{}/{:016x}{:016x}.memo", memo_dir, h.high64, h.low64);
}

std::optional<MemoRecord> load_memo(const std::string& path, const std::vector<std::string>& dirs) {
  const std::optional<std::string> bytes = read_memo_file(path, kMaxRecordBytes);
  if (!bytes) return std::nullopt;
  std::optional<MemoRecord> record = decode_memo(*bytes);
  // Another list of directories whose hash collides, or a record copied by hand: not ours.
  if (!record || record->toolkit_dirs != dirs) return std::nullopt;
  return record;
}

bool save_memo(const std::string& path, const MemoRecord& record) {
  std::string bytes;
  try {
    bytes = encode_memo(record);
  } catch (const std::exception&) {
    return false;  // out of memory: the next process recomputes
  }
  return write_memo_file(path, bytes);
}

}  // namespace kjit::detail
