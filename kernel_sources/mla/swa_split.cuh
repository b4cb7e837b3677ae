#pragma once
// The E4M3 hi + lo split of the fp8 SWA kernels (mla/swa_decode.cu on sm_89, swa_decode_sm90.cu):
// an operand that must keep more precision than one E4M3 byte (q, and P' in the P·V product) is
// stored as two E4M3 values whose sum carries ~8 significant bits, and multiplied twice.
#include "kjit/config.cuh"

namespace kjit::mla {

/// x = hi + lo, hi rounded to 4 significant bits (Veltkamp splitting with σ = 2^20 + 1 keeps
/// 24 − 20 bits) and lo = x − hi exactly. Stored as E4M3, hi is exact (in the normal range) and
/// lo is rounded to 4 bits, so hi + lo keeps ~8 bits of x: as many as a bf16 has.
KJIT_DEVICE void split_hi_lo(float x, float& hi, float& lo) {
  const float t = __fmul_rn(x, 1048577.f);
  hi = __fsub_rn(t, __fsub_rn(t, x));
  lo = __fsub_rn(x, hi);
}

}  // namespace kjit::mla
