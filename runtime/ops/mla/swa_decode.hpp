#pragma once
/// \file runtime/ops/mla/swa_decode.hpp
/// kjit::mla::swa_decode (include/kjit/ops/swa_decode.hpp) as an op of the pipeline
/// (runtime/ops/pipeline.hpp): the pure validate and window-partition plan steps
/// (swa_decode_plan.cc) and the launch value (swa_decode.cc), exposed so tests check every
/// rejection and plan without a GPU and the emulator runs the op's own Params.

#include <kjit/device.hpp>
#include <kjit/ops/swa_decode.hpp>

#include "mla/swa_decode_params.h"
#include "runtime/families/mla.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/ops/split_partials.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kjit::mla {

namespace detail {

/// The most splits a window of `window` positions takes: the merge reads at most kSwaMaxSplits
/// and a split holds at least one step of kSwaStepTokens (the validator's, the planner's and the
/// tuner's cap).
constexpr int swa_max_splits(int64_t window) noexcept {
  return static_cast<int>(window / kSwaStepTokens < kSwaMaxSplits ? window / kSwaStepTokens : kSwaMaxSplits);
}

/// The shape of a validated SwaDecodeArgs.
struct SwaDims {
  int device = 0;
  int64_t tokens = 0;      ///< T
  int64_t heads = 0;       ///< NH
  int64_t head_dim = 0;    ///< HD
  int64_t window = 0;      ///< W
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int cache = 0;           ///< kSwaCacheE4M3 or kSwaCacheE5M2
  bool lens_i64 = true;
  bool has_lse = false;
  bool kv_compact = true;  ///< block stride == block_size · row stride
  int requested_splits = 0;  ///< SwaDecodeArgs::num_splits (0 = choose)
  int requested_heads_per_cta = 0;  ///< SwaDecodeArgs::head_group (0 = choose)
  int requested_cluster_split = 0;  ///< SwaDecodeArgs::cluster_split (0 = choose)
};

/// Checks `args` against the contract in include/kjit/ops/swa_decode.hpp. Pure host code: no
/// driver call, no allocation unless it throws. Throws InvalidArgument
/// "kjit::mla::swa_decode: <tensor> <rule>, got <shape dtype>" for the first rule broken.
SwaDims validate_swa_decode(const SwaDecodeArgs& args);
/// validate_swa_decode, its messages naming `op` instead (a static string: the workspace query
/// validates the same arguments under its own name, kjit::mla::swa_decode_workspace_bytes).
SwaDims validate_swa_decode(const SwaDecodeArgs& args, const char* op);

/// How a decode runs: the specialization, the window partition and the workspace it needs.
struct SwaPlan {
  kjit::detail::Choice choice;  ///< set by SwaDecodeOp::plan; no family when T = 0
  int heads_per_cta = 16;    ///< query heads per CTA (the family parameter spelled `group`)
  int tile = 128;            ///< family parameter `kv_tile`
  int num_splits = 1;        ///< CTAs per (token, head group) along the window, merged by a second kernel
  /// CTAs of one thread-block cluster per (token, head group) along the window, merged in the
  /// kernel (family parameter `cluster_split`); num_splits is then 1.
  int cluster_split = 1;
  int split_len = 0;         ///< window positions per split (per cluster CTA): a multiple of 16, ≤ tile
  /// Decode-kernel CTAs (work items of the wgmma kernel): T · (NH / heads_per_cta) · num_splits ·
  /// cluster_split.
  int64_t ctas = 0;
  size_t o_part_bytes = 0;   ///< workspace offset of lse_part (o_part starts at 0)
  size_t workspace_bytes = 0;
};

/// Plans a validated decode on `info` (its SM count, opt-in shared memory per CTA, 0 = no
/// limit, and target; pure, no choice filled in). dims.requested_splits / requested_heads_per_cta /
/// requested_cluster_split are the args' num_splits / head_group / cluster_split (0 = choose).
/// Choice:
///  - a cluster split (swa_cluster_plan: one launch, the CTAs of a thread-block cluster share
///    one (token, head group) and merge through distributed shared memory) when requested
///    (> 1, with the requested group or 16), or when nothing was requested (num_splits,
///    head_group and cluster_split all 0) on a device with clusters (sm_90+): the largest of
///    8, 4, 2 CTAs per (token, 16 heads) whose T · NH / 16 · cluster_split CTAs fit two per SM
///    (one wave) and whose slices are whole 16-position steps of at most 128. T = 1 at NH 128
///    on 132 SMs: 8 CTAs of 16 positions each; T = 8: 4 of 32; T = 16: 2 of 64; from T = 17
///    none (the other rules below);
///  - group 64, the sm_90a wgmma kernel (kernel_sources/mla/swa_decode_sm90.cu: persistent CTAs
///    over (token, 64 heads) items, the whole window, never split), when the target has wgmma,
///    NH is a multiple of 64, W ≤ 128, no split was requested, its shared memory fits and
///    T · NH / 64 ≥ sm_count / 2 (fewer items leave each CTA one latency chain, which the
///    mma.sync kernel runs faster); or when requested;
///  - group 32 when NH allows it, its CTA with the 128 tile fits the device's shared memory
///    and T · NH / 32 ≥ sm_count (every SM gets a CTA of 8 warps that share one KV slice),
///    else 16;
///  - tile 128, or 64 when W ≤ 64 with groups of 16 or when 128 does not fit;
///  - splits: ceil(W / tile), also when few CTAs run: on the H200 a CTA's cost is mostly fixed
///    (latency chains, q, softmax, its partial), so extra splits cost more than the idle SMs
///    they fill (T = 1: 14.0 µs unsplit vs 18.2 µs in 8 splits). A requested count is clamped
///    to [ceil(W / tile), min(32, W / 16)].
///  - split_len = ceil(W / splits) rounded up to 16; trailing empty splits are dropped.
/// A requested group is kept even when it does not fit (SwaDecodeOp::plan then throws
/// Unsupported).
SwaPlan plan_swa_decode(const SwaDims& dims, const DeviceInfo& info);

/// The mma.sync partition of the window for `heads_per_cta` (16 or 32), `tile` window
/// positions per CTA and `splits` in [ceil(W / tile), min(32, W / 16)]: split_len =
/// ceil(W / splits) rounded up to 16, trailing empty splits dropped, the partials' workspace.
/// The planner's last step, and what a tuned choice runs. Pure; checks nothing.
SwaPlan partition_swa_window(const SwaDims& dims, int heads_per_cta, int tile, int splits);

/// The cluster split plan for `heads_per_cta` (16 or 32) and `cluster_split` (2, 4 or 8, whose
/// swa_cluster_split_rule the window meets): tile swa_cluster_tile, split_len W / cluster_split,
/// T · NH / heads_per_cta · cluster_split CTAs, one launch, no workspace. Pure; checks nothing.
SwaPlan swa_cluster_plan(const SwaDims& dims, int heads_per_cta, int cluster_split);

/// Throws InvalidArgument naming the needed bytes when `workspace` cannot hold the plan's
/// partials (too small, null, or not 16-byte aligned). Host-only.
void check_swa_workspace(const SwaPlan& plan, const void* workspace, size_t workspace_bytes);

/// kjit::mla::swa_decode_workspace_bytes, its argument errors naming `op` (a static string): the
/// public query passes its own name, a binding that sizes the workspace of the swa_decode call
/// it is about to make passes the op's (SwaDecodeOp::kInfo.name).
size_t swa_decode_workspace_bytes(const SwaDecodeArgs& args, const char* op);

/// kjit::mla::swa_decode in the op pipeline. The merge kernel takes the decode kernel's Params.
struct SwaDecodeOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::mla::swa_decode", kMinSm, "mma.sync, cp.async", {&swa_decode_family}};
  using Args = SwaDecodeArgs;
  using Dims = SwaDims;
  using Plan = SwaPlan;
  using Launch = kjit::detail::Launches<SwaDecodeParams, SwaDecodeParams>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.q, a.kv_cache, a.inv_scale, a.indices, a.lens, a.out, a.lse, a.scale, a.num_splits, a.head_group,
              a.cluster_split);
  }

  /// validate_swa_decode.
  static Dims validate(const Args& args) { return validate_swa_decode(args, kInfo.name); }
  /// plan_swa_decode and the family point. Throws Unsupported when T > 0 and the plan cannot run
  /// on the device: group 64 without wgmma, a cluster split without thread-block clusters
  /// (below sm_90), or a CTA above its shared memory per block.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// The kernels' Params for `args` under `plan` with the split partials in `workspace`.
  static SwaDecodeParams params(const Args& args, const Dims& dims, const Plan& plan, void* workspace);
  /// Checks the workspace and the grid, then the decode step (the wgmma kernel: one persistent
  /// CTA per SM at most; a cluster split: clusters of cluster_split CTAs) and, when the window is
  /// split over separate CTAs, the merge step.
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);

  // Tuning (runtime/ops/tuned.hpp; swa_decode_tune.cc). Knob: splits (CTAs per (token, head
  // group) along the window, merged by the second kernel). Point: group (16, 32, or 64 = the
  // sm_90a wgmma kernel), kv_tile and cluster_split (a cluster split runs with splits 1).
  // Bucket: window, cache format, T rounded up to a power of two, NH. A call that requests
  // num_splits, head_group or cluster_split is not tuned.
  static const kjit::detail::TuneOpSpec& tune_spec();
  static bool tune_key(const Dims& dims, kjit::detail::TunedKey* key);
  static bool apply_tuned(const Dims& dims, const DeviceInfo& info, const kjit::detail::TunedChoice& choice, Plan* plan);
  static kjit::detail::TunedChoice tuned_choice(const Dims& dims, const Plan& plan);
  static std::vector<kjit::detail::TunedChoice> tune_candidates(const Dims& dims, const DeviceInfo& info);
};

}  // namespace detail
}  // namespace kjit::mla
