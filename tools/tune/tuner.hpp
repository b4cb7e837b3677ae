#pragma once
/// \file tools/tune/tuner.hpp
/// The tuner behind `kjit tune`: for one op and a list of shapes it enumerates the candidates
/// (the op's family points × planner knobs, pruned by the device's limits: the op's
/// tune_candidates), compiles them in parallel (remembering failed compiles), measures them in a
/// worker process (scratch buffers, poisoned outputs checked against the float64 reference,
/// CUDA-event timing of CUDA-graph replays and of eager launches over inputs rotated through
/// more than twice the L2), picks a winner by the noise rule and publishes it into the device's
/// tuning table (cache/tune_table.hpp).
///
/// Faults: the worker is this same executable started again with KJIT_TUNE_WORKER=1 (so ops that
/// a test binary registers exist there too; the executable's main calls run_worker_if_requested
/// first). One worker measures every shape of a sweep in turn (one CUDA context for all); it
/// streams one JSON line per event; when it dies or hangs the candidate in flight is marked
/// failed and a fresh worker continues with the rest.
///
/// Measuring cost: every correct candidate is screened with a few CUDA-graph samples, and those
/// whose best sample is clearly slower than the leader's median are dropped early
/// (screen_candidates); the rest, and the default, get the full ≥ 20 graph and eager samples.

#include <kjit/device.hpp>
#include <kjit/runtime.hpp>

#include "runtime/internal/cache.hpp"
#include "runtime/internal/tuning.hpp"

#include <cuda.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kjit::tune {

/// A shape as `--shape` spells it: key → value text ("batch" → "8", "a" → "e4m3").
using Shape = std::map<std::string, std::string>;

/// Parses "key=value" words (a word may hold several, comma-separated) over `defaults`. Throws
/// InvalidArgument naming a word without '=' or a key `defaults` does not have.
Shape parse_shape(const std::vector<std::string>& words, const Shape& defaults);

/// The most bytes of a shapes file or a tune report the tuner reads (cache::read_input_file).
inline constexpr uint64_t kMaxTuneFileBytes = uint64_t{64} << 20;

/// parse_shape of every non-empty line of `path` that is not a '#' comment. Throws
/// InvalidArgument naming the file and line.
std::vector<Shape> read_shapes_file(const std::string& path, const Shape& defaults);
/// "batch=8 head_dim=128 kv_len=4096" (keys in order).
std::string shape_text(const Shape& shape);
/// The integer value of `key`; InvalidArgument naming the key and text when it is not one.
int64_t shape_int(const Shape& shape, const std::string& key);

/// One candidate of one shape.
struct Candidate {
  std::string label;               ///< "attention.decode head_dim=128 rows=8 splits=4"
  kjit::detail::TunedChoice choice;  ///< what the table stores (family null: a test-only op)
  bool is_default = false;         ///< the untuned planner's plan (always candidate 0)
  std::vector<ProgramSpec> programs;  ///< what it compiles
};

/// A candidate ready to launch on each input copy, and the resources its launches use.
struct Runner {
  std::vector<std::function<void(CUstream)>> per_copy;
  int threads = 0, smem = 0, registers = -1, cluster = 1;
  std::shared_ptr<void> keep;  ///< buffers (workspace) the launches use
};

/// One op at one shape. Host-side methods need no GPU; the worker side runs with device 0's
/// context current and owns every buffer it launches on (the caller's are never touched).
class Harness {
 public:
  virtual ~Harness() = default;
  /// The candidates for `info`'s device, the default first; deterministic.
  virtual std::vector<Candidate> candidates(const DeviceInfo& info) = 0;
  /// The table bucket of this shape (the op's tune_key); false: not tunable.
  virtual bool bucket(std::vector<int64_t>* out) const = 0;
  /// Bytes of one copy of the inputs (what rotating through L2 is sized by).
  virtual size_t input_bytes() const = 0;
  /// Allocates `copies` input sets with the same random values (from `seed`), the outputs and
  /// the float64 reference.
  virtual void prepare(int copies, uint64_t seed) = 0;
  /// The launches of `c` on every copy; throws what the op throws.
  virtual Runner runner(const Candidate& c, Runtime& runtime) = 0;
  /// Poisons the outputs, runs copy 0 on `stream`, synchronizes and compares with the reference:
  /// "" when correct, else what is wrong ("rel_l2=0.71 (tolerance 0.01), 2048 non-finite").
  virtual std::string check(const Runner& r, CUstream stream) = 0;
};

