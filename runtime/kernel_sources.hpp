#pragma once
/// \file kernel_sources.hpp
/// Where kernel source text comes from (the copies embedded into libkjit at build time, or the
/// live folder named by KJIT_KERNEL_DIR), and which files one compile can read: the closure of a
/// program's includes, which is both what NVRTC is handed and what the cache key hashes.
///
/// How the closure is found. A textual scan follows every `#include "x"`, `#include <x>`,
/// `#include_next` and `__has_include(...)` of the main source, of every `-include` file and of
/// every file they reach, ignoring conditional compilation (a header behind a false `#if` is
/// hashed too, which can only make the key more specific). Each name is resolved in NVRTC's own
/// search order, checked against NVRTC 13.0 on these machines:
///   1. the in-memory headers handed to nvrtcCreateProgram, by exact name, for quoted and angle
///      includes alike: ProgramSpec::headers, then kjit's kernel sources (kjit hands NVRTC every
///      kernel_sources file the scan reaches, so they shadow files on disk), then, for a program
///      with ProgramSpec::std_headers, kjit's standard headers (<cstdint> is the kernel source
///      kjit/std/cstdint, handed to NVRTC under the name "cstdint");
///   2. quoted includes only: the directory of the including file (an in-memory header named
///      "a/b.h" or the main source "a/k.cu" count as living in "a/", relative to the working
///      directory); `-no-source-include` turns this step off. `-include` files instead look in
///      the working directory here, whatever the option;
///   3. the user's `-I` directories, in option order;
///   4. the CUDA include directories (kjit appends them after the user's options).
/// The first hit is the file NVRTC reads; an `#include_next` follows every hit. The key gets each
/// in-memory header's name and text and each file's path and XXH3-128 digest, so any edit to
/// any file the compile can read, a new file that shadows another, or a moved working directory
/// is a different key. A name found nowhere adds nothing (NVRTC's built-in headers are covered
/// by its version in the key).
///
/// Not seen: the target of `#include MACRO` (a computed include is not followed), an edit to a
/// toolkit file while a process runs (see below; the next process sees it), and a toolkit edit
/// that keeps the file's stat stamp (toolkit_memo.hpp says when that can happen).
///
/// Cost. Files under the CUDA include directories are read, digested and scanned at most once
/// per process (a memo per path; also per directory and name for existence), on the assumption
/// that the toolkit does not change under a running process; the closure of each toolkit file
/// reached is memoized too. Across processes, a record under the cache root (toolkit_memo.hpp)
/// holds those closures with the stamps of the files they read and the paths where nothing was
/// found: a new process stats them and, when all agree, reads no toolkit file at all (a call
/// whose own headers shadow a name inside a toolkit closure still reads it file by file). Every
/// other file (the user's: the main source's directory, `-I` directories, `-include` files) is
/// stat'ed, read and digested on each call: cost proportional to the user's own headers. The
/// shipped ops' kernels reach only in-memory kernel sources and the toolkit, so after the first
/// call their closure costs hash lookups and no system calls. Only Runtime::compile/load/key walk
/// the closure; the op hot path (runtime/ops/kernel_table.hpp) never does.

#include <kjit/runtime.hpp>

#include "runtime/key_memo.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::detail {

/// Where kjit's NVRTC standard headers live among the kernel sources: the include name
/// "cstdint" is the kernel source "kjit/std/cstdint" (docs/std-headers.md).
inline constexpr std::string_view kStdHeaderDir = "kjit/std/";

/// Whether `name` has the form of a standard header's include name (one path component).
bool is_std_header_name(std::string_view name);

/// Kernel sources by path relative to kernel_sources/ ("rotary/rotary.cu").
class KernelSources {
 public:
  /// Embedded copies when `live_dir` is empty, else files read from `live_dir` on each call.
  explicit KernelSources(std::string live_dir);
  /// The text of `path`, or nullopt when there is none such.
  std::optional<std::string> read(std::string_view path) const;
  /// Whether `path` exists, without reading it.
  bool contains(std::string_view path) const;
  /// The text of kjit's standard header for include name `name` ("cstdint"), or nullopt when
  /// kjit has none such.
  std::optional<std::string> std_header(std::string_view name) const;
  /// Every source path, sorted.
  std::vector<std::string> list() const;
  const std::string& live_dir() const noexcept { return live_dir_; }
  /// A digest naming the whole set of embedded sources (SHA-256 hex, computed at build time);
  /// empty with a live folder, whose files can change under a running process.
  std::string_view digest() const noexcept;

 private:
  std::string live_dir_;
};

/// Where NVRTC looks for files beyond the in-memory headers (see the file comment).
struct IncludePath {
  std::vector<std::string> user_dirs;     ///< the user's -I directories, in option order
  std::vector<std::string> pre_includes;  ///< the user's -include files, in option order
  bool source_dirs = true;                ///< false with -no-source-include
  std::vector<std::string> toolkit_dirs;  ///< the CUDA include directories, searched last
  /// Folder of the toolkit memo's records (toolkit_memo.hpp); empty: none (disk cache off).
  std::string toolkit_memo_dir;
  bool toolkit_memo_writable = false;  ///< records may be written (the cache is writable)
};

/// One on-disk file the compile can read.
struct FileDigest {
  /// The path as NVRTC forms it ("inc/x.h", "/abs/y.h"); a file under a toolkit directory is
  /// written "<cuda>/" + its path below the first toolkit directory, so one toolkit at two
  /// install paths gives one key.
  std::string path;
  std::string xxh3;  ///< XXH3-128 of the bytes, 32 hex digits
};

/// A program's main source and everything its includes reach.
struct SourceClosure {
  std::string name;
  std::string text;
  /// In-memory headers handed to NVRTC: (include name, text), sorted by name, each once.
  std::vector<std::pair<std::string, std::string>> headers;
  /// On-disk files the compile can read, sorted by path, each once.
  std::vector<FileDigest> files;
};

/// Resolves `spec`'s source and the closure of its includes and of `path.pre_includes`, as the
/// file comment describes; with `checks`, also records what the walk learned from the file
/// system, for the key memo (key_memo.hpp). Throws InvalidArgument when the main source is
/// missing.
SourceClosure resolve_sources(const ProgramSpec& spec, const KernelSources& sources, const IncludePath& path,
                              KeyChecks* checks = nullptr);

/// What the process-wide toolkit memo did since the process started or reset_toolkit_memo(),
/// for tests and benchmarks.
struct ToolkitMemoCounters {
  uint64_t files_read = 0;             ///< toolkit files read, digested and scanned
  uint64_t records_loaded = 0;         ///< records that decoded and belonged to the directories
  uint64_t records_written = 0;        ///< records written
  uint64_t closures_from_records = 0;  ///< closures taken from a record after every check passed
};
ToolkitMemoCounters toolkit_memo_counters();

/// Forgets everything the process memoized about the toolkit, as if a new process started. For
/// tests and benchmarks; call it while no key is being computed.
void reset_toolkit_memo();

}  // namespace kjit::detail
