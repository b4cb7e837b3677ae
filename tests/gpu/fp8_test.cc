// kjit::fp8 on the GPU against the host references (tools/testing/reference_fp8.hpp).
//
// Quantize: the kernels do the same f32 operations as the reference (one rounding of x · m, IEEE
// division for computed multipliers, cvt.rn.satfinite), so y, amax and scale_inv must match bit
// for bit (a NaN may come back with either sign). GEMM: compared with a float64 GEMM on the
// dequantized operands. fp8 × fp8 products are exact in f32; the error is f32 accumulation (the
// Hopper FP8 tensor-core datapath keeps ~14 mantissa bits inside an MMA, DeepSeek-V3 report
// §3.3.2, so up to ~1e-4 relative) plus, for bf16 output, one rounding (2^-9 relative, ≈1.7e-3
// relative L2 on random data). Tolerances: relative L2 ≤ 1e-2 for bf16 and ≤ 2e-3 for f32
// outputs; a wrong fragment, layout or scale index gives O(1). Every output is poisoned first
// (0xFF: NaN in bf16, f32, e4m3 and e5m2) and the padding of strided outputs must keep its poison.
// Seeds come from std::random_device and are printed on failure.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/driver.hpp"
#include "runtime/families/fp8.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/fp8_gemm_case.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using kjit::DType;
using kjit::TensorRef;
namespace f8 = kjit::fp8;
namespace kt = kjit::testing;
using kt::Fp8Format;

int device_sm() { return kjit::device_info(0).sm(); }

/// The device runs the Hopper (TMA + wgmma) GEMM kernel.
bool device_has_wgmma() { return kjit::device_info(0).target().has_wgmma(); }

#define KJIT_REQUIRE_FP8_GPU()                                                                               \
  do {                                                                                                       \
    if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";                                                    \
    if (!(kjit::device_info(0).target().sm() >= kjit::fp8::kMinSm)) GTEST_SKIP() << "FP8 needs sm_89+ (Unsupported test)"; \
  } while (0)

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

// --- inputs ---------------------------------------------------------------------------------

/// `v` rounded to nearest even in f16 (kept as a float; |v| stays below 65504 here).
float round_f16(float v) {
  if (!std::isfinite(v) || v == 0.f) return v;
  int e;
  std::frexp(v, &e);                                  // |v| = f · 2^e, f in [0.5, 1)
  const float q = std::ldexp(1.f, std::max(e - 11, -24));  // f16 ulp (11 significant bits)
  return std::nearbyint(v / q) * q;
}

/// f16 bits of a float that is exactly representable in f16.
uint16_t half_bits(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a == 0.f) return sign;
  const int e = std::ilogb(a);
  if (e < -14) return sign | static_cast<uint16_t>(a / 0x1p-24f);  // subnormal
  const int mant = static_cast<int>((a / std::ldexp(1.f, e) - 1.f) * 1024.f);
  return sign | static_cast<uint16_t>(((e + 15) << 10) | mant);
}

/// `v` as the device sees it after upload in dtype `t`.
float round_to(float v, DType t) {
  if (t == DType::kBF16) return kt::round_bf16(v);
  if (t == DType::kF16) return round_f16(v);
  return v;
}

/// Random inputs over many binades, exactly representable in `t`.
std::vector<float> random_inputs(size_t n, DType t, std::mt19937_64& rng, float spread_log2 = 6.f) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(-spread_log2, spread_log2);
  std::vector<float> x(n);
  for (auto& v : x) v = round_to(nd(rng) * std::exp2(ud(rng)), t);
  return x;
}

/// A device copy of [rows, cols] `x` in dtype `t` with row stride `ld` elements.
kt::DeviceBuffer upload(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld, DType t) {
  const int es = kjit::dtype_size(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<int64_t>(rows * ld, 1) * es), 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = x[static_cast<size_t>(i * cols + j)];
      uint8_t* dst = bytes.data() + (i * ld + j) * es;
      if (t == DType::kBF16) {
        const uint16_t h = kt::float_to_bf16(v);
        std::memcpy(dst, &h, 2);
      } else if (t == DType::kF16) {
        const uint16_t h = half_bits(v);
        std::memcpy(dst, &h, 2);
      } else {
        std::memcpy(dst, &v, 4);
      }
    }
  }
  return kt::to_device(bytes);
}

Fp8Format fmt_of(DType t) { return t == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2; }

bool same_fp8(uint8_t got, uint8_t want, Fp8Format f) {
  if (kt::fp8_is_nan(want, f)) return kt::fp8_is_nan(got, f);
  return got == want;
}

// --- quantize -------------------------------------------------------------------------------

struct QCase {
  DType in = DType::kBF16;
  DType out = DType::kE4M3;
  f8::Granularity g = f8::Granularity::kTensor;
  int64_t rows = 0, cols = 0;
  bool pow2 = false;
  bool dynamic = false;
  float multiplier = 1.f;       // kTensor, static
  bool device_multiplier = false;
  bool strided = false;         // padded rows for x and y
  bool edges = false;           // sprinkle saturation edges, zeros, denormals, NaN, inf
  bool want_amax = true;
  CUstream stream = nullptr;

  std::string describe() const {
    static const char* gn[] = {"tensor", "row", "block1x128", "block128x128"};
    return std::string(kjit::dtype_name(in)) + "->" + kjit::dtype_name(out) + " " + gn[static_cast<int>(g)] + " " +
           std::to_string(rows) + "x" + std::to_string(cols) + (pow2 ? " pow2" : "") + (dynamic ? " dynamic" : "") +
           (g == f8::Granularity::kTensor && !dynamic ? " m=" + std::to_string(multiplier) : "") +
           (device_multiplier ? " device-m" : "") + (strided ? " strided" : "") + (edges ? " edges" : "");
  }
};

/// Edge inputs: the E4M3/E5M2 saturation boundaries (at multiplier 1), zeros, fp8 denormals and
/// their rounding midpoints, NaN, ±inf.
const std::vector<float>& edge_values() {
  static const std::vector<float> v = {447.f,  448.f,  464.f,   465.f,   -465.f, 1e4f,    -1e4f,  57344.f,
                                       61439.f, 61440.f, 0.f,   -0.f,    0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1p-16f,
                                       0x1p-17f, 0x1.8p-17f, NAN, INFINITY, -INFINITY, 0x1.ep-7f, 432.f, -1.f};
  return v;
}