/// An op `kjit tune` can sweep.
struct TuneOp {
  std::string name;  ///< "decode"
  std::string help;  ///< shape keys and bucket rule
  Shape defaults;    ///< every shape key with its default
  std::function<std::unique_ptr<Harness>(const Shape&)> make;
  /// Non-empty for an op whose default plan is its only candidate (every kernel and launch
  /// choice follows from the call): why. `kjit tune OP` says so and measures nothing; make is
  /// then null.
  std::string only_default;
};

/// Registers an op (the built-in ones are registered on first use of ops(); a test binary adds
/// its own at static initialization, before main).
void register_op(TuneOp op);
/// Every registered op, by name.
const std::map<std::string, TuneOp>& ops();
/// The op called `name`; InvalidArgument listing the known ones.
const TuneOp& op(const std::string& name);

/// What one candidate's measurement found.
struct Measurement {
  int index = 0;
  std::string label;
  bool is_default = false;
  /// "ok", "wrong" (output differs from the reference), "failed" (threw, faulted, hung, worker
  /// died), "compile-failed", "dropped" (correct, but screened out: its best screening sample was
  /// clearly slower than the leader's median; `us` is its screening median, eager_us 0).
  std::string status = "failed";
  std::string why;
  double us = 0, eager_us = 0, spread = 0;  ///< medians per call (µs) and (p90 − p10) / median
  int samples = 0;                          ///< graph samples behind `us`
  /// The screening: this candidate's best and median graph µs over its screening samples, and
  /// the leader's index and median when it was dropped (-1 / 0 otherwise).
  double screen_best_us = 0, screen_median_us = 0, leader_us = 0;
  int leader = -1;
  int threads = 0, smem = 0, registers = -1, cluster = 1;
  kjit::detail::TunedChoice choice;
};

/// The noise rule and tie-break: a candidate wins only when it is correct, fully measured ("ok")
/// and faster than the default by more than `noise` (relative); among those, the first in
/// candidate order whose time is within `noise` of the fastest (so hosts whose timings differ by
/// noise pick the same one). Returns the winner's index (the default's when nothing beats it; -1
/// when the default itself is not ok) and sets `*runner_up` to the fastest other ok or dropped
/// candidate (a dropped one by its screening median; -1 when none).
int select_winner(const std::vector<Measurement>& m, double noise, int* runner_up);

/// What screening decided for one shape's correct candidates.
struct Screen {
  std::vector<bool> keep;  ///< per candidate, in input order: measured in full
  int leader = -1;         ///< input position of the lowest screening median (the first on a tie); -1: none
  double leader_us = 0;    ///< its median
};

/// The early-rejection rule over screening samples (graph µs, one list per candidate, in
/// candidate order): the leader is the candidate with the lowest median; a candidate is kept when
/// `always[i]` (the default plan) or when its best sample is at most (1 + margin) × the leader's
/// median, so only candidates whose fastest run is clearly slower than the leader's typical one
/// are dropped (margin well above the noise, which the noise rule puts at 2%). A candidate
/// without samples is not kept. Pure and deterministic.
Screen screen_candidates(const std::vector<std::vector<double>>& samples, const std::vector<bool>& always,
                         double margin);

/// What a tuning table would record of `m`'s choice, as text (cache::TuneChoice::describe():
/// family, point, then the knobs by name). Candidate labels order knobs as the op lists them, so
/// this, not the label, is what matches a stored winner.
std::string stored_description(const std::string& op, const Measurement& m);

/// One shape of a sweep.
struct ShapeResult {
  Shape shape;
  std::vector<int64_t> bucket;
  bool tunable = true;
  std::vector<Measurement> candidates;
  int winner = -1, runner_up = -1;
  double margin = 0, gain = 0;
};

