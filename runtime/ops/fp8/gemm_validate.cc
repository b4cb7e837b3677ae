// kjit::fp8::gemm, validation: operands in either major order, scales per ScaleMode, the bias,
// and the operand swap that turns a column-major D into a row-major one. Pure host code.
#include "runtime/ops/fp8/gemm.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <climits>
#include <cstdint>

namespace kjit::fp8::detail {
namespace {

constexpr const char* kOp = GemmOp::kInfo.name;

struct Operand {
  const uint8_t* data = nullptr;
  int64_t ld = 0;
  bool trans = false;
  int fmt = kFormatE4M3;
};

/// An fp8 [rows, K] operand: K-major (stride(1) == 1) or rows-major (stride(0) == 1), the other
/// stride and the pointer 16-byte aligned.
Operand check_operand(const char* name, const TensorRef& t, int device, const char* rows_dim) {
  kjit::detail::check_rank(kOp, name, t, 2);
  kjit::detail::check_sizes(kOp, name, t);
  kjit::detail::check_dtype(kOp, name, t, {DType::kE4M3, DType::kE5M2});
  kjit::detail::check_device(kOp, name, t, device);
  kjit::detail::check_not_null(kOp, name, t);
  Operand o;
  o.data = static_cast<const uint8_t*>(t.data);
  o.fmt = t.dtype == DType::kE4M3 ? kFormatE4M3 : kFormatE5M2;
  int64_t outer = 0;  // extent of the strided dim
  if (t.strides[1] == 1 || t.shape[1] <= 1) {
    o.trans = false;
    o.ld = t.strides[0];
    outer = t.shape[0];
  } else if (t.strides[0] == 1 || t.shape[0] <= 1) {
    o.trans = true;
    o.ld = t.strides[1];
    outer = t.shape[1];
  } else {
    kjit::detail::fail(kOp, fmt::format("{} must have K (dim 1) or {} (dim 0) contiguous (stride 1), got {} with "
                                        "strides [{}, {}]",
                                        name, rows_dim, t.describe(), t.strides[0], t.strides[1]));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} data pointer {} must be 16-byte aligned, got {}", name, t.data,
                                        t.describe()));
  }
  if (outer > 1 && o.ld % 16 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} leading stride ({} bytes) must be a multiple of 16 bytes (16-byte "
                                        "cp.async chunks), got {} with strides [{}, {}]",
                                        name, o.ld, t.describe(), t.strides[0], t.strides[1]));
  }
  if (outer <= 1 && o.ld % 16 != 0) o.ld = 16;  // never used for a single row; keep it aligned
  return o;
}

struct Scale {
  const float* data = nullptr;
  int64_t s0 = 0, s1 = 0;
};

/// Tensorwise: [1] or [extent] f32.
Scale check_scale_1d(const char* name, const TensorRef& t, int device, int64_t extent, const char* what) {
  kjit::detail::check_rank(kOp, name, t, 1);
  kjit::detail::check_sizes(kOp, name, t);
  kjit::detail::check_dtype(kOp, name, t, DType::kF32);
  kjit::detail::check_device(kOp, name, t, device);
  if (t.shape[0] != 1 && t.shape[0] != extent) {
    kjit::detail::fail(kOp, fmt::format("{} must be [1] (per tensor) or [{}] (per {}) with kTensorwise scales, "
                                        "got {}",
                                        name, extent, what, t.describe()));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} data pointer must be 4-byte aligned, got {}", name, t.describe()));
  }
  kjit::detail::check_not_null(kOp, name, t);
  Scale s;
  s.data = static_cast<const float*>(t.data);
  s.s0 = t.shape[0] == 1 ? 0 : t.strides[0];
  return s;
}

