// The key memo's records: format, recall and remember (key_memo.hpp).
#include "runtime/key_memo.hpp"

#include "cache/le_bytes.hpp"
#include "runtime/toolkit_memo.hpp"

#include <fmt/format.h>

namespace kjit::detail {
namespace {

using cache::put_le;

constexpr std::string_view kMagic = "KJITKEYM";
/// A record holds a few hundred checks: kilobytes. A larger file is not one of ours.
constexpr uint64_t kMaxRecordBytes = uint64_t{4} << 20;

void put_key(std::string& out, const cache::Key& k) {
  put_le(out, k.hi, 8);
  put_le(out, k.lo, 8);
}

cache::Key get_key(MemoReader& r) {
  cache::Key k;
  k.hi = r.u(8);
  k.lo = r.u(8);
  return k;
}

// The checks as a record keeps them: every path where the walk found no regular file becomes the
// stamp of the nearest directory above it that exists. Nothing can appear at the path without an
// entry being added to (or replaced in) that directory, which moves its mtime and ctime; so one
// stat stands for every empty path below it (64 paths, 3 directories for rotary). A directory
// changed within the minimum age keeps its paths as they are (a change in the same timestamp
// tick would go unseen).
std::map<std::string, FileStamp> compact(const KeyChecks& checks) {
  std::map<std::string, FileStamp> out;
  std::map<std::string, FileStamp> dirs;  // what stamp_dir said of each directory asked about
  const int64_t now = realtime_ns();
  for (const auto& [path, stamp] : checks.stamps) {
    if (stamp.regular || path.empty() || path.front() != '/') {  // (relative: the path itself)
      out.emplace(path, stamp);
      continue;
    }
    std::string dir = path;
    FileStamp nearest;
    while (!nearest.directory) {
      const size_t slash = dir.rfind('/');
      if (slash == 0 || slash == std::string::npos) break;
      dir.resize(slash);
      auto it = dirs.find(dir);
      if (it == dirs.end()) it = dirs.emplace(dir, stamp_dir(dir)).first;
      nearest = it->second;
    }
    if (nearest.directory && stamp_is_settled(nearest, now)) {
      out.emplace(dir, nearest);
    } else {
      out.emplace(path, stamp);
    }
  }
  return out;
}

}  // namespace

std::string key_memo_path(const std::string& keys_dir, const cache::Key& id) {
  const std::string hex = id.hex();
  return fmt::format("{}/{}/{}.memo", keys_dir, hex.substr(0, 2), hex);
}

std::string encode_key_memo(const cache::Key& id, const cache::Key& key, const KeyChecks& checks) {
  std::string body;
  put_memo_str(body, memo_library());
  put_key(body, id);
  put_key(body, key);
  const std::map<std::string, FileStamp> kept = compact(checks);
  put_le(body, kept.size(), 4);
  for (const auto& [path, stamp] : kept) {
    put_memo_str(body, path);
    put_memo_stamp(body, stamp);
  }
  return frame_memo(kMagic, kKeyMemoVersion, body);
}

std::optional<KeyMemo> decode_key_memo(std::string_view bytes, const cache::Key& id) {
  const std::optional<std::string_view> body = unframe_memo(bytes, kMagic, kKeyMemoVersion);
  if (!body) return std::nullopt;
  MemoReader r(*body);
  if (r.view() != memo_library()) return std::nullopt;
  if (get_key(r) != id) return std::nullopt;  // a record copied under another name
  KeyMemo out;
  out.key = get_key(r);
  out.checks.resize(r.count(5));
  for (auto& [path, stamp] : out.checks) {
    path = r.str();
    stamp = r.stamp();
  }
  if (!r.ok() || !r.at_end()) return std::nullopt;
  return out;
}

std::optional<cache::Key> recall_key(const std::string& keys_dir, const cache::Key& id) {
  const std::optional<std::string> bytes = read_memo_file(key_memo_path(keys_dir, id), kMaxRecordBytes);
  if (!bytes) return std::nullopt;
  const std::optional<KeyMemo> memo = decode_key_memo(*bytes, id);
  if (!memo) return std::nullopt;
  for (const auto& [path, want] : memo->checks) {
    if (!stamp_holds(path, want)) return std::nullopt;
  }
  return memo->key;
}

bool remember_key(const std::string& keys_dir, const cache::Key& id, const cache::Key& key, const KeyChecks& checks) {
  if (!checks.usable) return false;
  std::string bytes;
  try {
    bytes = encode_key_memo(id, key, checks);
  } catch (const std::exception&) {
    return false;  // out of memory: the next process walks
  }
  return write_memo_file(key_memo_path(keys_dir, id), bytes);
}

}  // namespace kjit::detail
