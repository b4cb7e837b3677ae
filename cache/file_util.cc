// POSIX file primitives for the disk cache: read, atomic write, mkdir -p, directory listing.

#include "cache/file_util.hpp"

#include "cache/warn.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

namespace kjit::cache::detail {
namespace {

constexpr std::string_view kTempMarker = ".tmp-";

/// Closes a descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  /// Hands the descriptor to the caller, who closes it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes now and reports the close error, which for NFS-like filesystems can be the first
  /// sign that a write did not reach the disk.
  int close_checked() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

int write_all(int fd, std::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress and no errno: do not spin
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

/// Splits "a/b/c" into ("a/b", "c"); a bare name lives in ".".
void split_path(const std::string& path, std::string* dir, std::string* base) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    *dir = ".";
    *base = path;
  } else {
    *dir = slash == 0 ? "/" : path.substr(0, slash);
    *base = path.substr(slash + 1);
  }
}

/// Warns once per path and process that `path` is not a regular file and is left alone.
void warn_not_regular(const std::string& path, mode_t mode) {
  static std::mutex mutex;
  static std::set<std::string>* warned = new std::set<std::string>;  // never destroyed: used at exit
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned->insert(path).second) return;
  }
  const char* what = S_ISFIFO(mode)   ? "a FIFO"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "a special file";
  warn(fmt::format("{} is {}, not a regular file: kjit does not open it and goes on without it (remove it, or "
                   "point kjit elsewhere)",
                   path, what));
}

}  // namespace

std::string errno_text(int err) {
  char buf[256];
  // The GNU strerror_r may return a static string instead of filling buf; the XSI one returns
  // an int. Overloads accept both so this compiles under either.
  struct Pick {
    static const char* get(const char* r, const char*) { return r; }
    static const char* get(int r, const char* b) { return r == 0 ? b : "unknown error"; }
  };
  buf[0] = '\0';
  return Pick::get(strerror_r(err, buf, sizeof(buf)), buf);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  // pid alone collides across threads, the counter alone across processes (and across fork,
  // where the child inherits the counter); all three together cannot.
  return std::to_string(::getpid()) + "-" + std::to_string(static_cast<long>(::syscall(SYS_gettid))) +
         "-" + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

int make_dirs(const std::string& path_in) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return ENOENT;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  // ENOTDIR (a parent is a file) or EACCES will not be fixed by creating parents.
  if (errno != ENOENT) return errno;
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (int err = make_dirs(path.substr(0, slash)); err != 0) return err;
  }
  if (::mkdir(path.c_str(), 0755) == 0) return 0;
  const int err = errno;
  // Another process may have created it between our stat and mkdir.
  if (err == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return 0;
  return err == EEXIST ? ENOTDIR : err;
}

int writable_or_creatable(const std::string& dir) {
  std::string path = dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return ENOENT;
  struct stat st;
  // Up to the nearest ancestor that exists; a relative path's last one is the working folder.
  while (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return errno;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  }
  if (!S_ISDIR(st.st_mode)) return ENOTDIR;
  if (::access(path.c_str(), W_OK | X_OK) != 0) return errno;
  // Kernel pseudo filesystems (f_type magic numbers of linux/magic.h): proc, sysfs, cgroup v1
  // and v2, debugfs, tracefs, securityfs, devpts, bpf.
  static constexpr unsigned long kPseudo[] = {0x9fa0,     0x62656572, 0x27e0eb,   0x63677270, 0x64626720,
                                              0x74726163, 0x73636673, 0x1cd1,     0xcafe4a11};
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) == 0) {
    for (const unsigned long magic : kPseudo) {
      if (static_cast<unsigned long>(fs.f_type) == magic) return EPERM;
    }
  }
  return 0;
}