void run_quantize(const QCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<float> x = random_inputs(static_cast<size_t>(c.rows * c.cols), c.in, rng);
  if (c.edges) {
    const auto& e = edge_values();
    for (size_t i = 0; i < x.size(); i += 29) {
      x[i] = round_to(e[(i / 29) % e.size()], c.in);
    }
    if (c.rows >= 3) {  // an all-zero row/group and an all-NaN row
      for (int64_t j = 0; j < c.cols; ++j) x[static_cast<size_t>(c.cols + j)] = 0.f;
      for (int64_t j = 0; j < c.cols; ++j) x[static_cast<size_t>(2 * c.cols + j)] = NAN;
    }
  }
  const int es = kjit::dtype_size(c.in);
  const int64_t ldx = c.strided ? c.cols + 64 / es : c.cols;
  const int64_t ldy = c.strided ? c.cols + 32 : c.cols;
  kt::DeviceBuffer dx = upload(x, c.rows, c.cols, ldx, c.in);
  kt::DeviceBuffer dy(static_cast<size_t>(std::max<int64_t>(c.rows * ldy, 16)));
  dy.fill(0xFF);

  const Fp8Format f = fmt_of(c.out);
  const kt::Fp8QuantizeReference ref = kt::fp8_quantize_reference(
      x, c.rows, c.cols, f, static_cast<kt::Fp8Granularity>(c.g), c.pow2, c.dynamic, c.multiplier);
  const size_t groups = ref.amax.size();
  kt::DeviceBuffer damax((groups + 1) * 4), dscale((groups + 1) * 4), dmult(16);
  damax.fill(0xFF);
  dscale.fill(0xFF);
  dmult.upload(&c.multiplier, 4);

  f8::QuantizeArgs a;
  a.x = TensorRef(dx.get(), c.in, {c.rows, c.cols}, {ldx, 1}, 0);
  a.y = TensorRef(dy.get(), c.out, {c.rows, c.cols}, {ldy, 1}, 0);
  a.granularity = c.g;
  a.dynamic = c.dynamic;
  a.pow2_scale = c.pow2;
  const int64_t gr = ref.group_rows, gc = ref.group_cols;
  auto group_ref = [&](kt::DeviceBuffer& b) {
    if (c.g == f8::Granularity::kTensor) return TensorRef(b.get(), DType::kF32, {1}, {}, 0);
    if (c.g == f8::Granularity::kRow) return TensorRef(b.get(), DType::kF32, {c.rows}, {}, 0);
    return TensorRef(b.get(), DType::kF32, {gr, gc}, {}, 0);
  };
  if (c.want_amax) a.amax = group_ref(damax);
  a.scale_inv = group_ref(dscale);
  if (c.g == f8::Granularity::kTensor && !c.dynamic) {
    if (c.device_multiplier) {
      a.multiplier = TensorRef(dmult.get(), DType::kF32, {1}, {}, 0);
    } else {
      a.multiplier_value = c.multiplier;
    }
  }
  f8::quantize(a, c.stream);
  if (c.stream) KJIT_CU(cuStreamSynchronize(c.stream));
  kt::synchronize();

  const std::vector<uint8_t> y = dy.download<uint8_t>(static_cast<size_t>(c.rows * ldy));
  size_t bad = 0, pad = 0;
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const uint8_t got = y[static_cast<size_t>(i * ldy + j)];
      if (j >= c.cols) {
        pad += got != 0xFF;
        continue;
      }
      const size_t e = static_cast<size_t>(i * c.cols + j);
      if (!same_fp8(got, ref.y[e], f) && bad++ < 8) {
        ADD_FAILURE() << "y[" << i << "][" << j << "] = 0x" << std::hex << int(got) << ", want 0x" << int(ref.y[e])
                      << std::dec << " (x = " << x[e] << ", multiplier "
                      << ref.multiplier[0] << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "mismatched fp8 outputs";
  EXPECT_EQ(pad, 0u) << "bytes of y's row padding written";
  const std::vector<float> amax = damax.download<float>(groups + 1);
  const std::vector<float> scale = dscale.download<float>(groups + 1);
  size_t bad_s = 0;
  for (size_t i = 0; i < groups; ++i) {
    const bool amax_ok = !c.want_amax || amax[i] == ref.amax[i];
    if ((!amax_ok || !(scale[i] == ref.scale_inv[i])) && bad_s++ < 8) {
      ADD_FAILURE() << "group " << i << ": amax " << amax[i] << " want " << ref.amax[i] << ", scale_inv " << scale[i]
                    << " want " << ref.scale_inv[i];
    }
  }
  EXPECT_EQ(bad_s, 0u);
  uint32_t tail_a, tail_s;
  std::memcpy(&tail_a, &amax[groups], 4);
  std::memcpy(&tail_s, &scale[groups], 4);
  EXPECT_EQ(tail_a, 0xFFFFFFFFu) << "amax written past its groups";
  EXPECT_EQ(tail_s, 0xFFFFFFFFu) << "scale_inv written past its groups";
}

TEST(Fp8QuantizeGpu, EveryInputFormatGranularity) {
  KJIT_REQUIRE_FP8_GPU();
  using G = f8::Granularity;
  for (DType in : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType out : {DType::kE4M3, DType::kE5M2}) {
      for (G g : {G::kTensor, G::kRow, G::kBlock1x128, G::kBlock128x128}) {
        for (bool pow2 : {false, true}) {
          QCase c;
          c.in = in, c.out = out, c.g = g, c.pow2 = pow2;
          c.rows = 133, c.cols = 400;  // neither a multiple of 128
          c.multiplier = 3.3f;         // not a power of two
          c.strided = pow2;
          c.edges = !pow2;
          run_quantize(c);
          if (g == G::kTensor) {
            c.dynamic = true;
            run_quantize(c);
          }
        }
      }
    }
  }
}

TEST(Fp8QuantizeGpu, SaturationEdgesExact) {
  KJIT_REQUIRE_FP8_GPU();
  // One row of edge values at multiplier 1 (and at a small non-power-of-two multiplier, where
  // 1e4 · 0.046 = 460 rounds to 448 and 61440 · 0.046 saturates).
  const std::vector<float>& e = edge_values();
  std::vector<float> x(e);
  while (x.size() % 16) x.push_back(1.f);
  for (DType out : {DType::kE4M3, DType::kE5M2}) {
    for (float m : {1.f, 0.046f}) {
      const int64_t n = static_cast<int64_t>(x.size());
      kt::DeviceBuffer dx = upload(x, 1, n, n, DType::kF32);
      kt::DeviceBuffer dy(static_cast<size_t>(n)), damax(4), dscale(4);
      dy.fill(0xFF);
      f8::QuantizeArgs a;
      a.x = TensorRef(dx.get(), DType::kF32, {1, n}, {}, 0);
      a.y = TensorRef(dy.get(), out, {1, n}, {}, 0);
      a.multiplier_value = m;
      a.amax = TensorRef(damax.get(), DType::kF32, {1}, {}, 0);
      a.scale_inv = TensorRef(dscale.get(), DType::kF32, {1}, {}, 0);
      f8::quantize(a, nullptr);
      kt::synchronize();
      const std::vector<uint8_t> y = dy.download<uint8_t>(static_cast<size_t>(n));
      const Fp8Format f = fmt_of(out);
      for (int64_t i = 0; i < n; ++i) {
        volatile float p = x[static_cast<size_t>(i)] * m;
        const uint8_t want = kt::fp8_encode(p, f);
        EXPECT_TRUE(same_fp8(y[static_cast<size_t>(i)], want, f))
            << kt::fp8_name(f) << " x=" << x[static_cast<size_t>(i)] << " m=" << m << ": got 0x" << std::hex
            << int(y[static_cast<size_t>(i)]) << " want 0x" << int(want);
      }
      if (m == 1.f && out == DType::kE4M3) {  // the documented edges, spelled out
        EXPECT_EQ(y[0], 0x7e);  // 447 → 448
        EXPECT_EQ(y[1], 0x7e);  // 448
        EXPECT_EQ(y[2], 0x7e);  // 464: tie → even, not NaN
        EXPECT_EQ(y[3], 0x7e);  // 465 saturates
        EXPECT_EQ(y[4], 0xfe);
        EXPECT_EQ(y[5], 0x7e);  // 1e4
        EXPECT_EQ(y[19], 0x7e);  // +inf → max
        EXPECT_EQ(y[20], 0xfe);  // -inf → -max
        EXPECT_TRUE(kt::fp8_is_nan(y[18], f));
        EXPECT_EQ(y[12], 0x01);  // 2^-9: the smallest denormal
        EXPECT_EQ(y[13] & 0x7f, 0x00);  // 2^-10 ties to zero
      }
      const float amax = damax.download<float>(1)[0];
      EXPECT_EQ(amax, INFINITY) << "amax is max |x| including inf, ignoring NaN";
      EXPECT_EQ(dscale.download<float>(1)[0], 1.f / m);
    }
  }
}

TEST(Fp8QuantizeGpu, ShapesStridesStreamsAndMultipliers) {
  KJIT_REQUIRE_FP8_GPU();
  using G = f8::Granularity;
  CUstream stream = nullptr;
  KJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape s : {Shape{1, 16}, Shape{5, 48}, Shape{257, 7168}, Shape{3, 40960}, Shape{300, 128}}) {
    for (G g : {G::kTensor, G::kRow, G::kBlock1x128, G::kBlock128x128}) {
      QCase c;
      c.g = g, c.rows = s.rows, c.cols = s.cols;
      c.multiplier = 0.37f;
      c.stream = stream;
      c.strided = s.rows % 2 == 1;
      run_quantize(c);
    }
  }
  // A device-held multiplier, and no amax output.
  QCase c;
  c.rows = 64, c.cols = 4096, c.multiplier = 12.5f, c.device_multiplier = true, c.want_amax = false;
  run_quantize(c);
  c.edges = true, c.want_amax = true, c.pow2 = true;
  run_quantize(c);
  // Large enough that the per-tensor grid-strides and CTAs race on the atomic amax.
  c = QCase{};
  c.rows = 2048, c.cols = 7168, c.multiplier = 0.01f, c.edges = true;
  run_quantize(c);
  c.dynamic = true;
  run_quantize(c);
  KJIT_CU(cuStreamDestroy(stream));
}

// --- gemm -----------------------------------------------------------------------------------

using Scales = kt::GemmScales;
using GCase = kt::Fp8GemmCase;

/// Case `c` (kjit::testing::run_fp8_gemm_case) on fresh inputs.
void run_gemm(const GCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed " + std::to_string(seed));
  const kt::Fp8GemmResult r = kt::run_fp8_gemm_case(c, seed);
  EXPECT_TRUE(r.cmp.ok(r.tol)) << r.describe();
  EXPECT_EQ(r.padding_written, 0u) << "bytes of D's padding written";
}

