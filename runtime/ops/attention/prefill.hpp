#pragma once
/// \file runtime/ops/attention/prefill.hpp
/// kjit::attention::prefill and kjit::attention::paged_prefill (include/kjit/ops/attention.hpp)
/// as ops of the pipeline (runtime/ops/pipeline.hpp): the pure validate and plan steps
/// (prefill_plan.cc) and the launch values (prefill.cc; the sm_90a kernel's tensor maps in
/// prefill_sm90.cc), exposed so tests check every rejection and plan without a GPU. Dense
/// prefill runs one of two families, chosen by the variant rules (variant.hpp): the mma.sync
/// split-Q kernel (attention.prefill) or the TMA + wgmma kernel (attention.prefill_sm90). Paged
/// prefill is the mma.sync kernel body with a packed Q schedule and the PagedKV source.

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "attention/prefill_params.h"
#include "attention/prefill_sm90_params.h"
#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/common.hpp"
#include "runtime/ops/attention/variant.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/ops/tma_map.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kjit::attention {

namespace detail {

/// The shape of validated PrefillArgs.
struct PrefillDims {
  int device = 0;
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t max_kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t group = 0;
  bool has_kv_lens = false;
  int mask_rank = 0;  ///< 0 (none), 2 or 3
  bool has_lse = false;
  bool causal = false;  ///< PrefillArgs::causal (a tuning bucket field; the kernels take it at run time)
  int block_m = 0;    ///< PrefillArgs::block_m (0 = choose)
  AttentionVariant variant = AttentionVariant::kAuto;  ///< PrefillArgs::variant
  /// prefill_tma_layout_reason(args): "" (no allocation) for every layout TMA can address.
  std::string tma_layout;
};

/// Checks `args` against the contract. Pure host code: no driver call; no allocation unless it
/// throws or TMA cannot address the layout. Throws InvalidArgument
/// "kjit::attention::prefill: <tensor> <rule>, got ...".
PrefillDims validate_prefill(const PrefillArgs& args);

/// Why the wgmma prefill cannot address q/k/v/out through TMA tensor maps ("" when it can):
/// negative strides or strides of 2^39 elements or more. Host only.
std::string prefill_tma_layout_reason(const PrefillArgs& args);

/// What the variant rules see of a validated dense prefill on a device of `target`. Views
/// dims.tma_layout: `dims` must outlive it.
VariantCall prefill_variant_call(const PrefillDims& dims, const Target& target);

/// Query rows per CTA for a dense prefill: 64 when q_len ≤ 64 or when 128-row tiles would not
/// fill one wave of the device (sm_count · ctas_per_sm CTAs), else 128 (two m16 tiles per warp
/// share every K/V fragment, halving shared-memory traffic per MMA).
int choose_prefill_block_m(const PrefillDims& dims, int sm_count, int ctas_per_sm);

/// CTAs of the prefill kernel resident per SM (shared memory bound, 1..2).
int prefill_ctas_per_sm(int64_t head_dim, int block_m, int max_smem_per_sm);

/// The arguments of the 4-D (d, token, head, batch) tensor map of BLHD bf16 tensor `t` for boxes
/// of 64 d × `box_rows` tokens with the 128-byte swizzle: out-of-bounds tokens read as zero (and
/// are not written by stores); a dim of extent 1 gets a nominal stride (never stepped), and a
/// token dim of extent 0 is encoded as 1 (never loaded). Pure: the key of tma_map.
kjit::detail::TmaMapKey blhd_tma_map_key(const TensorRef& t, int box_rows);

/// How a dense prefill runs.
struct PrefillPlan {
  /// attention.prefill (head_dim, block_m, mask) or attention.prefill_sm90 (head_dim); no family
  /// when there is nothing to do (batch or q_len 0). A forced plan keeps it consistent with
  /// `variant`.
  kjit::detail::Choice choice;
  AttentionVariant variant = AttentionVariant::kMma;  ///< kMma or kWgmma: the kernel that runs
  int block_m = 0;        ///< query rows per CTA (the sm_90a kernel's is fixed: 128)
  int64_t q_tiles = 0;    ///< ceil(q_len / block_m): grid x
  size_t workspace_bytes = 0;  ///< always 0: prefill needs no scratch
};

/// kjit::attention::prefill in the op pipeline.
struct PrefillOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::prefill", 80, "mma.sync bf16, ldmatrix, cp.async",
                                               {&prefill_family, &prefill_sm90_family}};
  using Args = PrefillArgs;
  using Dims = PrefillDims;
  using Plan = PrefillPlan;
  /// Step 0 runs the mma.sync kernel, step 1 the sm_90a one; the plan fills exactly one.
  using Launch = kjit::detail::Launches<PrefillParams, PrefillSm90Params>;

  static Dims validate(const Args& args) { return validate_prefill(args); }
  /// The variant (resolve_variant: dims.variant, strict unless kAuto; kAuto prefers wgmma where
  /// it can run), then its family point and tile; pure. Throws Unsupported when a requested
  /// variant cannot run the call on `info`'s device.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// The mma.sync kernel's Params for `args` under `plan`; pure.
  static PrefillParams params(const Args& args, const Dims& dims, const Plan& plan);
  /// The sm_90a kernel's Params: the four TMA tensor maps of q, k, v and out (blhd_tma_map_key)
  /// from the thread's memo, encoded (a host-only driver call) on a miss; no launch.
  static PrefillSm90Params params_sm90(const Args& args, const Dims& dims, const Plan& plan);
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);

  // Tuning (runtime/ops/tuned.hpp; prefill_tune.cc). No knobs beyond the family point: the
  // kernel (attention.prefill at block_m 64 or 128, or attention.prefill_sm90) is the choice.
  // Bucket: head_dim, mask (0/1), causal (0/1), q_len and max_kv_len rounded up to powers of
  // two (at least 64), batch · q_heads rounded up to a power of two. A call that sets
  // block_m or a variant is not tuned; a stored wgmma choice is not taken for a call the wgmma
  // kernel cannot run (mask, kv_lens, a layout TMA cannot address).
  static const kjit::detail::TuneOpSpec& tune_spec();
  static bool tune_key(const Dims& dims, kjit::detail::TunedKey* key);
  static bool apply_tuned(const Dims& dims, const DeviceInfo& info, const kjit::detail::TunedChoice& choice, Plan* plan);
  static kjit::detail::TunedChoice tuned_choice(const Dims& dims, const Plan& plan);
  static std::vector<kjit::detail::TunedChoice> tune_candidates(const Dims& dims, const DeviceInfo& info);
};

