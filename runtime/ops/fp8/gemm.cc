// kjit::fp8::gemm: validate (layouts, operand swap) → (driver) context, arch check → tile
// planner → kernel table → gemm kernel. Also kjit::fp8::Linear, which strings quantize, gemm and
// the delayed-scaling update together over buffers it allocates once.
#include "runtime/ops/fp8/gemm.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "fp8/gemm_sm90_params.h"
#include "fp8/quantize_params.h"
#include "runtime/driver.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

namespace kjit::fp8 {
namespace {

constexpr const char* kOp = "kjit::fp8::gemm";

/// The POD specialization key of the op's kernel table (zero-initialized before it is filled).
struct Choice {
  int32_t wgmma, fmt_a, fmt_b, out_f32, block, bm, bn, stages, a_trans, b_trans;
};

const char* fmt_name(int fmt) { return fmt == kFormatE4M3 ? "e4m3" : "e5m2"; }

ProgramSpec make_spec(const ParamMap& params) {
  return gemm_family().spec(gemm_family().parse(params));
}

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

/// Encodes the TMA descriptor of a K-major fp8 operand [rows, k] (row stride `ld` bytes) for
/// boxes of 128 k × `box_rows` rows with the 128-byte swizzle the wgmma kernel's descriptors
/// expect; out-of-bounds elements read as zero. Host-only driver call, no allocation.
void encode_tma(TmaDescriptor* out, const void* base, int64_t k, int64_t rows, int64_t ld, int box_rows) {
  static_assert(sizeof(CUtensorMap) == sizeof(TmaDescriptor), "CUtensorMap is 128 bytes");
  CUtensorMap map;
  // A single-row operand may have a nominal stride below K; TMA wants strides ≥ the row bytes.
  const int64_t stride = std::max<int64_t>(ld, (k + 15) / 16 * 16);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride)};
  const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  KJIT_CU(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                                 elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  std::memcpy(out, &map, sizeof(map));
}

/// Encodes the TMA descriptor of D [rows, cols] (bf16 or f32, row stride `ld` elements) for
/// boxes of 128 bytes of columns × 64 rows with the 128-byte swizzle of the wgmma kernel's
/// staging tile. Host-only driver call, no allocation.
void encode_tma_store(TmaDescriptor* out, void* base, bool f32, int64_t cols, int64_t rows, int64_t ld) {
  CUtensorMap map;
  const int elem = f32 ? 4 : 2;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(std::max<int64_t>(ld, cols) * elem)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem), 64};
  const cuuint32_t elem_strides[2] = {1, 1};
  KJIT_CU(cuTensorMapEncodeTiled(&map, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                 base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  std::memcpy(out, &map, sizeof(map));
}

/// How many clusters of `size` CTAs of the wgmma kernel `kernel` (`threads` threads, `smem`
/// bytes of dynamic shared memory: one CTA per SM) the device holds at once, from
/// cuOccupancyMaxActiveClusters. Cached per device and size: every wgmma specialization has the
/// same footprint to within a few KiB (one CTA per SM either way).
int cluster_capacity(const Kernel& kernel, int device, int size, int threads, int smem) {
  constexpr int kDevices = 64;
  static std::atomic<int> cache[kDevices][kSm90MaxSplits + 1] = {};
  const bool cached = device >= 0 && device < kDevices;
  if (cached) {
    const int known = cache[device][size].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  kernel.reserve_dynamic_smem(static_cast<uint32_t>(smem));
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = static_cast<unsigned>(size);
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(size);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = static_cast<unsigned>(threads);
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(smem);
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  KJIT_CU(cuOccupancyMaxActiveClusters(&clusters, kernel.function(), &config));
  clusters = std::max(clusters, 1);
  if (cached) cache[device][size].store(clusters, std::memory_order_relaxed);
  return clusters;
}

}  // namespace

namespace detail {

GemmProblem validate_gemm(const GemmArgs& args) {
  using kjit::detail::fail;
  const TensorRef& a = args.a;
  const TensorRef& b = args.b;
  const TensorRef& d = args.d;
  kjit::detail::check_rank(kOp, "a", a, 2);
  if (a.device < 0) fail(kOp, fmt::format("a must be on a CUDA device, got host memory {}", a.describe()));
  GemmProblem g;
  g.device = a.device;
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
  return g;
}

namespace {

/// Relative time of a tile choice: the busiest SM runs ceil(CTAs / SMs) tiles one after another
/// (an SM's tensor throughput is shared by its resident CTAs, so co-residency hides latency but
/// adds no throughput), each costing its MACs over the kernel's relative throughput. The
/// throughputs are estimates (wgmma ≈ 2.5× mma.sync per SM on Hopper; small tiles lose to shared-
/// memory traffic and per-tile overhead), to be refined from bench_fp8.py measurements.
double tile_cost(int64_t m, int64_t n, int bm, int bn, bool wgmma, int sm_count) {
  double rate = 1.0;
  if (wgmma) {
    rate = bn == 256 ? 2.5 : 2.5 * 0.85;
  } else {
    rate = bm == 128 && bn == 128 ? 1.0 : bm == 128 ? 0.9 : 0.75;
  }
  const int64_t ctas = kjit::detail::ceil_div(m, bm) * kjit::detail::ceil_div(n, bn);
  const int64_t waves = kjit::detail::ceil_div(ctas, std::max(sm_count, 1));
  return static_cast<double>(waves) * bm * bn / rate;
}

}  // namespace

GemmPlan plan_gemm(const GemmProblem& g, GemmTile tile, int stages, const GemmDevice& dev, GemmKernel kernel,
                   int splits, int multicast) {
  check_fp8_arch(kOp, dev.sm, g.device, nullptr);
  if (splits < 0 || splits > kSm90MaxSplits) {
    kjit::detail::fail(kOp, fmt::format("splits must be 0 (auto) or 1..{}, got {}", kSm90MaxSplits, splits));
  }
  if (multicast < 0 || multicast > 2) {
    kjit::detail::fail(kOp, fmt::format("multicast must be 0 (auto), 1 (none) or 2 (CTA pairs), got {}", multicast));
  }
  if (multicast == 2 && splits > 1) {
    kjit::detail::fail(kOp, "multicast = 2 is the persistent wgmma kernel's; split-K (splits > 1) uses the cluster "
                            "for its reduction");
  }
  GemmPlan plan;
  auto cost = [&](int bm, int bn, bool wgmma) { return tile_cost(g.m, g.n, bm, bn, wgmma, dev.sm_count); };
  // The cheapest mma.sync tile (128x128 is not available with blockwise scales).
  auto best_mma = [&](int& bm, int& bn) {
    bm = 64, bn = 64;
    double best = cost(64, 64, false);
    if (cost(128, 64, false) < best) bm = 128, bn = 64, best = cost(128, 64, false);
    if (!g.block && cost(128, 128, false) < best) bm = 128, bn = 128;
  };
  const bool wgmma_layout = !g.block && !g.a_trans && !g.b_trans;
  const bool mma_tile = tile == GemmTile::k64x64 || tile == GemmTile::k128x64 || tile == GemmTile::k128x128;
  switch (kernel) {
    case GemmKernel::kWgmma:
      if (dev.sm != 90) {
        throw Unsupported(fmt::format("{}: the wgmma kernel needs sm_90a (Hopper); the device is sm_{}", kOp, dev.sm));
      }
      if (!wgmma_layout) {
        kjit::detail::fail(kOp, "the wgmma kernel takes tensorwise scales with A and B both K-major (stride(1) == 1); "
                                "use GemmKernel::kAuto or kMmaSync for this problem");
      }
      if (tile == GemmTile::k64x64 || tile == GemmTile::k128x64) {
        kjit::detail::fail(kOp, "the wgmma kernel's tiles are k128x128 and k128x256");
      }
      plan.wgmma = true;
      break;
    case GemmKernel::kMmaSync:
      if (tile == GemmTile::k128x256) kjit::detail::fail(kOp, "k128x256 is a wgmma tile; the mma.sync kernel's are 64x64, 128x64, 128x128");
      if (splits > 1) kjit::detail::fail(kOp, "splits > 1 is the wgmma kernel's split-K; the mma.sync kernel has none");
      if (multicast == 2) kjit::detail::fail(kOp, "multicast = 2 is the wgmma kernel's; the mma.sync kernel has none");
      plan.wgmma = false;
      break;
    case GemmKernel::kAuto: {
      // wgmma whenever it can run (persistent for large problems, split-K for small M: both beat
      // the mma.sync tiles on Hopper), unless an mma tile is forced; a forced 128x256 tile or
      // splits > 1 asks for it.
      const bool asked = tile == GemmTile::k128x256 || splits > 1 || multicast == 2;
      plan.wgmma = asked || (dev.sm == 90 && wgmma_layout && !mma_tile);
      const char* what = tile == GemmTile::k128x256 ? "tile k128x256" : splits > 1 ? "splits > 1" : "multicast = 2";
      if (plan.wgmma && dev.sm != 90) {
        throw Unsupported(fmt::format("{}: {} is the wgmma kernel's, which needs sm_90a; the device is sm_{}", kOp,
                                      what, dev.sm));
      }
      if (plan.wgmma && !wgmma_layout) {
        kjit::detail::fail(kOp, fmt::format("{} is the wgmma kernel's, which takes tensorwise scales with A and B both "
                                            "K-major",
                                            what));
      }
      if (plan.wgmma && (tile == GemmTile::k64x64 || tile == GemmTile::k128x64)) {
        kjit::detail::fail(kOp, fmt::format("{} is the wgmma kernel's, whose tiles are k128x128 and k128x256", what));
      }
      break;
    }
    default: kjit::detail::fail(kOp, "kernel is not a GemmKernel value");
  }

  if (plan.wgmma) {
    plan.bm = kSm90BM;
    if (tile == GemmTile::k128x128) {
      plan.bn = 128;
    } else if (tile == GemmTile::k128x256) {
      plan.bn = 256;
    } else {
      plan.bn = cost(128, 256, true) <= cost(128, 128, true) ? 256 : 128;
    }
    // Split-K when the output tiles leave more than half the SMs idle (small M): the k-slices
    // of a tile run on `splits` SMs, so all SMs stream B (most of the bytes: N × K).
    const int64_t ktiles = kjit::detail::ceil_div(g.k, 128);
    const int64_t tiles_m = kjit::detail::ceil_div(g.m, kSm90BM);
    if (splits == 0) {
      plan.splits = 1;
    }
    if (splits == 0 && multicast != 2) {
      if (tiles_m * kjit::detail::ceil_div(g.n, 128) * 2 <= dev.sm_count && ktiles >= 2) {
        if (tile == GemmTile::kAuto) plan.bn = 128;
        const int64_t tiles = tiles_m * kjit::detail::ceil_div(g.n, plan.bn);
        // A cluster that is not resident with the others runs in a second wave: take the largest
        // split whose clusters all fit at once.
        for (int64_t sp = std::min<int64_t>({kSm90MaxSplits, dev.sm_count / tiles, ktiles / 2}); sp >= 2; --sp) {
          const int capacity = dev.cluster_capacity[sp] > 0 ? dev.cluster_capacity[sp] : dev.sm_count / static_cast<int>(sp);
          if (tiles <= capacity) {
            plan.splits = static_cast<int>(sp);
            break;
          }
        }
      }
    } else if (splits != 0) {
      if (splits > ktiles) {
        kjit::detail::fail(kOp, fmt::format("splits = {} leaves a split without a 128-k tile: K = {} has {}", splits,
                                            g.k, ktiles));
      }
      plan.splits = splits;
    }
    plan.threads = kSm90Threads;
    if (stages != 0) {
      if (stages < 2 || stages > 6) {
        kjit::detail::fail(kOp, fmt::format("stages must be 0 (auto) or 2..6 for the wgmma kernel, got {}", stages));
      }
      if (sm90_smem_bytes(plan.bn, stages) > dev.smem_optin) {
        kjit::detail::fail(kOp, fmt::format("stages = {} of a 128x{} wgmma tile need {} bytes of shared memory, the "
                                            "device allows {}",
                                            stages, plan.bn, sm90_smem_bytes(plan.bn, stages), dev.smem_optin));
      }
      plan.stages = stages;
    } else {
      plan.stages = 0;
      for (int s = 6; s >= 2; --s) {
        if (sm90_smem_bytes(plan.bn, s) <= dev.smem_optin) {
          plan.stages = s;
          break;
        }
      }
      if (plan.stages == 0) {
        throw Unsupported(fmt::format("{}: two stages of a 128x{} wgmma tile need {} bytes of shared memory, the "
                                      "device allows {}",
                                      kOp, plan.bn, sm90_smem_bytes(plan.bn, 2), dev.smem_optin));
      }
    }
    plan.smem_bytes = sm90_smem_bytes(plan.bn, plan.stages);
  } else {
    switch (tile) {
      case GemmTile::k64x64: plan.bm = 64, plan.bn = 64; break;
      case GemmTile::k128x64: plan.bm = 128, plan.bn = 64; break;
      case GemmTile::k128x128:
        if (g.block) {
          kjit::detail::fail(kOp, "tile 128x128 is not available with kBlockwise scales (two accumulator sets of a "
                                  "128x128 tile do not fit the register file); use k128x64, k64x64 or kAuto");
        }
        plan.bm = 128, plan.bn = 128;
        break;
      case GemmTile::kAuto: best_mma(plan.bm, plan.bn); break;
      default: kjit::detail::fail(kOp, "tile is not a GemmTile value the mma.sync kernel takes");
    }
    const GemmLaunchShape shape = gemm_launch_shape(plan.bm, plan.bn, g.block);
    plan.threads = shape.threads;
    if (stages != 0) {
      if (stages < 2 || stages > 4) {
        kjit::detail::fail(kOp, fmt::format("stages must be 0 (auto) or 2..4 for the mma.sync kernel, got {}", stages));
      }
      if (stages * shape.stage_bytes > dev.smem_optin) {
        kjit::detail::fail(kOp, fmt::format("stages = {} of a {}x{} tile need {} bytes of shared memory, the device "
                                            "allows {}",
                                            stages, plan.bm, plan.bn, stages * shape.stage_bytes, dev.smem_optin));
      }
      plan.stages = stages;
    } else {
      plan.stages = 0;
      for (int s = 4; s >= 2; --s) {
        if (s * shape.stage_bytes <= dev.smem_optin) {
          plan.stages = s;
          break;
        }
      }
      if (plan.stages == 0) {
        throw Unsupported(fmt::format("{}: two stages of a {}x{} tile need {} bytes of shared memory, the device "
                                      "allows {}",
                                      kOp, plan.bm, plan.bn, 2 * shape.stage_bytes, dev.smem_optin));
      }
    }
    plan.smem_bytes = plan.stages * shape.stage_bytes;
  }
  plan.tiles_m = kjit::detail::ceil_div(g.m, plan.bm);
  plan.tiles_n = kjit::detail::ceil_div(g.n, plan.bn);
  const int64_t tiles = plan.tiles_m * plan.tiles_n;
  // Half the int32 range: the persistent kernel's tile index runs up to tiles + grid.
  if (tiles * plan.splits > INT32_MAX / 2) {
    kjit::detail::fail(kOp, fmt::format("{} x {} tiles exceed one launch", plan.tiles_m, plan.tiles_n));
  }
  if (!plan.wgmma) {
    plan.grid = tiles;
    return plan;
  }
  if (plan.splits > 1) {
    plan.grid = tiles * plan.splits;
    return plan;
  }
  // B multicast between CTA pairs on adjacent tile rows only when asked for: on the H200 it
  // measured 1.4-1.5x slower than unpaired CTAs with 128x256 tiles (2-2.4x with 128x128) at
  // every large shape of bench_fp8.py (docs/perf-notes.md), so the planner does not pair.
  plan.cluster_m = multicast == 2 ? 2 : 1;
  if (plan.cluster_m == 2) {
    const int64_t units = kjit::detail::ceil_div(plan.tiles_m, int64_t{2}) * plan.tiles_n;
    const int capacity = dev.cluster_capacity[2] > 0 ? dev.cluster_capacity[2] : std::max(dev.sm_count / 2, 1);
    plan.grid = 2 * std::min<int64_t>(units, capacity);
  } else {
    plan.grid = std::min<int64_t>(tiles, std::max(dev.sm_count, 1));
  }
  return plan;
}

GemmSm90Params sm90_params(const GemmProblem& g, const GemmPlan& plan) {
  GemmSm90Params p{};
  p.d = g.params.d;
  p.scale_a = g.params.scale_a;
  p.scale_b = g.params.scale_b;
  p.bias = g.params.bias;
  p.ldd = g.params.ldd;
  p.sa_stride_m = g.params.sa_stride_m;
  p.sb_stride_n = g.params.sb_stride_n;
  p.m = g.params.m;
  p.n = g.params.n;
  p.k = g.params.k;
  p.tiles_m = static_cast<int32_t>(plan.tiles_m);
  p.tiles_n = static_cast<int32_t>(plan.tiles_n);
  p.bias_bf16 = g.params.bias_bf16;
  p.bias_rows = g.params.bias_rows;
  const int elem = g.out_f32 ? 4 : 2;
  p.pair_store = reinterpret_cast<uintptr_t>(g.params.d) % (2 * elem) == 0 && g.params.ldd % 2 == 0 ? 1 : 0;
  // TMA stores need a 16-byte aligned base and row stride; split-K stores directly.
  const bool aligned = reinterpret_cast<uintptr_t>(g.params.d) % 16 == 0 && (g.params.ldd * elem) % 16 == 0;
  p.tma_store = aligned && plan.splits == 1 && (g.m == 1 || g.params.ldd >= g.n) ? 1 : 0;
  p.splits = plan.splits;
  p.cluster_m = plan.cluster_m;
  return p;
}

ParamMap gemm_params(const GemmProblem& g, const GemmPlan& plan) {
  return {{"impl", plan.wgmma ? "wgmma" : "mma"},
          {"a", fmt_name(g.fmt_a)},
          {"b", fmt_name(g.fmt_b)},
          {"out", g.out_f32 ? "f32" : "bf16"},
          {"scale", g.block ? "block" : "tensor"},
          {"tile", fmt::format("{}x{}", plan.bm, plan.bn)},
          {"stages", std::to_string(plan.stages)},
          {"a_major", g.a_trans ? "m" : "k"},
          {"b_major", g.b_trans ? "n" : "k"}};
}

}  // namespace detail

void gemm(const GemmArgs& args, CUstream stream, Runtime& runtime) {
  // All argument checks come before the first driver call.
  const detail::GemmProblem g = detail::validate_gemm(args);
  const CUcontext context = kjit::detail::ensure_context(g.device);
  const DeviceInfo& info = device_info(g.device);
  const int sm = info.cc_major * 10 + info.cc_minor;
  detail::check_fp8_arch(kOp, sm, g.device, info.name.c_str());
  if (g.m == 0 || g.n == 0) return;
  detail::GemmDevice dev{sm, info.sm_count, info.max_smem_per_block_optin};
  detail::GemmPlan plan = detail::plan_gemm(g, args.tile, args.stages, dev, args.kernel, args.splits, args.multicast);

  Choice choice{};
  choice.wgmma = plan.wgmma;
  choice.fmt_a = g.fmt_a;
  choice.fmt_b = g.fmt_b;
  choice.out_f32 = g.out_f32;
  choice.block = g.block;
  choice.bm = plan.bm;
  choice.bn = plan.bn;
  choice.stages = plan.stages;
  choice.a_trans = g.a_trans;
  choice.b_trans = g.b_trans;
  static kjit::detail::KernelTable<Choice> table;
  const LoadedProgram& program =
      table.get(runtime, context, choice, [&] { return make_spec(detail::gemm_params(g, plan)); });
  if (plan.wgmma && ((plan.splits > 1 && args.splits == 0) || plan.cluster_m > 1)) {
    // The planner assumed every cluster is resident at once (sm_count / size); with the
    // device's real cluster capacities it may settle on fewer splits or size the persistent
    // grid of pairs differently (same kernel: splits and pairing are parameters).
    for (int s = 2; s <= std::max(plan.splits, plan.cluster_m); ++s) {
      dev.cluster_capacity[s] = cluster_capacity(program.kernel(0), g.device, s, plan.threads, plan.smem_bytes);
    }
    plan = detail::plan_gemm(g, args.tile, args.stages, dev, args.kernel, args.splits, args.multicast);
  }

  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.grid);
  config.block[0] = static_cast<uint32_t>(plan.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(plan.smem_bytes);
  config.stream = stream;
  if (!plan.wgmma) {
    GemmParams p = g.params;
    p.tiles_m = static_cast<int32_t>(plan.tiles_m);
    p.tiles_n = static_cast<int32_t>(plan.tiles_n);
    launch(program.kernel(0), config, p);
    return;
  }
  // Split-K: the CTAs of a tile (consecutive blockIdx.x) form one cluster; so do B-sharing pairs.
  if (plan.splits > 1) config.cluster[0] = static_cast<uint32_t>(plan.splits);
  if (plan.cluster_m > 1) config.cluster[0] = static_cast<uint32_t>(plan.cluster_m);
  GemmSm90Params p = detail::sm90_params(g, plan);
  encode_tma(&p.tma_a, g.params.a, g.k, g.m, g.params.lda, kSm90BM);
  encode_tma(&p.tma_b, g.params.b, g.k, g.n, g.params.ldb, plan.bn / plan.cluster_m);
  if (p.tma_store) encode_tma_store(&p.tma_d, g.params.d, g.out_f32, g.n, g.m, g.params.ldd);
  launch(program.kernel(0), config, p);
}

// --- Linear ---------------------------------------------------------------------------------

namespace {

constexpr const char* kLinear = "kjit::fp8::Linear";

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

int fmt_of(DType t) { return t == DType::kE4M3 ? kFormatE4M3 : kFormatE5M2; }

int in_code(DType t) { return t == DType::kBF16 ? kInBF16 : t == DType::kF16 ? kInF16 : kInF32; }

void check_config(const LinearConfig& c) {
  using kjit::detail::fail;
  if (c.in_features <= 0 || c.in_features % 16 != 0) {
    fail(kLinear, fmt::format("in_features must be a positive multiple of 16, got {}", c.in_features));
  }
  if (c.out_features <= 0) fail(kLinear, fmt::format("out_features must be positive, got {}", c.out_features));
  if (c.max_tokens <= 0) fail(kLinear, fmt::format("max_tokens must be positive, got {}", c.max_tokens));
  if (c.in_features > INT32_MAX / 2 || c.out_features > INT32_MAX / 2 || c.max_tokens > INT32_MAX / 2) {
    fail(kLinear, "in_features, out_features and max_tokens must stay below 2^30");
  }
  for (DType t : {c.activation_format, c.weight_format}) {
    if (t != DType::kE4M3 && t != DType::kE5M2) {
      fail(kLinear, fmt::format("activation_format and weight_format must be e4m3 or e5m2, got {}", dtype_name(t)));
    }
  }
  const bool block_w = c.weight_granularity == Granularity::kBlock128x128;
  if (c.weight_granularity != Granularity::kTensor && c.weight_granularity != Granularity::kRow && !block_w) {
    fail(kLinear, "weight_granularity must be kTensor, kRow or kBlock128x128");
  }
  const bool block_x = c.recipe == Recipe::kDynamicBlock;
  if (block_x != block_w) {
    fail(kLinear, "Recipe::kDynamicBlock and weight_granularity kBlock128x128 go together (the block-scaled GEMM "
                  "needs 1x128 activation and 128x128 weight scales)");
  }
  if (block_x && c.in_features % kScaleBlock != 0) {
    fail(kLinear, fmt::format("in_features must be a multiple of 128 with block scaling, got {}", c.in_features));
  }
  if (c.recipe != Recipe::kDynamicTensor && c.recipe != Recipe::kDynamicRow && c.recipe != Recipe::kDynamicBlock &&
      c.recipe != Recipe::kDelayed) {
    fail(kLinear, "recipe is not a Recipe value");
  }
  if (c.recipe == Recipe::kDelayed) {
    if (c.history_len < 1 || c.history_len > 65536) {
      fail(kLinear, fmt::format("history_len must be in [1, 65536], got {}", c.history_len));
    }
    if (c.margin < 0 || c.margin > 64) fail(kLinear, fmt::format("margin must be in [0, 64], got {}", c.margin));
  }
}

}  // namespace

Linear::Linear(const LinearConfig& config, const TensorRef& weight, CUstream stream, Runtime& runtime)
    : config_(config), runtime_(&runtime) {
  check_config(config_);
  const int64_t n = config_.out_features, k = config_.in_features, t = config_.max_tokens;
  kjit::detail::check_rank(kLinear, "weight", weight, 2);
  kjit::detail::check_dim(kLinear, "weight", weight, 0, n, "out_features");
  kjit::detail::check_dim(kLinear, "weight", weight, 1, k, "in_features");
  kjit::detail::check_device(kLinear, "weight", weight, config_.device);
  kjit::detail::check_dtype(kLinear, "weight", weight, {DType::kBF16, DType::kF16, DType::kF32});

  kjit::detail::ensure_context(config_.device);
  const DeviceInfo& info = device_info(config_.device);
  detail::check_fp8_arch(kLinear, info.cc_major * 10 + info.cc_minor, config_.device, info.name.c_str());

  // One allocation, carved into 256-byte aligned pieces.
  const bool block = config_.recipe == Recipe::kDynamicBlock;
  switch (config_.weight_granularity) {
    case Granularity::kTensor: w_scale_ndim_ = 1, w_scale_shape_[0] = 1; break;
    case Granularity::kRow: w_scale_ndim_ = 1, w_scale_shape_[0] = n; break;
    default: w_scale_ndim_ = 2, w_scale_shape_[0] = kjit::detail::ceil_div(n, kScaleBlock), w_scale_shape_[1] = k / kScaleBlock;
  }
  const int64_t w_scales = w_scale_shape_[0] * (w_scale_ndim_ == 2 ? w_scale_shape_[1] : 1);
  const int64_t x_scales = config_.recipe == Recipe::kDynamicRow ? t : block ? t * (k / kScaleBlock) : 1;
  const bool delayed = config_.recipe == Recipe::kDelayed;
  size_t off = 0;
  auto carve = [&](size_t bytes) {
    const size_t at = off;
    off += align256(bytes);
    return at;
  };
  const size_t o_wq = carve(static_cast<size_t>(n * k));
  const size_t o_ws = carve(static_cast<size_t>(w_scales) * 4);
  const size_t o_xq = carve(static_cast<size_t>(t * k));
  const size_t o_xs = carve(static_cast<size_t>(x_scales) * 4);
  const size_t o_amax = carve(4);
  const size_t o_hist = delayed ? carve(static_cast<size_t>(config_.history_len) * 4) : 0;
  const size_t o_step = delayed ? carve(4) : 0;
  const size_t o_mult = delayed ? carve(4) : 0;
  KJIT_CU(cuMemAlloc(&buffer_, off));
  char* base = reinterpret_cast<char*>(buffer_);
  w_q_ = base + o_wq;
  w_scale_inv_ = reinterpret_cast<float*>(base + o_ws);
  x_q_ = base + o_xq;
  x_scale_inv_ = reinterpret_cast<float*>(base + o_xs);
  amax_ = reinterpret_cast<float*>(base + o_amax);
  try {
    KJIT_CU(cuMemsetD8(buffer_, 0, off));
    if (delayed) {
      history_ = reinterpret_cast<float*>(base + o_hist);
      step_ = reinterpret_cast<int32_t*>(base + o_step);
      multiplier_ = reinterpret_cast<float*>(base + o_mult);
      const float one = 1.f;
      KJIT_CU(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(multiplier_), &one, sizeof(one)));
    }
    QuantizeArgs q;
    q.x = weight;
    q.y = weight_fp8();
    q.granularity = config_.weight_granularity;
    q.scale_inv = weight_scale_inv();
    if (q.granularity == Granularity::kTensor) {
      q.dynamic = true;
      q.amax = TensorRef(amax_, DType::kF32, {1}, {}, config_.device);  // scratch for every recipe
    }
    fp8::quantize(q, stream, *runtime_);
    KJIT_CU(cuStreamSynchronize(stream));
  } catch (...) {
    release();
    throw;
  }
}

