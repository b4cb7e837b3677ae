#pragma once
/// \file runtime/ops/attention/paged_prefill.hpp
/// kjit::attention::plan_paged_prefill and kjit::attention::paged_prefill
/// (include/kjit/ops/attention.hpp) as ops of the pipeline (runtime/ops/pipeline.hpp): the pure
/// validate and plan steps (paged_prefill_plan.cc), the plan step's tuning
/// (paged_prefill_tune.cc) and the launch values with the public entry points (paged_prefill.cc),
/// exposed so tests check every rejection and plan without a GPU. A paged prefill runs the dense
/// mma.sync prefill's kernel body with a packed Q schedule and the PagedKV source
/// (attention.paged_prefill) or, on sm_90a, the wgmma prefill's consumers behind a page-table
/// gather producer (attention.paged_prefill_sm90).

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "attention/prefill_params.h"
#include "attention/prefill_sm90_params.h"
#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/common.hpp"
#include "runtime/ops/attention/variant.hpp"
#include "runtime/ops/pipeline.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kjit::attention {
namespace detail {

// A ragged paged prefill runs in two steps (include/kjit/ops/attention.hpp): the plan step
// (plan_paged_prefill: host indptrs → PagedPrefillPlanDims, tiled by PagedPrefillPlanner, the
// tunable part, into the public PagedPrefillPlan's work map) and the run step (paged_prefill:
// PagedPrefillOp through the pipeline, PagedPrefillDims from the arguments and that plan). Both
// steps choose the kernel as a PagedPrefillOpPlan, through paged_prefill_choice.

/// The shape of validated PagedPrefillArgs (and what the op needs of their host plan).
struct PagedPrefillDims {
  int device = 0;
  int64_t total_q = 0;
  int64_t q_heads = 0;
  int64_t head_dim = 0;
  int64_t group = 0;
  PagedCacheDims cache;
  bool has_lse = false;
  int tile_rows = 0;      ///< PagedPrefillPlan::tile_rows
  int pack_group = 1;     ///< PagedPrefillPlan::pack_group: 1, or `group` (checked)
  int64_t num_work = 0;   ///< PagedPrefillPlan::num_work()
  /// PagedPrefillPlan::variant, or the attention() entry's resolved request.
  AttentionVariant variant = AttentionVariant::kAuto;
  PageLoad page_load = PageLoad::kAuto;  ///< PagedPrefillPlan::page_load (kTma checked against the page size)
};

/// Whether the wgmma kernel's TMA page loads take pages of `page_size` tokens: boxes of
/// kPageBoxRows slots, each inside one page.
constexpr bool tma_page_size(int64_t page_size) { return page_size >= kPageBoxRows && page_size % kPageBoxRows == 0; }

/// Checks `args` against the contract and against `plan`. Pure host code. Throws
/// InvalidArgument "kjit::attention::paged_prefill: ...".
PagedPrefillDims validate_paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan);

/// What the variant rules see of a paged prefill of `tile_rows`-row work items at `head_dim` on a
/// device of `target`.
VariantCall paged_prefill_variant_call(const Target& target, int64_t head_dim, int tile_rows, int pack_group = 1);
/// The same for a validated paged prefill (its plan's tile).
VariantCall paged_prefill_variant_call(const PagedPrefillDims& dims, const Target& target);

/// The kernel of a paged prefill of `tile_rows`-row work items at `head_dim` run by `kernel`
/// (kMma or kWgmma): attention.paged_prefill (head_dim, block_m = tile_rows) or
/// attention.paged_prefill_sm90 (head_dim, block_m = tile_rows: 128, or 192 at head_dim 64,
/// page_load = tma when `kv_tma`, else gather). Checks nothing (the family's point() throws for a
/// tile it does not declare).
kjit::detail::Choice paged_prefill_choice(AttentionVariant kernel, int64_t head_dim, int tile_rows, bool kv_tma);

/// Whether the wgmma kernel loads K/V pages with TMA: `kernel` is kWgmma, `load` is not kGather
/// and `page_size` holds whole boxes (tma_page_size).
bool paged_prefill_kv_tma(AttentionVariant kernel, PageLoad load, int64_t page_size);

