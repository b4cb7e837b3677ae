#pragma once
// Host emulation of kernel_sources/attention/mma.cuh (tests/emulation only): the functions that
// header brings in from kjit/mma.cuh, kjit/cp_async.cuh, kjit/smem.cuh and kjit/f16_bits.cuh, and its
// own swizzle, implemented from the PTX ISA's fragment definitions as warp collectives over
// emu::WarpScratch.
// Shared memory is the array kjit::attention::smem; a "shared address" is a byte offset into it.
// A CTA's own shared memory starts at its offset emu::t_smem_offset (0 unless several CTAs of a
// cluster run at once, each then with its own region: kjit/cluster.cuh's emulation maps between
// them).
#include "kjit/config.cuh"
#include "emu_cp_async.hpp"

#include <vector>

namespace emu {
extern thread_local uint32_t t_smem_offset;  ///< this CUDA thread's CTA's region of kjit::attention::smem
}  // namespace emu

namespace kjit::attention {

extern uint8_t smem[];

inline uint8_t* dynamic_smem() { return smem + ::emu::t_smem_offset; }

namespace emu_detail {
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float lo(uint32_t r) { return from_bf16(static_cast<uint16_t>(r & 0xffff)); }
inline float hi(uint32_t r) { return from_bf16(static_cast<uint16_t>(r >> 16)); }
inline float half(uint32_t r, int which) { return which ? hi(r) : lo(r); }

/// Full m16n8k16: every lane deposits a[4], b[2], c[4]; each lane computes its own d[4].
inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  for (int i = 0; i < 4; ++i) w.u[lane][i] = a[i];
  w.u[lane][4] = b0;
  w.u[lane][5] = b1;
  w.barrier.arrive_and_wait();
  auto A = [&](int row, int col) {  // A (16x16, row-major) element
    const int l = (row % 8) * 4 + (col % 8) / 2;
    const int reg = (row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0);
    return half(w.u[l][reg], col % 2);
  };
  auto B = [&](int k, int n) {  // B (16x8, "col") element
    const int l = n * 4 + (k % 8) / 2;
    return half(w.u[l][4 + (k >= 8 ? 1 : 0)], k % 2);
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

/// ldmatrix.x4 (optionally .trans): lane L gives the row address of row L % 8 of matrix L / 8.
inline void ldmatrix(uint32_t (&r)[4], uint32_t addr, bool trans) {
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  w.u[lane][0] = addr;
  w.barrier.arrive_and_wait();
  const int g = lane / 4, t = lane % 4;
  for (int m = 0; m < 4; ++m) {
    uint16_t e0, e1;
    if (!trans) {  // (row g, cols 2t, 2t+1)
      const uint32_t row = w.u[8 * m + g][0];
      std::memcpy(&e0, smem + row + 4 * t, 2);
      std::memcpy(&e1, smem + row + 4 * t + 2, 2);
    } else {  // (rows 2t, 2t+1; col g)
      std::memcpy(&e0, smem + w.u[8 * m + 2 * t][0] + 2 * g, 2);
      std::memcpy(&e1, smem + w.u[8 * m + 2 * t + 1][0] + 2 * g, 2);
    }
    r[m] = static_cast<uint32_t>(e0) | (static_cast<uint32_t>(e1) << 16);
  }
  w.barrier.arrive_and_wait();
}

}  // namespace emu_detail

inline uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(static_cast<const uint8_t*>(ptr) - smem);
}

inline uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(emu_detail::to_bf16(lo)) | (static_cast<uint32_t>(emu_detail::to_bf16(hi)) << 16);
}

inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu_detail::mma(d, a, b0, b1);
}

inline void mma_bf16_16816_upper(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  float d[4] = {d0, d1, 0.f, 0.f};
  const uint32_t a[4] = {a0, 0u, a2, 0u};
  emu_detail::mma(d, a, b0, b1);
  d0 = d[0];
  d1 = d[1];
}

inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) { emu_detail::ldmatrix(r, addr, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) { emu_detail::ldmatrix(r, addr, true); }

inline void cp_async_16(uint32_t dst, const void* src, bool valid) { ::emu::cp_async_16(smem, dst, src, valid); }
inline void cp_async_commit() { ::emu::cp_async_commit(); }
template <int kPending>
inline void cp_async_wait() {
  ::emu::cp_async_wait(kPending);
}

template <int kRowBytes>
inline uint32_t swizzle_offset(int row, int chunk) {
  static_assert(kRowBytes % 128 == 0, "swizzled rows must span whole 128-byte bank sweeps");
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

}  // namespace kjit::attention
