// The divisions by a launch-fixed divisor the kernels run (kernel_sources/kjit/fast_div.h),
// against `/`: FastDiv (paged KV: token → page) and FastDiv64 (per-tensor FP8 quantize of a
// strided tensor: vector → row).
#include "kjit/fast_div.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <vector>

namespace {

// The next value of a 64-bit LCG walk (Knuth's MMIX constants); callers take its high bits.
uint64_t next(uint64_t& x) {
  x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

// Every dividend below 2^16 for every divisor up to 1024, and a spread of dividends up to
// 2^31 − 1 for divisors up to 2^31 − 1 (powers of two, their neighbours, primes, page sizes of
// real caches).
TEST(FastDiv, MatchesDivision) {
  auto check = [](uint32_t d, uint32_t n) {
    ASSERT_EQ(kjit::fast_quotient(n, kjit::fast_div_of(d)), n / d) << n << " / " << d;
  };
  for (uint32_t d = 1; d <= 1024; ++d) {
    for (uint32_t n = 0; n < (1u << 16); ++n) check(d, n);
  }
  std::vector<uint32_t> divisors = {1, 3, 7, 16, 17, 96, 127, 255, 1000, 4093, 65537, 1000003, 0x7fffffffu};
  for (int s = 1; s < 31; ++s) {
    for (int64_t e : {-1, 0, 1}) divisors.push_back(static_cast<uint32_t>((int64_t{1} << s) + e));
  }
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (const uint32_t d : divisors) {
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 0x7ffffffeu, 0x7fffffffu}) {
      if (n < 0x80000000u) check(d, n);
    }
    for (int i = 0; i < 20000; ++i) check(d, static_cast<uint32_t>(next(x) >> 33));
  }
}

// The same for 64-bit dividends below 2^63: every dividend below 2^12 for divisors up to 512,
// then each divisor's own edges (multiples ± 1), the top of the range, and random dividends of
// every magnitude (a random bit length, then random bits), for divisors of every magnitude up
// to 2^63 − 1.
TEST(FastDiv, SixtyFourBitMatchesDivision) {
  auto check = [](uint64_t d, uint64_t n) {
    ASSERT_EQ(kjit::fast_quotient64(n, kjit::fast_div64_of(d)), n / d) << n << " / " << d;
  };
  for (uint64_t d = 1; d <= 512; ++d) {
    for (uint64_t n = 0; n < (1u << 12); ++n) check(d, n);
  }
  constexpr uint64_t kTop = (uint64_t{1} << 63) - 1;
  std::vector<uint64_t> divisors = {1, 3, 7, 96, 896, 1000003, 0x7fffffffull, 0xffffffffull, 0x100000001ull, kTop};
  for (int s = 1; s < 63; ++s) {
    for (int64_t e : {-1, 0, 1}) divisors.push_back(static_cast<uint64_t>((int64_t{1} << s) + e));
  }
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (int i = 0; i < 200; ++i) {
    const int bits = 1 + static_cast<int>(next(x) >> 58);  // 1..64, clipped to 63 below
    divisors.push_back(std::max<uint64_t>(1, (next(x) >> 1) >> (63 - std::min(bits, 63))));
  }
  for (const uint64_t d : divisors) {
    for (uint64_t n : {uint64_t{0}, uint64_t{1}, d - 1, d, d + 1, 2 * d - 1, 2 * d, kTop - 1, kTop}) {
      if (n <= kTop) check(d, n);
    }
    for (uint64_t q : {uint64_t{3}, uint64_t{1000}, kTop / d}) {
      if (q <= kTop / d) {
        check(d, q * d);
        check(d, q * d - 1);
        if (q * d < kTop) check(d, q * d + 1);
      }
    }
    for (int i = 0; i < 5000; ++i) {
      const int bits = static_cast<int>(next(x) >> 58);  // 0..63
      check(d, (next(x) >> 1) >> (63 - bits));
    }
  }
}

}  // namespace