Linear::~Linear() { release(); }

void Linear::release() noexcept {
  if (buffer_ != 0) {
    if (const kjit::detail::Driver* d = kjit::detail::try_driver()) d->cuMemFree(buffer_);
  }
  buffer_ = 0;
  w_q_ = x_q_ = nullptr;
  w_scale_inv_ = x_scale_inv_ = amax_ = history_ = multiplier_ = nullptr;
  step_ = nullptr;
}

Linear::Linear(Linear&& other) noexcept { *this = std::move(other); }

Linear& Linear::operator=(Linear&& other) noexcept {
  if (this != &other) {
    release();
    config_ = other.config_;
    runtime_ = other.runtime_;
    buffer_ = std::exchange(other.buffer_, 0);
    w_q_ = std::exchange(other.w_q_, nullptr);
    w_scale_inv_ = std::exchange(other.w_scale_inv_, nullptr);
    w_scale_shape_[0] = other.w_scale_shape_[0];
    w_scale_shape_[1] = other.w_scale_shape_[1];
    w_scale_ndim_ = other.w_scale_ndim_;
    x_q_ = std::exchange(other.x_q_, nullptr);
    x_scale_inv_ = std::exchange(other.x_scale_inv_, nullptr);
    amax_ = std::exchange(other.amax_, nullptr);
    history_ = std::exchange(other.history_, nullptr);
    step_ = std::exchange(other.step_, nullptr);
    multiplier_ = std::exchange(other.multiplier_, nullptr);
  }
  return *this;
}

