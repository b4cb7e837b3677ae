#pragma once
/// \file runtime/ops/tuned.hpp
/// Tuned plans on the plan path: the tuning table of a device (cache/tune_table.hpp on disk) as
/// a small sorted array of POD keys, loaded once per device, and what each tunable op declares
/// about its tuning (TuneOpSpec). An op that takes part gives its struct (pipeline.hpp) four
/// more static functions:
///
///   static const TuneOpSpec& tune_spec();                      name, knobs, bucket rule, fits
///   static bool tune_key(const Dims&, TunedKey*);               the call's bucket; false: the
///                                                               caller forced a choice, no tuning
///   static bool apply_tuned(const Dims&, const DeviceInfo&, const TunedChoice&, Plan*);
///                                                               the plan of a stored choice;
///                                                               false: it does not fit this call
///   static TunedChoice tuned_choice(const Dims&, const Plan&);  a plan as a choice (the default's)
///   static std::vector<TunedChoice> tune_candidates(const Dims&, const DeviceInfo&);
///                                                               what `kjit tune` measures: the
///                                                               family points valid for the
///                                                               call × the op's knobs, pruned by
///                                                               the device's limits (fits)
///
/// and pipeline.hpp's choose_plan runs a stored choice instead of Op::plan when the table has
/// the call's bucket and apply_tuned accepts it. The hot path: one atomic load when the device
/// has no table; else the bucket arithmetic and a binary search over memcmp'd 28-byte keys. No
/// strings, no allocation, no lock.

#include <kjit/device.hpp>
#include <kjit/families.hpp>

#include "runtime/ops/kernel_table.hpp"  // PodEqual

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kjit::cache {
struct TuneTable;
struct TuneChoice;
}  // namespace kjit::cache

namespace kjit::detail {

struct OpInfo;

inline constexpr int kMaxTuneBucket = 6;
inline constexpr int kMaxTuneKnobs = 4;

/// The tunable ops, numbered for TunedKey (stored in tuning tables). Append only; 5 and 6 (rotary
/// and quantize, never tuned) stay unused.
enum class TuneOpId : int32_t {
  kDecode = 1,
  kPagedDecode = 2,
  kPrefill = 3,
  kPagedPrefill = 4,
  kGemm = 7,
  kSwaDecode = 8,
};

/// (op, bucket): what a table is keyed on. Zero-initialized, trivially copyable, no padding.
struct TunedKey {
  int32_t op = 0;
  int32_t bucket[kMaxTuneBucket] = {};
};
static_assert(std::is_trivially_copyable_v<TunedKey> && sizeof(TunedKey) == 4 * (1 + kMaxTuneBucket), "keyed by bytes");

/// A stored choice of an op: its family and point, and the op's planner knobs in the order its
/// TuneOpSpec names them (unused knobs 0).
struct TunedChoice {
  const Family* family = nullptr;
  Point point;
  int32_t knobs[kMaxTuneKnobs] = {};
};

/// The choice of a split-KV plan (decode, paged decode, SWA): its kernel, and its split count as
/// the one knob.
template <class Plan>
TunedChoice split_choice(const Plan& plan) {
  TunedChoice c;
  c.family = plan.choice.family;
  c.point = plan.choice.point;
  c.knobs[0] = plan.num_splits;
  return c;
}

/// What an op declares about its tuning.
struct TuneOpSpec {
  TuneOpId id;
  const char* name;  ///< "decode", as `kjit tune OP` and the table spell it
  const OpInfo* info;
  /// The knobs' names in TunedChoice::knobs order ("splits"); null past the last.
  const char* knobs[kMaxTuneKnobs];
  /// The bucket rule, for docs and `kjit tune --help` ("head_dim, group, batch·kv_heads rounded
  /// up to a power of two, max_kv_len rounded up to a power of two ≥ 64").
  const char* bucket_rule;
  /// The shape keys `kjit tune OP --shape` takes, with their defaults ("batch=1 kv_len=4096 ...").
  const char* shape_keys;
  /// Why `choice` cannot run on `info`'s device (its family is not the op's, its point is outside
  /// the space or has no kernel for the target, it needs more shared memory, threads or cluster
  /// CTAs than the device allows, a knob is out of range), or "".
  std::string (*fits)(const TunedChoice& choice, const DeviceInfo& info);
  /// The revision of the op's default planner. Bumped when the plans it makes change enough that
  /// a winner measured against the old default may lose to the new one (fp8_gemm 2: the small
  /// wgmma tiles; 3: their 64-row form; paged_prefill 2: the 192-row wgmma tile at head_dim 64;
  /// decode and paged_decode 2: the cluster merge on sm_90+);
  /// table entries of another revision are dropped with a warning.
  int planner = 1;

