#pragma once
/// \file file_util.hpp
/// POSIX file primitives the store is built from. Every function reports failure as an errno
/// value (0 = success) instead of throwing, because every caller turns failure into a miss or a
/// warning.

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache::detail {

/// strerror() text for `err`, safe to call from several threads.
std::string errno_text(int err);

/// Creates `path` and any missing parents (mode 0755 before umask). Returns 0 or an errno.
int make_dirs(const std::string& path);

/// What open_regular() returns for a path that holds something other than a regular file or a
/// folder (a FIFO, a socket, a device), after warning about it.
inline constexpr int kNotRegularFile = EINVAL;

/// Opens `path` with `flags` (O_RDONLY, O_RDWR, O_WRONLY | O_APPEND | O_CREAT, ..., optionally
/// O_NOFOLLOW; O_CLOEXEC is added) only if it is a regular file, and sets `*fd`. Every file the
/// cache reads, appends to or locks is opened through here, because opening a FIFO blocks until
/// a peer opens its other end, and reading one blocks until it writes: the open is made with
/// O_NONBLOCK (cleared again on the regular file it returns) and checked with fstat. A folder
/// fails with EISDIR; a FIFO, socket or device fails with kNotRegularFile and one warning per
/// path and process that names it, so callers need not warn again. Returns 0 or an errno.
int open_regular(const std::string& path, int flags, int* fd, unsigned mode = 0644);

/// How read_file() treats the file it reads.
enum ReadFlags : unsigned {
  kReadPlain = 0,
  /// A successful read also sets the file's mtime to now (best effort: a read-only file is still
  /// read). The LRU order of the cache is made of these.
  kReadTouch = 1,
  /// A symbolic link at `path` fails with ELOOP instead of being followed: a cache entry is
  /// never a link, and following one could touch a file outside the cache.
  kReadNoFollow = 2,
};

/// Reads the whole regular file at `path` into `out` (opened by open_regular). Files larger than
/// `max_bytes` fail with EFBIG before anything is read; a folder fails with EISDIR, another
/// non-regular file with kNotRegularFile (warned). Returns 0 or an errno.
int read_file(const std::string& path, uint64_t max_bytes, unsigned flags, std::string* out);

/// Atomically replaces `path` with `data`: write_temp_file(), then commit_temp_file(), then
/// sync_parent_dir(). On failure the temp file is removed and `path` is untouched. Returns 0 or
/// an errno.
int write_file_atomic(const std::string& path, std::string_view data);

/// Appends `line` to the log file `path` (created when missing) in one write(), holding a shared
/// flock meanwhile: appenders never wait for each other, only for a holder of the exclusive lock
/// (a fold or a clear of the log). A link at `path` is not followed. Returns 0 or an errno.
int append_line(const std::string& path, std::string_view line);

/// Writes `data` to a new temp file beside `path` (see is_temp_name) and fsyncs it, so that a
/// rename can publish it whole. Sets `*tmp` to its path. On failure nothing is left behind.
/// Returns 0 or an errno.
int write_temp_file(const std::string& path, std::string_view data, std::string* tmp);

/// Renames `tmp` over `path`; on failure removes `tmp`. Returns 0 or an errno.
int commit_temp_file(const std::string& tmp, const std::string& path);

/// fsyncs the folder holding `path`, persisting a rename in it. Best effort: some filesystems
/// refuse fsync on folders, and the file is still correct without it.
void sync_parent_dir(const std::string& path);

/// True for the names write_file_atomic() gives its temp files.
bool is_temp_name(std::string_view name);

/// Creates a throwaway file in `dir` and removes it again, to prove the folder is writable.
/// Returns 0 or an errno.
int probe_writable(const std::string& dir);

/// Whether files could be created in folder `dir` now: 0 when it is a folder this process may
/// write to, or when it does not exist yet and its nearest existing ancestor is such a folder
/// (make_dirs would create it, as the first publish to a new cache does); else an errno (ENOTDIR
/// when that ancestor is not a folder, EACCES or EROFS when it is not writable, EPERM when it is
/// on a kernel pseudo filesystem such as /proc or /sys, where access(2) lets root "write" but no
/// folder can be made). Asks access(2) and statfs(2), creates nothing.
int writable_or_creatable(const std::string& dir);

/// The names in directory `path`, without "." and "..". Returns 0 or an errno.
int list_dir(const std::string& path, std::vector<std::string>* names);

/// A name unique to this process, thread and call: "<pid>-<tid>-<counter>".
std::string unique_suffix();

}  // namespace kjit::cache::detail

namespace kjit::cache {

// The primitives are the cache's own, and also what kjit's runtime and tools outside cache/ read
// and write their files with (memo files, manifests, tuning reports): the non-detail names they
// use.
using detail::commit_temp_file;
using detail::errno_text;
using detail::is_temp_name;
using detail::kNotRegularFile;
using detail::kReadNoFollow;
using detail::kReadPlain;
using detail::kReadTouch;
using detail::list_dir;
using detail::make_dirs;
using detail::open_regular;
using detail::probe_writable;
using detail::read_file;
using detail::ReadFlags;
using detail::sync_parent_dir;
using detail::unique_suffix;
using detail::write_file_atomic;
using detail::write_temp_file;
using detail::writable_or_creatable;

}  // namespace kjit::cache