TEST(Fp8GemmGpu, EveryLayoutOutputAndScaleMode) {
  KJIT_REQUIRE_FP8_GPU();
  int i = 0;
  for (bool at : {false, true}) {
    for (bool bt : {false, true}) {
      for (DType out : {DType::kBF16, DType::kF32}) {
        for (Scales s : {Scales::kTensor, Scales::kChannel, Scales::kBlock}) {
          GCase c;
          c.m = 201, c.n = 150, c.k = s == Scales::kBlock ? 384 : 272;  // no dim a multiple of its tile
          c.a_trans = at, c.b_trans = bt, c.out = out, c.scales = s;
          static const f8::GemmTile tiles[] = {f8::GemmTile::kAuto, f8::GemmTile::k64x64, f8::GemmTile::k128x64,
                                               f8::GemmTile::k128x128};
          c.tile = tiles[i++ % 4];
          if (s == Scales::kBlock && c.tile == f8::GemmTile::k128x128) c.tile = f8::GemmTile::k128x64;
          run_gemm(c);
        }
      }
    }
  }
}

TEST(Fp8GemmGpu, TilesStagesAndEdges) {
  KJIT_REQUIRE_FP8_GPU();
  using T = f8::GemmTile;
  const int optin = kjit::device_info(0).max_smem_per_block_optin;
  for (T t : {T::k64x64, T::k128x64, T::k128x128}) {
    for (int st : {2, 3, 4}) {
      const int stage_bytes = t == T::k128x128 ? 32768 : t == T::k128x64 ? 24576 : 16384;
      if (st * stage_bytes > optin) continue;
      GCase c;
      c.m = 130, c.n = 257, c.k = 656, c.tile = t, c.stages = st, c.scales = Scales::kChannel;
      c.a_trans = st == 3, c.b_trans = t == T::k128x64;
      run_gemm(c);
    }
  }
  // Tiny and skinny shapes: one row, one column, K = 16, M < 16.
  for (GCase c : {GCase{1, 7168, 2048}, GCase{16, 2048, 512}, GCase{7, 9, 16}, GCase{300, 1, 128}, GCase{1, 1, 16},
                  GCase{64, 4096, 7168}}) {
    c.scales = Scales::kChannel;
    run_gemm(c);
    c.a_trans = c.b_trans = true;
    c.out = DType::kF32;
    run_gemm(c);
  }
  // Many tiles: raster groups of 8 tile rows with a partial last group.
  GCase big{1100, 1300, 512};
  big.scales = Scales::kTensor;
  run_gemm(big);
  big.scales = Scales::kBlock;
  run_gemm(big);
  // Long K: accumulation over 8192.
  GCase deep{128, 256, 8192};
  deep.out = DType::kF32;
  run_gemm(deep);
  deep.scales = Scales::kBlock;
  run_gemm(deep);
}

TEST(Fp8GemmGpu, FormatsBiasAndColumnMajorOutput) {
  KJIT_REQUIRE_FP8_GPU();
  for (DType fa : {DType::kE4M3, DType::kE5M2}) {
    for (DType fb : {DType::kE4M3, DType::kE5M2}) {
      GCase c{150, 170, 256};
      c.fa = fa, c.fb = fb, c.scales = Scales::kChannel, c.out = DType::kF32;
      run_gemm(c);
      c.scales = Scales::kBlock, c.b_trans = true, c.out = DType::kBF16;
      run_gemm(c);
    }
  }
  for (DType bias : {DType::kF32, DType::kBF16}) {
    for (Scales s : {Scales::kTensor, Scales::kBlock}) {
      GCase c{99, 200, 256};
      c.bias = bias, c.scales = s, c.a_trans = s == Scales::kBlock;
      run_gemm(c);
    }
  }
  for (bool at : {false, true}) {
    for (bool bt : {false, true}) {
      GCase c{77, 190, 144};
      c.d_colmajor = true, c.a_trans = at, c.b_trans = bt, c.scales = Scales::kChannel, c.bias = DType::kF32;
      c.out = at ? DType::kF32 : DType::kBF16;
      run_gemm(c);
    }
  }
  // Unpadded, exactly tile-sized operands with vector stores on every row.
  GCase c{256, 256, 256};
  c.padded = false;
  run_gemm(c);
  c.out = DType::kF32;
  c.scales = Scales::kBlock;
  run_gemm(c);
}

// The Hopper kernel (TMA + wgmma), forced, on sm_90 only: both tiles, every stage count that
// fits, edges in M, N and K (TMA zero fill), formats, output types, bias, column-major D. The
// auto-planned cases above already run it for K-major tensorwise problems with M > 64.
TEST(Fp8GemmGpu, WgmmaKernel) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  const int optin = kjit::device_info(0).max_smem_per_block_optin;
  for (T t : {T::k128x128, T::k128x256}) {
    const int bn = t == T::k128x256 ? 256 : 128;
    for (int st = 2; st <= 6; ++st) {
      if (st * (128 + bn) * 128 + 65536 + 1280 > optin) continue;
      GCase c{333, 517, 656};  // 656 = 5 k-tiles + 16
      c.kernel = f8::GemmKernel::kWgmma, c.tile = t, c.stages = st, c.scales = Scales::kChannel;
      c.out = st % 2 ? DType::kF32 : DType::kBF16;
      run_gemm(c);
    }
  }
  for (GCase c : {GCase{64, 64, 16}, GCase{1, 300, 128}, GCase{129, 257, 4096}, GCase{1100, 1300, 512},
                  GCase{4096, 4096, 1024}, GCase{77, 190, 144}}) {
    c.kernel = f8::GemmKernel::kWgmma;
    run_gemm(c);
    c.scales = Scales::kChannel, c.bias = DType::kBF16, c.fa = DType::kE5M2, c.out = DType::kF32;
    run_gemm(c);
    c.d_colmajor = true, c.bias = DType::kF32, c.fa = DType::kE4M3, c.fb = DType::kE5M2;
    run_gemm(c);
  }
  GCase c{256, 256, 256};
  c.kernel = f8::GemmKernel::kWgmma;
  c.padded = false;
  run_gemm(c);
}

