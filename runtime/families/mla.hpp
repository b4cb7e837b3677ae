#pragma once
/// \file runtime/families/mla.hpp
/// The "mla.swa_decode" family: fp8 sliding-window MLA decode. Parameters, in order:
///   head_dim 512 (latent dimension), group 16|32|64 (query heads per CTA, SwaPlan::heads_per_cta;
///   the parameter keeps its name, which keys and manifests carry), kv_tile 64|128
///   (window positions a CTA holds in shared memory), window 64|128|256|512, cache e4m3|e5m2
///   (codes mla::kSwaCacheE4M3 / kSwaCacheE5M2), cluster_split 1|2|4|8 (CTAs of one
///   thread-block cluster that split the window of one (token, head group) and merge their
///   partials through distributed shared memory in the same launch; 1 = no cluster).
/// group 16 / 32: mla/swa_decode.cu, [0] swa_decode_kernel, [1] swa_merge_kernel (split merge),
/// sm_80+; with cluster_split > 1 sm_90+, each CTA's slice W / cluster_split a whole number of
/// 16-position steps and kv_tile the smallest tile that holds it. group 64: mla/swa_decode_sm90.cu,
/// the sm_90a fp8 wgmma kernel (kv_tile 128, window ≤ 128, cluster_split 1, one kernel). group,
/// kv_tile and cluster_split are performance-only (KJIT_JIT=async may run one while another
/// compiles); window and cache are not.

#include <kjit/families.hpp>

#include "mla/swa_decode_params.h"

#include <cstdint>
#include <string>

namespace kjit::mla {

/// The family's and the op's lowest SM (mma.sync, cp.async; group 64 needs sm_90a on top).
inline constexpr int kMinSm = 80;
/// The `window` values: the indices' last dim W the validator accepts.
inline constexpr int kSwaWindows[] = {64, 128, 256, 512};
/// The `group` values (query heads per CTA): SwaDecodeArgs::head_group's choices besides 0.
inline constexpr int kSwaGroups[] = {16, 32, kSwaWgmmaHeads};
/// The `cluster_split` values: SwaDecodeArgs::cluster_split's choices besides 0. 8 is the largest
/// portable cluster.
inline constexpr int kSwaClusterSplits[] = {1, 2, 4, 8};
/// The lowest SM with thread-block clusters (cluster_split > 1).
inline constexpr int kSwaClusterMinSm = 90;

/// Why (group, kv_tile, window, cluster_split) cannot be a cluster split, or "" (also for
/// cluster_split 1, which is no cluster): the family's constraint and the op's check of a
/// requested split share it.
std::string swa_cluster_split_rule(int group, int tile, int64_t window, int cluster_split);
/// The kv_tile of a cluster split: the smallest tile that holds one CTA's window slice.
constexpr int swa_cluster_tile(int64_t window, int cluster_split) {
  return window / cluster_split <= 64 ? 64 : 128;
}

const Family& swa_decode_family();

}  // namespace kjit::mla
