// Rotary position embedding (RoPE): fused cos/sin lookup and rotation of bf16 q and k heads.
// Contract and formula: include/kjit/ops/rotary.hpp. Host side: runtime/ops/rotary/rotary.cc.
//
// Two kernels per specialization (head_dim, style, position type):
//  - rotary_kernel, the vector path. A "unit" is (token, group of kHeadsPerThread heads); a unit
//    has head_dim / 16 threads ("items"), and item i moves two 16-byte chunks (8 bf16 each) of
//    every head row of its group: elements [8i, 8i + 8) and [8i + rotary_dim/2, ... + 8) when
//    it rotates, or the matching two chunks of the pass-through tail when it copies. Both NeoX
//    and GPT-J pairs then need exactly 8 cos and 8 sin values per item (two float4 loads of each),
//    loaded once per (token, item) and reused for all heads of the group. Within a warp the two
//    chunk loads each cover whole 32-byte sectors of consecutive head rows, so loads coalesce.
//    Per thread: 2 × kHeadsPerThread = 8 independent 16-byte loads (128 B of q/k) issued before
//    any math, 4 float4 table loads (64 B, cache hits after the first head group of a token),
//    then 128 B stored. CTAs of ≤ 128 threads (kVectorThreads) keep the 70-90 registers from
//    capping occupancy below ~20 warps per SM. One unit per thread, no grid-stride loop: the
//    grid (tokens × head groups / units per CTA) fills the GPU for any prefill-sized call.
//    The host picks it when rotary_dim % 16 == 0 and every q/k/out pointer and stride, and the
//    cos/sin pointers, are 16-byte aligned.
//  - rotary_scalar_kernel: one thread per (token, head, pair), 2-byte loads; any even
//    rotary_dim, any alignment. Used for everything the vector path rejects.
//
// Arithmetic: each output is a·c ± b·s with a, b bf16 and c, s f32. The product b·s is split
// exactly into p + e (TwoProduct with an FMA), a·c − p is rounded once by an FMA and e is added
// back, so the f32 result stays within a few f32 ulps of the exact value even when the two
// products cancel; one round-to-nearest-even to bf16 then leaves every output within 1 bf16 ulp
// of the float64 result (a bf16 implementation that rounds between the products does not).
#include "kjit/config.cuh"
#include "kjit/f16_bits.cuh"
#include "rotary/rotary_params.h"