/// Blockwise: [d0, d1] f32.
Scale check_scale_2d(const char* name, const TensorRef& t, int device, int64_t d0, int64_t d1, const char* what) {
  kjit::detail::check_rank(kOp, name, t, 2);
  kjit::detail::check_sizes(kOp, name, t);
  kjit::detail::check_dtype(kOp, name, t, DType::kF32);
  kjit::detail::check_device(kOp, name, t, device);
  if (t.shape[0] != d0 || t.shape[1] != d1) {
    kjit::detail::fail(kOp, fmt::format("{} must be [{}, {}] ({}) with kBlockwise scales, got {}", name, d0, d1, what,
                                        t.describe()));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} data pointer must be 4-byte aligned, got {}", name, t.describe()));
  }
  kjit::detail::check_not_null(kOp, name, t);
  Scale s;
  s.data = static_cast<const float*>(t.data);
  s.s0 = t.strides[0];
  s.s1 = t.strides[1];
  return s;
}

// The overrides' failures, out of line and never returning: a message is built only when a
// check fails.
[[noreturn]] void force_failed(const char* rule) { kjit::detail::fail(kOp, rule); }
[[noreturn]] void stages_failed(int stages) {
  kjit::detail::fail(kOp, fmt::format("stages must be 0 (auto) or 2..{} (the chosen tile may allow fewer), got {}",
                                      kSm90MaxStages, stages));
}
[[noreturn]] void splits_failed(int splits) {
  kjit::detail::fail(kOp, fmt::format("splits must be 0 (auto) or 1..{}, got {}", kSm90MaxSplits, splits));
}
[[noreturn]] void splits_over_k_failed(int splits, int64_t k) {
  kjit::detail::fail(kOp, fmt::format("splits = {} leaves a split without a 128-k tile: K = {} has {}", splits, k,
                                      kjit::detail::ceil_div(k, 128)));
}
[[noreturn]] void multicast_failed(int multicast) {
  kjit::detail::fail(kOp, fmt::format("multicast must be 0 (auto), 1 (none), 2 (CTA pairs sharing B) or 3 (CTA pairs "
                                      "sharing A), got {}",
                                      multicast));
}
/// A rule of the CTA pairs (multicast 2 or 3): "multicast = <value> <rule>".
[[noreturn]] void pairs_failed(int multicast, const char* rule) {
  kjit::detail::fail(kOp, fmt::format("multicast = {} {}", multicast, rule));
}
[[noreturn]] void wgmma_asked_failed(const char* what, const char* rule) {
  kjit::detail::fail(kOp, fmt::format("{} is the wgmma kernel's, {}", what, rule));
}

}  // namespace

void check_gemm_force(const GemmForce& f, const GemmDims& g) {
  if (static_cast<int>(f.tile) > static_cast<int>(GemmTile::k64x256)) force_failed("tile is not a GemmTile value");
  if (f.stages != 0 && (f.stages < 2 || f.stages > kSm90MaxStages)) stages_failed(f.stages);
  if (f.splits < 0 || f.splits > kSm90MaxSplits) splits_failed(f.splits);
  if (f.splits > kjit::detail::ceil_div(g.k, 128)) splits_over_k_failed(f.splits, g.k);
  if (f.multicast < 0 || f.multicast > 3) multicast_failed(f.multicast);
  if (f.splits > 1 && sm90_wave_tile(gemm_tile_shape(f.tile).bn)) {
    force_failed("the wave-fitting tiles (k128x80 ... k128x224, k64x80 ... k64x224) run persistent only; split-K "
                 "(splits > 1) takes k128x128 or a small tile");
  }
  if (forces_pairs(f) && f.splits > 1) {
    pairs_failed(f.multicast,
                 "is the persistent wgmma kernel's; split-K (splits > 1) uses the cluster for its reduction");
  }
  switch (f.kernel) {
    case GemmKernel::kMmaSync:
      if (is_wgmma_only_tile(f.tile)) {
        force_failed("k128x256, k128x16, k128x32, k64x16, k64x32, k128x80 ... k128x224 and k64x80 ... k64x256 are "
                     "wgmma tiles; the mma.sync kernel's are 64x64, 128x64, 128x128");
      }
      if (f.splits > 1) force_failed("splits > 1 is the wgmma kernel's split-K; the mma.sync kernel has none");
      if (forces_pairs(f)) pairs_failed(f.multicast, "is the wgmma kernel's; the mma.sync kernel has none");
      break;
    case GemmKernel::kWgmma:
      if (!is_wgmma_layout(g)) {
        force_failed("the wgmma kernel takes tensorwise scales with A and B both K-major (stride(1) == 1); use "
                     "GemmKernel::kAuto or kMmaSync for this problem");
      }
      break;
    case GemmKernel::kAuto: {
      // What only the wgmma kernel has selects it; the problem and the tile must then be its.
      const char* what = wgmma_only_override(f);
      if (what == nullptr) break;
      if (!is_wgmma_layout(g)) wgmma_asked_failed(what, "which takes tensorwise scales with A and B both K-major");
      if (is_mma_tile(f.tile) && f.tile != GemmTile::k128x128) {
        wgmma_asked_failed(what, "and tiles k64x64 and k128x64 select the mma.sync kernel unless kernel is kWgmma");
      }
      break;
    }
    default: force_failed("kernel is not a GemmKernel value");
  }
  if (f.tile == GemmTile::k128x128 && g.block) {  // blockwise runs the mma.sync kernel only
    force_failed("tile 128x128 is not available with kBlockwise scales (two accumulator sets of a 128x128 tile do "
                 "not fit the register file); use k128x64, k64x64 or kAuto");
  }
  if (forces_pairs(f) && f.tile != GemmTile::kAuto && !sm90_pair_tile(gemm_tile_shape(f.tile).bn)) {
    pairs_failed(f.multicast, "is the wgmma tiles' of N side 80 ... 256 (k128x80 ... k128x256, k64x80 ... k64x256)");
  }
}