/// A paged_prefill call: its arguments, the host plan they were built for, and the device
/// workspace the plan's work map was uploaded to (checked with the arguments, before any driver
/// call, so it travels with them rather than as the pipeline's Workspace).
struct PagedPrefillCall {
  const PagedPrefillArgs& args;
  const PagedPrefillPlan& plan;
  const void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

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
  int64_t num_work = 0;   ///< PagedPrefillPlan::num_work()
};

/// Checks `args` against the contract and against `plan`. Pure host code. Throws
/// InvalidArgument "kjit::attention::paged_prefill: ...".
PagedPrefillDims validate_paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan);

/// How a paged prefill runs: its host plan decided everything; this names the kernel.
struct PagedPrefillOpPlan {
  kjit::detail::Choice choice;  ///< attention.paged_prefill (head_dim, tile_rows); none without work
  size_t workspace_bytes = 0;   ///< 0: the work map's workspace is sized by the host plan
};

/// kjit::attention::paged_prefill in the op pipeline.
struct PagedPrefillOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::paged_prefill", 80, "mma.sync bf16, ldmatrix, cp.async",
                                               {&paged_prefill_family}};
  using Args = PagedPrefillCall;
  using Dims = PagedPrefillDims;
  using Plan = PagedPrefillOpPlan;
  using Launch = kjit::detail::Launches<PrefillParams>;

  /// validate_paged_prefill, then the work map's workspace (InvalidArgument naming the bytes).
  static Dims validate(const Args& call);
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// The kernel's Params for `call` (the work map read from call.workspace); pure.
  static PrefillParams params(const Args& call, const Dims& dims);
  /// The launch value; the pipeline's `workspace` is unused (see PagedPrefillCall).
  static Launch build(const Args& call, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);
};

}  // namespace detail
}  // namespace kjit::attention
