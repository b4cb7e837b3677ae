#pragma once
// FP8 conversion helpers shared by the quantize and GEMM kernels: format limits, saturating
// float → fp8 conversion, the multiplier formula and 16-byte vector unpacking of the inputs.
//
// Conversion (cvt_fp8x2, kjit/fp8_cvt.cuh): one cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (sm_89+): round to nearest even; a finite value past the largest
// finite one, and ±inf, become ±max (E4M3 448, E5M2 57344); NaN stays NaN. tools/testing/
// reference_fp8.cc reproduces it bit for bit on the host.
#include "kjit/config.cuh"
#include "kjit/warp_reduce.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/fp8_cvt.cuh"
#include "fp8/stream.cuh"
#include "fp8/quantize_params.h"

namespace kjit::fp8 {

template <int kFmt>
struct FormatTraits;
template <>
struct FormatTraits<kFormatE4M3> {
  static constexpr float kMax = 448.f;
};
template <>
struct FormatTraits<kFormatE5M2> {
  static constexpr float kMax = 57344.f;
};

/// Four floats → four fp8 bytes packed in a word, f[0] in the low byte.
template <int kFmt>
KJIT_DEVICE uint32_t cvt_fp8x4(float f0, float f1, float f2, float f3) {
  return cvt_fp8x2<kFmt>(f0, f1) | (cvt_fp8x2<kFmt>(f2, f3) << 16);
}

/// The multiplier that maps a block's amax onto the format's largest finite value:
///   multiplier = fmt_max / amax          for 0 < amax < inf
///              = 1                       for amax == 0 (an all-zero block) or amax == inf
/// clamped to FLT_MAX (a denormal amax would overflow it), then, with kPow2, rounded down to a
/// power of two (UE8M0 scales): the exponent bits alone. fmt_max / amax ≥ 448 / FLT_MAX is a
/// normal float, so masking the mantissa is exact. IEEE division (__fdiv_rn) whatever the flags.
template <int kFmt, bool kPow2>
KJIT_DEVICE float multiplier_from_amax(float amax) {
  float m = 1.f;
  if (amax > 0.f && amax <= 3.402823466e38f) m = fminf(__fdiv_rn(FormatTraits<kFmt>::kMax, amax), 3.402823466e38f);
  if (kPow2) m = __uint_as_float(__float_as_uint(m) & 0x7f800000u);
  return m;
}

/// A given multiplier with the power-of-two rounding applied (denormal and zero multipliers are
/// rejected on the host, so the exponent mask is exact here too).
template <bool kPow2>
KJIT_DEVICE float round_multiplier(float m) {
  return kPow2 ? __uint_as_float(__float_as_uint(m) & 0x7f800000u) : m;
}

/// The input element type of a `kIn` code and how a 16-byte vector of it unpacks to floats.
template <int kIn>
struct InTraits;
template <>
struct InTraits<kInBF16> {
  static constexpr int kVec = 8;  // elements per 16-byte vector
  KJIT_DEVICE static void unpack(const uint4& v, float (&f)[8]) {
    // bf16 → f32 is exact: the bf16 bits are the high half of the f32.
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};
template <>
struct InTraits<kInF16> {
  static constexpr int kVec = 8;
  KJIT_DEVICE static void unpack(const uint4& v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // f16 → f32 is exact
      f[2 * i] = f16_to_f32(static_cast<uint16_t>(w[i] & 0xffffu));
      f[2 * i + 1] = f16_to_f32(static_cast<uint16_t>(w[i] >> 16));
    }
  }
};
template <>
struct InTraits<kInF32> {
  static constexpr int kVec = 4;
  KJIT_DEVICE static void unpack(const uint4& v, float (&f)[4]) {
    f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
  }
};

/// max(m, |f[i]|) over a vector. fmaxf returns the non-NaN operand, so NaN inputs never reach
/// the amax (they stay NaN in the output).
template <int kN>
KJIT_DEVICE float vec_amax(float m, const float (&f)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) m = fmaxf(m, fabsf(f[i]));
  return m;
}

/// The fp8 bytes of f[i] · multiplier (one f32 rounding for the product, then one conversion).
/// 8 inputs → uint2, 4 inputs → one word in .x.
template <int kFmt, int kN>
KJIT_DEVICE uint2 vec_quantize(const float (&f)[kN], float multiplier) {
  uint2 out;
  out.x = cvt_fp8x4<kFmt>(__fmul_rn(f[0], multiplier), __fmul_rn(f[1], multiplier),
                          __fmul_rn(f[2], multiplier), __fmul_rn(f[3], multiplier));
  if constexpr (kN == 8) {
    out.y = cvt_fp8x4<kFmt>(__fmul_rn(f[4], multiplier), __fmul_rn(f[5], multiplier),
                            __fmul_rn(f[6], multiplier), __fmul_rn(f[7], multiplier));
  } else {
    out.y = 0;
  }
  return out;
}

/// Stores the quantized vector: 8 bytes for 8 inputs, 4 bytes for 4.
template <int kN>
KJIT_DEVICE void store_fp8(void* ptr, const uint2& v) {
  if constexpr (kN == 8) {
    store_u64(ptr, v.x, v.y);
  } else {
    store_u32(ptr, v.x);
  }
}

/// Maximum over the CTA, returned to every thread. `scratch` holds 32 floats; blockDim.x is a
/// multiple of 32. Ends with a barrier, so `scratch` may be reused right after.
KJIT_DEVICE float block_max(float v, float* scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.f;
  r = warp_max(r);
  __syncthreads();
  return r;
}

}  // namespace kjit::fp8
