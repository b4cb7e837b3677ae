#pragma once
/// \file file_util.hpp
/// POSIX file primitives the store is built from. Every function reports failure as an errno
/// value (0 = success) instead of throwing, because every caller turns failure into a miss or a
/// warning.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache::detail {

/// strerror() text for `err`, safe to call from several threads.
std::string errno_text(int err);

/// Creates `path` and any missing parents (mode 0755 before umask). Returns 0 or an errno.
int make_dirs(const std::string& path);

/// Reads the whole regular file at `path` into `out`. Files larger than `max_bytes` fail with
/// EFBIG before anything is read. With `touch`, a successful read also sets the file's mtime to
/// now (best effort: a read-only file is still read). Returns 0 or an errno.
int read_file(const std::string& path, uint64_t max_bytes, bool touch, std::string* out);

/// Atomically replaces `path` with `data`: writes a temp file in the same directory (see
/// is_temp_name), fsyncs it, renames it over `path`, then fsyncs the directory (best effort).
/// On failure the temp file is removed and `path` is untouched. Returns 0 or an errno.
int write_file_atomic(const std::string& path, std::string_view data);

/// True for the names write_file_atomic() gives its temp files.
bool is_temp_name(std::string_view name);

/// Creates a throwaway file in `dir` and removes it again, to prove the folder is writable.
/// Returns 0 or an errno.
int probe_writable(const std::string& dir);

/// The names in directory `path`, without "." and "..". Returns 0 or an errno.
int list_dir(const std::string& path, std::vector<std::string>* names);

/// A name unique to this process, thread and call: "<pid>-<tid>-<counter>".
std::string unique_suffix();

}  // namespace kjit::cache::detail