  /// How many knobs the op has.
  int knob_count() const noexcept;
  /// "attention.decode head_dim=128 rows=8 splits=4".
  std::string describe(const TunedChoice& choice) const;
};

/// The candidates of a split-KV op (decode, paged decode, SWA decode: a family point and the
/// split count as knob 0), the one routine their tune_candidates share: for each point of
/// `family` with a kernel for the device's target that `matches` (a TunedChoice with that point,
/// knobs 0), each count of `splits` (any order, repeats allowed) up to `max_splits` that fits
/// the device (Op::tune_spec().fits) and that Op::apply_tuned plans. A count the planner runs as
/// another one already offered for the point (it rounds counts to whole tiles) is offered once,
/// under the count it runs.
template <class Op, class Matches>
std::vector<TunedChoice> split_candidates(const Family& family, const typename Op::Dims& dims, const DeviceInfo& info,
                                          Matches matches, std::vector<int> splits, int64_t max_splits) {
  std::sort(splits.begin(), splits.end());
  splits.erase(std::unique(splits.begin(), splits.end()), splits.end());
  std::vector<TunedChoice> out;
  const Target target = info.target();
  for (const Point& p : family.enumerate(&target)) {
    TunedChoice c;
    c.family = &family;
    c.point = p;
    if (!matches(c)) continue;
    std::vector<int> seen;  // the counts the planner runs for this point
    for (int s : splits) {
      if (s > max_splits) break;
      c.knobs[0] = s;
      if (!Op::tune_spec().fits(c, info).empty()) continue;
      typename Op::Plan plan;
      if (!Op::apply_tuned(dims, info, c, &plan)) continue;
      if (std::find(seen.begin(), seen.end(), plan.num_splits) != seen.end()) continue;
      seen.push_back(plan.num_splits);
      c.knobs[0] = plan.num_splits;
      out.push_back(c);
    }
  }
  return out;
}

/// Every tunable op, in TuneOpId order.
const std::vector<const TuneOpSpec*>& tune_ops();
/// The op called `name`; nullptr when none is.
const TuneOpSpec* find_tune_op(std::string_view name);

/// The smallest power of two ≥ max(v, 1), saturating at 2^30: the usual bucket rounding.
inline int32_t bucket_pow2(int64_t v) noexcept {
  int64_t p = 1;
  while (p < v && p < (int64_t{1} << 30)) p <<= 1;
  return static_cast<int32_t>(p);
}
/// `v` clamped into int32 (bucket fields that are exact).
inline int32_t bucket_exact(int64_t v) noexcept {
  return static_cast<int32_t>(v < 0 ? -1 : v > INT32_MAX ? INT32_MAX : v);
}

/// A device's tuned choices: a sorted flat array, searched by key bytes.
class TunedTable {
 public:
  /// The choice for `key`, or nullptr. No allocation, no lock.
  const TunedChoice* find(const TunedKey& key) const noexcept;
  /// Adds or replaces the choice for `key`.
  void set(const TunedKey& key, const TunedChoice& choice);
  size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }

 private:
  std::vector<std::pair<TunedKey, TunedChoice>> items_;  // sorted by memcmp of the keys
};

/// A stored choice (family name, point text, knobs by name) as `op`'s TunedChoice, checked
/// against `info`'s device: "" and `*out` set, or why it is unusable (unknown family, a point
/// that does not parse, an unknown or missing knob, op.fits).
std::string tuned_choice_from(const TuneOpSpec& op, const cache::TuneChoice& stored, const DeviceInfo& info,
                              TunedChoice* out);
/// The inverse of tuned_choice_from: family name, point text and knobs by name (no timing).
cache::TuneChoice stored_choice_of(const TuneOpSpec& op, const TunedChoice& choice);

/// The table for `info`'s device from the table file `file`: entries of unknown ops, with a
/// bucket of the wrong size, or whose winner is unusable on the device (tuned_choice_from) or
/// needs more than it allows (registers × threads above the CTA's register file, shared memory
/// above the opt-in limit, more threads, a cluster above 8 CTAs or on a device without clusters)
/// are left out, one line each in `*dropped`. The caller checks the fingerprint first.
TunedTable tuned_table_from(const cache::TuneTable& file, const DeviceInfo& info, std::vector<std::string>* dropped);

/// The tuned choices of the device `info` describes (info.ordinal), read on first use from
/// `<cache dir>/tuning/<fingerprint id>.json` and merged with the fleet's table of the device
/// (KJIT_REMOTE), or nullptr when it has none. The cache dir, KJIT_TUNING and the fleet tier are
/// Runtime::global()'s (read once from the environment, so workspace queries and calls agree
/// whatever Runtime they use); the fleet's table comes through that runtime's one RemoteTier
/// (runtime/fleet.hpp). KJIT_TUNING=off (or 0) ignores tables. A missing table with tables of other fingerprints
/// beside it, a table that records another fingerprint, a table that does not decode: one
/// warning each, and no table. A dropped entry: one warning, the rest of the table is used.
/// Never throws.
const TunedTable* tuned_table(const DeviceInfo& info) noexcept;

/// Replaces the table of device `ordinal` (tests, and `kjit tune --check`); an empty table means
/// none. Not for use while other threads plan on that device.
void install_tuned_table(int ordinal, TunedTable table);

/// Makes the next tuned_table() of device `ordinal` read its table file again (a process that
/// writes a table and then plans: tests). Tables
/// handed out earlier stay alive. Throws InvalidArgument for an ordinal out of range. Not for use
/// while other threads plan on that device.
void reload_tuned_table(int ordinal);

template <class Op, class = void>
struct IsTunable : std::false_type {};
template <class Op>
struct IsTunable<Op, std::void_t<decltype(&Op::apply_tuned)>> : std::true_type {};

}  // namespace kjit::detail