GemmDims validate_gemm(const GemmArgs& args) {
  using kjit::detail::fail;
  const TensorRef& a = args.a;
  const TensorRef& b = args.b;
  const TensorRef& d = args.d;
  GemmDims g;
  g.device = kjit::detail::check_leading(kOp, "a", a, 2);
  const Operand oa = check_operand("a", a, g.device, "M");
  const Operand ob = check_operand("b", b, g.device, "N");
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[0];
  kjit::detail::check_dim(kOp, "b", b, 1, k, "K (a dim 1)");
  if (k <= 0 || k % 16 != 0) {
    fail(kOp, fmt::format("K (a dim 1) must be a positive multiple of 16 (16-byte cp.async chunks of fp8), got a {} "
                          "and b {}",
                          a.describe(), b.describe()));
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    fail(kOp, fmt::format("M, N and K must stay below 2^31, got a {} and b {}", a.describe(), b.describe()));
  }
  if (args.scale_mode != ScaleMode::kTensorwise && args.scale_mode != ScaleMode::kBlockwise) {
    fail(kOp, "scale_mode is not a ScaleMode value");
  }
  g.block = args.scale_mode == ScaleMode::kBlockwise;
  if (g.block && k % kScaleBlock != 0) {
    fail(kOp, fmt::format("K must be a multiple of 128 with kBlockwise scales (1x128 / 128x128 scale blocks "
                          "cover whole k-tiles), got K = {}",
                          k));
  }

  kjit::detail::check_rank(kOp, "d", d, 2);
  kjit::detail::check_sizes(kOp, "d", d);
  kjit::detail::check_dtype(kOp, "d", d, {DType::kBF16, DType::kF32});
  kjit::detail::check_device(kOp, "d", d, g.device);
  kjit::detail::check_dim(kOp, "d", d, 0, m, "M (a dim 0)");
  kjit::detail::check_dim(kOp, "d", d, 1, n, "N (b dim 0)");
  kjit::detail::check_not_null(kOp, "d", d);
  const int elem = dtype_size(d.dtype);
  if (reinterpret_cast<uintptr_t>(d.data) % elem != 0) {
    fail(kOp, fmt::format("d data pointer must be {}-byte aligned, got {}", elem, d.describe()));
  }
  int64_t ldd = 0;
  if (d.strides[1] == 1 || n <= 1) {
    ldd = d.strides[0];
  } else if (d.strides[0] == 1 || m <= 1) {
    if (g.block) {
      fail(kOp, fmt::format("d must be row-major (stride(1) == 1) with kBlockwise scales (the column-major operand "
                            "swap needs symmetric scales), got {} with strides [{}, {}]",
                            d.describe(), d.strides[0], d.strides[1]));
    }
    g.swapped = true;
    ldd = d.strides[1];
  } else {
    fail(kOp, fmt::format("d must be row-major (stride(1) == 1) or column-major (stride(0) == 1), got {} with "
                          "strides [{}, {}]",
                          d.describe(), d.strides[0], d.strides[1]));
  }
  g.out_f32 = d.dtype == DType::kF32;

  Scale sa, sb;
  if (!g.block) {
    sa = check_scale_1d("scale_a", args.scale_a, g.device, m, "row of a");
    sb = check_scale_1d("scale_b", args.scale_b, g.device, n, "row of b (output channel)");
  } else {
    sa = check_scale_2d("scale_a", args.scale_a, g.device, m, k / kScaleBlock, "M x K/128: 1x128 blocks of a");
    sb = check_scale_2d("scale_b", args.scale_b, g.device, kjit::detail::ceil_div(n, kScaleBlock), k / kScaleBlock,
                        "ceil(N/128) x K/128: 128x128 blocks of b");
  }

  const void* bias = nullptr;
  bool bias_bf16 = false;
  if (args.bias.ndim != 0) {
    const TensorRef& t = args.bias;
    kjit::detail::check_rank(kOp, "bias", t, 1);
    kjit::detail::check_sizes(kOp, "bias", t);
    kjit::detail::check_dtype(kOp, "bias", t, {DType::kBF16, DType::kF32});
    kjit::detail::check_device(kOp, "bias", t, g.device);
    kjit::detail::check_dim(kOp, "bias", t, 0, n, "N (b dim 0)");
    kjit::detail::check_last_dim_contiguous(kOp, "bias", t);
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
      fail(kOp, fmt::format("bias data pointer must be {}-byte aligned, got {}", dtype_size(t.dtype), t.describe()));
    }
    kjit::detail::check_not_null(kOp, "bias", t);
    bias = t.data;
    bias_bf16 = t.dtype == DType::kBF16;
  }

  GemmParams& p = g.params;
  const Operand& a2 = g.swapped ? ob : oa;
  const Operand& b2 = g.swapped ? oa : ob;
  const Scale& sa2 = g.swapped ? sb : sa;
  const Scale& sb2 = g.swapped ? sa : sb;
  g.m = g.swapped ? n : m;
  g.n = g.swapped ? m : n;
  g.k = k;
  g.fmt_a = a2.fmt;
  g.fmt_b = b2.fmt;
  g.a_trans = a2.trans;
  g.b_trans = b2.trans;
  p.a = a2.data;
  p.b = b2.data;
  p.d = d.data;
  p.scale_a = sa2.data;
  p.scale_b = sb2.data;
  p.bias = bias;
  p.lda = a2.ld;
  p.ldb = b2.ld;
  p.ldd = ldd;
  p.sa_stride_m = sa2.s0;
  p.sa_stride_k = sa2.s1;
  p.sb_stride_n = sb2.s0;
  p.sb_stride_k = sb2.s1;
  p.m = static_cast<int32_t>(g.m);
  p.n = static_cast<int32_t>(g.n);
  p.k = static_cast<int32_t>(g.k);
  p.bias_bf16 = bias_bf16 ? 1 : 0;
  p.bias_rows = g.swapped ? 1 : 0;
  p.vec_store = reinterpret_cast<uintptr_t>(d.data) % 16 == 0 && (ldd * elem) % 16 == 0 ? 1 : 0;
  g.force = {args.kernel, args.tile, args.stages, args.splits, args.multicast};
  check_gemm_force(g.force, g);
  (g.swapped ? g.a_const : g.b_const) = args.b_constant;
  return g;
}

}  // namespace kjit::fp8::detail