/// The kernel a paged prefill runs: what the plan step decides (PagedPrefillPlanner) and what the
/// run step resolves it to (PagedPrefillOp::plan).
struct PagedPrefillOpPlan {
  /// paged_prefill_choice of `variant` (in the plan step: of the variant the run step's automatic
  /// choice takes on the device planned on); no family without query rows.
  kjit::detail::Choice choice;
  /// The run step: kMma or kWgmma, the kernel that runs. The plan step (PagedPrefillPlan::variant):
  /// kAuto from the built-in rule (the run step chooses), the measured kernel from a tuning table.
  AttentionVariant variant = AttentionVariant::kMma;
  int tile_rows = 0;            ///< query rows per work item: 64, 128 or (wgmma, head_dim 64) 192
  int pack_group = 1;           ///< q heads packed per KV head (PagedPrefillPlan::pack_group)
  size_t workspace_bytes = 0;   ///< 0: the work map's workspace is sized by the host plan
  /// The wgmma kernel loads K/V pages with TMA: in the run step paged_prefill_kv_tma (the
  /// choice's page_load); in the plan step a tuned choice's page_load (apply_tuned), which the
  /// plan then records.
  bool kv_tma = false;
};

/// The run step's plan of a paged prefill: the variant (resolve_variant: dims.variant strict
/// unless kAuto, kAuto prefers wgmma where it can run: sm_90a, head_dim 64/128, 128-row tiles or
/// 192-row tiles at head_dim 64; a 192-row plan has no mma.sync kernel, so it runs wgmma or fails),
/// then TMA page loads where the variant is wgmma, page_load is not kGather and the page size
/// takes them (paged_prefill_kv_tma), then its family point; pure, no memo. Throws Unsupported when a
/// requested variant cannot run the plan on `info`'s device, or page_load kTma where the variant
/// is not wgmma.
PagedPrefillOpPlan plan_paged_prefill_run(const PagedPrefillDims& dims, const DeviceInfo& info);

/// kjit::attention::paged_prefill in the op pipeline.
struct PagedPrefillOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::paged_prefill", kMinSm, kMinSmNeeds,
                                               {&paged_prefill_family, &paged_prefill_sm90_family}};
  /// A paged_prefill call: its arguments, the host plan they were built for, and the device
  /// workspace the plan's work map was uploaded to (checked with the arguments, before any driver
  /// call, so it travels with them rather than as the pipeline's Workspace).
  struct Args {
    const PagedPrefillArgs& args;
    const PagedPrefillPlan& plan;
    const void* workspace = nullptr;
    size_t workspace_bytes = 0;
  };
  using Dims = PagedPrefillDims;
  using Plan = PagedPrefillOpPlan;
  using Launch = kjit::detail::Launches<PrefillParams>;
  /// Every field of the call's arguments and of the host plan's that validation and the launch
  /// read (its scalars and the work map's length: the map itself is read from the workspace by
  /// the kernel), and the workspace, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& call, kjit::detail::CallKeyWriter& k) {
    const PagedPrefillArgs& a = call.args;
    const PagedPrefillPlan& p = call.plan;
    k.put_all(a.q, a.qo_indptr, a.cache, a.causal, a.out, a.lse, a.scale);
    k.put_all(p.batch, p.total_q, p.head_dim, p.tile_rows, p.pack_group, p.variant, p.page_load, p.q_tile_to_batch.size(),
              p.q_tile_to_index.size(), p.workspace_bytes, p.map_index_offset, call.workspace, call.workspace_bytes);
    k.put_all(p.cta_work_indptr.size(), p.cta_work.size(), p.schedule_heads, p.schedule_indptr_offset,
              p.schedule_work_offset);
  }
  /// The call memo's key words: Args holds references, so its size says nothing of them.
  static constexpr size_t kCallKeyWords = sizeof(PagedPrefillArgs) / 8 + 40;

  /// validate_paged_prefill, then the work map's workspace (InvalidArgument naming the bytes).
  static Dims validate(const Args& call);
  /// plan_paged_prefill_run, memoized per thread as PrefillOp::plan.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// KJIT_JIT=async's candidates besides plan() (runtime/ops/fallback.hpp): the call on each
  /// kernel variant (mma.sync, wgmma) that runs its host plan's work map on `info`'s device,
  /// whatever variant the host plan forces (the kernel is performance-only: both compute the
  /// same attention over the same work items). Fills `out`, returns how many. Pure.
  static int fallback_plans(const Dims& dims, const DeviceInfo& info, Plan (&out)[kjit::detail::kMaxOpFallbackPlans]);
  /// The kernel's Params for `call` (the work map read from call.workspace); pure.
  static PrefillParams params(const Args& call, const Dims& dims);
  /// The launch value; the pipeline's `workspace` is unused (see Args).
  static Launch build(const Args& call, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);
};

