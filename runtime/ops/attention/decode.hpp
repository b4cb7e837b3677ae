#pragma once
/// \file runtime/ops/attention/decode.hpp
/// kjit::attention::decode (include/kjit/ops/attention.hpp) as an op of the pipeline
/// (runtime/ops/pipeline.hpp): the pure validate and split-KV plan steps (decode_plan.cc) and the
/// launch value (decode.cc), exposed so tests check every rejection and plan without a GPU. The
/// paged decode reuses the planner and the merge step. Two programs: the plan's decode program
/// (attention.decode, or attention.paged_decode) and, only when the plan splits the KV and
/// combines the splits with the merge kernel (merge=kernel), the merge program
/// (attention.decode_merge at the call's head_dim: decode_merge_choice), which the pipeline loads
/// as the op's second program (runtime/ops/pipeline.hpp) and both ops share. On sm_90+ a plan of
/// 2..kDecodeMaxClusterSplits splits combines them in the decode kernel instead (merge=cluster:
/// one thread-block cluster per split group, launched with the cluster dimension), unless the
/// device cannot hold such clusters (settle_decode_merge, after the program is loaded).

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "attention/decode_merge_params.h"
#include "attention/decode_params.h"
#include "runtime/families/attention.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/ops/pod_memo.hpp"
#include "runtime/ops/split_partials.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kjit::attention {