TensorRef Linear::weight_fp8() const {
  return TensorRef(w_q_, config_.weight_format, {config_.out_features, config_.in_features}, {}, config_.device);
}

TensorRef Linear::weight_scale_inv() const {
  if (w_scale_ndim_ == 1) return TensorRef(w_scale_inv_, DType::kF32, {w_scale_shape_[0]}, {}, config_.device);
  return TensorRef(w_scale_inv_, DType::kF32, {w_scale_shape_[0], w_scale_shape_[1]}, {}, config_.device);
}

TensorRef Linear::input_fp8() const {
  return TensorRef(x_q_, config_.activation_format, {config_.max_tokens, config_.in_features}, {}, config_.device);
}

TensorRef Linear::input_scale_inv() const {
  switch (config_.recipe) {
    case Recipe::kDynamicRow: return TensorRef(x_scale_inv_, DType::kF32, {config_.max_tokens}, {}, config_.device);
    case Recipe::kDynamicBlock:
      return TensorRef(x_scale_inv_, DType::kF32, {config_.max_tokens, config_.in_features / kScaleBlock}, {},
                       config_.device);
    default: return TensorRef(x_scale_inv_, DType::kF32, {1}, {}, config_.device);
  }
}

TensorRef Linear::amax_history() const {
  if (!history_) return TensorRef();
  return TensorRef(history_, DType::kF32, {config_.history_len}, {}, config_.device);
}