// The persistent walk: more tiles than SMs, so each CTA runs several tiles through one stage ring
// and one epilogue staging ring (TMA-stored D: unpadded, 16-byte rows), with partial last tile
// rows and columns and K not a multiple of 128; and the direct-store epilogue (padded D).
TEST(Fp8GemmGpu, WgmmaPersistent) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  for (T t : {T::k128x128, T::k128x256}) {
    for (DType out : {DType::kBF16, DType::kF32}) {
      GCase c{2100, 2296, 272};  // 17 x 18 (or 9) tiles, N % 8 == 0 for TMA stores of bf16 and f32
      c.kernel = f8::GemmKernel::kWgmma, c.tile = t, c.out = out, c.padded = false;
      c.scales = out == DType::kF32 ? Scales::kChannel : Scales::kTensor;
      c.bias = t == T::k128x256 ? DType::kBF16 : DType::kU8;
      run_gemm(c);
    }
  }
  GCase c{2100, 2300, 400};  // padded D: direct stores
  c.kernel = f8::GemmKernel::kWgmma, c.scales = Scales::kChannel, c.bias = DType::kF32;
  run_gemm(c);
  c.d_colmajor = true, c.out = DType::kF32;  // swapped operands: bias per row of the kernel's D
  run_gemm(c);
  // B multicast between CTA pairs (GemmArgs::multicast = 2): many tiles, an odd tile row count
  // (the last pair's second CTA has no rows), a single tile row, 128x128 and 128x256 tiles,
  // both epilogues, the k-tail.
  c = GCase{2100, 2296, 272};
  c.kernel = f8::GemmKernel::kWgmma, c.multicast = 2, c.padded = false;
  run_gemm(c);
  for (GCase m : {GCase{333, 517, 656}, GCase{100, 1000, 304}, GCase{1000, 700, 1040}}) {
    for (f8::GemmTile t : {f8::GemmTile::k128x128, f8::GemmTile::k128x256}) {
      m.kernel = f8::GemmKernel::kWgmma, m.multicast = 2, m.tile = t;
      m.padded = t == f8::GemmTile::k128x256;  // TMA-store and direct-store epilogues
      m.scales = Scales::kChannel, m.out = t == f8::GemmTile::k128x128 ? DType::kF32 : DType::kBF16;
      run_gemm(m);
    }
  }
  // Pairs over the wave-fitting tiles (BN / 2 rows of B a CTA: 40 ... 112), odd tile rows and
  // N not a whole number of tiles; the last two with a constant weight loaded early.
  for (T t : {T::k128x80, T::k128x112, T::k128x160, T::k128x224}) {
    GCase m{333, 1000, 4224};
    m.kernel = f8::GemmKernel::kWgmma, m.multicast = 2, m.tile = t, m.scales = Scales::kChannel;
    m.b_constant = t == T::k128x160 || t == T::k128x224;
    run_gemm(m);
  }
  // The 64-row tiles, paired over the halves of M ≤ 128 (and over more rows, forced): a full
  // pair, a pair whose second half is short, one whose second CTA has no rows; the staged tiles'
  // TMA-store and copy-out epilogues, the wave-fitting tiles' direct stores, unpaired too.
  for (T t : {T::k64x128, T::k64x256, T::k64x80, T::k64x224}) {
    for (const int64_t m_rows : {128, 100, 40, 333}) {
      GCase m{m_rows, 1000, 2176};
      m.kernel = f8::GemmKernel::kWgmma, m.multicast = m_rows == 333 ? 1 : 2, m.tile = t;
      m.padded = m_rows == 100;
      m.scales = m_rows == 40 ? Scales::kTensor : Scales::kChannel;
      m.b_constant = m_rows == 128;
      run_gemm(m);
    }
  }
  c = GCase{64, 64, 256};
  c.multicast = 2, c.splits = 2;
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
  c.splits = 0, c.multicast = 4;
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
  // TMA-stored column-major D (the kernel's rows are D's columns: a per-row bias), per-tensor
  // scales: the epilogue without per-column loads.
  c = GCase{1000, 2296, 272};
  c.kernel = f8::GemmKernel::kWgmma, c.d_colmajor = true, c.padded = false, c.bias = DType::kF32;
  run_gemm(c);
  c = GCase{40, 300, 512};  // one tile, no split, M < 64 (the second consumer stores nothing)
  c.kernel = f8::GemmKernel::kWgmma, c.splits = 1, c.padded = false;
  run_gemm(c);
  // A constant weight (b_constant): the first unit's first ring of B loads before the kernel's
  // wait, the rest after it. 144 tiles of 128x128 over 132 CTAs (some take a second unit) with 8
  // k-tiles over 5 stages; 3 k-tiles (all of a unit early); CTA pairs, each multicasting its
  // half of B's first ring early; pairs over 8 k-tiles of 5 stages with units past the first;
  // column-major D with pairs (validation swaps: the weight is the kernel's A, loaded early
  // beside the multicast).
  c = GCase{1100, 2048, 1024};
  c.kernel = f8::GemmKernel::kWgmma, c.tile = T::k128x128, c.b_constant = true, c.scales = Scales::kChannel;
  run_gemm(c);
  c = GCase{2100, 2296, 272};
  c.kernel = f8::GemmKernel::kWgmma, c.tile = T::k128x256, c.b_constant = true, c.padded = false;
  run_gemm(c);
  c.multicast = 2;
  run_gemm(c);
  c = GCase{1100, 2048, 1024};
  c.kernel = f8::GemmKernel::kWgmma, c.tile = T::k128x128, c.b_constant = true, c.multicast = 2;
  c.stages = 5, c.scales = Scales::kChannel;
  run_gemm(c);
  c = GCase{1000, 700, 1040};
  c.kernel = f8::GemmKernel::kWgmma, c.multicast = 2, c.d_colmajor = true, c.b_constant = true, c.out = DType::kF32;
  run_gemm(c);
}

// CTA pairs sharing A (GemmArgs::multicast = 3): the two CTAs of a cluster take adjacent tile
// columns of one tile row; each loads half of A's box (BM / 2 rows) multicast to both, and its
// own B. Both epilogues of the staged tiles (TMA stores, padded D's copy-out), the wave-fitting
// tiles' direct stores; an odd tile column count (the last pair's second CTA has no tile: it
// loads and multicasts its half of A, frees every stage and stores nothing); a partial last tile
// row, including one whose second half of A lies wholly past M (its box clamped into the tensor);
// one k-tile (the ring wraps across units) and a long K; more pairs than resident clusters
// (units past the first); a constant weight loaded early (B is each CTA's own) and, with a
// column-major D, a constant A' (the weight, after validation's swap) multicast early; the 64-row
// tiles (32-row halves); bf16 and f32, per-tensor and per-channel scales, bias.
GCase a_pairs(GCase c, f8::GemmTile t) {
  c.kernel = f8::GemmKernel::kWgmma, c.tile = t, c.multicast = 3;
  return c;
}

// A few of WgmmaPairsSharingA's cases, one of each protocol corner, small enough for
// compute-sanitizer's racecheck: an odd tile column count with a partial last tile row and a
// constant weight; a wave-fitting tile over one k-tile (f32); a second half of A past M; the
// 64-row tile (32-row halves); A' constant and multicast early (column-major D).
TEST(Fp8GemmGpu, WgmmaPairsSharingASmoke) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  GCase c = a_pairs(GCase{333, 1096, 656}, T::k128x128);
  c.padded = false, c.b_constant = true, c.scales = Scales::kChannel;
  run_gemm(c);
  c = a_pairs(GCase{200, 1000, 128}, T::k128x80);
  c.out = DType::kF32;
  run_gemm(c);
  c = a_pairs(GCase{150, 1096, 1040}, T::k128x128);
  c.padded = false;
  run_gemm(c);
  c = a_pairs(GCase{100, 1096, 2176}, T::k64x128);
  c.b_constant = true;
  run_gemm(c);
  c = a_pairs(GCase{1000, 700, 1040}, T::kAuto);
  c.d_colmajor = true, c.b_constant = true, c.out = DType::kF32;
  run_gemm(c);
}

TEST(Fp8GemmGpu, WgmmaPairsSharingA) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  // 128x128 at M = 256: 2 x 18 tiles (even), TMA stores; then padded D (copy-out), f32.
  for (DType out : {DType::kBF16, DType::kF32}) {
    GCase c = a_pairs(GCase{256, 2296, 272}, T::k128x128);
    c.padded = false, c.out = out;
    c.scales = out == DType::kF32 ? Scales::kChannel : Scales::kTensor;
    run_gemm(c);
    c = a_pairs(GCase{256, 2300, 400}, T::k128x128);
    c.out = out, c.scales = Scales::kChannel, c.bias = DType::kF32;
    run_gemm(c);
  }
  // M = 333 (a partial third tile row) with an odd tile column count (N = 1096: 9 columns of
  // 128; N = 520: 3 of 256; 16-byte rows for TMA stores unless padded), both epilogues, both
  // outputs, constant weight on and off.
  for (T t : {T::k128x128, T::k128x256}) {
    for (const bool padded : {false, true}) {
      GCase c = a_pairs(GCase{333, t == T::k128x128 ? 1096 : 520, 656}, t);
      c.padded = padded, c.scales = Scales::kChannel;
      c.out = padded ? DType::kF32 : DType::kBF16;
      c.b_constant = padded;
      run_gemm(c);
    }
  }
  // The wave-fitting tiles at M = 200 with N = 1000 (13 columns of 80, 7 of 160, 9 of 112 and 5
  // of 224: odd, N not a whole number of tiles), K = 128 (one k-tile) and 4224 (33), constant
  // weight on and off, bf16 and f32.
  for (T t : {T::k128x80, T::k128x160, T::k128x112, T::k128x224}) {
    for (const int64_t k : {128, 4224}) {
      GCase c = a_pairs(GCase{200, 1000, k}, t);
      c.scales = Scales::kChannel;
      c.b_constant = k == 4224;
      c.out = t == T::k128x80 || t == T::k128x224 ? DType::kF32 : DType::kBF16;
      c.bias = t == T::k128x160 ? DType::kBF16 : DType::kU8;
      run_gemm(c);
    }
  }
  // Second halves of A past M: M = 150 (the second tile row's rows 192.. of 128..255: the box
  // starts at 192, clamped to 149), M = 40 (one 64-row half), both with an odd column count.
  for (const int64_t m : {150, 40}) {
    GCase c = a_pairs(GCase{m, 1096, 1040}, T::k128x128);
    c.scales = Scales::kChannel, c.padded = false;
    run_gemm(c);
    c = a_pairs(GCase{m, 1000, 4224}, T::k128x160);
    c.b_constant = true;
    run_gemm(c);
  }
  // More pairs than resident clusters (17 x 18 tiles: 153 pairs), the k-tail (3 k-tiles); a
  // constant weight over 8 k-tiles of 5 stages with units past the first (9 x 16 tiles: 72
  // pairs); 128x256 with 9 tile columns (odd) and a constant weight, 3 k-tiles all loaded early.
  GCase c = a_pairs(GCase{2100, 2296, 272}, T::k128x128);
  c.padded = false;
  run_gemm(c);
  c = a_pairs(GCase{1100, 2048, 1024}, T::k128x128);
  c.b_constant = true, c.stages = 5, c.scales = Scales::kChannel;
  run_gemm(c);
  c = a_pairs(GCase{2100, 2296, 272}, T::k128x256);
  c.b_constant = true, c.padded = false;
  run_gemm(c);
  // Column-major D: validation swaps, the weight is the kernel's A' (constant: each CTA
  // multicasts its half of A' before the wait), tile chosen by the planner.
  c = a_pairs(GCase{1000, 700, 1040}, T::kAuto);
  c.d_colmajor = true, c.b_constant = true, c.out = DType::kF32;
  run_gemm(c);
  // The 64-row tiles: halves of 32 rows; M = 100 (a short second tile row), 40 (one row), 20
  // (the second half wholly past M, clamped); odd column counts (9 of 128, 5 of 224).
  for (T t : {T::k64x128, T::k64x224}) {
    for (const int64_t m : {100, 40, 20}) {
      GCase h = a_pairs(GCase{m, 1096, 2176}, t);
      h.padded = m == 100;
      h.scales = m == 40 ? Scales::kTensor : Scales::kChannel;
      h.b_constant = m == 100;
      run_gemm(h);
    }
  }
  // Refused: split-K, the mma.sync kernel, a small tile.
  c = a_pairs(GCase{256, 1024, 1024}, T::k128x128);
  c.splits = 2;
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
  c.splits = 0, c.kernel = f8::GemmKernel::kMmaSync;
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
  c.kernel = f8::GemmKernel::kWgmma, c.tile = T::k128x32;
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
}

