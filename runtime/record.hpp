#pragma once
/// \file runtime/record.hpp
/// What the runtime knows about a specialization beyond its ProgramSpec: whether it is a point
/// of a shipped family (so a name can rebuild it), the warm-up manifest line that records it
/// (KJIT_RECORD, cache/manifest.hpp), and the `kjit compile` command that would build it.

#include <kjit/device.hpp>
#include <kjit/runtime.hpp>

#include "cache/manifest.hpp"

#include <mutex>
#include <set>
#include <string>

namespace kjit::detail {

/// The manifest entry of `spec` for `target`: a family line when `spec` is exactly what a
/// shipped family makes of the point its template_args name (same source, kernels, no source
/// text, headers or options of its own), else a user line carrying `key_hex`.
cache::ManifestEntry manifest_entry(const ProgramSpec& spec, const Target& target, const std::string& key_hex);

/// `word` as one /bin/sh word: unchanged when it holds only characters the shell takes
/// literally (letters, digits and `_-.,/:=+@%`), else single-quoted (a `'` as `'\''`).
std::string shell_word(const std::string& word);

/// The shell command that builds `entry` into the cache at `cache_dir`, pasteable as printed:
/// "KJIT_CACHE_DIR=/c KJIT_JIT=on kjit compile attention.decode head_dim=128 rows=8 --arch sm_90a"
/// (plus "--emit ptx" for a compute_XY target), each word quoted by shell_word. KJIT_JIT=on
/// because the shell that shows this message may still export KJIT_JIT=off. "" for a host
/// application's own kernel, which no command can rebuild.
std::string compile_command(const cache::ManifestEntry& entry, const std::string& cache_dir);

/// Appends the specializations a process obtains to one manifest file, each line once per
/// process (lines already in the file when the recorder opens it count as written). Safe from
/// any thread; the file format and the append discipline are in cache/manifest.hpp.
class Recorder {
 public:
  /// The recorder of `path`, shared by every Runtime of this process that records there.
  static Recorder& for_path(const std::string& path);

  /// Appends the line of `entry` unless this process already has. A write failure is warned
  /// once per file and never thrown: recording must not break the application it watches.
  void record(const cache::ManifestEntry& entry) noexcept;

 private:
  explicit Recorder(std::string path);
  std::string path_;
  std::mutex mutex_;
  bool loaded_ = false;
  bool warned_ = false;
  std::set<std::string> written_;
};

}  // namespace kjit::detail
