#pragma once
/// \file runtime/families/fp8.hpp
/// The FP8 kernel families (min_sm 89: mma.sync and conversions with E4M3/E5M2 operands).
///   fp8.quantize  in bf16|f16|f32, fmt e4m3|e5m2, granularity tensor|row|block1x128|block128x128,
///                 pow2 0|1 (codes: fp8::kIn*, kFormat*, kGran*, 0/1). kernel_sources/fp8/quantize.cu;
///                 granularity=tensor is one program of four kernels: [0] quantize with a given
///                 multiplier, [1] quantize with the multiplier from amax, [2] amax,
///                 [3] delayed-scaling update; the others one kernel each.
///   fp8.gemm      impl mma|wgmma, a, b e4m3|e5m2, out bf16|f32, scale tensor|block,
///                 tile 64x64|128x64|128x128|128x256|128x16|128x32|64x16|64x32|128x80|128x96|
///                 128x112|128x160|128x192|128x224|64x80|64x96|64x112|64x128|64x160|64x192|
///                 64x224|64x256 (code gemm_tile_code(bm, bn)), stages 2..12 (mma 2..4, wgmma
///                 2..8, wgmma small tiles 2..12), a_major k|m, b_major k|n. impl=mma:
///                 fp8/gemm.cu (sm_89+); impl=wgmma: fp8/gemm_sm90.cu (sm_90a only, tensor
///                 scales, K-major operands, 128-row tiles, BN 16/32/64 with 128 or 64 rows for
///                 N <= 64, BN 80..224 for M <= 256, 64-row tiles of BN 80..256 for CTA pairs at
///                 M <= 128). impl, tile and stages are performance-only (KJIT_JIT=async may run
///                 one while another compiles).

#include <kjit/families.hpp>

#include <cstdint>

namespace kjit::fp8 {

/// The lowest SM of both families and of the ops on them: cvt.rn.satfinite to E4M3/E5M2 and
/// mma.sync m16n8k32 with FP8 operands exist from sm_89 (Ada) on.
inline constexpr int kMinSm = 89;
/// What a device below kMinSm lacks, for the ops' Unsupported message.
inline constexpr const char* kMinSmNeeds = "FP8 cvt.satfinite and mma.sync e4m3/e5m2 exist from Ada/Hopper on";

const Family& quantize_family();
const Family& gemm_family();

/// The code of the gemm `tile` value bm x bn.
constexpr int64_t gemm_tile_code(int bm, int bn) { return int64_t{bm} * 1000 + bn; }

}  // namespace kjit::fp8
