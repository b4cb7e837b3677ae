#pragma once
/// \file runtime/families/mla.hpp
/// The "mla.swa_decode" family: fp8 sliding-window MLA decode. Parameters, in order:
///   head_dim 512 (latent dimension), group 16|32|64 (query heads per CTA, SwaPlan::heads_per_cta;
///   the parameter keeps its name, which keys and manifests carry), kv_tile 64|128
///   (window positions a CTA holds in shared memory), window 64|128|256|512, cache e4m3|e5m2
///   (codes mla::kSwaCacheE4M3 / kSwaCacheE5M2).
/// group 16 / 32: mla/swa_decode.cu, [0] swa_decode_kernel, [1] swa_merge_kernel (split merge),
/// sm_80+. group 64: mla/swa_decode_sm90.cu, the sm_90a fp8 wgmma kernel (kv_tile 128, window
/// ≤ 128, one kernel). group and kv_tile are performance-only (KJIT_JIT=async may run one while
/// another compiles); window and cache are not.

#include <kjit/families.hpp>

#include "mla/swa_decode_params.h"

namespace kjit::mla {

/// The family's and the op's lowest SM (mma.sync, cp.async; group 64 needs sm_90a on top).
inline constexpr int kMinSm = 80;
/// The `window` values: the indices' last dim W the validator accepts.
inline constexpr int kSwaWindows[] = {64, 128, 256, 512};
/// The `group` values (query heads per CTA): SwaDecodeArgs::head_group's choices besides 0.
inline constexpr int kSwaGroups[] = {16, 32, kSwaWgmmaHeads};

const Family& swa_decode_family();

}  // namespace kjit::mla