/// What the plan step of a ragged paged prefill (plan_paged_prefill) decides the tile from.
struct PagedPrefillPlanDims {
  int64_t batch = 0;
  int64_t total_q = 0;   ///< qo_indptr[batch]
  int64_t nonempty = 0;  ///< requests with at least one query row
  int64_t head_dim = 0;
  /// Known to the PagedPrefillPlanArgs overload only; 0 from the legacy overload, whose calls
  /// are never tuned.
  int64_t q_heads = 0;
  int64_t max_kv_len = 0;  ///< KV tokens of the longest request
  /// KV tokens of each request (paged_kv_lens; the PagedPrefillPlanArgs overload only, else empty).
  std::vector<int64_t> kv_lens;
  int64_t page_size = 0;
  bool causal = false;
  /// The caller's: 64, 128 or 192 (head_dim 64) forces it, 0 lets the planner (or the table) choose.
  int tile_rows = 0;
  /// q_heads / kv_heads, or 0 where kv_heads is unknown (the legacy overload, kv_heads 0).
  int64_t group = 0;
  /// The caller's packing request; plan_paged_prefill makes it kOff for a forced mma kernel.
  PackGqa pack_gqa = PackGqa::kAuto;
  /// The caller's page_load (PagedPrefillPlanArgs::page_load; kAuto from the legacy overload).
  PageLoad page_load = PageLoad::kAuto;
};

/// "auto", "on", "off".
const char* pack_gqa_name(PackGqa pack) noexcept;
/// Parses a pack_gqa value: "auto", "on", "off" (case-sensitive); nullopt for anything else.
std::optional<PackGqa> parse_pack_gqa(std::string_view text);

/// Checks qo_indptr (non-null, from 0, non-decreasing, total_q < 2^30), head_dim and tile_rows
/// (0, 64, 128, or 192 at head_dim 64 only: whether the device runs it is the run step's check),
/// and returns the query side of the dims (q_heads and the KV side 0). Pure. Throws
/// InvalidArgument "kjit::attention::plan_paged_prefill: ...".
PagedPrefillPlanDims paged_prefill_plan_dims(const int32_t* qo_indptr_host, int64_t batch, int64_t head_dim,
                                             int tile_rows);
/// The same for the tuned overload: the query side, then q_heads ≥ 1, page_size ≥ 1, the page
/// table's host indptr (non-null, from 0, non-decreasing) and last_page_len (non-null; clamped
/// to [0, page_size]) giving max_kv_len, kv_heads (0, or a divisor of q_heads: the group) and
/// pack_gqa (a PackGqa; kOn needs a group > 1 and a tile_rows other than 64). Pure; no device is
/// looked at.
PagedPrefillPlanDims paged_prefill_plan_dims(const PagedPrefillPlanArgs& args);
/// The host plan (work map and workspace layout) of `dims` at `tile_rows` (64, 128 or 192) with
/// `pack_group` q heads packed per KV head: request b gets ceil(q_len_b · pack_group / tile_rows)
/// work items, in request order.
PagedPrefillPlan paged_prefill_work_map(const int32_t* qo_indptr_host, const PagedPrefillPlanDims& dims,
                                        int tile_rows, int pack_group = 1);

/// KV tokens of each request of a validated PagedPrefillPlanArgs ([batch]; last_page_len clamped to
/// [0, page_size] as on the device).
std::vector<int64_t> paged_kv_lens(const PagedPrefillPlanArgs& args);

/// Heads per work item of a plan packing `pack_group` q heads per KV head (PagedPrefillPlan::
/// pack_group): the q heads, or the KV heads when packed.
constexpr int64_t paged_item_heads(int64_t q_heads, int64_t pack_group) {
  return pack_group > 1 ? q_heads / pack_group : q_heads;
}