namespace kjit::rope {

namespace detail {

// Streaming 16-byte load/store (.cs: each q/k byte is touched once, keep cos/sin in cache instead).
KJIT_DEVICE uint4 load_stream(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

KJIT_DEVICE void store_stream(void* ptr, const uint4& v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

KJIT_DEVICE float4 load_table(const float* ptr) {
  return __ldg(reinterpret_cast<const float4*>(ptr));
}

// bf16 → f32 is exact: the bf16 bits are the high half of the f32.
KJIT_DEVICE float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
KJIT_DEVICE float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// a·c + b·s with one rounding of (a·c − p) and one of the final sum; b·s = p + e exactly.
// The intrinsics keep the compiler from contracting or reassociating the sequence.
KJIT_DEVICE float dot2(float a, float c, float b, float s) {
  const float p = __fmul_rn(b, s);
  const float e = __fmaf_rn(b, s, -p);
  const float t = __fmaf_rn(a, c, p);
  return __fadd_rn(t, e);
}

// Rotates the pair (x0, x1) by the angle whose cosine and sine are (c, s), in place.
KJIT_DEVICE void rotate(float& x0, float& x1, float c, float s) {
  const float y0 = dot2(x0, c, -x1, s);
  const float y1 = dot2(x1, c, x0, s);
  x0 = y0;
  x1 = y1;
}

// The 8 bf16 of a 16-byte chunk as f32, and back.
KJIT_DEVICE void unpack8(const uint4& v, float (&f)[8]) {
  f[0] = bf16_lo(v.x), f[1] = bf16_hi(v.x), f[2] = bf16_lo(v.y), f[3] = bf16_hi(v.y);
  f[4] = bf16_lo(v.z), f[5] = bf16_hi(v.z), f[6] = bf16_lo(v.w), f[7] = bf16_hi(v.w);
}

KJIT_DEVICE uint4 pack8(const float (&f)[8]) {
  uint4 v;
  v.x = pack_bf16x2(f[0], f[1]);
  v.y = pack_bf16x2(f[2], f[3]);
  v.z = pack_bf16x2(f[4], f[5]);
  v.w = pack_bf16x2(f[6], f[7]);
  return v;
}

template <class PosT>
KJIT_DEVICE int64_t position_of(const RotaryParams& p, int64_t token) {
  return static_cast<int64_t>(__ldg(static_cast<const PosT*>(p.positions) + token));
}

}  // namespace detail

template <int kHeadDim, int kStyle, class PosT>
__global__ void __launch_bounds__(kVectorThreads) rotary_kernel(KJIT_PARAMS RotaryParams p) {
  static_assert(kHeadDim % 16 == 0 && kHeadDim >= 16 && kHeadDim <= 512, "head_dim");
  static_assert(kStyle == kStyleNeoX || kStyle == kStyleGPTJ, "style");
  constexpr int kItems = kHeadDim / 16;
  constexpr int kUnitsPerCta = kVectorThreads / kItems;
  constexpr int kH = kHeadsPerThread;
  using detail::load_stream;
  using detail::store_stream;

  const int item = threadIdx.x % kItems;
  const uint64_t unit = uint64_t(blockIdx.x) * kUnitsPerCta + threadIdx.x / kItems;
  const uint32_t q_groups = uint32_t(p.q_head_groups);
  const uint64_t groups = q_groups + uint32_t(p.k_head_groups);
  if (unit >= uint64_t(uint32_t(p.tokens)) * groups) return;
  const int64_t token = static_cast<int64_t>(unit / groups);
  const uint32_t group = static_cast<uint32_t>(unit - uint64_t(token) * groups);
  const int half = p.rotary_dim >> 1;
  const int rot_items = p.rotary_dim >> 4;
  const bool rotates = item < rot_items;
  if (!rotates && !p.copy_tail) return;  // in place: the tail stays as it is

  // A group holds heads of q or of k, never both, so one base pointer and stride serve it all.
  const bool is_q = group < q_groups;
  const int head0 = static_cast<int>(is_q ? group : group - q_groups) * kH;
  const int heads = (is_q ? p.q_heads : p.kv_heads) - head0;  // ≥ 1; this group has min(kH, heads)
  const int64_t in_stride = is_q ? p.q_head_stride : p.k_head_stride;
  const int64_t out_stride = is_q ? p.q_out_head_stride : p.k_out_head_stride;
  const bf16* in =
      is_q ? static_cast<const bf16*>(p.q) + token * p.q_token_stride + head0 * in_stride
           : static_cast<const bf16*>(p.k) + token * p.k_token_stride + head0 * in_stride;

  // Element offsets of this item's two chunks in a head row.
  int off0, off1;
  if (rotates) {
    off0 = item * 8;
    off1 = off0 + half;
  } else {
    off0 = p.rotary_dim + (item - rot_items) * 8;
    off1 = off0 + ((kHeadDim - p.rotary_dim) >> 1);
  }

  // All loads of the group first: 2 * kH independent 16-byte loads in flight.
  uint4 v0[kH], v1[kH];
#pragma unroll
  for (int u = 0; u < kH; ++u) {
    if (u < heads) {
      v0[u] = load_stream(in + u * in_stride + off0);
      v1[u] = load_stream(in + u * in_stride + off1);
    }
  }

  if (rotates) {
    const int64_t pos = detail::position_of<PosT>(p, token);
    const float* cos_row = p.cos + pos * half;
    const float* sin_row = p.sin + pos * half;
    // NeoX: pairs (off0 + j, off1 + j) use table column 8·item + j.
    // GPT-J: chunk 0 holds pairs 4·item + j, chunk 1 holds pairs half/2 + 4·item + j.
    const int col0 = kStyle == kStyleNeoX ? item * 8 : item * 4;
    const int col1 = kStyle == kStyleNeoX ? item * 8 + 4 : (half >> 1) + item * 4;
    const float4 ca = detail::load_table(cos_row + col0);
    const float4 cb = detail::load_table(cos_row + col1);
    const float4 sa = detail::load_table(sin_row + col0);
    const float4 sb = detail::load_table(sin_row + col1);
    const float cs[8] = {ca.x, ca.y, ca.z, ca.w, cb.x, cb.y, cb.z, cb.w};
    const float sn[8] = {sa.x, sa.y, sa.z, sa.w, sb.x, sb.y, sb.z, sb.w};
#pragma unroll
    for (int u = 0; u < kH; ++u) {
      float a[8], b[8];
      detail::unpack8(v0[u], a);
      detail::unpack8(v1[u], b);
      if (kStyle == kStyleNeoX) {
#pragma unroll
        for (int j = 0; j < 8; ++j) detail::rotate(a[j], b[j], cs[j], sn[j]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          detail::rotate(a[2 * j], a[2 * j + 1], cs[j], sn[j]);
          detail::rotate(b[2 * j], b[2 * j + 1], cs[4 + j], sn[4 + j]);
        }
      }
      v0[u] = detail::pack8(a);
      v1[u] = detail::pack8(b);
    }
  }

  bf16* out =
      is_q ? static_cast<bf16*>(p.q_out) + token * p.q_out_token_stride + head0 * out_stride
           : static_cast<bf16*>(p.k_out) + token * p.k_out_token_stride + head0 * out_stride;
#pragma unroll
  for (int u = 0; u < kH; ++u) {
    if (u < heads) {
      store_stream(out + u * out_stride + off0, v0[u]);
      store_stream(out + u * out_stride + off1, v1[u]);
    }
  }
}

template <int kHeadDim, int kStyle, class PosT>
__global__ void __launch_bounds__(kScalarThreads) rotary_scalar_kernel(KJIT_PARAMS RotaryParams p) {
  static_assert(kHeadDim % 2 == 0 && kHeadDim <= 512, "head_dim");
  constexpr int kPairs = kHeadDim / 2;
  const uint64_t idx = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t total_heads = uint32_t(p.q_heads + p.kv_heads);
  if (idx >= uint64_t(uint32_t(p.tokens)) * total_heads * kPairs) return;
  const uint64_t row = idx / kPairs;
  const int j = static_cast<int>(idx - row * kPairs);
  const int64_t token = static_cast<int64_t>(row / total_heads);
  const int h = static_cast<int>(row - uint64_t(token) * total_heads);
  const int half = p.rotary_dim >> 1;
  if (j >= half && !p.copy_tail) return;

  const bf16* in;
  bf16* out;
  if (h < p.q_heads) {
    in = static_cast<const bf16*>(p.q) + token * p.q_token_stride + h * p.q_head_stride;
    out = static_cast<bf16*>(p.q_out) + token * p.q_out_token_stride +
          h * p.q_out_head_stride;
  } else {
    const int hk = h - p.q_heads;
    in = static_cast<const bf16*>(p.k) + token * p.k_token_stride + hk * p.k_head_stride;
    out = static_cast<bf16*>(p.k_out) + token * p.k_out_token_stride +
          hk * p.k_out_head_stride;
  }

  int e0, e1;
  if (j < half) {
    e0 = kStyle == kStyleNeoX ? j : 2 * j;
    e1 = kStyle == kStyleNeoX ? j + half : 2 * j + 1;
  } else {
    // Tail pair t covers elements rotary_dim + t and the one half a tail further on, so that
    // neighbouring threads touch neighbouring elements.
    e0 = p.rotary_dim + (j - half);
    e1 = e0 + (kPairs - half);
  }
  const bf16 b0 = in[e0];
  const bf16 b1 = in[e1];
  if (j < half) {
    float x0 = bf16_to_f32(b0);
    float x1 = bf16_to_f32(b1);
    const int64_t pos = detail::position_of<PosT>(p, token);
    detail::rotate(x0, x1, __ldg(p.cos + pos * half + j), __ldg(p.sin + pos * half + j));
    out[e0] = f32_to_bf16(x0);
    out[e1] = f32_to_bf16(x1);
  } else {
    out[e0] = b0;  // pass-through: the bits as they were
    out[e1] = b1;
  }
}

}  // namespace kjit::rope
