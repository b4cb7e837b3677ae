#pragma once
// Division by a run-time divisor that is fixed per launch (a page size, a grid dimension), as one
// multiply-high, an add and a shift: the same instructions for every divisor, so a kernel carries
// one code path where `pow2 ? n >> s : n / d` carried two (and a ~20-instruction division in the
// second).
// Compiled by g++ (the op layer builds the divisor into the Params) and by NVRTC (the kernels
// divide); the host tests check it against `/` exhaustively over divisors and dividends.
//
// For a divisor d ≥ 1 let s = ⌈log2 d⌉ and m = ⌊2^32 · (2^s − d) / d⌋ + 1 (< 2^32). Then for
// every 0 ≤ n < 2^31:  n / d = (⌊n · m / 2^32⌋ + n) >> s.  This is the round-up multiplier of
// Granlund and Montgomery, "Division by Invariant Integers using Multiplication" (PLDI 1994,
// section 4), with N = 32 and the 33-bit multiplier 2^32 + m: 2^(32+s) < (2^32 + m) · d ≤
// 2^(32+s) + 2^s, so ⌊n / d⌋ = ⌊(2^32 + m) · n / 2^(32+s)⌋; n < 2^31 keeps the add below 2^32.
// A power of two gives m = 1 (the high product is 0): the quotient is n >> s.
//
// FastDiv64 is the same construction with N = 64: m = ⌊2^64 · (2^s − d) / d⌋ + 1 (< 2^64) and,
// for every 0 ≤ n < 2^63, n / d = (⌊n · m / 2^64⌋ + n) >> s. The high half of the 128-bit product
// is one __umul64hi on the device (a few 32-bit multiplies) where `/` is a long subroutine.
#include "kjit/types.h"

namespace kjit {

/// A divisor d ≥ 1 prepared for fast_quotient (see the file comment for the formula).
struct FastDiv {
  uint32_t magic;  ///< ⌊2^32 · (2^shift − d) / d⌋ + 1
  uint32_t shift;  ///< ⌈log2 d⌉
};

/// ⌈log2 d⌉ for 1 ≤ d ≤ 2^63: the shift of FastDiv and FastDiv64.
constexpr uint32_t ceil_log2(uint64_t d) {
  uint32_t s = 0;
  while ((uint64_t{1} << s) < d) ++s;
  return s;
}

/// The FastDiv of divisor d (1 ≤ d < 2^31).
constexpr FastDiv fast_div_of(uint32_t d) {
  const uint32_t s = ceil_log2(d);
  return {static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1), s};
}

/// n / d for 0 ≤ n < 2^31, d the divisor `f` was built from. On the device the 64-bit product's
/// high half is one mul.hi.u32.
constexpr uint32_t fast_quotient(uint32_t n, FastDiv f) {
  return (static_cast<uint32_t>((uint64_t{n} * f.magic) >> 32) + n) >> f.shift;
}

/// A divisor d ≥ 1 prepared for fast_quotient64 (see the file comment for the formula).
struct FastDiv64 {
  uint64_t magic;  ///< ⌊2^64 · (2^shift − d) / d⌋ + 1
  uint32_t shift;  ///< ⌈log2 d⌉
  uint32_t pad_;
};

/// ⌊a · b / 2^64⌋.
inline uint64_t mul_hi_u64(uint64_t a, uint64_t b) {
#ifdef __CUDACC_RTC__
  return __umul64hi(a, b);
#else
  __extension__ using u128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
}

#ifndef __CUDACC_RTC__
/// The FastDiv64 of divisor d (1 ≤ d < 2^63). Host only: the op layer builds it into the Params.
inline FastDiv64 fast_div64_of(uint64_t d) {
  __extension__ using u128 = unsigned __int128;
  const uint32_t s = ceil_log2(d);
  return {static_cast<uint64_t>(((u128{1} << 64) * ((u128{1} << s) - d)) / d + 1), s, 0};
}
#endif

/// n / d for 0 ≤ n < 2^63, d the divisor `f` was built from.
inline uint64_t fast_quotient64(uint64_t n, FastDiv64 f) { return (mul_hi_u64(n, f.magic) + n) >> f.shift; }

}  // namespace kjit
