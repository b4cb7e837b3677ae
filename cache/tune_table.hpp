#pragma once
/// \file tune_table.hpp
/// Tuning tables on disk: what `kjit tune` measured on one kind of device, and what the planners
/// read. One file per device fingerprint (DeviceInfo::fingerprint_id):
///
///   <cache root>/tuning/<fingerprint id>.json     the table (UTF-8 JSON, below)
///   <cache root>/tuning/<fingerprint id>.lock     flock'ed by writers while they merge
///   <cache root>/tuning/failed-compiles.json      compiles that failed, with their logs
///
/// The table file:
///
///   {
///     "format": "kjit-tuning", "version": 1,
///     "fingerprint": {"id": "3f2a9c0d41be", "text": "name=NVIDIA H200;cc=9.0;...", ...fields},
///     "entries": [
///       {"op": "decode",                        op name (`kjit tune --help` lists them)
///        "bucket": [128, 4, 64, 4096],           the op's bucket key (docs/tuning.md: rule per op)
///        "shape": "batch=8 kv_len=4096 ...",     the shape that was measured (for people)
///        "winner":    <choice>,                  what the planner runs for this bucket
///        "runner_up": <choice> or null,          second best correct candidate
///        "default":   <choice>,                  what the untuned planner runs
///        "margin": 0.031,                        runner_up.us / winner.us − 1
///        "gain": 0.12,                           default.us / winner.us − 1 (0: the default won)
///        "tuned_unix": 1764547200,               when it was measured (newest wins a merge)
///        "planner": 2}                           the op's planner revision it was measured
///                                                against (absent: 1); planners drop entries of
///                                                another revision (runtime/ops/tuned.hpp)
///     ]
///   }
///
///   <choice> = {"family": "attention.decode", "point": "head_dim=128 rows=8",
///               "knobs": {"splits": 4},           the op's planner knobs (names per op)
///               "us": 10.4, "eager_us": 12.9,     median µs per call: graph replay, eager
///               "spread": 0.011,                  (p90 − p10) / median of the graph samples
///               "threads": 128, "smem": 41472,    largest CTA and dynamic shared memory, bytes
///               "registers": 96, "cluster": 1}    registers per thread (-1 unknown), CTAs per cluster
///
/// Entries are kept sorted by (op, bucket), one per key. Writers publish atomically (temp file
/// + rename) while holding the lock, after re-reading the file and merging their entries into
/// it (merge_tables: per key the newer measurement wins), so concurrent tuners lose nothing.
/// Readers take no lock. Planners read only the file named by their own device's fingerprint
/// id and check its recorded fingerprint (see runtime/ops/tuned.hpp).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

/// The table format version this code reads and writes.
inline constexpr int kTuneTableVersion = 1;

/// One measured choice of an op: a family point and the op's planner knobs, with its timing.
struct TuneChoice {
  std::string family;  ///< Family::name; "" for an op step that launches nothing
  std::string point;   ///< Family::describe of the point ("head_dim=128 rows=8")
  std::map<std::string, int64_t> knobs;
  double us = 0;        ///< median µs per call under CUDA-graph replay
  double eager_us = 0;  ///< median µs per call launched eagerly
  double spread = 0;    ///< (p90 − p10) / median of the graph samples
  int threads = 0;      ///< the largest CTA of the op's launches
  int smem = 0;         ///< the largest dynamic shared memory of the op's launches, bytes
  int registers = -1;   ///< the most registers per thread of the op's kernels; -1 unknown
  int cluster = 1;      ///< the largest thread-block cluster of the op's launches

  /// "attention.decode head_dim=128 rows=8 splits=4" (reports, warnings).
  std::string describe() const;
};

/// One (op, bucket) of a table.
struct TuneEntry {
  std::string op;
  std::vector<int64_t> bucket;
  std::string shape;
  TuneChoice winner;
  bool has_runner_up = false;
  TuneChoice runner_up;
  TuneChoice default_choice;
  double margin = 0;
  double gain = 0;
  int64_t tuned_unix = 0;
  int planner = 1;  ///< the op's planner revision when measured (TuneOpSpec::planner)
};

/// A whole table: the fingerprint it was measured on and its entries.
struct TuneTable {
  std::string fingerprint_id;
  std::string fingerprint_text;  ///< DeviceInfo::fingerprint()
  std::map<std::string, std::string> fingerprint_fields;  ///< for people: name, cc, clocks, ...
  std::vector<TuneEntry> entries;  ///< sorted by (op, bucket), unique keys

  /// The entry for (op, bucket), or nullptr.
  const TuneEntry* find(std::string_view op, const std::vector<int64_t>& bucket) const;
};

/// Serializes `table` (entries sorted first) as the JSON above.
std::string encode_table(const TuneTable& table);

/// Parses a table file's bytes. Throws CacheError saying what is wrong ("not JSON: ...",
/// "format is not kjit-tuning", "version 2 != 1", "entry 3: winner.us is not a number", a
/// fingerprint id that is not a plain file name: 1 to 64 letters, digits, '-' or '_') without
/// the path (callers add it). Never reads outside `bytes`; no content makes it crash.
TuneTable decode_table(std::string_view bytes);

/// Merges `incoming` into `base` (same fingerprint): per (op, bucket) the entry with the larger
/// tuned_unix wins, `base` on a tie. Returns how many entries of `incoming` were taken. Throws
/// CacheError when the fingerprint ids differ.
size_t merge_tables(TuneTable& base, const TuneTable& incoming);

/// `<root>/tuning`: where the tables of the cache at `root` live.
std::string tuning_dir(const std::string& root);
/// `<root>/tuning/<id>.json`.
std::string table_path(const std::string& root, const std::string& fingerprint_id);
/// `tuning/<id>.json`: table_path() relative to the cache root.
std::string table_relative_path(const std::string& fingerprint_id);

/// Reads the table at `path`. Returns false when there is no file; throws CacheError naming the
/// path when it cannot be read or does not decode.
bool read_table(const std::string& path, TuneTable* out);

/// Publishes `table` into the cache at `root`: takes `<id>.lock`, re-reads the file (a table a
/// concurrent tuner published meanwhile), merges `table` into it, writes a temp file and renames
/// it over the table. A file that does not decode, or that records another fingerprint than its
/// name, is moved aside to `<id>.json.bad-<suffix>` with a warning, never silently dropped or
/// merged into. Returns the merged table. Throws CacheError naming the path when the folder or
/// file cannot be written (or such a file cannot be moved aside).
TuneTable publish_table(const std::string& root, const TuneTable& table);

/// The names of the table files under `<root>/tuning` (`<id>.json`), sorted; empty when none.
std::vector<std::string> list_tables(const std::string& root);

}  // namespace kjit::cache
