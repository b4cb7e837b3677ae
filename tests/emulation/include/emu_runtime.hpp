#pragma once
// CUDA built-ins for running kernel_sources text on the host (tests/emulation only). One
// std::thread per CUDA thread; __syncthreads is a block barrier; warp collectives (shuffles,
// ldmatrix, mma) exchange per-lane values through a per-warp scratch between two warp barriers.
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>

#define __global__
#define __device__
#define __forceinline__
#define __shared__
#define __grid_constant__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

/// A reusable barrier for `count` threads (generation counting).
class Barrier {
 public:
  void reset(int count) { count_ = count; waiting_ = 0; }
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t gen = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_ = 0;
  int waiting_ = 0;
  uint64_t generation_ = 0;
};

constexpr int kMaxWarps = 32;

/// Per-warp exchange area: each lane's operands of the current collective.
struct WarpScratch {
  Barrier barrier;
  uint32_t u[32][16];
  float f[32][8];
};

struct Block {
  Barrier barrier;
  WarpScratch warps[kMaxWarps];
};

/// The block state of the one CTA running when the emulator runs one at a time.
inline Block g_block;
inline thread_local Dim3 t_thread, t_block;
/// The block barrier and warp scratch of this CUDA thread's CTA when several CTAs run at once (a
/// cluster launch: each emulated CUDA thread points at its own CTA's); null: g_block.
inline thread_local Block* t_cta = nullptr;

inline Block& my_block() { return t_cta != nullptr ? *t_cta : g_block; }
inline WarpScratch& my_warp() { return my_block().warps[t_thread.x / 32]; }
inline int my_lane() { return static_cast<int>(t_thread.x % 32); }

}  // namespace emu

#define threadIdx (::emu::t_thread)
#define blockIdx (::emu::t_block)

inline void __syncthreads() { emu::my_block().barrier.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::my_warp().barrier.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  emu::WarpScratch& w = emu::my_warp();
  const int lane = emu::my_lane();
  w.f[lane][0] = v;
  w.barrier.arrive_and_wait();
  const float r = w.f[lane ^ lane_mask][0];
  w.barrier.arrive_and_wait();
  return r;
}

inline int __shfl_sync(unsigned, int v, int src_lane) {
  emu::WarpScratch& w = emu::my_warp();
  const int lane = emu::my_lane();
  std::memcpy(&w.f[lane][0], &v, 4);
  w.barrier.arrive_and_wait();
  int r;
  std::memcpy(&r, &w.f[src_lane & 31][0], 4);
  w.barrier.arrive_and_wait();
  return r;
}

template <class T>
inline T __ldg(const T* p) { return *p; }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

namespace emu {
/// cvt.rn.bf16.f32: round to nearest even; NaN stays NaN (quieted).
inline uint16_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
}  // namespace emu

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