struct Options {
  int jobs = 4;           ///< parallel compiles
  int samples = 25;       ///< timing samples per fully measured candidate (at least 20)
  /// Graph samples each correct candidate gets before early rejection (they count toward
  /// `samples` for the ones kept); 0 measures every candidate in full.
  int screen_samples = 5;
  double screen_margin = 0.15;  ///< screen_candidates' margin
  double noise = 0.02;    ///< the noise rule's threshold
  double timeout_s = 60;  ///< per candidate, in the worker
  bool publish = true;    ///< merge winners into the cache's tuning table
  bool progress = true;   ///< a progress line on stderr
  /// Only measure these candidates (their stored_description()); empty: all. `kjit tune --check`
  /// passes the stored winners.
  std::vector<std::string> only;
  /// Per shape (one list each, in shape order) instead of `only` when not empty.
  std::vector<std::vector<std::string>> only_by_shape;
  /// The worker executable; empty: this process's own (/proc/self/exe).
  std::string worker;
};

struct SweepResult {
  std::string op;
  std::string fingerprint_id, fingerprint, device;
  std::vector<ShapeResult> shapes;
  int compiled = 0, compile_failed = 0, compile_skipped = 0;
  double compile_s = 0, measure_s = 0;
  int screen_samples = 0;      ///< the sweep's Options::screen_samples (0: no screening)
  double screen_margin = 0;    ///< and margin
};

/// Sweeps `op` over `shapes` on device 0 (see the file comment). Throws InvalidArgument for a bad
/// shape, DriverError without a device.
SweepResult sweep(const std::string& op, const std::vector<Shape>& shapes, const Options& options);

/// One measurement as one JSON object (the fields the sweep's JSON keeps per candidate, less the
/// label), with "shape": `shape` when ≥ 0: what the worker streams.
std::string measurement_line(const Measurement& m, int shape = -1);
/// The sweep as JSON (what `--json-out` writes and `kjit tune report` reads).
std::string to_json(const SweepResult& r);
/// Parses to_json's output. Every field is checked: absent ones take their defaults, and one of
/// the wrong type or out of range (a winner or runner-up that names no candidate, a candidate
/// index that is not its position) throws InvalidArgument naming it ("shapes[0].winner = 7 names
/// no candidate (the shape has 0)"), as does text that is not such JSON. The result is safe to
/// index by its winners and runner-ups. Never crashes, whatever the bytes.
SweepResult from_json(const std::string& text);

/// The table `kjit tune --report` prints: per shape every candidate with status, graph and eager
/// µs, spread, the winner and the default marked.
std::string report_table(const SweepResult& r);
/// Writes a PNG chart (gnuplot): per shape, time per candidate relative to the default, winner
/// marked. Returns "" or why it could not (gnuplot missing: the message says how to install it).
std::string write_chart(const SweepResult& r, const std::string& png_path);

namespace detail {

/// The integer `name` of JSON object `j`, `fallback` when absent. Throws InvalidArgument naming
/// `where` + `name` when it is not an integer or lies outside [lo, hi].
int json_int(const nlohmann::json& j, const char* name, int fallback, int lo, int hi, const std::string& where);
/// Reads the measured fields of one candidate (a measurement_line, or a candidate of to_json's
/// output) into `*m`: absent ones keep their defaults; a field of the wrong type or range
/// throws InvalidArgument naming `where` + the field ("shapes[0].candidates[2].us is not a
/// number").
void read_measurement(const nlohmann::json& j, Measurement* m, const std::string& where);

/// What is left to measure of one shape: its position in the sweep and candidate indices.
struct Todo {
  size_t shape = 0;
  std::vector<int> indices;
};

/// The measuring half of sweep(): runs `exe` as the worker (KJIT_TUNE_WORKER=1, the job on its
/// stdin) for every shape of `todo` and reads its results into `shapes[...].candidates` (`tick`
/// once per final result). A worker that dies or hangs past `o.timeout_s` costs the candidate in
/// flight ("failed", with how the worker ended), or, while it prepared a shape, that shape; a
/// fresh worker takes the rest, until a worker makes no progress.
void measure(const std::string& op, std::vector<ShapeResult>& shapes, std::vector<Todo> todo, const Options& o,
             const std::string& exe, const std::function<void()>& tick);

}  // namespace detail

/// When KJIT_TUNE_WORKER=1: runs the measuring worker on stdin/stdout and exits the process.
/// Otherwise returns. Call it first thing in main of any executable that runs sweeps.
void run_worker_if_requested();

}  // namespace kjit::tune
