#pragma once
// Host emulation of kernel_sources/mla/swa_ptx.cuh (tests/emulation/swa only): the functions
// that header brings in from kjit/ (mma.cuh, fp8_cvt.cuh, cp_async.cuh, named_barrier.cuh,
// smem.cuh, prefetch.cuh; fast_math.cuh has its own emulation), written from the PTX ISA —
// mma.m16n8k16 .f16 and m16n8k32 fp8 fragments, cp.async zero fill and commit/wait groups,
// bar.sync with a thread count, cvt.rn.satfinite.e4m3x2 and cvt.rn.f16x2.e4m3x2. Shared memory
// is the array kjit::mla::smem; a "shared address" is a byte offset into it.
#include "kjit/config.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/fp8_format.h"
#include "emu_cp_async.hpp"

#include <cstdio>
#include <cstdlib>
#include <vector>

// SWA_EMU_ARCH picks the code path: 80 (f16 mma, bit conversions), 89 (fp8 mma: sm_89/sm_120),
// 90 (f16 mma, cvt for K fragments, bit conversions for V: sm_90/sm_100).
#ifndef SWA_EMU_ARCH
#define SWA_EMU_ARCH 90
#endif
#define KJIT_SWA_FP8_MMA (SWA_EMU_ARCH == 89)
#define KJIT_SWA_CVT_E4M3 (SWA_EMU_ARCH >= 89)

namespace kjit::mla {

extern unsigned char smem[];

namespace swa_detail {
namespace emu_detail {

/// Named barriers 1..15 of the running CTA (reset by the emulator's launch), and the thread
/// count each was reset with.
extern emu::Barrier g_named[16];
extern int g_named_count[16];

inline float f16(uint32_t reg, int which) {
  return swa_emu::f16_value(static_cast<uint16_t>(which ? reg >> 16 : reg & 0xffff));
}

inline double e4m3(uint32_t b) {
  const int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -v : v;
}

inline double e5m2(uint32_t b) {
  const int e = (b >> 2) & 0x1f, m = b & 3;
  double v = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1.0 + m / 4.0, e - 15);
  if (e == 31) v = m == 0 ? INFINITY : NAN;
  return (b & 0x80) ? -v : v;
}

inline double byte_of(uint32_t reg, int i) { return static_cast<double>((reg >> (8 * i)) & 0xffu); }

/// Round to the nearest E4M3 value, ties to even, saturating to ±448 (cvt.rn.satfinite).
inline uint32_t to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint32_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  uint32_t best = 0;
  double best_err = INFINITY;
  for (uint32_t c = 0; c <= 0x7e; ++c) {
    const double err = std::fabs(e4m3(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best | sign;
}

}  // namespace emu_detail

inline uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(ptr) - smem);
}

inline void cp_async_16(uint32_t dst, const void* src, bool valid) { ::emu::cp_async_16(smem, dst, src, valid); }
inline void cp_async_commit() { ::emu::cp_async_commit(); }
template <int kPending>
inline void cp_async_wait() {
  ::emu::cp_async_wait(kPending);
}

inline void named_barrier(int id, int threads) {
  if (id < 1 || id > 15 || emu_detail::g_named_count[id] != threads) {
    std::fprintf(stderr, "emulator: bar.sync %d, %d does not match the barrier's %d threads\n", id, threads,
                 id >= 1 && id <= 15 ? emu_detail::g_named_count[id] : -1);
    std::abort();
  }
  emu_detail::g_named[id].arrive_and_wait();
}

/// mma.m16n8k16.row.col.f32.f16.f16.f32: every lane deposits a[4], b[2]; each lane computes
/// its own d[4] (PTX ISA fragment layouts; products and sums in double).
inline void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  w.u[lane][0] = a0;
  w.u[lane][1] = a1;
  w.u[lane][2] = a2;
  w.u[lane][3] = a3;
  w.u[lane][4] = b0;
  w.u[lane][5] = b1;
  w.barrier.arrive_and_wait();
  auto A = [&](int row, int col) {  // A (16x16, row-major)
    const int l = (row % 8) * 4 + (col % 8) / 2;
    const int reg = (row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0);
    return emu_detail::f16(w.u[l][reg], col % 2);
  };
  auto B = [&](int k, int n) {  // B (16x8, "col")
    const int l = n * 4 + (k % 8) / 2;
    return emu_detail::f16(w.u[l][4 + (k >= 8 ? 1 : 0)], k % 2);
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int col = 2 * t + (i % 2);
    double acc = d[i];
    for (int k = 0; k < 16; ++k) acc += static_cast<double>(A(row, k)) * B(k, col);
    out[i] = static_cast<float>(acc);
  }
  w.barrier.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// mma.m16n8k32.row.col.f32.e4m3.{e4m3|e5m2}.f32 (the kernel's A is always E4M3): A (16x32): a0 = (g, k 4t..4t+3),
/// a1 = (g+8, 4t..), a2 = (g, 16+4t..), a3 = (g+8, 16+4t..); B (32x8): b0 = (k 4t..4t+3, n g),
/// b1 = (k 16+4t.., n g); byte i of a register is element k = base + i.
template <int kFa, int kFb>
inline void mma_fp8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  static_assert(kFa == fp8::kFormatE4M3, "the SWA kernel's A operand (q, P) is E4M3");
  constexpr bool kE5M2B = kFb == fp8::kFormatE5M2;
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  w.u[lane][0] = a0;
  w.u[lane][1] = a1;
  w.u[lane][2] = a2;
  w.u[lane][3] = a3;
  w.u[lane][4] = b0;
  w.u[lane][5] = b1;
  w.barrier.arrive_and_wait();
  auto A = [&](int row, int k) {
    const int l = (row % 8) * 4 + (k % 16) / 4;
    const int reg = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
    return emu_detail::e4m3((w.u[l][reg] >> (8 * (k % 4))) & 0xffu);
  };
  auto B = [&](int k, int n) {
    const int l = n * 4 + (k % 16) / 4;
    const uint32_t byte = (w.u[l][4 + (k >= 16 ? 1 : 0)] >> (8 * (k % 4))) & 0xffu;
    return kE5M2B ? emu_detail::e5m2(byte) : emu_detail::e4m3(byte);
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int col = 2 * t + (i % 2);
    double acc = d[i];
    for (int k = 0; k < 32; ++k) acc += A(row, k) * B(k, col);
    out[i] = static_cast<float>(acc);
  }
  w.barrier.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// cvt.rn.satfinite.e4m3x2.f32 of (lo, hi): lo in the lower byte.
inline uint32_t e4m3x2_pack(float lo, float hi) { return emu_detail::to_e4m3(lo) | (emu_detail::to_e4m3(hi) << 8); }

/// cvt.rn.f16x2.e4m3x2 of the low / high 16 bits of w (the lower byte to the lower half).
template <bool kHigh>
inline uint32_t cvt_e4m3x2_f16x2(uint32_t w) {
  auto one = [](uint32_t b) -> uint16_t {
    const int e = (b >> 3) & 0xf, m = b & 7;
    double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    if (e == 15 && m == 7) v = NAN;
    if (b & 0x80) v = -v;
    return swa_emu::f16_bits(static_cast<float>(v));
  };
  const uint32_t pair = kHigh ? w >> 16 : w & 0xffff;
  return static_cast<uint32_t>(one(pair & 0xff)) | (static_cast<uint32_t>(one((pair >> 8) & 0xff)) << 16);
}

inline void prefetch_l1(const void*) {}

}  // namespace swa_detail
}  // namespace kjit::mla
