#pragma once
/// \file runtime/families/attention.hpp
/// The attention kernel families. Parameters (in order) and programs:
///   attention.decode          head_dim 64|128|256, rows 8|16 (query heads per CTA, the plan's
///                             heads_per_cta: 8 when the GQA group q_heads / kv_heads ≤ 8,
///                             else 16), merge kernel|cluster (how a split plan combines its
///                             splits, DecodeMerge's codes; cluster needs sm_90+).
///                             attention/decode.cu over the contiguous KV source: [0]
///                             decode_kernel, nothing else.
///   attention.paged_decode    the same space and kernel over the PagedKV source.
///   attention.decode_merge    head_dim 64|128|256: attention/decode_merge.cu, [0]
///                             decode_merge_kernel. Both decode ops load it, at the call's
///                             head_dim, only when their plan splits the KV (num_splits > 1) with
///                             merge=kernel; it combines the partials either decode kernel wrote.
///                             Its own program so that neither decode program compiles the
///                             merge, nor the merge program the decode kernel.
///   attention.paged_append    head_dim, index positions|indptr (code 0 / 1): paged_append_kernel.
///   attention.prefill         head_dim, block_m 64|128, mask none|bool (code 0 / 1):
///                             prefill_kernel with DenseQSchedule + ContigKV.
///   attention.prefill_sm90    head_dim 64|128; sm_90a only: the TMA + wgmma prefill_sm90_kernel.
///   attention.paged_prefill   head_dim, block_m: prefill_kernel with PackedQSchedule + PagedKV.
///   attention.paged_prefill_sm90  head_dim 64|128, block_m 128|192 (192 at head_dim 64 only);
///                             sm_90a only: paged_prefill_sm90_kernel (the wgmma prefill's
///                             consumers, two or three warpgroups, a page-table gather
///                             producer), for plans of block_m-row tiles.
/// min_sm 80 (mma.sync bf16, cp.async) except the two sm_90a families. `rows`, `merge` and
/// `block_m` are performance-only (FamilyParam::performance_only): KJIT_JIT=async may run one
/// value while another compiles; head_dim, mask and index are not.

#include <kjit/families.hpp>

#include <cstdint>
#include <string>

namespace kjit::attention {

/// The floor of every attention family but the sm_90a ones (prefill_sm90, paged_prefill_sm90),
/// and of the ops on them.
inline constexpr int kMinSm = 80;
/// What a device below kMinSm lacks, for the ops' Unsupported message.
inline constexpr const char* kMinSmNeeds = "mma.sync bf16, ldmatrix, cp.async";
/// The `head_dim` values of the mma.sync families (every attention family but the sm_90a ones):
/// the validators, planners and tuners accept exactly these.
inline constexpr int kHeadDims[] = {64, 128, 256};
/// The `head_dim` values of the wgmma families, attention.prefill_sm90 and paged_prefill_sm90.
inline constexpr int kSm90HeadDims[] = {64, 128};
/// The `block_m` values of attention.prefill and attention.paged_prefill: query rows per CTA
/// (PrefillArgs::block_m, the paged plan's tile_rows).
inline constexpr int kBlockMs[] = {64, 128};
/// The paged prefill's wide tile: 192 query rows per work item (three consumer warpgroups),
/// which only attention.paged_prefill_sm90 runs, and only at head_dim kWideTileHeadDim (at
/// head_dim 128 it would need 240 KiB of shared memory: Q 48 KiB + the 192 KiB ring). Every
/// other file names the wide tile through these two constants or paged_tile_rows_fit().
inline constexpr int kWideTileRows = 192;
/// The one head_dim of the wide tile (kWideTileRows).
inline constexpr int kWideTileHeadDim = 64;
/// The `block_m` values of attention.paged_prefill_sm90: query rows per work item, 128 (two
/// consumer warpgroups) or, at head_dim kWideTileHeadDim only, kWideTileRows (three).
inline constexpr int kSm90PagedRows[] = {128, kWideTileRows};
/// The paged plan's tile_rows values: kBlockMs, and kWideTileRows for attention.paged_prefill_sm90.
inline constexpr int kPagedTileRows[] = {64, 128, kWideTileRows};
/// Whether a paged plan of `tile_rows`-row work items at `head_dim` has an sm_90a kernel point.
constexpr bool sm90_paged_tile(int64_t head_dim, int tile_rows) {
  return (head_dim == 64 || head_dim == 128) &&
         (tile_rows == 128 || (tile_rows == kWideTileRows && head_dim == kWideTileHeadDim));
}
/// The paged prefill planner's tile rule: whether a plan at `head_dim` may have `tile_rows`-row
/// work items (a kPagedTileRows value; the wide tile only at kWideTileHeadDim). 0 (choose) is the
/// caller's to allow.
constexpr bool paged_tile_rows_fit(int64_t head_dim, int tile_rows) {
  bool listed = false;
  for (int m : kPagedTileRows) listed = listed || m == tile_rows;
  return listed && (tile_rows != kWideTileRows || head_dim == kWideTileHeadDim);
}
/// The rule of paged_tile_rows_fit() for an error message: "64, 128, or 192 at head_dim 64".
std::string paged_tile_rows_text();

const Family& decode_family();
const Family& paged_decode_family();
const Family& decode_merge_family();
const Family& paged_append_family();
const Family& prefill_family();
const Family& prefill_sm90_family();
const Family& paged_prefill_family();
const Family& paged_prefill_sm90_family();

}  // namespace kjit::attention
