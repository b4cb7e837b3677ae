#pragma once
// Host emulation of kernel_sources/kjit/wgmma.cuh (emu_sm90.hpp): each thread computes its own
// accumulator fragment of a warpgroup's m64nNk16 bf16 step, or m64nNk32 fp8 (E4M3/E5M2) step,
// from shared memory through the real descriptor encoders (kjit/wgmma_desc.cuh), in f32 fma, k
// in order (the tensor cores' fp8 accumulation order and its reduced internal precision are not
// emulated). The register A operand of
// the RS form is exchanged within the warp at issue (each row's 16 values live in a quad).
// Every wgmma instruction (and setmaxnreg) is .sync.aligned: a thread resumes once its whole warp
// has executed it, so each is a warp barrier here too (a lane cannot run a unit ahead of its warp
// and miss a barrier phase). The registers and fences have nothing else to do.
#include "kjit/config.cuh"
#include "kjit/fp8_format.h"
#include "kjit/wgmma_desc.cuh"

namespace kjit::sm90 {

inline void wgmma_fence() { __syncwarp(); }
inline void wgmma_commit() {
  __syncwarp();
  ::emu::sm90::wgmma_commit();
}
/// Completion is collective too: no lane goes on (say, lane 0 to release the stage) before every
/// lane's retired operations have read their operands.
template <int kPending>
inline void wgmma_wait() {
  __syncwarp();
  ::emu::sm90::wgmma_wait(kPending);
  __syncwarp();
}
template <int kRegs>
inline void setmaxnreg_dec() {
  __syncwarp();
  if (::emu::t_thread.x % 32 == 0) ::emu::sm90::setmaxnreg(kRegs, false);
  __syncwarp();
}
template <int kRegs>
inline void setmaxnreg_inc() {
  __syncwarp();
  if (::emu::t_thread.x % 32 == 0) ::emu::sm90::setmaxnreg(kRegs, true);
  __syncwarp();
}

/// d (+)= A · B, A (64 × 16) and B (N × 16) both K-major bf16 (see the kernel header).
template <int kN>
inline void wgmma_bf16_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma N");
  __syncwarp();
  float* acc = d;
  ::emu::sm90::wgmma_issue([=] {
    using namespace ::emu::sm90;
    const Desc a = decode(desc_a), b = decode(desc_b);
    for (int i = 0; i < kN / 2; ++i) {
      const int row = acc_row(i), col = acc_col(i);
      float s = scale_d != 0 ? acc[i] : 0.f;
      for (int k = 0; k < 16; ++k) s = std::fma(bf16_at(k_major(a, row, 2 * k)), bf16_at(k_major(b, col, 2 * k)), s);
      acc[i] = s;
    }
  }, {{::emu::sm90::decode(desc_a), true, 64, 2}, {::emu::sm90::decode(desc_b), true, kN, 2}});
}

/// d (+)= A · B, A from registers (the mma.m16n8k16 A fragment per warp's 16 rows) and B MN-major.
template <int kN>
inline void wgmma_bf16_rs_tb(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma N");
  // The quad's fragments: row l/4 (h 0) and l/4 + 8 (h 1) of the warp's 16, k 0..15.
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  for (int r = 0; r < 4; ++r) w.u[lane][r] = a[r];
  w.barrier.arrive_and_wait();
  float rows[2][16];
  for (int q = 0; q < 4; ++q) {
    const uint32_t* f = w.u[(lane & ~3) + q];
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        const uint32_t pair = f[h + 2 * half];
        rows[h][8 * half + 2 * q] = __uint_as_float(pair << 16);
        rows[h][8 * half + 2 * q + 1] = __uint_as_float(pair & 0xffff0000u);
      }
    }
  }
  w.barrier.arrive_and_wait();
  float* acc = d;
  ::emu::sm90::wgmma_issue([=] {
    using namespace ::emu::sm90;
    const Desc b = decode(desc_b);
    for (int i = 0; i < kN / 2; ++i) {
      const int h = (i % 4) / 2, col = acc_col(i);
      float s = scale_d != 0 ? acc[i] : 0.f;
      for (int k = 0; k < 16; ++k) s = std::fma(rows[h][k], bf16_at(mn_major(b, col, k, 2)), s);
      acc[i] = s;
    }
  }, {{::emu::sm90::decode(desc_b), false, kN, 2}});
}

/// d (+)= A · B, A (64 × 32, format kFa) and B (N × 32, format kFb) both K-major fp8 (see the
/// kernel header); scale_d = 0 overwrites d.
template <int kN, int kFa, int kFb>
inline void wgmma_fp8(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= 256, "wgmma N");
  static_assert((kFa == fp8::kFormatE4M3 || kFa == fp8::kFormatE5M2) && (kFb == fp8::kFormatE4M3 || kFb == fp8::kFormatE5M2),
                "fp8 formats");
  __syncwarp();
  float* acc = d;
  ::emu::sm90::wgmma_issue([=] {
    using namespace ::emu::sm90;
    const Desc a = decode(desc_a), b = decode(desc_b);
    const int row0 = acc_row(0);
    float av[2][32];
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 32; ++k) av[h][k] = fp8_at(k_major(a, row0 + 8 * h, k), kFa);
    }
    for (int j = 0; j < kN / 8; ++j) {
      for (int e = 0; e < 2; ++e) {
        const int col = acc_col(4 * j + e);
        float bv[32];
        for (int k = 0; k < 32; ++k) bv[k] = fp8_at(k_major(b, col, k), kFb);
        for (int h = 0; h < 2; ++h) {
          const int i = 4 * j + 2 * h + e;
          float s = scale_d != 0 ? acc[i] : 0.f;
          for (int k = 0; k < 32; ++k) s = std::fma(av[h][k], bv[k], s);
          acc[i] = s;
        }
      }
    }
  }, {{::emu::sm90::decode(desc_a), true, 64, 1}, {::emu::sm90::decode(desc_b), true, kN, 1}});
}

}  // namespace kjit::sm90
