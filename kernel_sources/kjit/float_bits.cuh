#pragma once
// Float constants and powers of two built from the IEEE-754 bit pattern: NVRTC has neither
// INFINITY nor __builtin_huge_valf, and exact powers of two (the per-row scaling of the fp8 SWA
// kernels) are cheaper as exponent arithmetic than as exp2f/log2f.
#include "kjit/config.cuh"

namespace kjit {

/// ln 2: turns a log2-domain log-sum-exp back into natural log.
constexpr float kLn2 = 0.6931471805599453f;

/// −inf.
KJIT_DEVICE float neg_inf() { return __uint_as_float(0xff800000u); }

/// 2^e as an f32, for e in [-126, 127] (normal range).
KJIT_DEVICE float exp2i(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

/// floor(log2 |x|) for a finite nonzero normal x (its unbiased exponent; subnormals give -127).
KJIT_DEVICE int ilog2(float x) { return static_cast<int>((__float_as_uint(x) >> 23) & 0xffu) - 127; }

}  // namespace kjit
