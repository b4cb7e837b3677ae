#pragma once
/// \file manifest.hpp
/// Warm-up manifests: the specializations a process used, as KJIT_RECORD writes them and
/// `kjit precompile --manifest` reads them. JSON Lines: one object per line, UTF-8, "\n" ends
/// every line. Two kinds of line:
///
///   {"family":"attention.decode","params":{"head_dim":"128","rows":"8"},"target":"sm_90a"}
///   {"user":true,"family":"myapp.gemm","template_args":"tile=128","source_name":"gemm.cu",
///    "target":"sm_90a","key":"0123456789abcdef0123456789abcdef"}
///
/// The first names a point of a shipped kernel family: every parameter and its value text, as
/// `kjit compile FAMILY key=value...` takes them, and the compile target ("sm_90a", "sm_89",
/// "compute_120" for PTX). Replaying it needs nothing but the name: the key is recomputed, so a
/// manifest stays valid across kjit, NVRTC and kernel-source versions as long as the family
/// still declares that point.
///
/// The second is a host application's own kernel (a ProgramSpec with its own source text,
/// headers or options): no name can rebuild it, so the line records what identifies it (the
/// cache key, valid for this kjit, toolkit and source only) and what describes it. Precompile
/// reports whether that key is in the cache and never fails on it.
///
/// Readers ignore fields they do not know and blank lines; a line that is not such an object is
/// reported with its line number (parse_manifest). Writers (append_manifest_line) open the file
/// with O_APPEND and write each line with one write() under an exclusive flock: O_APPEND puts
/// every write at the end of the file, and the lock keeps lines whole where O_APPEND writes may
/// interleave (lines longer than PIPE_BUF, network filesystems without flock excepted). So any
/// number of processes may record into one file at once.
///
/// A line is appended whole or not at all: a write cut short (a full disk, a file size limit) is
/// truncated away again under the lock. A fragment can still be left by a crash mid-write or
/// where flock is missing; a writer that finds the file not ending in "\n" starts its line with
/// one, and readers call a line that stops mid-way torn (ManifestLine::torn) and skip it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

/// One manifest line, parsed.
struct ManifestEntry {
  /// Family name: a shipped family ("attention.decode"), or the host application's own name
  /// when `user`.
  std::string family;
  /// Parameter → value text (a shipped family's point; empty when `user`).
  std::map<std::string, std::string> params;
  /// "sm_90a", "sm_89", "compute_120" (not checked here: Target::parse does that).
  std::string target;
  /// A host application's own kernel: the fields below describe it; `params` is empty.
  bool user = false;
  std::string template_args;  ///< ProgramSpec::template_args
  std::string source_name;    ///< ProgramSpec::source_name
  std::string key;            ///< the cache key, 32 lowercase hex digits

  friend bool operator==(const ManifestEntry& a, const ManifestEntry& b) {
    return a.family == b.family && a.params == b.params && a.target == b.target && a.user == b.user &&
           a.template_args == b.template_args && a.source_name == b.source_name && a.key == b.key;
  }
};

/// The parameters a family point's template_args spell, as a family line records them:
/// "head_dim=128 rows=8" → {head_dim: 128, rows: 8} (words are separated by spaces). nullopt when the
/// text is not such words: a word without '=' or with an empty name, or a name given twice.
std::optional<std::map<std::string, std::string>> params_of_template_args(std::string_view template_args);

/// The line for `entry`, ending in "\n". Fields in a fixed order, so equal entries give equal
/// lines (what in-process deduplication compares).
std::string format_manifest_line(const ManifestEntry& entry);

/// One non-blank line of a manifest: the entry, or why it is not one.
struct ManifestLine {
  size_t line = 0;  ///< 1-based line number in the file
  std::optional<ManifestEntry> entry;
  std::string error;  ///< "" when `entry` is set: "not JSON", "no \"target\" string", ...
  /// The line stops mid-way (what a write cut short leaves): it is a cut-off prefix of JSON, or
  /// it ends the file without its newline and is not JSON. Readers skip it with a warning
  /// rather than calling the manifest invalid; `error` says so.
  bool torn = false;
};

/// The most bytes of a manifest that its readers (`kjit precompile --manifest`, `kjit remote pull
/// --manifest`) read with read_input_file: far above what a process records.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;

/// Parses every non-blank line of `text`. Never throws and never reads outside `text`; a line
/// that is not valid JSON, not an object, lacks a field or has one of the wrong type is
/// reported (a torn one marked so), the rest still parse.
std::vector<ManifestLine> parse_manifest(std::string_view text);

/// Appends `line` (one whole line, "\n" included) to the manifest at `path`, creating it (mode
/// 0644 before umask) when missing, as the header comment describes: whole or not at all, after
/// a "\n" when the file ends in a torn line. Never opens a FIFO, socket or device
/// (detail::open_regular: kNotRegularFile, warned there). Returns 0 or an errno (ENOSPC, EFBIG:
/// the file is left as it was).
int append_manifest_line(const std::string& path, std::string_view line);

}  // namespace kjit::cache
