#pragma once
/// \file cache_test_util.hpp
/// Helpers shared by the cache tests: scratch folders, sample entries, file pokes.

#include "cache/entry.hpp"
#include "cache/key.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>

namespace kjit::cache::testing {

/// A fresh folder under $KJIT_TEST_BINARY_DIR (or /tmp), or under `base` when given, removed
/// with everything in it.
class TempDir {
 public:
  explicit TempDir(const char* base = std::getenv("KJIT_TEST_BINARY_DIR")) {
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kjit-cache-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    // Restore write permission first so a test that chmod'ed a folder still cleans up.
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  /// The folder's path, without a trailing slash.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Runs `body` in a forked child with its stderr in `stderr_path` and a watchdog: SIGALRM ends
/// it after `seconds` (what a call that blocks forever does). Returns the child's exit status
/// (body's return value), or 128 + the signal that ended it (142: it blocked). For calls that
/// may hang, or that need process-wide limits (setrlimit) the test process must not keep.
inline int in_child(unsigned seconds, const std::string& stderr_path, const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 2);
    ::alarm(seconds);
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
    }
    ::_exit(rc);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// A key derived from `i`, so tests can make many distinct ones.
inline Key key_for(int i) { return KeyBuilder().add("test", int64_t{i}).finish(); }

/// A sample entry for key_for(i) with a payload of exactly `payload_bytes` bytes.
inline Entry sample_entry(int i, size_t payload_bytes = 256) {
  Entry e;
  e.key = key_for(i);
  e.meta.family = "attention_decode";
  e.meta.template_args = "<128, 64>";
  e.meta.target = "sm_90a";
  e.meta.kernels.push_back({"decode<128, 64>", "_Z6decodeILi128ELi64EEvv", 96, 0, 4096});
  e.meta.options = {"-std=c++17", "-DKJIT_HEAD_DIM=128"};
  e.meta.nvrtc_version = "13.0";
  e.meta.cuda_headers_version = "13000";
  e.meta.source_name = "attention/decode.cu";
  e.meta.compile_ms = 45.5;
  e.meta.created_unix = 1764460800;
  e.meta.inputs = {{"source", "attention/decode.cu", "0123456789abcdef0123456789abcdef"},
                   {"file", "<cuda>/cuda_bf16.h", "fedcba9876543210fedcba9876543210"}};
  e.payload.resize(payload_bytes);
  for (size_t b = 0; b < payload_bytes; ++b) e.payload[b] = static_cast<char>((b * 31 + static_cast<size_t>(i)) & 0xff);
  return e;
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// Sets a file's mtime (and atime) to `unix_seconds`, to make LRU order deterministic.
inline void set_mtime(const std::string& path, int64_t unix_seconds) {
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = static_cast<time_t>(unix_seconds);
  times[0].tv_nsec = times[1].tv_nsec = 0;
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) {
    throw std::runtime_error("utimensat failed for " + path);
  }
}

inline int64_t mtime_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec);
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace kjit::cache::testing