namespace detail {

/// The shape of a validated DecodeArgs.
struct DecodeDims {
  int device = 0;
  int64_t batch = 0;
  int64_t max_kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t group = 0;  ///< q_heads / kv_heads
  bool has_kv_lens = false;
  bool has_mask = false;
  bool has_lse = false;
  int requested_splits = 0;  ///< DecodeArgs::num_splits (0 = choose)
  DecodeMerge requested_merge = DecodeMerge::kAuto;  ///< DecodeArgs::merge
};

/// Checks `args` against the contract in include/kjit/ops/attention.hpp. Pure host code: no
/// driver call, no allocation unless it throws. Throws InvalidArgument
/// "kjit::attention::decode: <tensor> <rule>, got <shape dtype>" for the first rule broken.
DecodeDims validate_decode(const DecodeArgs& args);
/// validate_decode, its messages naming `op` instead (a static string: the workspace query
/// validates the same arguments under its own name, kjit::attention::decode_workspace_bytes).
DecodeDims validate_decode(const DecodeArgs& args, const char* op);

/// How a decode runs: the specialization, the split-KV partition and the workspace it needs.
struct DecodePlan {
  kjit::detail::Choice choice;  ///< the decode family and point; no family for an empty batch
  int heads_per_cta = 8;   ///< query heads per CTA (the family parameter spelled `rows`)
  int m_tiles = 1;         ///< ceil(group / heads_per_cta)
  int num_splits = 1;      ///< KV splits per sequence (1: no merge, no workspace)
  int split_tokens = 1;    ///< tokens per split
  int64_t ctas = 0;        ///< decode-kernel CTAs: batch · kv_heads · num_splits · m_tiles
  /// How the splits combine (the family parameter `merge`): kKernel (also every one-split plan,
  /// which merges nothing) or kCluster (then 2..kDecodeMaxClusterSplits splits, one cluster of
  /// num_splits CTAs each); never kAuto.
  DecodeMerge merge = DecodeMerge::kKernel;
  size_t o_part_bytes = 0; ///< workspace offset of lse_part (o_part starts at 0)
  /// The merge kernel's partials for num_splits > 1, whatever the merge: a cluster plan writes
  /// none of it, but may turn into the merge-kernel plan of the same splits (settle_decode_merge,
  /// or a KJIT_JIT=async fallback), which must find its workspace in what the caller sized.
  size_t workspace_bytes = 0;
};

/// The merge a plan of `num_splits` splits runs for `requested` (DecodeArgs::merge) on a device
/// that has thread-block clusters or not (`clusters`): kKernel for one split (nothing to merge);
/// kAuto takes kCluster where `clusters` and num_splits ≤ kDecodeMaxClusterSplits, else kKernel;
/// kKernel and kCluster are taken as they are (the op checks a forced kCluster first:
/// check_decode_merge_request).
DecodeMerge plan_merge(DecodeMerge requested, int num_splits, bool clusters);

/// The checks of a merge request that need no device (validate_decode and
/// validate_paged_decode run them): `merge` is a DecodeMerge enumerator, and kCluster takes
/// `num_splits` 0 or 1..kDecodeMaxClusterSplits. Throws InvalidArgument naming `op`.
void check_decode_merge_args(const char* op, DecodeMerge merge, int num_splits);

/// The check of a merge request on `info`'s device (both ops' plan steps): kCluster needs
/// thread-block clusters. Throws Unsupported naming `op` and the device's target.
void check_decode_merge_request(const char* op, DecodeMerge merge, const DeviceInfo& info);

/// The decode family point (`family`: attention.decode or attention.paged_decode) of a plan at
/// `head_dim`: its rows (heads_per_cta) and merge.
Point decode_point(const Family& family, int64_t head_dim, const DecodePlan& plan);

/// After `program` (the plan's decode program) is loaded: a cluster plan whose clusters of
/// num_splits CTAs the device cannot hold at all (cuOccupancyMaxActiveClusters says 0: too few
/// SMs per GPC for the CTA's shared memory, or a partitioned device) becomes the merge-kernel
/// plan of the same splits and workspace (its point in `family`), and true is returned: the
/// pipeline then builds from that plan's programs. A forced cluster merge (`requested` kCluster)
/// throws Unsupported naming `op` instead. Any other plan: false, unchanged.
bool settle_decode_merge(const char* op, const Family& family, int64_t head_dim, DecodeMerge requested,
                         int device, const LoadedProgram& program, DecodePlan* plan);

/// The DecodeParams fields both decode ops fill alike: q and out ([batch, 1, q_heads, head_dim])
/// and lse ([batch, q_heads]; null: none) with their batch and head strides, batch, the plan's
/// splits and m_tiles, and the split partials in `workspace`. The op adds its heads and KV source
/// (runtime/ops/attention/params.hpp) and its own fields, then set_grid_divisors.
DecodeParams decode_query_params(const TensorRef& q, const TensorRef& out, const TensorRef* lse, int64_t batch,
                                 const DecodePlan& plan, void* workspace);

/// Sets p's m_tiles_div, num_splits_div and kv_heads_div from its m_tiles, num_splits and
/// kv_heads (a 0 counts as 1): how the decode kernel splits blockIdx.x. Both decode ops call it
/// last.
void set_grid_divisors(DecodeParams& p);

/// CTAs of decode_kernel<head_dim, ·> that can be resident per SM given the SM's shared memory
/// (bytes), in [1, 2]: the kernel is launched with __launch_bounds__(threads, 2).
int decode_resident_ctas(int64_t head_dim, int max_smem_per_sm);

/// CTAs per SM the contiguous decode planner counts as slots: 1 (measured; see the definition).
int decode_ctas_per_sm(int64_t head_dim, int max_smem_per_sm);

/// The most splits plan_decode's search considers and the decode tuner tries.
inline constexpr int kMaxDecodeSplits = 256;

/// The split search of plan_decode, run every time: the KV tiles per split (chunk) minimizing
///   ceil(base · s / slots) · (chunk + kCtaOverheadTiles) + (s > 1) · kMergeCostTiles
/// over the partitions of `tiles` KV tiles into s = ceil(tiles / chunk) ≤ max_splits splits, with
/// `base` CTAs per split and `slots` CTA slots on the device; the smallest s wins a tie. Up to
/// max_splits (≤ kMaxDecodeSplits) rounds of 64-bit divisions: what split_chunk saves repeat calls.
int64_t search_split_chunk(int64_t tiles, int64_t base, int64_t slots, int64_t max_splits = kMaxDecodeSplits);

/// Everything search_split_chunk reads. Zero-initialized, no padding.
struct SplitSearchKey {
  int64_t tiles;
  int64_t base;
  int64_t slots;
  int64_t max_splits;
};
/// The thread's memo of search_split_chunk (64 slots).
using SplitChunkMemo = kjit::detail::PodMemo<SplitSearchKey, int64_t, 64>;
SplitChunkMemo& split_chunk_memo();

/// search_split_chunk(tiles, base, slots, max_splits) through the thread's memo: the same chunk,
/// searched once per thread and key. Its key is the search's whole input, so the memo needs no
/// invalidation: a tuned plan (runtime/ops/tuned.hpp) is chosen before the planner runs, and a
/// tuned split count never reaches the search (the paged planner searches for the rows and
/// m_tiles, then takes the tuned count).
int64_t split_chunk(int64_t tiles, int64_t base, int64_t slots, int64_t max_splits = kMaxDecodeSplits);

/// Plans a validated decode. `requested_splits` is DecodeArgs::num_splits (0 = choose). When
/// choosing, the planner takes the split count s minimizing
///   ceil(base · s / slots) · (ceil(tiles / s) + kCtaOverheadTiles) + (s > 1) · kMergeCostTiles
/// with base = batch · kv_heads · m_tiles CTAs per split, slots = sm_count · ctas_per_sm and
/// tiles = ceil(max_kv_len / tile_tokens): full waves of equal-length CTAs, each paying a fixed
/// pipeline fill, plus one merge launch when split; s ≤ kDecodeMaxClusterSplits when `merge` is
/// kCluster. A requested count is honoured up to max_kv_len (each split gets
/// ceil(max_kv_len / s) tokens; trailing empty splits are dropped). `heads_per_cta` (8 or 16)
/// forces the query heads per CTA (a tuned plan); 0 takes 8 for groups up to 8, else 16. The
/// plan's merge is plan_merge(merge, num_splits, clusters): `clusters` says whether the device
/// has thread-block clusters (sm_90+).
DecodePlan plan_decode(const DecodeDims& dims, int requested_splits, int sm_count, int ctas_per_sm,
                       int heads_per_cta = 0, DecodeMerge merge = DecodeMerge::kAuto, bool clusters = false);

/// The merge program a decode plan needs: attention.decode_merge at `head_dim` when `plan` splits
/// the KV (num_splits > 1) and combines the splits with it (merge kKernel), else no family. What
/// DecodeOp and PagedDecodeOp::second_choice give the pipeline; no strings, no allocation.
kjit::detail::Choice decode_merge_choice(int64_t head_dim, const DecodePlan& plan);

/// The merge step over the split partials the decode kernel wrote for `p` (p.o_part, p.lse_part,
/// p.num_splits > 1) into p.out / p.lse, launched right after the decode kernel: overlapped with
/// it through programmatic dependent launch where the device has it.
kjit::detail::Step<DecodeMergeParams> decode_merge_step(const Kernel& merge_kernel, const DecodeParams& p,
                                                         const DeviceInfo& info);

/// The decode kernels' launches (contiguous or paged KV, as `program` and `p` say) into `launch`:
/// the decode step (plan.ctas CTAs of head_dim's launch shape; a cluster plan's in clusters of
/// num_splits CTAs) and, when the merge kernel combines the splits, the merge step from `merge`
/// (the attention.decode_merge program of decode_merge_choice). Checks nothing else: the ops
/// check the workspace and the grid first. Throws InvalidArgument naming `op` when the plan needs
/// the merge kernel and `merge` is null (a caller that built the launch without loading it).
void decode_steps(kjit::detail::Launches<DecodeParams, DecodeMergeParams>& launch, const char* op,
                  const LoadedProgram& program, const LoadedProgram* merge, const DecodeParams& p,
                  const DecodePlan& plan, int64_t head_dim, const DeviceInfo& info);

/// Throws InvalidArgument naming the needed bytes when `workspace` cannot hold the plan's
/// partials (too small, null, or not 16-byte aligned). Host-only.
void check_decode_workspace(const DecodePlan& plan, const void* workspace, size_t workspace_bytes);

/// kjit::attention::decode_workspace_bytes, its argument errors naming `op` (a static string):
/// the public query passes its own name, a binding that sizes the workspace of the decode call
/// it is about to make passes the op's (DecodeOp::kInfo.name).
size_t decode_workspace_bytes(const DecodeArgs& args, const char* op);

/// The split counts a decode sweep tries besides the planner's own: the powers of two and their
/// 1.5× in between cover the wave quantization on 100-170 SM parts.
inline constexpr int kDecodeSplitGrid[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};

/// Why a decode choice (`family`: the contiguous or the paged decode family; knob 0: splits in
/// 1..256) cannot run on `info`'s device: another family, a point outside the space or without
/// a kernel for the target (merge=cluster below sm_90), a CTA above the device's shared memory or
/// threads, merge=cluster with a split count outside 2..kDecodeMaxClusterSplits; "" when it can.
std::string decode_choice_fits(const Family& family, const kjit::detail::TunedChoice& choice, const DeviceInfo& info);

/// The merge of a decode choice's point (attention.decode or attention.paged_decode).
DecodeMerge merge_of(const kjit::detail::TunedChoice& choice);

/// kjit::attention::decode in the op pipeline.
struct DecodeOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::decode", kMinSm, "mma.sync bf16, cp.async", {&decode_family}};
  using Args = DecodeArgs;
  using Dims = DecodeDims;
  using Plan = DecodePlan;
  using Launch = kjit::detail::Launches<DecodeParams, DecodeMergeParams>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.q, a.k, a.v, a.kv_lens, a.mask, a.out, a.lse, a.scale, a.num_splits, a.merge);
  }

  static Dims validate(const Args& args) { return validate_decode(args, kInfo.name); }
  /// plan_decode on the device's SMs (decode_ctas_per_sm slots each) and clusters, and the family
  /// point. Throws Unsupported for a forced cluster merge on a device without clusters.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// settle_decode_merge over the contiguous decode family (the pipeline's hook after loading).
  static bool settle(const Dims& dims, const LoadedProgram& program, Plan* plan) {
    return settle_decode_merge(kInfo.name, decode_family(), dims.head_dim, dims.requested_merge, dims.device, program,
                               plan);
  }
  /// The decode kernel's Params for `args` under `plan` with the split partials in `workspace`.
  static DecodeParams params(const Args& args, const Dims& dims, const Plan& plan, void* workspace);
  /// The merge program when `plan` splits (decode_merge_choice): the pipeline's second program.
  static kjit::detail::Choice second_choice(const Dims& dims, const Plan& plan) {
    return decode_merge_choice(dims.head_dim, plan);
  }
  /// Checks the workspace and the grid, then the decode step from `program` and (split) the
  /// merge step from `merge`.
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      const LoadedProgram* merge, kjit::detail::Workspace workspace, const DeviceInfo& info);

  // Tuning (runtime/ops/tuned.hpp; decode_tune.cc). Knob: splits (the KV split count). Point:
  // rows and merge. Bucket: head_dim, group, batch · kv_heads and max_kv_len, the last two
  // rounded up to powers of two (max_kv_len at least 64). A call that requests a split count or
  // a merge is not tuned.
  static const kjit::detail::TuneOpSpec& tune_spec();
  static bool tune_key(const Dims& dims, kjit::detail::TunedKey* key);
  static bool apply_tuned(const Dims& dims, const DeviceInfo& info, const kjit::detail::TunedChoice& choice, Plan* plan);
  static kjit::detail::TunedChoice tuned_choice(const Dims& dims, const Plan& plan);
  static std::vector<kjit::detail::TunedChoice> tune_candidates(const Dims& dims, const DeviceInfo& info);
};

}  // namespace detail
}  // namespace kjit::attention