// Split-K: the CTAs of a tile (one cluster) sum their k-slices' partials in rank order through
// distributed shared memory. K-tile counts that the split does not divide, M below 64 and not a
// multiple of 64, both tiles, both output types, per-tensor and per-channel scales, bias,
// column-major D, e5m2; and the planner's own split at the benchmark's skinny shapes.
TEST(Fp8GemmGpu, WgmmaSplitK) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  for (int splits : {2, 3, 4}) {
    for (T t : {T::k128x128, T::k128x256}) {
      GCase c{100, 300, 656};  // 6 k-tiles (the last one 16 deep): 3+3, 2+2+2, 1+1+2+2
      c.kernel = f8::GemmKernel::kWgmma, c.tile = t, c.splits = splits;
      c.scales = splits == 3 ? Scales::kTensor : Scales::kChannel;
      c.out = t == T::k128x256 ? DType::kF32 : DType::kBF16;
      c.bias = splits == 2 ? DType::kBF16 : splits == 4 ? DType::kF32 : DType::kU8;
      run_gemm(c);
    }
  }
  for (GCase c : {GCase{1, 7168, 2048}, GCase{16, 520, 1040}, GCase{64, 7168, 2048}, GCase{128, 4096, 7168},
                  GCase{200, 1000, 1536}}) {
    c.scales = Scales::kChannel;  // planner's kernel and split
    run_gemm(c);
  }
  GCase c{33, 130, 3 * 128 + 48};  // 4 k-tiles over 3 splits, e5m2 x e4m3, unpadded
  c.kernel = f8::GemmKernel::kWgmma, c.splits = 3, c.fa = DType::kE5M2, c.padded = false;
  run_gemm(c);
  c = GCase{77, 190, 144};  // column-major D: the kernel runs D^T (M' = 190), 2 k-tiles over 2
  c.splits = 2, c.d_colmajor = true, c.scales = Scales::kChannel, c.bias = DType::kF32;
  run_gemm(c);
  // Bad splits: above the k-tiles, above the maximum, on the mma.sync kernel.
  c = GCase{64, 64, 256};
  for (int bad : {3, 5, -1}) {
    c.splits = bad;
    EXPECT_THROW(run_gemm(c), kjit::InvalidArgument) << "splits " << bad;
  }
  c.splits = 2, c.kernel = f8::GemmKernel::kMmaSync;
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
}

// The small tiles (BN 16/32/64, 128 or 64 rows): M ≤ 64 swapped onto the tile's N side (D stored
// transposed), N ≤ 64 unswapped; every BN and BM, ragged M, N and K, split counts, stage depths,
// scales, bias, f32 output, mixed formats, unpadded and column-major D.
TEST(Fp8GemmGpu, WgmmaSmallTiles) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  // The planner's choice over M 1…64 (BN 16, 32, 64; 64-row tiles, the last one ragged) and
  // ragged N, K.
  int i = 0;
  for (int64_t m : {1, 2, 7, 16, 17, 31, 33, 64}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{1000, 656}, {4100, 2048}}) {
      GCase c{m, n, k};
      c.scales = i % 2 ? Scales::kChannel : Scales::kTensor;
      c.bias = i % 3 == 0 ? DType::kBF16 : i % 3 == 1 ? DType::kF32 : DType::kU8;
      c.out = i % 4 == 3 ? DType::kF32 : DType::kBF16;
      c.fa = i % 5 == 4 ? DType::kE5M2 : DType::kE4M3;
      c.padded = i % 2 == 0;
      run_gemm(c);
      ++i;
    }
  }
  // Forced tiles, stages and splits (K = 656: 6 k-tiles, the last 16 deep).
  struct Forced {
    int64_t m;
    T tile;
    int stages, splits;
  };
  for (const Forced& f : {Forced{5, T::k128x16, 2, 1}, Forced{40, T::k128x16, 12, 3}, Forced{20, T::k128x32, 4, 2},
                          Forced{64, T::k128x64, 8, 4}, Forced{3, T::k128x64, 6, 0}, Forced{5, T::k64x16, 2, 1},
                          Forced{40, T::k64x16, 12, 3}, Forced{20, T::k64x32, 5, 2}, Forced{64, T::k64x64, 8, 4},
                          Forced{3, T::k64x64, 6, 0}, Forced{33, T::k64x64, 12, 1}}) {
    GCase c{f.m, 300, 656};
    c.kernel = f8::GemmKernel::kWgmma, c.tile = f.tile, c.stages = f.stages, c.splits = f.splits;
    c.scales = Scales::kChannel, c.bias = DType::kF32;
    run_gemm(c);
    // The same with the weight constant: its first stages (all 6 k-tiles, or a split's 2–3, or
    // 2 of 6 with 2 stages) load before the wait.
    c.b_constant = true;
    run_gemm(c);
  }
  // Column-major D with small M: validation swaps it (N' = M), the small tile takes N' as is.
  GCase c{9, 700, 512};
  c.d_colmajor = true, c.scales = Scales::kChannel, c.bias = DType::kBF16;
  run_gemm(c);
  // Column-major D with small N: validation swaps it (M' = N small), the planner swaps back and
  // stores the transposed D' (the column-major D itself).
  c = GCase{700, 9, 384};
  c.d_colmajor = true, c.scales = Scales::kChannel, c.bias = DType::kF32, c.out = DType::kF32;
  run_gemm(c);
  // N ≤ 64 with a large M: unswapped small tile, persistent over 64-row tiles (1100 rows) and
  // over 128-row ones (20000 rows fill the SMs).
  c = GCase{1100, 48, 384};
  c.scales = Scales::kChannel, c.out = DType::kF32;
  run_gemm(c);
  c = GCase{20000, 40, 256};
  c.scales = Scales::kTensor, c.bias = DType::kBF16;
  run_gemm(c);
  // Small M over a weight of more rows than 128-row tiles leave SMs idle for: 128-row tiles.
  c = GCase{3, 9000, 256};
  c.scales = Scales::kChannel;
  run_gemm(c);
  // A forced small tile on a large problem: persistent, several column tiles.
  c = GCase{300, 200, 256};
  c.kernel = f8::GemmKernel::kWgmma, c.tile = T::k128x32;
  run_gemm(c);
}