TensorRef Linear::step() const {
  if (!step_) return TensorRef();
  return TensorRef(step_, DType::kI32, {1}, {}, config_.device);
}

TensorRef Linear::multiplier() const {
  if (!multiplier_) return TensorRef();
  return TensorRef(multiplier_, DType::kF32, {1}, {}, config_.device);
}

TensorRef Linear::amax() const {
  if (config_.recipe != Recipe::kDynamicTensor && config_.recipe != Recipe::kDelayed) return TensorRef();
  return TensorRef(amax_, DType::kF32, {1}, {}, config_.device);
}

void Linear::forward(const TensorRef& x, const TensorRef& y, CUstream stream, const TensorRef& bias) {
  using kjit::detail::fail;
  if (buffer_ == 0) fail(kLinear, "forward() on a moved-from Linear");
  kjit::detail::check_rank(kLinear, "x", x, 2);
  kjit::detail::check_dim(kLinear, "x", x, 1, config_.in_features, "in_features");
  kjit::detail::check_dtype(kLinear, "x", x, {DType::kBF16, DType::kF16, DType::kF32});
  kjit::detail::check_device(kLinear, "x", x, config_.device);
  const int64_t m = x.shape[0];
  if (m < 0 || m > config_.max_tokens) {
    fail(kLinear, fmt::format("x has {} rows; at most max_tokens = {} (the activation buffers' size), got {}", m,
                              config_.max_tokens, x.describe()));
  }
  kjit::detail::check_rank(kLinear, "y", y, 2);
  kjit::detail::check_dim(kLinear, "y", y, 0, m, "tokens (x dim 0)");
  kjit::detail::check_dim(kLinear, "y", y, 1, config_.out_features, "out_features");
  if (m == 0) return;
  const int64_t k = config_.in_features;

  QuantizeArgs q;
  q.x = x;
  q.y = TensorRef(x_q_, config_.activation_format, {m, k}, {}, config_.device);
  switch (config_.recipe) {
    case Recipe::kDynamicTensor:
      q.granularity = Granularity::kTensor;
      q.dynamic = true;
      q.amax = amax();
      q.scale_inv = TensorRef(x_scale_inv_, DType::kF32, {1}, {}, config_.device);
      break;
    case Recipe::kDynamicRow:
      q.granularity = Granularity::kRow;
      q.scale_inv = TensorRef(x_scale_inv_, DType::kF32, {m}, {}, config_.device);
      break;
    case Recipe::kDynamicBlock:
      q.granularity = Granularity::kBlock1x128;
      q.scale_inv = TensorRef(x_scale_inv_, DType::kF32, {m, k / kScaleBlock}, {}, config_.device);
      break;
    case Recipe::kDelayed:
      q.granularity = Granularity::kTensor;
      q.multiplier = multiplier();
      q.amax = amax();
      q.scale_inv = TensorRef(x_scale_inv_, DType::kF32, {1}, {}, config_.device);
      break;
  }
  fp8::quantize(q, stream, *runtime_);

  GemmArgs g;
  g.a = q.y;
  g.b = weight_fp8();
  g.d = y;
  g.scale_a = q.scale_inv;
  g.scale_b = weight_scale_inv();
  g.scale_mode = config_.recipe == Recipe::kDynamicBlock ? ScaleMode::kBlockwise : ScaleMode::kTensorwise;
  g.bias = bias;
  fp8::gemm(g, stream, *runtime_);

  if (config_.recipe == Recipe::kDelayed) {
    DelayedScalingParams d{};
    d.amax = amax_;
    d.history = history_;
    d.step = step_;
    d.multiplier = multiplier_;
    d.margin_scale = std::ldexp(1.f, config_.margin);
    d.history_len = config_.history_len;
    detail::launch_delayed_scaling(d, in_code(x.dtype), fmt_of(config_.activation_format), config_.device, stream,
                                   *runtime_);
  }
}

}  // namespace kjit::fp8
