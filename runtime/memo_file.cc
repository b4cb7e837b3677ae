// The frame, codec and file handling the memo records share (memo_file.hpp).
#include "runtime/memo_file.hpp"

#include "cache/file_util.hpp"
#include "cache/le_bytes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <ctime>
#include <vector>

#ifndef KJIT_VERSION
#define KJIT_VERSION "unknown"
#endif

namespace kjit::detail {
namespace {

using cache::get_le;
using cache::put_le;

constexpr size_t kHeaderBytes = 28;
/// A temp file this old belongs to a writer that died (a save takes milliseconds).
constexpr int64_t kStaleTempSeconds = 60;

int64_t ns_of(const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

FileStamp from_stat(const struct stat& st) {
  FileStamp s;
  s.regular = S_ISREG(st.st_mode);
  if (!s.regular) return s;  // a folder or device where a header was looked for: only "not a file" counts
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = ns_of(st.st_mtim);
  s.ctime_ns = ns_of(st.st_ctim);
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.device = static_cast<uint64_t>(st.st_dev);
  return s;
}

// The memo folders are not pruned by the cache, so their writers clean up after crashed ones.
void remove_stale_temps(const std::string& dir) {
  std::vector<std::string> names;
  if (cache::list_dir(dir, &names) != 0) return;
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  for (const std::string& name : names) {
    if (!cache::is_temp_name(name)) continue;
    struct stat st {};
    const std::string p = dir + "/" + name;
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtim.tv_sec > kStaleTempSeconds) {
      ::unlink(p.c_str());
    }
  }
}

}  // namespace

FileStamp stamp_path(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? from_stat(st) : FileStamp{};
}

FileStamp stamp_fd(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? from_stat(st) : FileStamp{};
}

FileStamp stamp_dir(const std::string& path) {
  struct stat st {};
  FileStamp s;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return s;
  s.directory = true;
  s.mtime_ns = ns_of(st.st_mtim);
  s.ctime_ns = ns_of(st.st_ctim);
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.device = static_cast<uint64_t>(st.st_dev);
  return s;
}

bool stamp_holds(const std::string& path, const FileStamp& recorded) {
  if (recorded.directory) return stamp_dir(path) == recorded;
  const FileStamp now = stamp_path(path);
  return recorded.regular ? now == recorded : !now.regular;
}

std::string memo_library() { return "kjit " KJIT_VERSION; }

void put_memo_str(std::string& out, std::string_view s) {
  put_le(out, s.size(), 4);
  out.append(s);
}

void put_memo_stamp(std::string& out, const FileStamp& s) {
  put_le(out, s.regular ? 1 : s.directory ? 2 : 0, 1);
  if (!s.regular && !s.directory) return;
  put_le(out, s.size, 8);
  put_le(out, static_cast<uint64_t>(s.mtime_ns), 8);
  put_le(out, static_cast<uint64_t>(s.ctime_ns), 8);
  put_le(out, s.inode, 8);
  put_le(out, s.device, 8);
}

uint64_t MemoReader::u(int width) {
  if (!ok_ || bytes_.size() - pos_ < static_cast<size_t>(width)) return fail();
  const uint64_t v = get_le(bytes_, pos_, width);
  pos_ += static_cast<size_t>(width);
  return v;
}

std::string_view MemoReader::view() {
  const uint64_t n = u(4);
  if (!ok_ || bytes_.size() - pos_ < n) {
    fail();
    return {};
  }
  const std::string_view s = bytes_.substr(pos_, n);
  pos_ += n;
  return s;
}

std::string MemoReader::str() { return std::string(view()); }

FileStamp MemoReader::stamp() {
  FileStamp s;
  const uint64_t kind = u(1);
  if (kind > 2) {
    fail();
    return s;
  }
  s.regular = kind == 1;
  s.directory = kind == 2;
  if (kind == 0) return s;
  s.size = u(8);
  s.mtime_ns = static_cast<int64_t>(u(8));
  s.ctime_ns = static_cast<int64_t>(u(8));
  s.inode = u(8);
  s.device = u(8);
  return s;
}

size_t MemoReader::count(size_t min_item) {
  const uint64_t n = u(4);
  if (!ok_ || n > (bytes_.size() - pos_) / min_item) {
    fail();
    return 0;
  }
  return static_cast<size_t>(n);
}

std::string frame_memo(std::string_view magic, uint32_t version, std::string_view body) {
  std::string out(magic);
  put_le(out, version, 4);
  put_le(out, body.size(), 8);
  put_le(out, XXH3_64bits(body.data(), body.size()), 8);
  out += body;
  return out;
}

std::optional<std::string_view> unframe_memo(std::string_view bytes, std::string_view magic, uint32_t version) {
  if (bytes.size() < kHeaderBytes || bytes.substr(0, magic.size()) != magic) return std::nullopt;
  if (get_le(bytes, 8, 4) != version) return std::nullopt;
  if (get_le(bytes, 12, 8) != bytes.size() - kHeaderBytes) return std::nullopt;
  const std::string_view body = bytes.substr(kHeaderBytes);
  if (XXH3_64bits(body.data(), body.size()) != get_le(bytes, 20, 8)) return std::nullopt;
  return body;
}

std::optional<std::string> read_memo_file(const std::string& path, uint64_t max_bytes) {
  std::string bytes;
  if (cache::read_file(path, max_bytes, /*flags=*/0, &bytes) != 0) return std::nullopt;
  return bytes;
}

bool write_memo_file(const std::string& path, std::string_view bytes) {
  const size_t slash = path.rfind('/');
  const std::string dir = path.substr(0, slash);
  if (cache::make_dirs(dir) != 0) return false;
  remove_stale_temps(dir);
  // Temp file + rename, as cache::write_file_atomic, but without its fsyncs: they cost
  // milliseconds on a process's first key, and a record a power cut leaves torn fails its
  // checksum and is recomputed, which costs no more than having no record.
  const std::string tmp = dir + "/." + path.substr(slash + 1) + ".tmp-" + cache::unique_suffix();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = true;
  for (size_t done = 0; ok && done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ::close(fd) == 0 && ok;
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return true;
  ::unlink(tmp.c_str());
  return false;
}

}  // namespace kjit::detail
