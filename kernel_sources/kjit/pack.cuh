#pragma once
// Two floats into one 32-bit register of a 16-bit pair, the operand format of mma.sync / wgmma
// A fragments and of 4-byte bf16 stores.
#include "kjit/config.cuh"

namespace kjit {

/// (lo, hi) → bf16x2, `lo` in the low half, each rounded to nearest even.
KJIT_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace kjit