// The wave-fitting tiles (BN 80 … 224, BM 128, persistent, direct stores): every tile forced
// over ragged M, N and K (tile columns and the k-tail cut short, more tiles than CTAs so a CTA
// takes several), both outputs, every scale and bias kind, mixed formats, unpadded and padded
// and column-major D, a constant weight; and the planner's own choice at the decoder layer's
// N (10240: 128x80 at M = 128, 128x160 at M = 256; 28672: 128x224) with a shorter K.
TEST(Fp8GemmGpu, WgmmaWaveTiles) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  using T = f8::GemmTile;
  int i = 0;
  for (T t : {T::k128x80, T::k128x96, T::k128x112, T::k128x160, T::k128x192, T::k128x224}) {
    for (const GCase& shape : {GCase{200, 1000, 656}, GCase{1, 2000, 272}, GCase{65, 30000, 144}}) {
      GCase c = shape;
      c.kernel = f8::GemmKernel::kWgmma, c.tile = t;
      c.scales = i % 2 ? Scales::kChannel : Scales::kTensor;
      c.bias = i % 3 == 0 ? DType::kBF16 : i % 3 == 1 ? DType::kF32 : DType::kU8;
      c.out = i % 4 == 3 ? DType::kF32 : DType::kBF16;
      c.fb = i % 5 == 4 ? DType::kE5M2 : DType::kE4M3;
      c.padded = i % 2 == 0;
      c.b_constant = i % 3 == 2;
      c.stages = i % 7 == 3 ? 2 : 0;
      run_gemm(c);
      ++i;
    }
  }
  GCase c{130, 520, 400};  // column-major D: validation swaps (M' = 520), the tile runs D^T
  c.kernel = f8::GemmKernel::kWgmma, c.tile = T::k128x96, c.d_colmajor = true, c.scales = Scales::kChannel;
  c.bias = DType::kF32;
  run_gemm(c);
  for (GCase p : {GCase{128, 10240, 512}, GCase{256, 10240, 512}, GCase{100, 28672, 256}}) {
    p.scales = Scales::kTensor, p.b_constant = true;  // the planner's tile
    run_gemm(p);
  }
  c = GCase{128, 1024, 512};
  c.tile = T::k128x80, c.splits = 2;  // persistent only
  EXPECT_THROW(run_gemm(c), kjit::InvalidArgument);
}

// --- a decode step: a captured chain with programmatic dependent launch ----------------------

/// Random finite e4m3 bytes, 8 from each draw (0x7f / 0xff, the NaNs, become ±448): fast enough
/// for a 235 MB weight.
std::vector<uint8_t> random_e4m3(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng();
    for (size_t j = i; j < std::min(n, i + 8); ++j, r >>= 8) {
      const uint8_t b = static_cast<uint8_t>(r);
      v[j] = (b & 0x7f) == 0x7f ? static_cast<uint8_t>(b ^ 1) : b;
    }
  }
  return v;
}

/// [rows, cols] bf16 bits as floats (exact).
std::vector<float> bf16_floats(const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = kt::bf16_to_float(bits[i]);
  return f;
}

/// One layer-like chain of a decode step, every kernel back to back on one stream:
///   GEMM1   D1 [M, N1] bf16 = A0 · W1ᵀ            (A0 [M, K0], per-tensor scales)
///   quantize A1 [M, N1] e4m3, sa1 [M] = per-row quantization of D1
///   GEMM2   D2 [M, N2] bf16 = A1 · W2ᵀ · sa1 · sb2   (reads what quantize wrote: RAW)
///   GEMM3   D3 [M, N1/4] f32 = A0 · W3ᵀ, D3 in A1's bytes (overwrites what GEMM2 reads: WAR)
/// GEMM2 and GEMM3 declare their weights constant, so their first weight stages load before they
/// wait for the previous kernel. On sm_90 each GEMM may start while the kernel before it runs; a
/// read or write placed before the kernel's wait shows as poison (NaN) or as a wrong D2. Checked
/// eagerly on the stream, then over replays of the captured graph with fresh inputs and
/// poisoned outputs each time, against float64 references.
struct ChainCase {
  int64_t m, k0, n1, n2;
};

void run_chain(const ChainCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "M " << c.m << " K0 " << c.k0 << " N1 " << c.n1 << " N2 " << c.n2 << " seed "
                                  << seed);
  std::mt19937_64 rng(seed);
  const int64_t m = c.m, k0 = c.k0, n1 = c.n1, n2 = c.n2, n3 = c.n1 / 4;
  std::uniform_real_distribution<float> sd(0.01f, 0.3f);
  auto scales = [&](int64_t n) {
    std::vector<float> s(static_cast<size_t>(n));
    for (auto& v : s) v = sd(rng);
    return s;
  };
  // The weights and their scales: uploaded once (a model's).
  const std::vector<uint8_t> w1 = random_e4m3(static_cast<size_t>(n1 * k0), rng);
  const std::vector<uint8_t> w2 = random_e4m3(static_cast<size_t>(n2 * n1), rng);
  const std::vector<uint8_t> w3 = random_e4m3(static_cast<size_t>(n3 * k0), rng);
  const std::vector<float> sb1 = scales(1), sb2 = scales(n2), sb3 = scales(n3);
  kt::DeviceBuffer dw1 = kt::to_device(w1), dw2 = kt::to_device(w2), dw3 = kt::to_device(w3);
  kt::DeviceBuffer dsb1 = kt::to_device(sb1), dsb2 = kt::to_device(sb2), dsb3 = kt::to_device(sb3);
  kt::DeviceBuffer da0(static_cast<size_t>(m * k0)), dsa0(4);
  kt::DeviceBuffer dd1(static_cast<size_t>(m * n1 * 2)), da1(static_cast<size_t>(m * n1));
  kt::DeviceBuffer dsa1(static_cast<size_t>(m * 4)), dd2(static_cast<size_t>(m * n2 * 2));

  f8::GemmArgs g1, g2, g3;
  g1.a = TensorRef(da0.get(), DType::kE4M3, {m, k0}, {}, 0);
  g1.b = TensorRef(dw1.get(), DType::kE4M3, {n1, k0}, {}, 0);
  g1.d = TensorRef(dd1.get(), DType::kBF16, {m, n1}, {}, 0);
  g1.scale_a = TensorRef(dsa0.get(), DType::kF32, {1}, {}, 0);
  g1.scale_b = TensorRef(dsb1.get(), DType::kF32, {1}, {}, 0);
  f8::QuantizeArgs q;
  q.x = g1.d;
  q.y = TensorRef(da1.get(), DType::kE4M3, {m, n1}, {}, 0);
  q.granularity = f8::Granularity::kRow;
  q.scale_inv = TensorRef(dsa1.get(), DType::kF32, {m}, {}, 0);
  g2.a = q.y;
  g2.b = TensorRef(dw2.get(), DType::kE4M3, {n2, n1}, {}, 0);
  g2.d = TensorRef(dd2.get(), DType::kBF16, {m, n2}, {}, 0);
  g2.scale_a = q.scale_inv;
  g2.scale_b = TensorRef(dsb2.get(), DType::kF32, {n2}, {}, 0);
  g2.b_constant = true;
  g3.a = g1.a;
  g3.b = TensorRef(dw3.get(), DType::kE4M3, {n3, k0}, {}, 0);
  g3.d = TensorRef(da1.get(), DType::kF32, {m, n3}, {}, 0);  // A1's bytes
  g3.scale_a = g1.scale_a;
  g3.scale_b = TensorRef(dsb3.get(), DType::kF32, {n3}, {}, 0);
  g3.b_constant = true;
  // The wgmma launches ask for PDL (the chain would otherwise test plain stream order).
  for (const f8::GemmArgs* g : {&g1, &g2, &g3}) {
    const auto l = f8::detail::GemmOp::launch_value(*g, kjit::Runtime::global());
    ASSERT_NE(l.step<1>().kernel, nullptr);
    EXPECT_TRUE(l.step<1>().config.overlap_previous);
  }

  CUstream stream = nullptr;
  KJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  auto chain = [&] {
    f8::gemm(g1, stream);
    f8::quantize(q, stream);
    f8::gemm(g2, stream);
    f8::gemm(g3, stream);
  };
  // Fresh activations and poisoned outputs, then the chain `run` runs, then every output checked.
  auto check = [&](const char* what, const std::function<void()>& run) {
    SCOPED_TRACE(what);
    const std::vector<uint8_t> a0 = random_e4m3(static_cast<size_t>(m * k0), rng);
    const std::vector<float> sa0 = scales(1);
    da0.upload(a0);
    dsa0.upload(sa0);
    dd1.fill(0xFF);
    da1.fill(0xFF);
    dsa1.fill(0xFF);
    dd2.fill(0xFF);
    run();
    KJIT_CU(cuStreamSynchronize(stream));
    // D1 against float64; then the quantization of the D1 the GPU wrote (quantize is exact).
    kt::Fp8GemmProblem p1{m, n1, k0};
    p1.a = a0, p1.b = w1, p1.scale_a = sa0, p1.scale_b = sb1;
    const std::vector<float> d1 = bf16_floats(dd1.download<uint16_t>(static_cast<size_t>(m * n1)));
    const kt::Comparison c1 = kt::compare(d1, kt::fp8_gemm_reference(p1));
    EXPECT_TRUE(c1.ok(1e-2)) << "D1: " << c1.describe();
    const kt::Fp8QuantizeReference qr =
        kt::fp8_quantize_reference(d1, m, n1, Fp8Format::kE4M3, kt::Fp8Granularity::kRow, false);
    kt::Fp8GemmProblem p2{m, n2, n1};
    p2.a = qr.y, p2.b = w2, p2.scale_a = qr.scale_inv, p2.scale_b = sb2;
    const kt::Comparison c2 =
        kt::compare(bf16_floats(dd2.download<uint16_t>(static_cast<size_t>(m * n2))), kt::fp8_gemm_reference(p2));
    EXPECT_TRUE(c2.ok(1e-2)) << "D2 (A1 read before quantize wrote it, or after GEMM3 overwrote it?): "
                             << c2.describe();
    kt::Fp8GemmProblem p3{m, n3, k0};
    p3.a = a0, p3.b = w3, p3.scale_a = sa0, p3.scale_b = sb3;
    const kt::Comparison c3 = kt::compare(da1.download<float>(static_cast<size_t>(m * n3)), kt::fp8_gemm_reference(p3));
    EXPECT_TRUE(c3.ok(2e-3)) << "D3: " << c3.describe();
  };
  check("eager, on the stream", chain);  // also loads every kernel outside the capture

  const kjit::detail::Driver& d = kjit::detail::driver();
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  chain();
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 3; ++replay) {
    check("graph replay", [&] { ASSERT_EQ(d.cuGraphLaunch(exec, stream), CUDA_SUCCESS); });
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
  KJIT_CU(cuStreamDestroy(stream));
}

