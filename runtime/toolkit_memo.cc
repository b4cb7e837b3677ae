// The toolkit memo's record: stamps, the byte format, load and save (toolkit_memo.hpp).
#include "runtime/toolkit_memo.hpp"

#include "cache/file_util.hpp"
#include "cache/le_bytes.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>

#ifndef KJIT_VERSION
#define KJIT_VERSION "unknown"
#endif

namespace kjit::detail {
namespace {

using cache::detail::get_le;
using cache::detail::put_le;

constexpr std::string_view kMagic = "KJITTKMM";
constexpr size_t kHeaderBytes = 28;
/// Records are kilobytes; a larger file is not one of ours and is not read into memory.
constexpr uint64_t kMaxRecordBytes = uint64_t{16} << 20;
/// A temp file this old belongs to a writer that died (a save takes milliseconds).
constexpr int64_t kStaleTempSeconds = 60;

std::atomic<int64_t> min_age_ns{int64_t{2'000'000'000}};

std::string library() { return "kjit " KJIT_VERSION; }

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

void put_str(std::string& out, std::string_view s) {
  put_le(out, s.size(), 4);
  out.append(s);
}

// Reads the body front to back; any read past the end sets `ok` false and yields zeros.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == bytes_.size(); }

  uint64_t u(int width) {
    if (!ok_ || bytes_.size() - pos_ < static_cast<size_t>(width)) return fail();
    const uint64_t v = get_le(bytes_, pos_, width);
    pos_ += static_cast<size_t>(width);
    return v;
  }
  std::string str() {
    const uint64_t n = u(4);
    if (!ok_ || bytes_.size() - pos_ < n) {
      fail();
      return {};
    }
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A count of items each at least `min_item` bytes long: more than the bytes left can hold is
  // corruption, caught before anything is reserved.
  size_t count(size_t min_item) {
    const uint64_t n = u(4);
    if (!ok_ || n > (bytes_.size() - pos_) / min_item) {
      fail();
      return 0;
    }
    return static_cast<size_t>(n);
  }

 private:
  uint64_t fail() {
    ok_ = false;
    return 0;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Temp file + rename, as cache::detail::write_file_atomic, but without its fsyncs: they cost
// milliseconds on a process's first key, and a record a power cut leaves torn fails its checksum
// and is recomputed, which costs no more than having no record.
bool write_without_fsync(const std::string& path, std::string_view bytes) {
  const size_t slash = path.rfind('/');
  const std::string tmp = path.substr(0, slash + 1) + "." + path.substr(slash + 1) + ".tmp-" +
                          cache::detail::unique_suffix();
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

}  // namespace

FileStamp stamp_path(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? from_stat(st) : FileStamp{};
}

FileStamp stamp_fd(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? from_stat(st) : FileStamp{};
}

int64_t realtime_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

bool stamp_is_settled(const FileStamp& s, int64_t read_start_ns) {
  // Timestamps come from a coarse clock (a kernel tick, or seconds on some filesystems): a file
  // changed just before it was read can change again with the same mtime and ctime.
  const int64_t last_change = std::max(s.mtime_ns, s.ctime_ns);
  return s.regular && last_change <= read_start_ns - min_age_ns.load(std::memory_order_relaxed);
}

int64_t set_toolkit_memo_min_age_ns(int64_t ns) { return min_age_ns.exchange(ns); }

std::string encode_memo(const MemoRecord& record) {
  std::string body;
  put_str(body, library());
  put_le(body, record.toolkit_dirs.size(), 4);
  for (const std::string& d : record.toolkit_dirs) put_str(body, d);
  put_le(body, record.closures.size(), 4);
  for (const MemoClosure& c : record.closures) {
    put_str(body, c.root);
    put_le(body, c.files.size(), 4);
    for (const auto& [path, xxh3] : c.files) {
      put_str(body, path);
      put_str(body, xxh3);
    }
    put_le(body, c.names.size(), 4);
    for (const std::string& n : c.names) put_str(body, n);
    put_le(body, c.checks.size(), 4);
    for (const auto& [path, s] : c.checks) {
      put_str(body, path);
      put_le(body, s.regular ? 1 : 0, 1);
      if (!s.regular) continue;
      put_le(body, s.size, 8);
      put_le(body, static_cast<uint64_t>(s.mtime_ns), 8);
      put_le(body, static_cast<uint64_t>(s.ctime_ns), 8);
      put_le(body, s.inode, 8);
      put_le(body, s.device, 8);
    }
  }
  std::string out(kMagic);
  put_le(out, kMemoVersion, 4);
  put_le(out, body.size(), 8);
  put_le(out, XXH3_64bits(body.data(), body.size()), 8);
  out += body;
  return out;
}

std::optional<MemoRecord> decode_memo(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes || bytes.substr(0, kMagic.size()) != kMagic) return std::nullopt;
  if (get_le(bytes, 8, 4) != kMemoVersion) return std::nullopt;
  const uint64_t size = get_le(bytes, 12, 8);
  if (size != bytes.size() - kHeaderBytes) return std::nullopt;
  const std::string_view body = bytes.substr(kHeaderBytes);
  if (XXH3_64bits(body.data(), body.size()) != get_le(bytes, 20, 8)) return std::nullopt;
  Reader r(body);
  if (r.str() != library()) return std::nullopt;
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
    for (auto& [path, s] : c.checks) {
      path = r.str();
      const uint64_t kind = r.u(1);
      if (kind > 1) return std::nullopt;
      s.regular = kind == 1;
      if (!s.regular) continue;
      s.size = r.u(8);
      s.mtime_ns = static_cast<int64_t>(r.u(8));
      s.ctime_ns = static_cast<int64_t>(r.u(8));
      s.inode = r.u(8);
      s.device = r.u(8);
    }
    if (!r.ok()) return std::nullopt;
  }
  if (!r.ok() || !r.at_end()) return std::nullopt;
  return out;
}

std::string memo_record_path(const std::string& memo_dir, const std::vector<std::string>& dirs) {
  // Length-prefixed, so no two lists of directories serialize alike.
  std::string id;
  for (const std::string& d : dirs) put_str(id, d);
  const XXH128_hash_t h = XXH3_128bits(id.data(), id.size());
  return fmt::format("{}/{:016x}{:016x}.memo", memo_dir, h.high64, h.low64);
}

std::optional<MemoRecord> load_memo(const std::string& path, const std::vector<std::string>& dirs) {
  std::string bytes;
  if (cache::detail::read_file(path, kMaxRecordBytes, /*touch=*/false, &bytes) != 0) return std::nullopt;
  std::optional<MemoRecord> record = decode_memo(bytes);
  // Another list of directories whose hash collides, or a record copied by hand: not ours.
  if (!record || record->toolkit_dirs != dirs) return std::nullopt;
  return record;
}

bool save_memo(const std::string& path, const MemoRecord& record) {
  const std::string dir = path.substr(0, path.rfind('/'));
  std::string bytes;
  try {
    bytes = encode_memo(record);
  } catch (const std::exception&) {
    return false;  // out of memory: the next process recomputes
  }
  if (cache::detail::make_dirs(dir) != 0) return false;
  // The cache's prune does not look in this folder, so its writers clean up after crashed ones.
  std::vector<std::string> names;
  if (cache::detail::list_dir(dir, &names) == 0) {
    const int64_t now = static_cast<int64_t>(::time(nullptr));
    for (const std::string& name : names) {
      if (!cache::detail::is_temp_name(name)) continue;
      struct stat st {};
      const std::string p = dir + "/" + name;
      if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtim.tv_sec > kStaleTempSeconds) {
        ::unlink(p.c_str());
      }
    }
  }
  return write_without_fsync(path, bytes);
}

}  // namespace kjit::detail
