#pragma once
// Butterfly reductions over the lanes of a warp (xor shuffles; every lane ends with the result,
// and all 32 lanes must call them). "quad" = the four lanes 4g..4g+3 that share a row of an
// mma.sync / wgmma accumulator fragment.
#include "kjit/config.cuh"

namespace kjit {

/// Max over this lane's quad.
KJIT_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/// Sum over this lane's quad.
KJIT_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// Max over the warp.
KJIT_DEVICE float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// Sum over the warp.
KJIT_DEVICE float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

}  // namespace kjit