TEST(Fp8GemmGpu, DecodeChainWithProgrammaticLaunch) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel (the one launched with PDL) is sm_90a only";
  // M 1 and 16 over N·K 7168·2048 (GEMM1: 64x16 tiles) and 4096·7168 (GEMM2: 64x16 or 64x32
  // over 2 splits); M 100 with GEMM1 split 2 ways over 128x128 tiles; M 256, persistent; M 1 over
  // the 70B up-projection 28672·8192 (128x16 tiles, more tiles than SMs).
  for (const ChainCase& c : {ChainCase{1, 2048, 7168, 4096}, ChainCase{16, 2048, 7168, 4096},
                             ChainCase{100, 4096, 2048, 1024}, ChainCase{256, 1024, 2048, 1024},
                             ChainCase{1, 8192, 28672, 1024}}) {
    run_chain(c);
  }
}

// The op's second planning phase: the first plan of M = 128, N = 4096, K = 8192 assumes all 32
// clusters of 4 are resident at once (132 / 4 = 33 slots); the launch value comes from the plan
// redone with the device's real capacity for clusters of 4, which decides between 4 splits and
// fewer (3 on an H200, whose GPCs hold 29). Either way it launches what its plan says.
TEST(Fp8GemmGpu, ClusterCapacityRefinesSplitK) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_has_wgmma()) GTEST_SKIP() << "the wgmma kernel is sm_90a only";
  namespace fd = kjit::fp8::detail;
  const int64_t m = 128, n = 4096, k = 8192;  // 64 k-tiles: 4 slices of 16
  kt::DeviceBuffer da(m * k), db(n * k), dd(m * n * 2), ds(64);
  f8::GemmArgs g;
  g.a = TensorRef(da.get(), DType::kE4M3, {m, k}, {}, 0);
  g.b = TensorRef(db.get(), DType::kE4M3, {n, k}, {}, 0);
  g.d = TensorRef(dd.get(), DType::kBF16, {m, n}, {}, 0);
  g.scale_a = TensorRef(ds.get(), DType::kF32, {1}, {}, 0);
  g.scale_b = TensorRef(ds.get(), DType::kF32, {1}, {}, 0);
  const kjit::DeviceInfo& info = kjit::device_info(0);
  const fd::GemmDims dims = fd::validate_gemm(g);
  const fd::GemmPlan first = fd::plan_gemm(dims, info);
  if (info.sm_count != 132) GTEST_SKIP() << "the split counts below assume 132 SMs";
  ASSERT_TRUE(first.wgmma);
  EXPECT_EQ(first.splits, 4);
  EXPECT_EQ(fd::gemm_assumed_cluster_size(first, dims.force), 4);
  const fd::GemmOp::Launch l = fd::GemmOp::launch_value(g, kjit::Runtime::global());
  const auto& step = l.step<1>();
  ASSERT_NE(step.kernel, nullptr);
  EXPECT_EQ(l.step<0>().kernel, nullptr);
  const int splits = step.params.splits;
  EXPECT_TRUE(splits == 3 || splits == 4) << splits;
  EXPECT_EQ(step.config.cluster[0], static_cast<uint32_t>(splits));
  EXPECT_EQ(step.config.grid[0], static_cast<uint32_t>(32 * splits));
  std::printf("M128 N4096 K8192 on %s: %d splits after the capacity query\n", info.name.c_str(), splits);
  l.launch(nullptr);
  kt::synchronize();
}

TEST(Fp8GemmGpu, RejectsBlockwiseWithoutK128) {
  KJIT_REQUIRE_FP8_GPU();
  kt::DeviceBuffer buf(1 << 20);
  f8::GemmArgs g;
  g.a = TensorRef(buf.get(), DType::kE4M3, {64, 144}, {}, 0);
  g.b = TensorRef(buf.get(), DType::kE4M3, {64, 144}, {}, 0);
  g.d = TensorRef(buf.get(), DType::kBF16, {64, 64}, {}, 0);
  g.scale_a = TensorRef(buf.get(), DType::kF32, {64, 1}, {}, 0);
  g.scale_b = TensorRef(buf.get(), DType::kF32, {1, 1}, {}, 0);
  g.scale_mode = f8::ScaleMode::kBlockwise;
  EXPECT_THROW(f8::gemm(g, nullptr), kjit::InvalidArgument);
}

// --- Linear ---------------------------------------------------------------------------------

struct LCase {
  f8::Recipe recipe;
  f8::Granularity wg;
  DType out = DType::kBF16;
  int history = 3;
  int margin = 0;
  bool bias = false;
};