/// The persistent schedule plan_paged_prefill gives `plan` (a work map of paged_prefill_work_map
/// for `q_heads` q heads): paged_prefill_schedule over `info`'s SMs (at most `max_ctas` CTAs when
/// it is > 0) where `info`'s device runs the plan on the sm_90a wgmma kernel and plan.variant is
/// not kMma; else none. Pure.
void paged_prefill_device_schedule(PagedPrefillPlan& plan, const int32_t* qo_indptr_host,
                                   const std::vector<int64_t>& kv_lens, bool causal, int64_t q_heads,
                                   const DeviceInfo& info, int max_ctas = 0);

/// Gives `plan` (a work map of paged_prefill_work_map) the persistent schedule of
/// PagedPrefillPlan::cta_work for `heads` heads per work item (q_heads, or kv_heads when packed)
/// on `sm_count` SMs: each unit's cost is its KV tiles of 128 keys (under `causal`, up to its last
/// row's limit; from qo_indptr_host and kv_lens) plus one, and the units, in the order the
/// one-CTA-per-unit grid walks them, go each to the CTA with the least cost so far (the lowest
/// index on a tie). Extends the workspace layout. No work, no schedule. Pure.
void paged_prefill_schedule(PagedPrefillPlan& plan, const int32_t* qo_indptr_host, const std::vector<int64_t>& kv_lens,
                            bool causal, int64_t heads, int sm_count);

/// plan_paged_prefill's tile choice as a tunable planner (runtime/ops/tuned.hpp;
/// paged_prefill_tune.cc): the choice is the kernel point (attention.paged_prefill at block_m 64
/// or 128, or attention.paged_prefill_sm90 on sm_90a at block_m 128 or, head_dim 64, 192) and one
/// knob, pack_gqa (0 or 1: whether the group's q heads share a work item; 1 only for the sm_90a
/// kernel and a group > 1). Bucket: head_dim, causal (0/1) + 2 · group (0 when unknown), the
/// query rows × q_heads rounded up to a power of two (≥ 64), the mean query rows of a non-empty
/// request rounded up to a power of two (≥ 16), max_kv_len rounded up to a power of two (≥ 64),
/// page_size exact. A plan that forces tile_rows or pack_gqa, or comes from the legacy overload
/// (q_heads 0), is not tuned.
struct PagedPrefillPlanner {
  using Dims = PagedPrefillPlanDims;
  using Plan = PagedPrefillOpPlan;

  /// The built-in rule: packing (pack_group = group) where pack_gqa is kOn, or kAuto with a
  /// group > 1, no forced 64-row tile and `info`'s target running the wgmma kernel at 128 rows.
  /// Then the requested tile, else, counting q_len · pack_group rows per request: 64 when the
  /// non-empty requests average ≤ 64 rows (short chunks waste most of a 128-row tile) and
  /// nothing is packed, else 192 when they average > 128 and `info`'s target runs the wgmma
  /// kernel's 192-row tile (sm_90a, head_dim 64: three consumer warpgroups; a request of 65–128
  /// rows would run 1.5× its rows in one), else 128; variant kAuto, and the choice names the
  /// kernel the run step's automatic variant takes on `info`'s target (wgmma on sm_90a for
  /// head_dim 64/128 at 128 rows and hd64 at 192, else mma.sync; none for a packed plan that
  /// only wgmma runs where it cannot). Without a device (DeviceInfo{}: the legacy overload)
  /// never 192 and never packed unless kOn. Pure.
  static Plan plan(const Dims& dims, const DeviceInfo& info);

  static const kjit::detail::TuneOpSpec& tune_spec();
  static bool tune_key(const Dims& dims, kjit::detail::TunedKey* key);
  static bool apply_tuned(const Dims& dims, const DeviceInfo& info, const kjit::detail::TunedChoice& choice, Plan* plan);
  static kjit::detail::TunedChoice tuned_choice(const Dims& dims, const Plan& plan);
  static std::vector<kjit::detail::TunedChoice> tune_candidates(const Dims& dims, const DeviceInfo& info);
};

}  // namespace detail
}  // namespace kjit::attention
