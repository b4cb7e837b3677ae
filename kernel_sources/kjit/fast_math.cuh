#pragma once
// The hardware approximations of 2^x, log2(x) and 1/x (MUFU.EX2 / MUFU.LG2 / MUFU.RCP). The
// attention and SWA kernels keep softmax in the log2 domain (scores pre-multiplied by
// scale · log2(e)), so every exponential is one ex2 and a log-sum-exp needs one lg2; their final
// normalization by the softmax sum is one rcp (IEEE `1.f / x` adds a ~60-instruction slow path
// for operands near the range limits, which a sum ≥ 1 never is).
#include "kjit/config.cuh"

namespace kjit {

/// 2^x (ex2.approx.ftz: relative error ~2^-22; 2^-inf = +0).
KJIT_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// log2(x) (lg2.approx.ftz; lg2(0) = -inf).
KJIT_DEVICE float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// 1/x (rcp.approx.ftz: at most 1 ulp from the correctly rounded result; subnormal x flushes to
/// ±0, giving ±inf). For a softmax sum, which is ≥ 1 whenever anything was attended.
KJIT_DEVICE float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kjit