void run_linear(const LCase& lc) {
  const uint64_t seed = fresh_seed();
  static const char* rn[] = {"dynamic-tensor", "dynamic-row", "dynamic-block", "delayed"};
  static const char* gn[] = {"tensor", "row", "block1x128", "block128x128"};
  SCOPED_TRACE(std::string(rn[static_cast<int>(lc.recipe)]) + " weights=" + gn[static_cast<int>(lc.wg)] +
               " margin=" + std::to_string(lc.margin) + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t n = 320, k = 512, max_tokens = 48;
  f8::LinearConfig cfg;
  cfg.in_features = k, cfg.out_features = n, cfg.max_tokens = max_tokens;
  cfg.recipe = lc.recipe, cfg.weight_granularity = lc.wg, cfg.history_len = lc.history, cfg.margin = lc.margin;
  const std::vector<float> w = random_inputs(static_cast<size_t>(n * k), DType::kBF16, rng, 3.f);
  kt::DeviceBuffer dw = upload(w, n, k, k, DType::kBF16);
  f8::Linear lin(cfg, TensorRef(dw.get(), DType::kBF16, {n, k}, {}, 0), nullptr);

  // The weight is quantized once, exactly as the reference.
  const kt::Fp8QuantizeReference wref =
      kt::fp8_quantize_reference(w, n, k, Fp8Format::kE4M3, static_cast<kt::Fp8Granularity>(lc.wg), false, true);
  {
    TensorRef wq = lin.weight_fp8();
    std::vector<uint8_t> got(static_cast<size_t>(n * k));
    KJIT_CU(cuMemcpyDtoH(got.data(), reinterpret_cast<CUdeviceptr>(wq.data), got.size()));
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += !same_fp8(got[i], wref.y[i], Fp8Format::kE4M3);
    EXPECT_EQ(bad, 0u) << "weight bytes differ from the reference quantization";
    TensorRef ws = lin.weight_scale_inv();
    std::vector<float> s(static_cast<size_t>(ws.numel()));
    KJIT_CU(cuMemcpyDtoH(s.data(), reinterpret_cast<CUdeviceptr>(ws.data), s.size() * 4));
    EXPECT_EQ(s, wref.scale_inv);
  }

  std::vector<float> bias;
  if (lc.bias) bias = random_inputs(static_cast<size_t>(n), DType::kF32, rng, 2.f);
  kt::DeviceBuffer dbias = kt::to_device(bias.empty() ? std::vector<float>(1) : bias);
  std::vector<float> history(static_cast<size_t>(lc.history), 0.f);
  float multiplier = 1.f;
  // Steps with varying token counts and input magnitudes (step 3 jumps ×50, so the delayed
  // recipe saturates it, exactly as the reference does).
  const int64_t tokens[] = {48, 17, 48, 1, 33};
  const float magnitude[] = {1.f, 4.f, 0.5f, 50.f, 2.f};
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int64_t m = tokens[step];
    std::vector<float> x = random_inputs(static_cast<size_t>(m * k), DType::kBF16, rng, 2.f);
    for (auto& v : x) v = kt::round_bf16(v * magnitude[step]);
    kt::DeviceBuffer dx = upload(x, m, k, k, DType::kBF16);
    const int es = kjit::dtype_size(lc.out);
    kt::DeviceBuffer dy(static_cast<size_t>(m * n * es));
    dy.fill(0xFF);
    lin.forward(TensorRef(dx.get(), DType::kBF16, {m, k}, {}, 0), TensorRef(dy.get(), lc.out, {m, n}, {}, 0), nullptr,
                lc.bias ? TensorRef(dbias.get(), DType::kF32, {n}, {}, 0) : TensorRef());
    kt::synchronize();

    kt::Fp8QuantizeReference xr;
    switch (lc.recipe) {
      case f8::Recipe::kDelayed:
        xr = kt::fp8_quantize_reference(x, m, k, Fp8Format::kE4M3, kt::Fp8Granularity::kTensor, false, false, multiplier);
        break;
      case f8::Recipe::kDynamicTensor:
        xr = kt::fp8_quantize_reference(x, m, k, Fp8Format::kE4M3, kt::Fp8Granularity::kTensor, false, true);
        break;
      case f8::Recipe::kDynamicRow:
        xr = kt::fp8_quantize_reference(x, m, k, Fp8Format::kE4M3, kt::Fp8Granularity::kRow, false);
        break;
      case f8::Recipe::kDynamicBlock:
        xr = kt::fp8_quantize_reference(x, m, k, Fp8Format::kE4M3, kt::Fp8Granularity::kBlock1x128, false);
        break;
    }
    kt::Fp8GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    p.a = xr.y;
    p.b = wref.y;
    p.block = lc.recipe == f8::Recipe::kDynamicBlock;
    p.scale_a = xr.scale_inv;
    p.scale_b = wref.scale_inv;
    for (float v : bias) p.bias.push_back(v);
    const std::vector<double> ref = kt::fp8_gemm_reference(p);
    std::vector<float> out(static_cast<size_t>(m * n));
    if (es == 4) {
      out = dy.download<float>(out.size());
    } else {
      const std::vector<uint16_t> h = dy.download<uint16_t>(out.size());
      for (size_t i = 0; i < h.size(); ++i) out[i] = kt::bf16_to_float(h[i]);
    }
    const kt::Comparison cmp = kt::compare(out, ref);
    EXPECT_TRUE(cmp.ok(es == 4 ? 2e-3 : 1e-2)) << cmp.describe();

    // The activation bytes the GEMM consumed match the reference quantization bit for bit.
    std::vector<uint8_t> xq(static_cast<size_t>(m * k));
    KJIT_CU(cuMemcpyDtoH(xq.data(), reinterpret_cast<CUdeviceptr>(lin.input_fp8().data), xq.size()));
    size_t bad = 0;
    for (size_t i = 0; i < xq.size(); ++i) bad += !same_fp8(xq[i], xr.y[i], Fp8Format::kE4M3);
    EXPECT_EQ(bad, 0u) << "activation bytes differ from the reference quantization";

    if (lc.recipe == f8::Recipe::kDelayed) {
      history[static_cast<size_t>(step % lc.history)] = xr.amax[0];
      multiplier = kt::fp8_delayed_multiplier(history, multiplier, Fp8Format::kE4M3, lc.margin);
      std::vector<float> h(static_cast<size_t>(lc.history));
      KJIT_CU(cuMemcpyDtoH(h.data(), reinterpret_cast<CUdeviceptr>(lin.amax_history().data), h.size() * 4));
      EXPECT_EQ(h, history);
      float m_dev = 0;
      int32_t step_dev = 0;
      KJIT_CU(cuMemcpyDtoH(&m_dev, reinterpret_cast<CUdeviceptr>(lin.multiplier().data), 4));
      KJIT_CU(cuMemcpyDtoH(&step_dev, reinterpret_cast<CUdeviceptr>(lin.step().data), 4));
      EXPECT_EQ(m_dev, multiplier);
      EXPECT_EQ(step_dev, step + 1);
    }
  }
}

TEST(Fp8LinearGpu, DelayedScalingOverSteps) {
  KJIT_REQUIRE_FP8_GPU();
  run_linear({f8::Recipe::kDelayed, f8::Granularity::kRow});
  run_linear({f8::Recipe::kDelayed, f8::Granularity::kTensor, DType::kF32, 2, 1, true});
  run_linear({f8::Recipe::kDelayed, f8::Granularity::kRow, DType::kBF16, 16, 0, true});
}

TEST(Fp8LinearGpu, DynamicScaling) {
  KJIT_REQUIRE_FP8_GPU();
  run_linear({f8::Recipe::kDynamicTensor, f8::Granularity::kTensor});
  run_linear({f8::Recipe::kDynamicTensor, f8::Granularity::kRow, DType::kF32, 3, 0, true});
  run_linear({f8::Recipe::kDynamicRow, f8::Granularity::kRow});
  run_linear({f8::Recipe::kDynamicRow, f8::Granularity::kTensor, DType::kBF16, 3, 0, true});
  run_linear({f8::Recipe::kDynamicBlock, f8::Granularity::kBlock128x128});
  run_linear({f8::Recipe::kDynamicBlock, f8::Granularity::kBlock128x128, DType::kF32, 3, 0, true});
}

TEST(Fp8LinearGpu, RejectsBadConfigAndInputs) {
  KJIT_REQUIRE_FP8_GPU();
  kt::DeviceBuffer dw(256 * 512 * 2);
  const TensorRef w(dw.get(), DType::kBF16, {256, 512}, {}, 0);
  f8::LinearConfig cfg;
  cfg.in_features = 512, cfg.out_features = 256, cfg.max_tokens = 8;
  cfg.recipe = f8::Recipe::kDynamicBlock;  // needs block weights
  EXPECT_THROW(f8::Linear(cfg, w, nullptr), kjit::InvalidArgument);
  cfg.recipe = f8::Recipe::kDelayed;
  cfg.history_len = 0;
  EXPECT_THROW(f8::Linear(cfg, w, nullptr), kjit::InvalidArgument);
  cfg.history_len = 4;
  f8::Linear lin(cfg, w, nullptr);
  kt::DeviceBuffer dx(16 * 512 * 2), dy(16 * 256 * 2);
  EXPECT_THROW(lin.forward(TensorRef(dx.get(), DType::kBF16, {9, 512}, {}, 0),
                           TensorRef(dy.get(), DType::kBF16, {9, 256}, {}, 0), nullptr),
               kjit::InvalidArgument);  // more than max_tokens
  EXPECT_THROW(lin.forward(TensorRef(dx.get(), DType::kBF16, {4, 256}, {}, 0),
                           TensorRef(dy.get(), DType::kBF16, {4, 256}, {}, 0), nullptr),
               kjit::InvalidArgument);  // wrong in_features
  f8::Linear moved(std::move(lin));
  EXPECT_NO_THROW(moved.forward(TensorRef(dx.get(), DType::kBF16, {4, 512}, {}, 0),
                                TensorRef(dy.get(), DType::kBF16, {4, 256}, {}, 0), nullptr));
  kt::synchronize();
}

TEST(Fp8Gpu, UnsupportedBelowSm89) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  if ((kjit::device_info(0).target().sm() >= kjit::fp8::kMinSm)) GTEST_SKIP() << "device supports FP8 (the host-only planner test covers sm_80)";
  kt::DeviceBuffer buf(1 << 16);
  f8::QuantizeArgs q;
  q.x = TensorRef(buf.get(), DType::kBF16, {16, 16}, {}, 0);
  q.y = TensorRef(buf.get(), DType::kE4M3, {16, 16}, {}, 0);
  try {
    f8::quantize(q, nullptr);
    ADD_FAILURE() << "quantize ran below sm_89";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("sm_" + std::to_string(device_sm())), std::string::npos) << e.what();
  }
}

}  // namespace