int open_regular(const std::string& path, int flags, int* fd_out, unsigned mode) {
  *fd_out = -1;
  Fd fd(::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, static_cast<mode_t>(mode)));
  struct stat st;
  if (fd.get() < 0) {
    const int err = errno;
    // A FIFO without a reader (opened for writing) and a socket fail the open itself with ENXIO.
    if (err != ENXIO || ::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return err;
  } else if (::fstat(fd.get(), &st) != 0) {
    return errno;
  }
  if (S_ISDIR(st.st_mode)) return EISDIR;
  if (!S_ISREG(st.st_mode)) {
    warn_not_regular(path, st.st_mode);
    return kNotRegularFile;
  }
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl >= 0) (void)::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  *fd_out = fd.release();
  return 0;
}

int read_file(const std::string& path, uint64_t max_bytes, unsigned flags, std::string* out) {
  out->clear();
  int raw = -1;
  if (const int err = open_regular(path, O_RDONLY | ((flags & kReadNoFollow) ? O_NOFOLLOW : 0), &raw); err != 0) {
    return err;
  }
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno;
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return EFBIG;
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t n = ::read(fd.get(), out->data() + got, out->size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;  // shrank under us; decode() will call it truncated
    got += static_cast<size_t>(n);
  }
  out->resize(got);
  // Touching through the descriptor marks exactly the file we read, even if a publish renamed a
  // new one over the path meanwhile. Failure (read-only cache) only costs LRU accuracy.
  if (flags & kReadTouch) (void)::futimens(fd.get(), nullptr);
  return 0;
}

int write_temp_file(const std::string& path, std::string_view data, std::string* tmp) {
  std::string dir;
  std::string base;
  split_path(path, &dir, &base);
  // Leading dot: listings and `ls` skip it; the marker lets prune() find leftovers of crashes.
  *tmp = dir + "/." + base + std::string(kTempMarker) + unique_suffix();
  Fd fd(::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return errno;
  int err = write_all(fd.get(), data);
  // fsync before rename: otherwise a crash can leave the new name pointing at an empty file.
  if (err == 0 && ::fsync(fd.get()) != 0) err = errno;
  const int close_err = fd.close_checked();
  if (err == 0) err = close_err;
  if (err != 0) ::unlink(tmp->c_str());
  return err;
}

int commit_temp_file(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) == 0) return 0;
  const int err = errno;
  ::unlink(tmp.c_str());
  return err;
}

void sync_parent_dir(const std::string& path) {
  std::string dir;
  std::string base;
  split_path(path, &dir, &base);
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() >= 0) (void)::fsync(dfd.get());
}

int append_line(const std::string& path, std::string_view line) {
  int fd = -1;
  if (const int err = open_regular(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, &fd); err != 0) return err;
  while (::flock(fd, LOCK_SH) != 0 && errno == EINTR) {
  }
  ssize_t w;
  do {
    w = ::write(fd, line.data(), line.size());
  } while (w < 0 && errno == EINTR);
  const int err = w < 0 ? errno : static_cast<size_t>(w) != line.size() ? EIO : 0;
  ::close(fd);
  return err;
}

int write_file_atomic(const std::string& path, std::string_view data) {
  std::string tmp;
  int err = write_temp_file(path, data, &tmp);
  if (err == 0) err = commit_temp_file(tmp, path);
  if (err == 0) sync_parent_dir(path);
  return err;
}

bool is_temp_name(std::string_view name) {
  return !name.empty() && name[0] == '.' && name.find(kTempMarker) != std::string_view::npos;
}

int probe_writable(const std::string& dir) {
  const std::string probe = dir + "/.probe-" + unique_suffix();
  Fd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return errno;
  int err = write_all(fd.get(), "k");
  const int close_err = fd.close_checked();
  if (err == 0) err = close_err;
  ::unlink(probe.c_str());
  return err;
}

int list_dir(const std::string& path, std::vector<std::string>* names) {
  names->clear();
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return errno;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (name != "." && name != "..") names->emplace_back(name);
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  return err;
}

}  // namespace kjit::cache::detail
