#pragma once
/// \file runtime/ops/attention/prefill.hpp
/// kjit::attention::prefill (include/kjit/ops/attention.hpp) as an op of the pipeline
/// (runtime/ops/pipeline.hpp): the pure validate and plan steps (prefill_plan.cc) and the launch
/// values (prefill.cc; the sm_90a kernel's tensor maps in prefill_sm90.cc), exposed so tests check
/// every rejection and plan without a GPU. Dense prefill runs one of two families, chosen by the
/// variant rules (variant.hpp): the mma.sync split-Q kernel (attention.prefill) or the TMA + wgmma
/// kernel (attention.prefill_sm90). The ragged paged prefill, which runs the same kernel bodies
/// over a packed Q schedule and a page table, is paged_prefill.hpp's.

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

/// Q heads a dense prefill kernel walks together (PrefillParams / PrefillSm90Params::head_group,
/// head_group_order in attention/work_order.cuh). Without a causal mask: 1, one head's q tiles
/// after another's, so the CTAs in flight read the K/V of a few heads and find it in L2. Under
/// causal, heaviest q tile first within each group: for the sm_90a kernel (`kernel` kWgmma) as
/// many heads as share 4 MiB of K/V (at least 2, at most q_heads); for the mma.sync kernel all
/// q_heads, so the heaviest tiles of every head start first. Measured on the H200 (B4 H32 L4096
/// hd128): the sm_90a kernel with all heads together read 10× the compulsory DRAM bytes without a
/// mask and ran 7% slower (7–8% under causal); the mma.sync kernel, two CTAs per SM and less
/// bound by L2, gained 1.6% without a mask and lost 3–6% under causal with the 4 MiB groups.
int prefill_head_group(const PrefillDims& dims, AttentionVariant kernel);

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

/// A dense prefill's built-in plan: the variant (resolve_variant: dims.variant, strict unless
/// kAuto; kAuto prefers wgmma where it can run), then its family point and tile; pure, no memo.
/// Throws Unsupported when a requested variant cannot run the call on `info`'s device.
PrefillPlan plan_prefill(const PrefillDims& dims, const DeviceInfo& info);

/// kjit::attention::prefill in the op pipeline.
struct PrefillOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::prefill", kMinSm, kMinSmNeeds,
                                               {&prefill_family, &prefill_sm90_family}};
  using Args = PrefillArgs;
  using Dims = PrefillDims;
  using Plan = PrefillPlan;
  /// Step 0 runs the mma.sync kernel, step 1 the sm_90a one; the plan fills exactly one.
  using Launch = kjit::detail::Launches<PrefillParams, PrefillSm90Params>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.q, a.k, a.v, a.kv_lens, a.mask, a.causal, a.out, a.lse, a.scale, a.block_m, a.variant);
  }

  static Dims validate(const Args& args) { return validate_prefill(args); }
  /// plan_prefill, memoized per thread (runtime/ops/pod_memo.hpp) by every field of `dims` and
  /// `info` it reads (the layout as "TMA can address it"): a repeat shape resolves no variant and
  /// searches no family. A failure is not stored.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// The mma.sync kernel's Params for `args` under `plan`; pure.
  static PrefillParams params(const Args& args, const Dims& dims, const Plan& plan);
  /// The sm_90a kernel's Params: the four TMA tensor maps of q, k, v and out (blhd_tma_map_key)
  /// from the thread's memo, encoded (a host-only driver call) on a miss; no launch.
  static PrefillSm90Params params_sm90(const Args& args, const Dims& dims, const Plan& plan);
  /// params_sm90 written into zero-initialized `*p` (a fresh Step's): build's way, which writes
  /// the ~600 bytes once instead of building them and copying them over.
  static void fill_params_sm90(const Args& args, const Dims& dims, const Plan& plan, PrefillSm90Params* p);
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

}  // namespace detail
}  // namespace kjit::attention
