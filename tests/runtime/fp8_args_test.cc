// Host-only checks of the FP8 family: the host E4M3/E5M2 codec (known values, every code, an
// independent bit-level encoder on millions of floats), every validation rule of quantize and
// gemm (fired before any driver call, naming the tensor), the Unsupported error below sm_89, the
// planners' choices, the family specs, and NVRTC compiles of the defaults and of every layout
// and format specialization kind without spills. No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/runtime.hpp>

#include "fp8/gemm_params.h"
#include "fp8/quantize_params.h"
#include "runtime/families/fp8.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using kjit::DType;
using kjit::TensorRef;
namespace f8 = kjit::fp8;
namespace fd = kjit::fp8::detail;
namespace kt = kjit::testing;
using kt::Fp8Format;

/// A device as the planners see it, described by hand (no GPU needed).
kjit::DeviceInfo device(int cc_major, int cc_minor, int sm_count, int smem_optin, int smem_per_sm = 0) {
  kjit::DeviceInfo d;
  d.cc_major = cc_major;
  d.cc_minor = cc_minor;
  d.sm_count = sm_count;
  d.max_smem_per_block_optin = smem_optin;
  d.max_smem_per_sm = smem_per_sm != 0 ? smem_per_sm : smem_optin + 1024;
  d.max_threads_per_block = 1024;
  return d;
}
/// H200: sm_90a, 132 SMs, 227 KiB of shared memory per block (opt-in), 228 KiB per SM.
kjit::DeviceInfo h200() { return device(9, 0, 132, 232448, 233472); }
/// L40S: sm_89, 142 SMs, 99 KiB per block, 100 KiB per SM.
kjit::DeviceInfo l40s() { return device(8, 9, 142, 101376, 102400); }

/// plan_gemm of `dims` under the overrides GemmArgs would carry, checked first as validate_gemm
/// checks them (check_gemm_force): what the op does with them.
fd::GemmPlan gemm_plan(fd::GemmDims dims, f8::GemmTile tile, int stages, const kjit::DeviceInfo& info,
                       f8::GemmKernel kernel = f8::GemmKernel::kAuto, int splits = 0, int multicast = 0,
                       const fd::GemmClusterCapacity& capacity = {}) {
  dims.force = {kernel, tile, stages, splits, multicast};
  fd::check_gemm_force(dims.force, dims);
  return fd::plan_gemm(dims, info, capacity);
}

/// The fp8.quantize parameters of a specialization, through the family (what `kjit compile` takes).
kjit::ParamMap quantize_params(int in, int fmt, int granularity, bool pow2) {
  const kjit::Family& f = f8::quantize_family();
  return f.params_of(f.point({in, fmt, granularity, pow2 ? 1 : 0}));
}

// --- host codec -------------------------------------------------------------------------------

/// An encoder written independently of reference_fp8.cc: scale to the quantum of |x|'s binade,
/// round half to even with nearbyint, then assemble the bits.
uint8_t naive_encode(float x, Fp8Format f) {
  const bool e4 = f == Fp8Format::kE4M3;
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
  const double a = std::fabs(static_cast<double>(x));
  const uint8_t max_code = e4 ? 0x7e : 0x7b;
  if (e4 ? a > 464.0 : a >= 61440.0) return sign | max_code;  // satfinite, ±inf included
  const int emin = 1 - bias;
  const int e = a > 0 ? std::max(std::ilogb(a), emin) : emin;
  const double ulp = std::ldexp(1.0, e - mbits);
  const double v = std::nearbyint(a / ulp) * ulp;  // ties to even (default rounding mode)
  if (v == 0) return sign;
  if (v > (e4 ? 448.0 : 57344.0)) return sign | max_code;
  const int ev = std::ilogb(v);
  if (ev < emin) return sign | static_cast<uint8_t>(v / std::ldexp(1.0, emin - mbits));
  const int mant = static_cast<int>((v / std::ldexp(1.0, ev) - 1.0) * (1 << mbits));
  return sign | static_cast<uint8_t>(((ev + bias) << mbits) | mant);
}

TEST(Fp8Codec, KnownValues) {
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  struct K {
    float x;
    Fp8Format f;
    uint8_t code;
  };
  const K known[] = {
      {0.f, e4, 0x00},          {-0.f, e4, 0x80},          {1.f, e4, 0x38},        {-1.f, e4, 0xb8},
      {448.f, e4, 0x7e},        {-448.f, e4, 0xfe},        {447.f, e4, 0x7e},      {440.f, e4, 0x7e},
      {416.f, e4, 0x7d},        {431.f, e4, 0x7d},         {432.f, e4, 0x7e},  // 416|448 tie → even mantissa
      {464.f, e4, 0x7e},  // 448|(480) tie → even, not NaN
      {465.f, e4, 0x7e},  // saturates
      {1e4f, e4, 0x7e},         {-1e4f, e4, 0xfe},         {INFINITY, e4, 0x7e},   {-INFINITY, e4, 0xfe},
      {0x1p-6f, e4, 0x08},      {0x1p-9f, e4, 0x01},       {0x1p-10f, e4, 0x00},   {0x1.8p-10f, e4, 0x01},
      {0x1.4p-7f, e4, 0x05},    {0x7p-9f, e4, 0x07},       {0x1.ep-7f, e4, 0x08},  {1e-30f, e4, 0x00},
      {-1e-30f, e4, 0x80},      {0.f, e5, 0x00},           {1.f, e5, 0x3c},        {57344.f, e5, 0x7b},
      {-57344.f, e5, 0xfb},     {61439.f, e5, 0x7b},       {61440.f, e5, 0x7b},    {1e6f, e5, 0x7b},
      {INFINITY, e5, 0x7b},     {-INFINITY, e5, 0xfb},     {0x1p-14f, e5, 0x04},   {0x1p-16f, e5, 0x01},
      {0x1p-17f, e5, 0x00},     {0x1.8p-17f, e5, 0x01},    {3.f, e5, 0x42},        {2.5f, e5, 0x41},
      {3.5f, e5, 0x43},         {3.75f, e5, 0x44},  // 3.5|4 tie → even mantissa (4 = 0x44)
  };
  for (const K& k : known) {
    EXPECT_EQ(kt::fp8_encode(k.x, k.f), k.code) << "x=" << k.x << " " << kt::fp8_name(k.f);
  }
  EXPECT_EQ(kt::fp8_encode(NAN, e4), 0x7f);
  EXPECT_EQ(kt::fp8_encode(-NAN, e4), 0x7f);
  EXPECT_EQ(kt::fp8_encode(NAN, e5), 0x7f);
  EXPECT_TRUE(kt::fp8_is_nan(0x7f, e4) && kt::fp8_is_nan(0xff, e4) && !kt::fp8_is_nan(0x7e, e4));
  EXPECT_TRUE(kt::fp8_is_nan(0x7d, e5) && kt::fp8_is_nan(0xfe, e5) && !kt::fp8_is_nan(0x7c, e5));
  EXPECT_EQ(kt::fp8_decode(0x7e, e4), 448.f);
  EXPECT_EQ(kt::fp8_decode(0x01, e4), 0x1p-9f);
  EXPECT_EQ(kt::fp8_decode(0x08, e4), 0x1p-6f);
  EXPECT_TRUE(std::signbit(kt::fp8_decode(0x80, e4)) && kt::fp8_decode(0x80, e4) == 0.f);
  EXPECT_EQ(kt::fp8_decode(0x7b, e5), 57344.f);
  EXPECT_EQ(kt::fp8_decode(0x01, e5), 0x1p-16f);
  EXPECT_EQ(kt::fp8_decode(0x7c, e5), INFINITY);
  EXPECT_EQ(kt::fp8_decode(0xfc, e5), -INFINITY);
  EXPECT_TRUE(std::isnan(kt::fp8_decode(0x7f, e4)) && std::isnan(kt::fp8_decode(0x7e | 0x80 | 1, e5)));
  EXPECT_EQ(kt::fp8_max(e4), 448.f);
  EXPECT_EQ(kt::fp8_max(e5), 57344.f);
}

TEST(Fp8Codec, EveryCodeRoundTripsAndOrders) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    float prev = -1.f;
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float v = kt::fp8_decode(code, f);
      if (kt::fp8_is_nan(code, f)) {
        EXPECT_TRUE(std::isnan(v));
        continue;
      }
      if (std::isinf(v)) continue;  // E5M2 ±inf encode to ±max under satfinite
      EXPECT_EQ(kt::fp8_encode(v, f), code) << kt::fp8_name(f) << " code " << c;
      EXPECT_EQ(naive_encode(v, f), code) << kt::fp8_name(f) << " code " << c;
      if (c < 0x80 && c > 0) {
        EXPECT_GT(v, prev) << "codes must ascend with value";
        prev = v;
      }
    }
  }
}

TEST(Fp8Codec, MatchesIndependentEncoderEverywhere) {
  std::random_device rd;
  const uint32_t seed = rd();
  std::mt19937 rng(seed);
  size_t checked = 0;
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    // Every grid value, its float neighbours and the exact midpoints to the next value.
    for (int c = 0; c < 0x7f; ++c) {
      const float v = kt::fp8_decode(static_cast<uint8_t>(c), f);
      if (!std::isfinite(v)) continue;
      const float next = kt::fp8_decode(static_cast<uint8_t>(c + 1), f);
      std::vector<float> probes = {v, std::nextafter(v, 0.f), std::nextafter(v, INFINITY)};
      if (std::isfinite(next)) {
        const float mid = (v + next) / 2;  // exact: one more mantissa bit
        probes.insert(probes.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)});
      }
      for (float p : probes) {
        for (float s : {p, -p}) {
          ASSERT_EQ(kt::fp8_encode(s, f), naive_encode(s, f)) << kt::fp8_name(f) << " x=" << s;
          ++checked;
        }
      }
    }
    // Random floats over the whole exponent range around the format's.
    for (int i = 0; i < 2000000; ++i) {
      uint32_t bits = rng();
      const uint32_t exp = 127 - 30 + rng() % 50;  // 2^-30 .. 2^19
      bits = (bits & 0x807fffffu) | (exp << 23);
      float x;
      std::memcpy(&x, &bits, 4);
      ASSERT_EQ(kt::fp8_encode(x, f), naive_encode(x, f)) << kt::fp8_name(f) << " x=" << x << " seed " << seed;
      ++checked;
    }
  }
  EXPECT_GT(checked, 4000000u);
}

TEST(Fp8Codec, MultiplierFormula) {
  EXPECT_EQ(kt::fp8_multiplier_from_amax(0.f, Fp8Format::kE4M3, false), 1.f);
  EXPECT_EQ(kt::fp8_multiplier_from_amax(INFINITY, Fp8Format::kE4M3, false), 1.f);
  EXPECT_EQ(kt::fp8_multiplier_from_amax(448.f, Fp8Format::kE4M3, false), 1.f);
  EXPECT_EQ(kt::fp8_multiplier_from_amax(3.f, Fp8Format::kE4M3, false), 448.f / 3.f);
  EXPECT_EQ(kt::fp8_multiplier_from_amax(3.f, Fp8Format::kE4M3, true), 128.f);  // 149.33 → 2^7
  EXPECT_EQ(kt::fp8_multiplier_from_amax(1e-40f, Fp8Format::kE5M2, false), FLT_MAX);
  EXPECT_EQ(kt::fp8_multiplier_from_amax(1e-40f, Fp8Format::kE5M2, true), 0x1p127f);
  EXPECT_EQ(kt::fp8_round_multiplier(0.3f, true), 0.25f);
}

// --- quantize validation --------------------------------------------------------------------

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

constexpr int64_t kRows = 200, kCols = 272;

f8::QuantizeArgs quantize_args(f8::Granularity g) {
  f8::QuantizeArgs a;
  a.x = TensorRef(fake_ptr(0), DType::kBF16, {kRows, kCols}, {}, 0);
  a.y = TensorRef(fake_ptr(0x100000), DType::kE4M3, {kRows, kCols}, {}, 0);
  a.granularity = g;
  const int64_t cb = (kCols + 127) / 128;
  switch (g) {
    case f8::Granularity::kTensor:
      a.amax = TensorRef(fake_ptr(0x200000), DType::kF32, {1}, {}, 0);
      a.scale_inv = TensorRef(fake_ptr(0x200100), DType::kF32, {1}, {}, 0);
      a.multiplier_value = 2.5f;
      break;
    case f8::Granularity::kRow:
      a.amax = TensorRef(fake_ptr(0x200000), DType::kF32, {kRows}, {}, 0);
      a.scale_inv = TensorRef(fake_ptr(0x210000), DType::kF32, {kRows}, {}, 0);
      break;
    case f8::Granularity::kBlock1x128:
      a.amax = TensorRef(fake_ptr(0x200000), DType::kF32, {kRows, cb}, {}, 0);
      a.scale_inv = TensorRef(fake_ptr(0x210000), DType::kF32, {kRows, cb}, {}, 0);
      break;
    case f8::Granularity::kBlock128x128:
      a.amax = TensorRef(fake_ptr(0x200000), DType::kF32, {(kRows + 127) / 128, cb}, {}, 0);
      a.scale_inv = TensorRef(fake_ptr(0x210000), DType::kF32, {(kRows + 127) / 128, cb}, {}, 0);
      break;
  }
  return a;
}

/// Applies `edit` to valid args and expects validate_quantize — and the public quantize(), which
/// must validate before touching the driver — to throw InvalidArgument mentioning every needle.
void expect_quantize_invalid(f8::Granularity g, const std::function<void(f8::QuantizeArgs&)>& edit,
                             std::initializer_list<const char*> needles) {
  f8::QuantizeArgs a = quantize_args(g);
  edit(a);
  for (int via_op = 0; via_op < 2; ++via_op) {
    try {
      if (via_op) {
        f8::quantize(a, nullptr);
      } else {
        fd::QuantizeOp::validate(a);
      }
      ADD_FAILURE() << "no error for an invalid argument (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("kjit::fp8::quantize"), std::string::npos) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

// One fact, one place: the granularity and tile names, the GemmTile shapes and the scale
// shapes all come from the fp8 family declarations. A value added to a declaration without an
// enumerator (or the other way round) fails here.
TEST(Fp8Families, NamesTilesAndScaleShapesFollowTheDeclarations) {
  const kjit::Family& q = f8::quantize_family();
  const auto& grans = q.params[q.param_index("granularity")].values;
  ASSERT_EQ(grans.size(), 4u);  // Granularity's enumerators
  for (const kjit::ParamValue& v : grans) {
    const f8::Granularity g = f8::parse_granularity(v.text);
    EXPECT_EQ(static_cast<int64_t>(g), v.code) << v.text;
    EXPECT_EQ(f8::granularity_name(g), v.text);
  }
  EXPECT_THROW(f8::parse_granularity("block64x64"), kjit::InvalidArgument);
  try {
    f8::parse_granularity("column", "kjit.fp8.quantize");
  } catch (const kjit::InvalidArgument& e) {
    for (const kjit::ParamValue& v : grans) EXPECT_NE(std::string(e.what()).find(v.text), std::string::npos) << e.what();
  }

  const kjit::Family& g = f8::gemm_family();
  const auto& tiles = g.params[g.param_index("tile")].values;
  ASSERT_EQ(tiles.size(), static_cast<size_t>(f8::GemmTile::k64x256));  // every GemmTile but kAuto
  for (const kjit::ParamValue& v : tiles) {
    const f8::GemmTile t = f8::parse_gemm_tile(v.text);
    EXPECT_NE(t, f8::GemmTile::kAuto) << v.text;
    EXPECT_EQ(f8::gemm_tile_name(t), v.text);
    const fd::GemmTileShape shape = fd::gemm_tile_shape(t);
    EXPECT_EQ(f8::gemm_tile_code(shape.bm, shape.bn), v.code) << v.text;
    EXPECT_EQ(fd::gemm_tile_of(shape.bm, shape.bn), t) << v.text;
    EXPECT_EQ(v.text, std::to_string(shape.bm) + "x" + std::to_string(shape.bn));
  }
  EXPECT_EQ(f8::parse_gemm_tile("auto"), f8::GemmTile::kAuto);
  EXPECT_STREQ(f8::gemm_tile_name(f8::GemmTile::kAuto), "auto");
  EXPECT_THROW(f8::parse_gemm_tile("256x256"), kjit::InvalidArgument);

  // The scale groups per granularity (x [300, 1000]: 3 row blocks, 8 column blocks).
  const f8::ScaleShape t = f8::scale_shape(f8::Granularity::kTensor, 300, 1000);
  EXPECT_EQ(t.ndim, 1);
  EXPECT_EQ(t.shape[0], 1);
  const f8::ScaleShape r = f8::scale_shape(f8::Granularity::kRow, 300, 1000);
  EXPECT_EQ(r.ndim, 1);
  EXPECT_EQ(r.shape[0], 300);
  const f8::ScaleShape b1 = f8::scale_shape(f8::Granularity::kBlock1x128, 300, 1000);
  EXPECT_EQ(b1.ndim, 2);
  EXPECT_EQ(b1.shape[0], 300);
  EXPECT_EQ(b1.shape[1], 8);
  const f8::ScaleShape b2 = f8::scale_shape(f8::Granularity::kBlock128x128, 300, 1000);
  EXPECT_EQ(b2.ndim, 2);
  EXPECT_EQ(b2.shape[0], 3);
  EXPECT_EQ(b2.shape[1], 8);
}

TEST(Fp8QuantizeArgs, ValidArgsPass) {
  using G = f8::Granularity;
  for (G g : {G::kTensor, G::kRow, G::kBlock1x128, G::kBlock128x128}) {
    const fd::QuantizeDims q = fd::QuantizeOp::validate(quantize_args(g));
    EXPECT_EQ(q.rows, kRows);
    EXPECT_EQ(q.cols, kCols);
    EXPECT_EQ(q.in, f8::kInBF16);
    EXPECT_EQ(q.fmt, f8::kFormatE4M3);
    EXPECT_EQ(q.params.col_blocks, 3);
  }
  // Compact per-tensor inputs collapse into one row; strided ones keep their rows.
  fd::QuantizeDims t = fd::QuantizeOp::validate(quantize_args(G::kTensor));
  EXPECT_TRUE(t.collapse);
  EXPECT_EQ(t.params.rows, 1);
  EXPECT_EQ(t.params.cols, kRows * kCols);
  f8::QuantizeArgs a = quantize_args(G::kTensor);
  a.x = TensorRef(fake_ptr(0), DType::kF32, {kRows, kCols}, {kCols + 4, 1}, 0);
  a.y = TensorRef(fake_ptr(0x1000000), DType::kE5M2, {kRows, kCols}, {kCols + 16, 1}, 0);
  t = fd::QuantizeOp::validate(a);
  EXPECT_FALSE(t.collapse);
  EXPECT_EQ(t.in, f8::kInF32);
  EXPECT_EQ(t.fmt, f8::kFormatE5M2);
  EXPECT_EQ(t.params.x_stride, kCols + 4);
  EXPECT_EQ(t.params.y_stride, kCols + 16);
  // The kernel finds a vector's row as vector / (cols / 4) for f32 input (kjit/fast_div.h).
  const kjit::FastDiv64 want = kjit::fast_div64_of(kCols / 4);
  EXPECT_EQ(t.params.vpr_div.magic, want.magic);
  EXPECT_EQ(t.params.vpr_div.shift, want.shift);
  for (uint64_t v : {uint64_t{0}, uint64_t{kCols / 4 - 1}, uint64_t{kCols / 4}, uint64_t{kRows * kCols / 4 - 1}}) {
    EXPECT_EQ(kjit::fast_quotient64(v, t.params.vpr_div), v / (kCols / 4));
  }
  // Optional outputs may be absent where allowed; dynamic needs only amax.
  a = quantize_args(G::kTensor);
  a.amax = {};
  a.scale_inv = {};
  EXPECT_EQ(fd::QuantizeOp::validate(a).params.amax, nullptr);
  a = quantize_args(G::kTensor);
  a.dynamic = true;
  a.scale_inv = {};
  EXPECT_TRUE(fd::QuantizeOp::validate(a).dynamic);
  a = quantize_args(G::kRow);
  a.amax = {};
  EXPECT_EQ(fd::QuantizeOp::validate(a).params.amax, nullptr);
  // Empty inputs are fine (a per-tensor one collapses to zero columns: nothing to divide by).
  a = quantize_args(G::kRow);
  a.x.shape[0] = a.y.shape[0] = a.amax.shape[0] = a.scale_inv.shape[0] = 0;
  EXPECT_NO_THROW(fd::QuantizeOp::validate(a));
  a = quantize_args(G::kTensor);
  a.x.shape[0] = a.y.shape[0] = 0;
  EXPECT_EQ(fd::QuantizeOp::validate(a).params.cols, 0);
  a = quantize_args(G::kTensor);
  a.x.shape[1] = a.y.shape[1] = 0;
  EXPECT_NO_THROW(fd::QuantizeOp::validate(a));
}

TEST(Fp8QuantizeArgs, RejectsBadInputs) {
  using G = f8::Granularity;
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.x = {}; }, {"x is required"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.x = TensorRef(fake_ptr(), DType::kBF16, {kRows * kCols}, {}, 0); },
                          {"x must be 2-d"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.x.dtype = DType::kE4M3; }, {"x must be bf16 or f16 or f32"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.x.device = -1; }, {"x must be on a CUDA device"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.x.data = fake_ptr(8); }, {"x data pointer", "16-byte aligned"});
  expect_quantize_invalid(G::kRow, [](auto& a) { a.x.strides[0] = kCols + 4; }, {"x row stride", "multiple of 16"});
  expect_quantize_invalid(G::kRow, [](auto& a) { a.x.strides[1] = 2; }, {"x must have a contiguous last dimension"});
  expect_quantize_invalid(G::kTensor, [](auto& a) {
    a.x.shape[1] = a.y.shape[1] = 40;
  }, {"x cols", "multiple of 16"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.y.dtype = DType::kBF16; }, {"y must be e4m3 or e5m2"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.y.dtype = DType::kU8; }, {"y must be e4m3 or e5m2"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.y.shape[0] = kRows - 1; }, {"y dim 0", "rows"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.y.device = 1; }, {"y is on CUDA device 1"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.y.data = fake_ptr(0x100004); }, {"y data pointer"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.y.data = nullptr; }, {"y has a null data pointer"});
}

TEST(Fp8QuantizeArgs, RejectsBadScales) {
  using G = f8::Granularity;
  // Per tensor.
  for (float bad : {0.f, -1.f, NAN, INFINITY, 1e-40f}) {
    expect_quantize_invalid(G::kTensor, [bad](auto& a) { a.multiplier_value = bad; }, {"multiplier_value"});
  }
  expect_quantize_invalid(G::kTensor, [](auto& a) {
    a.multiplier = TensorRef(fake_ptr(0x300000), DType::kF32, {2}, {}, 0);
  }, {"multiplier must be [1]"});
  expect_quantize_invalid(G::kTensor, [](auto& a) {
    a.multiplier = TensorRef(fake_ptr(0x300000), DType::kBF16, {1}, {}, 0);
  }, {"multiplier must be f32"});
  expect_quantize_invalid(G::kTensor, [](auto& a) {
    a.dynamic = true;
    a.multiplier = TensorRef(fake_ptr(0x300000), DType::kF32, {1}, {}, 0);
  }, {"multiplier must be absent", "dynamic"});
  expect_quantize_invalid(G::kTensor, [](auto& a) {
    a.dynamic = true;
    a.amax = {};
  }, {"amax", "required when dynamic"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.amax.shape[0] = 2; }, {"amax must be [1]"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.scale_inv.dtype = DType::kF64; }, {"scale_inv must be f32"});
  expect_quantize_invalid(G::kTensor, [](auto& a) { a.amax.data = fake_ptr(0x200002); }, {"amax data pointer", "4-byte"});
  // Per row / block.
  expect_quantize_invalid(G::kRow, [](auto& a) { a.scale_inv = {}; }, {"scale_inv", "required for row"});
  expect_quantize_invalid(G::kRow, [](auto& a) { a.scale_inv.shape[0] = kRows + 1; }, {"scale_inv must be [200]"});
  expect_quantize_invalid(G::kRow, [](auto& a) { a.dynamic = true; }, {"dynamic applies to kTensor only"});
  expect_quantize_invalid(G::kRow, [](auto& a) {
    a.multiplier = TensorRef(fake_ptr(0x300000), DType::kF32, {1}, {}, 0);
  }, {"multiplier must be absent"});
  expect_quantize_invalid(G::kBlock1x128, [](auto& a) { a.scale_inv.shape[1] = 2; }, {"scale_inv must be [200, 3]", "1x128"});
  expect_quantize_invalid(G::kBlock1x128, [](auto& a) { a.amax.shape[0] = 2; }, {"amax must be [200, 3]"});
  expect_quantize_invalid(G::kBlock128x128, [](auto& a) { a.scale_inv.shape[0] = kRows; }, {"scale_inv must be [2, 3]", "128x128"});
  expect_quantize_invalid(G::kBlock1x128, [](auto& a) {
    a.amax = TensorRef(fake_ptr(0x200000), DType::kF32, {kRows, 3}, {1, kRows}, 0);
  }, {"same strides"});
}

// --- gemm validation ------------------------------------------------------------------------

constexpr int64_t kM = 100, kN = 300, kK = 256;

f8::GemmArgs gemm_args(bool block = false) {
  f8::GemmArgs a;
  a.a = TensorRef(fake_ptr(0), DType::kE4M3, {kM, kK}, {}, 0);
  a.b = TensorRef(fake_ptr(0x100000), DType::kE4M3, {kN, kK}, {}, 0);
  a.d = TensorRef(fake_ptr(0x200000), DType::kBF16, {kM, kN}, {}, 0);
  if (block) {
    a.scale_mode = f8::ScaleMode::kBlockwise;
    a.scale_a = TensorRef(fake_ptr(0x300000), DType::kF32, {kM, kK / 128}, {}, 0);
    a.scale_b = TensorRef(fake_ptr(0x310000), DType::kF32, {(kN + 127) / 128, kK / 128}, {}, 0);
  } else {
    a.scale_a = TensorRef(fake_ptr(0x300000), DType::kF32, {kM}, {}, 0);
    a.scale_b = TensorRef(fake_ptr(0x310000), DType::kF32, {1}, {}, 0);
  }
  return a;
}

void expect_gemm_invalid(bool block, const std::function<void(f8::GemmArgs&)>& edit,
                         std::initializer_list<const char*> needles) {
  f8::GemmArgs a = gemm_args(block);
  edit(a);
  for (int via_op = 0; via_op < 2; ++via_op) {
    try {
      if (via_op) {
        f8::gemm(a, nullptr);
      } else {
        fd::validate_gemm(a);
      }
      ADD_FAILURE() << "no error for an invalid argument (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("kjit::fp8::gemm"), std::string::npos) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

TEST(Fp8GemmArgs, LayoutsAndSwap) {
  fd::GemmDims g = fd::validate_gemm(gemm_args());
  EXPECT_FALSE(g.a_trans || g.b_trans || g.swapped || g.out_f32 || g.block);
  EXPECT_EQ(g.params.lda, kK);
  EXPECT_EQ(g.params.ldb, kK);
  EXPECT_EQ(g.params.sa_stride_m, 1);
  EXPECT_EQ(g.params.sb_stride_n, 0);  // [1]: per tensor
  EXPECT_EQ(g.params.vec_store, 0);    // 300 bf16 = 600-byte rows are not 16-byte multiples
  // Transposed views: A stored [K, M], B stored [K, N].
  f8::GemmArgs a = gemm_args();
  a.a = TensorRef(fake_ptr(0), DType::kE5M2, {kM, kK}, {1, 112}, 0);
  a.b = TensorRef(fake_ptr(0x100000), DType::kE4M3, {kN, kK}, {1, 304}, 0);
  a.d = TensorRef(fake_ptr(0x200000), DType::kF32, {kM, kN}, {304, 1}, 0);
  g = fd::validate_gemm(a);
  EXPECT_TRUE(g.a_trans && g.b_trans && g.out_f32 && !g.swapped);
  EXPECT_EQ(g.fmt_a, f8::kFormatE5M2);
  EXPECT_EQ(g.params.lda, 112);
  EXPECT_EQ(g.params.ldb, 304);
  EXPECT_EQ(g.params.vec_store, 1);
  // Column-major D: D' = B · A'ᵀ, so the kernel's A is b, its B is a, scales and bias swap too.
  a = gemm_args();
  a.d = TensorRef(fake_ptr(0x200000), DType::kBF16, {kM, kN}, {1, kM}, 0);
  a.bias = TensorRef(fake_ptr(0x400000), DType::kF32, {kN}, {}, 0);
  g = fd::validate_gemm(a);
  EXPECT_TRUE(g.swapped);
  EXPECT_EQ(g.m, kN);
  EXPECT_EQ(g.n, kM);
  EXPECT_EQ(g.params.a, static_cast<const uint8_t*>(fake_ptr(0x100000)));
  EXPECT_EQ(g.params.b, static_cast<const uint8_t*>(fake_ptr(0)));
  EXPECT_EQ(g.params.scale_a, static_cast<const float*>(fake_ptr(0x310000)));
  EXPECT_EQ(g.params.sa_stride_m, 0);
  EXPECT_EQ(g.params.sb_stride_n, 1);
  EXPECT_EQ(g.params.ldd, kM);
  EXPECT_EQ(g.params.bias_rows, 1);
  // Blockwise.
  g = fd::validate_gemm(gemm_args(true));
  EXPECT_TRUE(g.block);
  EXPECT_EQ(g.params.sa_stride_m, kK / 128);
  EXPECT_EQ(g.params.sa_stride_k, 1);
  EXPECT_EQ(g.params.sb_stride_n, kK / 128);
}

TEST(Fp8GemmArgs, RejectsBadOperands) {
  expect_gemm_invalid(false, [](auto& a) { a.a.dtype = DType::kBF16; }, {"a must be e4m3 or e5m2"});
  expect_gemm_invalid(false, [](auto& a) { a.b = {}; }, {"b is required"});
  expect_gemm_invalid(false, [](auto& a) { a.b.shape[1] = kK + 16; }, {"b dim 1", "K"});
  expect_gemm_invalid(false, [](auto& a) {
    a.a.shape[1] = a.b.shape[1] = 72;
    a.a.strides[0] = a.b.strides[0] = 80;
  }, {"multiple of 16"});
  expect_gemm_invalid(false, [](auto& a) { a.a.shape[1] = a.b.shape[1] = 0; }, {"positive multiple of 16"});
  expect_gemm_invalid(false, [](auto& a) { a.a.strides[1] = 2; a.a.strides[0] = 1024; },
                      {"a must have K (dim 1) or M (dim 0) contiguous"});
  expect_gemm_invalid(false, [](auto& a) { a.a.data = fake_ptr(8); }, {"a data pointer", "16-byte aligned"});
  expect_gemm_invalid(false, [](auto& a) { a.b.strides[0] = kK + 8; }, {"b leading stride", "multiple of 16"});
  expect_gemm_invalid(false, [](auto& a) {
    a.b = TensorRef(fake_ptr(0x100000), DType::kE4M3, {kN, kK}, {1, kN}, 0);  // 300-byte rows
  }, {"b leading stride"});
  expect_gemm_invalid(false, [](auto& a) { a.b.device = 2; }, {"b is on CUDA device 2"});
  expect_gemm_invalid(false, [](auto& a) { a.a.device = -1; }, {"a must be on a CUDA device"});
}

TEST(Fp8GemmArgs, RejectsBadOutputsAndScales) {
  expect_gemm_invalid(false, [](auto& a) { a.d.dtype = DType::kF16; }, {"d must be bf16 or f32"});
  expect_gemm_invalid(false, [](auto& a) { a.d.shape[1] = kN - 1; }, {"d dim 1", "N"});
  expect_gemm_invalid(false, [](auto& a) { a.d.strides[1] = 2; a.d.strides[0] = 1000; },
                      {"d must be row-major", "or column-major"});
  expect_gemm_invalid(false, [](auto& a) { a.d.data = fake_ptr(0x200001); }, {"d data pointer"});
  expect_gemm_invalid(true, [](auto& a) {
    a.d = TensorRef(fake_ptr(0x200000), DType::kBF16, {kM, kN}, {1, kM}, 0);
  }, {"d must be row-major", "kBlockwise"});
  expect_gemm_invalid(false, [](auto& a) { a.scale_a.shape[0] = 7; }, {"scale_a must be [1]", "[100]"});
  expect_gemm_invalid(false, [](auto& a) { a.scale_b.dtype = DType::kBF16; }, {"scale_b must be f32"});
  expect_gemm_invalid(false, [](auto& a) { a.scale_b = {}; }, {"scale_b is required"});
  expect_gemm_invalid(false, [](auto& a) { a.scale_a.device = 3; }, {"scale_a is on CUDA device 3"});
  expect_gemm_invalid(true, [](auto& a) {
    a.a.shape[1] = a.b.shape[1] = 208;
    a.a.strides[0] = a.b.strides[0] = 208;
  }, {"K must be a multiple of 128", "kBlockwise"});
  expect_gemm_invalid(true, [](auto& a) { a.scale_a.shape[1] = 3; }, {"scale_a must be [100, 2]", "1x128"});
  expect_gemm_invalid(true, [](auto& a) { a.scale_b.shape[0] = 2; }, {"scale_b must be [3, 2]", "128x128"});
  expect_gemm_invalid(true, [](auto& a) {
    a.scale_a = TensorRef(fake_ptr(0x300000), DType::kF32, {kM}, {}, 0);
  }, {"scale_a must be 2-d"});
  expect_gemm_invalid(false, [](auto& a) {
    a.bias = TensorRef(fake_ptr(0x400000), DType::kF32, {kM}, {}, 0);
  }, {"bias dim 0", "N"});
  expect_gemm_invalid(false, [](auto& a) {
    a.bias = TensorRef(fake_ptr(0x400000), DType::kF16, {kN}, {}, 0);
  }, {"bias must be bf16 or f32"});
  expect_gemm_invalid(false, [](auto& a) {
    a.bias = TensorRef(fake_ptr(0x400000), DType::kF32, {kN}, {2}, 0);
  }, {"bias must have a contiguous last dimension"});
}

// The overrides' device-free rules are the validation's: without a GPU, f8::gemm refuses them
// naming the argument and the rule, not "driver unavailable" (they were the planner's, after the
// device opened).
TEST(Fp8GemmArgs, RejectsOverridesWithoutADevice) {
  using K = f8::GemmKernel;
  using T = f8::GemmTile;
  expect_gemm_invalid(false, [](auto& a) { a.splits = 5; }, {"splits must be 0 (auto) or 1..4, got 5"});
  expect_gemm_invalid(false, [](auto& a) { a.splits = -1; }, {"splits must be 0 (auto) or 1..4, got -1"});
  expect_gemm_invalid(false, [](auto& a) { a.splits = 3; },  // K = 256: two 128-k tiles
                      {"splits = 3 leaves a split without a 128-k tile: K = 256 has 2"});
  expect_gemm_invalid(false, [](auto& a) { a.multicast = 4; },
                      {"multicast must be 0 (auto), 1 (none), 2 (CTA pairs sharing B) or 3 (CTA pairs sharing A)",
                       "got 4"});
  expect_gemm_invalid(false, [](auto& a) { a.multicast = -1; }, {"multicast must be 0 (auto)", "got -1"});
  expect_gemm_invalid(false, [](auto& a) { a.multicast = 2; a.splits = 2; }, {"multicast = 2", "split-K"});
  expect_gemm_invalid(false, [](auto& a) { a.multicast = 3; a.splits = 2; },
                      {"multicast = 3 is the persistent wgmma kernel's", "split-K"});
  expect_gemm_invalid(false, [](auto& a) { a.stages = 1; }, {"stages must be 0 (auto) or 2..12", "got 1"});
  expect_gemm_invalid(false, [](auto& a) { a.stages = 13; }, {"stages must be 0 (auto) or 2..12", "got 13"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kMmaSync; a.splits = 2; },
                      {"splits > 1 is the wgmma kernel's split-K"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kMmaSync; a.multicast = 2; },
                      {"multicast = 2 is the wgmma kernel's"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kMmaSync; a.multicast = 3; },
                      {"multicast = 3 is the wgmma kernel's; the mma.sync kernel has none"});
  expect_gemm_invalid(true, [](auto& a) { a.multicast = 3; }, {"multicast = 3 is the wgmma kernel's", "tensorwise"});
  expect_gemm_invalid(false, [](auto& a) { a.tile = T::k64x64; a.multicast = 3; },
                      {"multicast = 3 is the wgmma kernel's", "k64x64 and k128x64 select the mma.sync kernel"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kMmaSync; a.tile = T::k128x256; }, {"are wgmma tiles"});
  expect_gemm_invalid(true, [](auto& a) { a.kernel = K::kWgmma; },
                      {"the wgmma kernel takes tensorwise scales"});
  expect_gemm_invalid(false, [](auto& a) { a.tile = T::k64x64; a.splits = 2; },
                      {"splits > 1 is the wgmma kernel's", "k64x64 and k128x64 select the mma.sync kernel"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kWgmma; a.tile = T::k128x32; a.multicast = 2; },
                      {"multicast = 2 is the wgmma tiles' of N side 80 ... 256"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kWgmma; a.tile = T::k128x32; a.multicast = 3; },
                      {"multicast = 3 is the wgmma tiles' of N side 80 ... 256"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = K::kWgmma; a.tile = T::k64x64; a.multicast = 3; },
                      {"multicast = 3 is the wgmma tiles' of N side 80 ... 256"});
  expect_gemm_invalid(true, [](auto& a) { a.tile = T::k128x128; }, {"tile 128x128 is not available with kBlockwise"});
  expect_gemm_invalid(true, [](auto& a) { a.splits = 2; }, {"splits > 1 is the wgmma kernel's", "tensorwise"});
  expect_gemm_invalid(false, [](auto& a) { a.tile = static_cast<T>(99); }, {"tile is not a GemmTile value"});
  expect_gemm_invalid(false, [](auto& a) { a.kernel = static_cast<K>(9); }, {"kernel is not a GemmKernel value"});
}

// --- planners -------------------------------------------------------------------------------

TEST(Fp8Plan, UnsupportedBelowSm89NamesTheArch) {
  const fd::GemmDims g = fd::validate_gemm(gemm_args());
  for (int sm : {70, 75, 80, 86, 87}) {
    try {
      gemm_plan(g, f8::GemmTile::kAuto, 0, device(sm / 10, sm % 10, 108, 166912));
      ADD_FAILURE() << "sm_" << sm << " accepted";
    } catch (const kjit::Unsupported& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("sm_" + std::to_string(sm)), std::string::npos) << what;
      EXPECT_NE(what.find("sm_89"), std::string::npos) << what;
      EXPECT_NE(what.find("kjit::fp8::gemm"), std::string::npos) << what;
    }
    const fd::QuantizeDims q = fd::QuantizeOp::validate(quantize_args(f8::Granularity::kRow));
    try {
      fd::QuantizeOp::plan(q, device(sm / 10, sm % 10, 108, 166912));
      ADD_FAILURE() << "sm_" << sm << " accepted";
    } catch (const kjit::Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("sm_" + std::to_string(sm)), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(gemm_plan(g, f8::GemmTile::kAuto, 0, device(8, 9, 128, 101376)));
  EXPECT_NO_THROW(gemm_plan(g, f8::GemmTile::kAuto, 0, device(10, 0, 148, 232448)));
}

f8::GemmArgs problem_args(int64_t m, int64_t n, int64_t k, bool block = false) {
  f8::GemmArgs a = gemm_args(block);
  a.a = TensorRef(fake_ptr(0), DType::kE4M3, {m, k}, {}, 0);
  a.b = TensorRef(fake_ptr(0x10000000), DType::kE4M3, {n, k}, {}, 0);
  a.d = TensorRef(fake_ptr(0x20000000), DType::kBF16, {m, n}, {}, 0);
  if (block) {
    a.scale_a = TensorRef(fake_ptr(0x30000000), DType::kF32, {m, k / 128}, {}, 0);
    a.scale_b = TensorRef(fake_ptr(0x31000000), DType::kF32, {(n + 127) / 128, k / 128}, {}, 0);
  } else {
    a.scale_a = TensorRef(fake_ptr(0x30000000), DType::kF32, {1}, {}, 0);
  }
  return a;
}

fd::GemmDims problem(int64_t m, int64_t n, int64_t k, bool block = false) {
  return fd::validate_gemm(problem_args(m, n, k, block));
}

TEST(Fp8Plan, KernelChoice) {
  const kjit::DeviceInfo h200 = ::h200(), l40 = l40s(), b200 = device(10, 0, 148, 232448);
  using K = f8::GemmKernel;
  using T = f8::GemmTile;
  // Hopper, tensorwise, K-major, M > 64: wgmma, 128x256 when that fills the GPU, else 128x128.
  fd::GemmPlan p = gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h200);
  EXPECT_TRUE(p.wgmma);
  EXPECT_EQ(p.bn, 256);
  EXPECT_EQ(p.stages, 3);
  EXPECT_EQ(p.threads, 384);
  EXPECT_EQ(p.smem_bytes, 3 * 384 * 128 + 65536 + 1024 + 256);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.cluster_m, 1);  // B multicast only when forced
  EXPECT_EQ(p.grid, 132);     // persistent: one CTA per SM over 512 tiles
  const fd::GemmPlan pairs = gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h200, K::kAuto, 0, 2);
  EXPECT_EQ(pairs.cluster_m, 2);
  EXPECT_EQ(pairs.grid, 132);  // 66 pairs over 256 tile pairs
  EXPECT_EQ(fd::sm90_params(problem(4096, 4096, 4096), pairs).cluster_m, 2);
  fd::GemmClusterCapacity pairs60;
  pairs60.clusters[2] = 60;
  EXPECT_EQ(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h200, K::kAuto, 0, 2, pairs60).grid, 120);
  EXPECT_EQ(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h200, K::kAuto, 0, 1).cluster_m, 1);
  const fd::GemmPlan forced_pairs = gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200, K::kAuto, 0, 2);
  EXPECT_EQ(forced_pairs.splits, 1);  // multicast = 2 rules out split-K
  EXPECT_EQ(forced_pairs.cluster_m, 2);
  EXPECT_EQ(forced_pairs.grid, 2 * 56);  // one tile row: 56 pairs, each with an idle second CTA
  EXPECT_THROW(gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200, K::kAuto, 2, 2), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200, K::kAuto, 0, 4), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200, K::kMmaSync, 0, 2), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, l40, K::kAuto, 0, 2), kjit::Unsupported);
  EXPECT_EQ(f8::gemm_family().params_of(p.choice.point).at("impl"), "wgmma");
  p = gemm_plan(problem(256, 7168, 2048), T::kAuto, 0, h200);
  EXPECT_TRUE(p.wgmma);
  EXPECT_EQ(p.bn, 128);
  EXPECT_EQ(p.stages, 6);  // two staging boxes a warpgroup at BN = 128 leave room for six
  EXPECT_EQ(p.splits, 1);  // 112 tiles
  EXPECT_EQ(p.grid, 112);
  // M ≤ 64: the swapped small tile (Fp8Plan.SmallTiles); above, split-K over clusters, BN = 128.
  p = gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200);
  EXPECT_TRUE(p.wgmma);
  EXPECT_TRUE(p.swap_ab);
  EXPECT_EQ(p.bm, 64);
  EXPECT_EQ(p.bn, 64);
  EXPECT_EQ(p.splits, 1);  // 112 tiles of 64 rows, 16 k-tiles: too few to split
  EXPECT_EQ(p.grid, 112);
  p = gemm_plan(problem(128, 4096, 7168), T::kAuto, 0, h200);
  EXPECT_FALSE(p.swap_ab);
  EXPECT_EQ(p.bn, 128);
  EXPECT_EQ(p.splits, 3);  // 32 tiles; 56 k-tiles keep 16 or more a slice over 3
  EXPECT_EQ(p.grid, 96);
  EXPECT_EQ(fd::sm90_params(problem(128, 4096, 7168), p).splits, 3);
  EXPECT_EQ(gemm_plan(problem(128, 7168, 2048), T::kAuto, 0, h200).splits, 1);  // 16 k-tiles: no split
  EXPECT_EQ(gemm_plan(problem(128, 4096, 8192), T::kAuto, 0, h200).splits, 4);
  EXPECT_EQ(fd::sm90_params(problem(128, 4096, 7168), p).tma_store, 0);  // split-K stores directly
  // Only as many splits as keep every cluster resident (29 clusters of 4 on this device).
  fd::GemmClusterCapacity gpcs;
  gpcs.clusters[4] = 29;
  gpcs.clusters[3] = 44;
  EXPECT_EQ(gemm_plan(problem(128, 4096, 8192), T::kAuto, 0, h200, K::kAuto, 0, 0, gpcs).splits, 3);
  gpcs.clusters[3] = 20;
  gpcs.clusters[2] = 20;
  EXPECT_EQ(gemm_plan(problem(128, 4096, 8192), T::kAuto, 0, h200, K::kAuto, 0, 0, gpcs).splits, 1);
  EXPECT_EQ(gemm_plan(problem(128, 4096, 7168), T::kAuto, 0, h200, K::kAuto, 4, 0, gpcs).splits, 4);  // forced
  EXPECT_EQ(gemm_plan(problem(256, 4096, 7168), T::kAuto, 0, h200).splits, 2);  // 64 tiles
  EXPECT_EQ(gemm_plan(problem(1, 7168, 2048), T::kAuto, 0, h200).splits, 1);  // 16 k-tiles
  EXPECT_EQ(gemm_plan(problem(16, 520, 256), T::kAuto, 0, h200).splits, 1);  // K/256 = 1
  EXPECT_EQ(gemm_plan(problem(64, 7168, 2048), T::k128x256, 0, h200).bn, 256);  // forced tile kept
  EXPECT_EQ(gemm_plan(problem(64, 7168, 2048), T::k128x256, 0, h200).splits, 1);  // 16 k-tiles
  EXPECT_EQ(gemm_plan(problem(64, 7168, 8192), T::k128x256, 0, h200).splits, 4);
  // Forced splits: 1..4 and at most one per 128-k tile; only the wgmma kernel splits.
  EXPECT_EQ(gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200, K::kAuto, 1).splits, 1);
  EXPECT_EQ(gemm_plan(problem(64, 7168, 2048), T::kAuto, 0, h200, K::kAuto, 1).grid, 112);
  EXPECT_EQ(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h200, K::kAuto, 3).grid, 3 * 512);
  EXPECT_EQ(gemm_plan(problem(100, 100, 272), T::kAuto, 0, h200, K::kWgmma, 3).splits, 3);
  EXPECT_THROW(gemm_plan(problem(100, 100, 256), T::kAuto, 0, h200, K::kWgmma, 3), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(100, 100, 1024), T::kAuto, 0, h200, K::kAuto, 5), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(100, 100, 1024), T::kAuto, 0, h200, K::kAuto, -1), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(100, 100, 1024), T::kAuto, 0, h200, K::kMmaSync, 2), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(100, 100, 1024), T::k64x64, 0, h200, K::kAuto, 2), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(100, 100, 1024, true), T::kAuto, 0, h200, K::kAuto, 2), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(100, 100, 1024), T::kAuto, 0, l40, K::kAuto, 2), kjit::Unsupported);
  EXPECT_FALSE(gemm_plan(problem(100, 100, 1024), T::kAuto, 0, l40, K::kAuto, 1).wgmma);
  EXPECT_TRUE(gemm_plan(problem(1024, 7168, 2048), T::kAuto, 0, h200).wgmma);
  EXPECT_EQ(gemm_plan(problem(1024, 7168, 2048), T::kAuto, 0, h200).bn, 256);
  EXPECT_FALSE(gemm_plan(problem(4096, 4096, 4096, true), T::kAuto, 0, h200).wgmma);  // blockwise
  EXPECT_FALSE(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, l40).wgmma);
  EXPECT_FALSE(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, b200).wgmma);
  EXPECT_FALSE(gemm_plan(problem(4096, 4096, 4096), T::k128x128, 0, h200).wgmma);  // forced mma tile
  EXPECT_TRUE(gemm_plan(problem(4096, 4096, 4096), T::k128x128, 0, h200, K::kWgmma).wgmma);
  EXPECT_TRUE(gemm_plan(problem(100, 100, 64), T::k128x256, 0, h200).wgmma);
  EXPECT_FALSE(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h200, K::kMmaSync).wgmma);
  // An M-major A goes to mma even on Hopper; forcing wgmma for it is an argument error.
  f8::GemmArgs a = gemm_args();
  a.a = TensorRef(fake_ptr(0), DType::kE4M3, {kM, kK}, {1, 112}, 0);
  const fd::GemmDims mt = fd::validate_gemm(a);
  EXPECT_FALSE(gemm_plan(mt, T::kAuto, 0, h200).wgmma);
  EXPECT_THROW(gemm_plan(mt, T::kAuto, 0, h200, K::kWgmma), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, l40, K::kWgmma), kjit::Unsupported);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), T::k128x256, 0, b200), kjit::Unsupported);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), T::k128x256, 0, h200, K::kMmaSync), kjit::InvalidArgument);
  EXPECT_EQ(gemm_plan(problem(4096, 4096, 4096), T::k64x64, 0, h200, K::kWgmma).bm, 64);  // a small wgmma tile
  EXPECT_FALSE(gemm_plan(problem(4096, 4096, 4096), T::k64x64, 0, h200).wgmma);             // the mma.sync one
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 7, h200), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), T::k128x256, 6, h200), kjit::InvalidArgument);  // 289 KiB
  EXPECT_EQ(gemm_plan(problem(4096, 4096, 4096), T::k128x256, 3, h200).stages, 3);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 6, h200, K::kMmaSync), kjit::InvalidArgument);
}

// Small M (or N) on Hopper: the wgmma kernel's BN 16/32/64 tiles with the small side on the
// tile's N, the operands swapped when that side is M, 64 rows when 128 would leave more than half
// the SMs idle, a deep ring, split-K over the weight tiles.
TEST(Fp8Plan, SmallTiles) {
  const kjit::DeviceInfo h200 = ::h200(), l40 = l40s();
  using K = f8::GemmKernel;
  using T = f8::GemmTile;
  struct Case {
    int64_t m, n, k;
    int bm, bn, stages, splits;
  };
  // M 1…64 over the DeepSeek-V3 projections: BN covers M; 128-row weight tiles would fill at most
  // 56 of the 132 SMs, so the tiles have 64 rows (112 at N = 7168; 64 × 2 splits at N = 4096).
  // N = 16384: 128 tiles of 128 rows fill the SMs; N = 8448 is the last with 64 rows (66 × 2 ≤ 132).
  for (const Case& c : {Case{1, 7168, 2048, 64, 16, 8, 1}, Case{16, 7168, 2048, 64, 16, 8, 1},
                        Case{17, 7168, 2048, 64, 32, 8, 1}, Case{33, 4096, 7168, 64, 64, 8, 2},
                        Case{64, 4096, 7168, 64, 64, 8, 2}, Case{5, 520, 4096, 64, 16, 8, 2},
                        Case{1, 16384, 2048, 128, 16, 8, 1}, Case{40, 8448, 4096, 64, 64, 8, 1},
                        Case{40, 8576, 4096, 128, 64, 8, 1}}) {
    const fd::GemmPlan p = gemm_plan(problem(c.m, c.n, c.k), T::kAuto, 0, h200);
    SCOPED_TRACE(testing::Message() << c.m << "x" << c.n << "x" << c.k);
    EXPECT_TRUE(p.wgmma);
    EXPECT_TRUE(p.swap_ab);
    EXPECT_EQ(p.bm, c.bm);
    EXPECT_EQ(p.bn, c.bn);
    EXPECT_EQ(p.stages, c.stages);
    EXPECT_EQ(p.tiles_m, (c.n + c.bm - 1) / c.bm);
    EXPECT_EQ(p.tiles_n, 1);
    EXPECT_EQ(p.splits, c.splits);
    EXPECT_EQ(p.grid, p.tiles_m * c.splits);
    EXPECT_EQ(p.smem_bytes, c.stages * (c.bm + c.bn) * 128 + 512 * c.bn + 1024 + 256);  // f32 staging
    EXPECT_LE(p.smem_bytes, 232448);
    EXPECT_EQ(f8::gemm_family().params_of(p.choice.point).at("tile"),
              std::to_string(c.bm) + "x" + std::to_string(c.bn));
  }
  // Only as many splits as keep the clusters resident (as for the large tiles): 64 tiles of 64
  // rows at N = 4096 take 2 splits when 64 clusters of 2 fit at once, else none.
  fd::GemmClusterCapacity gpcs;
  gpcs.clusters[2] = 66;
  EXPECT_EQ(gemm_plan(problem(1, 4096, 8192), T::kAuto, 0, h200, K::kAuto, 0, 0, gpcs).splits, 2);
  gpcs.clusters[2] = 60;
  EXPECT_EQ(gemm_plan(problem(1, 4096, 8192), T::kAuto, 0, h200, K::kAuto, 0, 0, gpcs).splits, 1);
  // With 128-row tiles forced, the 32 tiles split 3 ways where 44 clusters of 3 fit.
  gpcs.clusters[4] = 29;
  gpcs.clusters[3] = 44;
  EXPECT_EQ(gemm_plan(problem(1, 4096, 8192), T::k128x16, 0, h200, K::kAuto, 0, 0, gpcs).splits, 3);
  // The swap in the kernel's Params: M and N, the scales and their strides exchanged, the bias
  // per row, D stored transposed with direct stores.
  f8::GemmArgs a = gemm_args();
  a.a = TensorRef(fake_ptr(0), DType::kE4M3, {3, 256}, {}, 0);
  a.b = TensorRef(fake_ptr(0x100000), DType::kE4M3, {300, 256}, {}, 0);
  a.d = TensorRef(fake_ptr(0x200000), DType::kBF16, {3, 300}, {}, 0);
  a.scale_a = TensorRef(fake_ptr(0x300000), DType::kF32, {3}, {}, 0);
  a.scale_b = TensorRef(fake_ptr(0x310000), DType::kF32, {300}, {}, 0);
  a.bias = TensorRef(fake_ptr(0x320000), DType::kF32, {300}, {}, 0);
  const fd::GemmDims dims = fd::validate_gemm(a);
  const fd::GemmPlan sp = fd::plan_gemm(dims, h200);
  ASSERT_TRUE(sp.swap_ab);
  const auto sw = fd::sm90_params(dims, sp);
  EXPECT_EQ(sw.m, 300);
  EXPECT_EQ(sw.n, 3);
  EXPECT_EQ(sw.scale_a, a.scale_b.data);
  EXPECT_EQ(sw.scale_b, a.scale_a.data);
  EXPECT_EQ(sw.sa_stride_m, 1);
  EXPECT_EQ(sw.sb_stride_n, 1);
  EXPECT_EQ(sw.bias_rows, 1);
  EXPECT_EQ(sw.d_trans, 1);
  EXPECT_EQ(sw.ldd, 300);
  EXPECT_EQ(sw.pair_store, 0);
  EXPECT_EQ(sw.tma_store, 0);
  EXPECT_EQ(sw.d_vec16, 0);  // 300 bf16 a row: 600 bytes
  // A column-major D is swapped once by validation; a small side there is N' = M again.
  a.d = TensorRef(fake_ptr(0x200000), DType::kBF16, {3, 300}, {1, 3}, 0);
  const fd::GemmDims cm = fd::validate_gemm(a);
  ASSERT_TRUE(cm.swapped);
  const fd::GemmPlan cp = fd::plan_gemm(cm, h200);
  EXPECT_FALSE(cp.swap_ab);  // the kernel's problem is already 300 x 3
  EXPECT_EQ(cp.bn, 16);
  EXPECT_EQ(fd::sm90_params(cm, cp).d_trans, 0);
  EXPECT_EQ(fd::sm90_params(cm, cp).bias_rows, 1);
  // A column-major D with a small N: validation's swap makes M' = N small, the planner swaps
  // back: the kernel runs the call's own A and B and stores D' (the column-major D) transposed.
  a.a = TensorRef(fake_ptr(0), DType::kE4M3, {300, 256}, {}, 0);
  a.b = TensorRef(fake_ptr(0x100000), DType::kE4M3, {3, 256}, {}, 0);
  a.d = TensorRef(fake_ptr(0x200000), DType::kBF16, {300, 3}, {1, 304}, 0);
  a.scale_a = TensorRef(fake_ptr(0x300000), DType::kF32, {300}, {}, 0);
  a.scale_b = TensorRef(fake_ptr(0x310000), DType::kF32, {3}, {}, 0);
  a.bias = TensorRef(fake_ptr(0x320000), DType::kF32, {3}, {}, 0);
  const fd::GemmDims twice = fd::validate_gemm(a);
  ASSERT_TRUE(twice.swapped);
  const fd::GemmPlan tp = fd::plan_gemm(twice, h200);
  ASSERT_TRUE(tp.swap_ab);
  const auto tw = fd::sm90_params(twice, tp);
  EXPECT_EQ(tw.m, 300);
  EXPECT_EQ(tw.n, 3);
  EXPECT_EQ(tw.scale_a, a.scale_a.data);  // the call's own A side again
  EXPECT_EQ(tw.scale_b, a.scale_b.data);
  EXPECT_EQ(tw.bias_rows, 0);  // bias per column of the call's D = per kernel column
  EXPECT_EQ(tw.d_trans, 1);
  EXPECT_EQ(tw.ldd, 304);
  EXPECT_EQ(tw.d_vec16, 1);  // 304 bf16 = 608 bytes a column
  // N ≤ 64 with a large M: the small tile on N, no swap.
  const fd::GemmPlan tall = gemm_plan(problem(4096, 48, 1024), T::kAuto, 0, h200);
  EXPECT_FALSE(tall.swap_ab);
  EXPECT_EQ(tall.bn, 64);
  EXPECT_EQ(tall.bm, 64);  // 32 tiles of 128 rows would leave 100 SMs idle
  EXPECT_EQ(tall.tiles_m, 64);
  // M = N ≤ 64: no swap.
  EXPECT_FALSE(gemm_plan(problem(40, 40, 1024), T::kAuto, 0, h200).swap_ab);
  // M = 65: the large tiles.
  EXPECT_EQ(gemm_plan(problem(65, 7168, 2048), T::kAuto, 0, h200).bn, 128);
  // Forced small tiles and their stage range; k128x64 is the mma.sync tile unless kWgmma.
  const fd::GemmPlan f32 = gemm_plan(problem(8, 4096, 1024), T::k128x32, 5, h200);
  EXPECT_TRUE(f32.wgmma && f32.swap_ab);
  EXPECT_EQ(f32.bn, 32);
  EXPECT_EQ(f32.stages, 5);
  EXPECT_EQ(gemm_plan(problem(8, 4096, 1024), T::k128x16, 12, h200).stages, 12);  // forced beyond the plan's 8
  EXPECT_EQ(gemm_plan(problem(8, 4096, 1024), T::k128x16, 0, h200).stages, 8);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k128x16, 13, h200), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k128x128, 7, h200, K::kWgmma), kjit::InvalidArgument);
  EXPECT_FALSE(gemm_plan(problem(8, 4096, 1024), T::k128x64, 0, h200).wgmma);
  const fd::GemmPlan w64 = gemm_plan(problem(8, 4096, 1024), T::k128x64, 0, h200, K::kWgmma);
  EXPECT_TRUE(w64.wgmma && w64.swap_ab);
  EXPECT_EQ(w64.bn, 64);
  EXPECT_EQ(w64.stages, 8);
  // The 64-row small tiles, forced: the wgmma kernel's (k64x64 only with kWgmma), swapped as the
  // 128-row ones.
  const fd::GemmPlan f16 = gemm_plan(problem(8, 7168, 1024), T::k64x16, 0, h200);
  EXPECT_TRUE(f16.wgmma && f16.swap_ab);
  EXPECT_EQ(f16.bm, 64);
  EXPECT_EQ(f16.bn, 16);
  EXPECT_EQ(f16.tiles_m, 112);
  EXPECT_EQ(gemm_plan(problem(8, 16384, 1024), T::k64x32, 0, h200).bm, 64);  // kept where 128 would be planned
  EXPECT_EQ(gemm_plan(problem(8, 16384, 1024), T::k64x32, 12, h200).stages, 12);
  EXPECT_EQ(gemm_plan(problem(8, 7168, 1024), T::k64x64, 0, h200, K::kWgmma).bm, 64);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k64x16, 0, h200, K::kMmaSync), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k64x32, 0, l40), kjit::Unsupported);
  // A forced small tile on a large problem runs persistent over N/BN tiles, unswapped.
  const fd::GemmPlan wide = gemm_plan(problem(4096, 4096, 1024), T::k128x16, 0, h200);
  EXPECT_FALSE(wide.swap_ab);
  EXPECT_EQ(wide.tiles_n, 256);
  EXPECT_EQ(wide.grid, 132);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k128x16, 0, h200, K::kMmaSync), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k128x32, 0, h200, K::kAuto, 1, 2), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(8, 4096, 1024), T::k128x16, 0, l40), kjit::Unsupported);
  // CTA pairs keep the large tiles (no swap); the mma.sync kernel never swaps.
  EXPECT_FALSE(gemm_plan(problem(8, 4096, 1024), T::kAuto, 0, h200, K::kAuto, 0, 2).swap_ab);
  EXPECT_FALSE(gemm_plan(problem(8, 4096, 1024), T::kAuto, 0, l40).swap_ab);
}

TEST(Fp8Plan, TilesAndStages) {
  // The mma.sync planner, on a device with H200's SM count and shared memory that has no wgmma.
  const kjit::DeviceInfo dev = device(10, 0, 132, 232448), l40 = l40s();
  auto tile = [](const fd::GemmPlan& p) { return std::to_string(p.bm) + "x" + std::to_string(p.bn); };
  EXPECT_EQ(tile(gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::kAuto, 0, dev)), "128x128");
  EXPECT_EQ(tile(gemm_plan(problem(256, 7168, 2048), f8::GemmTile::kAuto, 0, dev)), "128x128");  // 112 CTAs, 1 wave
  EXPECT_EQ(tile(gemm_plan(problem(512, 7168, 2048), f8::GemmTile::kAuto, 0, dev)), "128x128");
  EXPECT_EQ(tile(gemm_plan(problem(128, 4096, 7168), f8::GemmTile::kAuto, 0, dev)), "64x64");
  EXPECT_EQ(tile(gemm_plan(problem(1, 7168, 2048), f8::GemmTile::kAuto, 0, dev)), "64x64");
  EXPECT_EQ(tile(gemm_plan(problem(64, 7168, 2048), f8::GemmTile::kAuto, 0, dev)), "64x64");
  const fd::GemmPlan big = gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::kAuto, 0, dev);
  EXPECT_EQ(big.stages, 4);
  EXPECT_EQ(big.threads, 256);
  EXPECT_EQ(big.tiles_m, 32);
  EXPECT_EQ(big.smem_bytes, 4 * 32768);
  const fd::GemmPlan ada = gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::kAuto, 0, l40);
  EXPECT_EQ(ada.stages, 3);  // 4 × 32 KiB exceeds sm_89's 99 KiB
  EXPECT_LE(ada.smem_bytes, 101376);
  // Blockwise: 128x64 at most (32x32 warp tiles), 4 stages fit even sm_89.
  const fd::GemmPlan blk = gemm_plan(problem(4096, 4096, 4096, true), f8::GemmTile::kAuto, 0, l40);
  EXPECT_EQ(tile(blk), "128x64");
  EXPECT_EQ(blk.stages, 4);
  EXPECT_EQ(blk.threads, 256);
  EXPECT_EQ(blk.smem_bytes, 4 * (24576 + 640));
  EXPECT_EQ(tile(gemm_plan(problem(256, 512, 1024, true), f8::GemmTile::kAuto, 0, dev)), "64x64");
  EXPECT_EQ(gemm_plan(problem(256, 512, 1024, true), f8::GemmTile::kAuto, 0, dev).threads, 128);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096, true), f8::GemmTile::k128x128, 0, dev),
               kjit::InvalidArgument);
  const fd::GemmPlan small = gemm_plan(problem(33, 65, 48), f8::GemmTile::k64x64, 2, dev);
  EXPECT_EQ(small.stages, 2);
  EXPECT_EQ(small.threads, 128);
  EXPECT_EQ(small.tiles_m, 1);
  EXPECT_EQ(small.tiles_n, 2);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::k128x128, 4, l40), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::kAuto, 5, dev), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::kAuto, 1, dev), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::kAuto, 0, device(9, 0, 132, 40000)),
               kjit::Unsupported);
  const fd::GemmPlan forced = gemm_plan(problem(4096, 4096, 4096), f8::GemmTile::k128x64, 3, dev);
  const kjit::ParamMap params = f8::gemm_family().params_of(forced.choice.point);
  EXPECT_EQ(params.at("tile"), "128x64");
  EXPECT_EQ(params.at("stages"), "3");
  EXPECT_NO_THROW(f8::gemm_family().parse(params));
}

// The op's two planning phases (runtime/ops/fp8/gemm.hpp): what the first plan assumed about
// cluster residency, and that the second plan, given the capacities, keeps the kernel.
TEST(Fp8Plan, ClusterCapacityPhases) {
  using K = f8::GemmKernel;
  using T = f8::GemmTile;
  const kjit::DeviceInfo h = h200();
  fd::GemmDims d = problem(128, 4096, 8192);
  const fd::GemmPlan first = fd::plan_gemm(d, h);
  EXPECT_EQ(first.splits, 4);
  EXPECT_EQ(fd::gemm_assumed_cluster_size(first, d.force), 4);  // query sizes 2..4
  fd::GemmClusterCapacity capacity;
  capacity.clusters[2] = 66;
  capacity.clusters[3] = 44;
  capacity.clusters[4] = 29;
  const fd::GemmPlan second = fd::plan_gemm(d, h, capacity);
  EXPECT_EQ(second.splits, 3);
  EXPECT_EQ(second.grid, 32 * 3);
  EXPECT_EQ(second.choice.point, first.choice.point);  // same kernel: nothing new to compile
  // Nothing assumed: forced splits, persistent CTAs, the mma.sync kernel.
  EXPECT_EQ(fd::gemm_assumed_cluster_size(gemm_plan(d, T::kAuto, 0, h, K::kAuto, 4), {K::kAuto, T::kAuto, 0, 4, 0}), 0);
  EXPECT_EQ(fd::gemm_assumed_cluster_size(fd::plan_gemm(problem(4096, 4096, 4096), h), {}), 0);
  EXPECT_EQ(fd::gemm_assumed_cluster_size(fd::plan_gemm(problem(128, 4096, 7168), l40s()), {}), 0);
  // CTA pairs: the grid rests on the capacity for clusters of 2.
  fd::GemmForce pairs;
  pairs.multicast = 2;
  EXPECT_EQ(fd::gemm_assumed_cluster_size(gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h, K::kAuto, 0, 2), pairs), 2);
  // An empty output plans nothing, whatever the overrides.
  EXPECT_EQ(gemm_plan(problem(0, 4096, 4096), T::k128x256, 0, l40s()).choice.family, nullptr);
}

// Programmatic dependent launch: the wgmma kernel waits for the previous grid before it reads
// what that grid may write, so its launches ask to overlap it wherever the target has PDL; the
// mma.sync kernel does not wait, so it never overlaps. The launch carries the plan's shape, and
// split-K's cluster beside the PDL attribute.
TEST(Fp8Plan, LaunchConfigOverlapsThePreviousKernelOnHopper) {
  using K = f8::GemmKernel;
  using T = f8::GemmTile;
  const kjit::DeviceInfo h = h200(), l40 = l40s(), b200 = device(10, 0, 148, 232448);
  struct Case {
    int64_t m, n, k;
    int splits;  // of the plan, the launch's cluster size when > 1
  };
  // The decode shapes: small tiles (M 1, 16), split-K small tiles (N 4096 K 7168), the 70B
  // up-projection and a large persistent problem.
  for (const Case& c : {Case{1, 7168, 2048, 1}, Case{16, 7168, 2048, 1}, Case{1, 4096, 7168, 2},
                        Case{256, 28672, 8192, 1}, Case{4096, 4096, 4096, 1}}) {
    SCOPED_TRACE(testing::Message() << c.m << "x" << c.n << "x" << c.k);
    const fd::GemmPlan p = fd::plan_gemm(problem(c.m, c.n, c.k), h);
    ASSERT_TRUE(p.wgmma);
    EXPECT_EQ(p.splits, c.splits);
    const kjit::LaunchConfig lc = fd::gemm_launch_config(p, h);
    EXPECT_TRUE(lc.overlap_previous);
    EXPECT_EQ(lc.grid[0], static_cast<uint32_t>(p.grid));
    EXPECT_EQ(lc.block[0], 384u);
    EXPECT_EQ(lc.dynamic_smem_bytes, static_cast<uint32_t>(p.smem_bytes));
    EXPECT_EQ(lc.cluster[0], static_cast<uint32_t>(c.splits));
    // The same plan on a target without PDL (sm_80) does not ask for it.
    EXPECT_FALSE(fd::gemm_launch_config(p, device(8, 0, 108, 166912)).overlap_previous);
  }
  // CTA pairs: cluster of 2 and PDL in one launch.
  const fd::GemmPlan pairs = gemm_plan(problem(4096, 4096, 4096), T::kAuto, 0, h, K::kAuto, 0, 2);
  EXPECT_EQ(fd::gemm_launch_config(pairs, h).cluster[0], 2u);
  EXPECT_TRUE(fd::gemm_launch_config(pairs, h).overlap_previous);
  // The mma.sync kernel: forced on the H200, planned on sm_89 and sm_100 (no wgmma there).
  const fd::GemmPlan mma = gemm_plan(problem(128, 4096, 7168), T::kAuto, 0, h, K::kMmaSync);
  ASSERT_FALSE(mma.wgmma);
  EXPECT_FALSE(fd::gemm_launch_config(mma, h).overlap_previous);
  EXPECT_EQ(fd::gemm_launch_config(mma, h).cluster[0], 1u);
  for (const kjit::DeviceInfo& info : {l40, b200}) {
    const fd::GemmPlan p = fd::plan_gemm(problem(1, 7168, 2048), info);
    ASSERT_FALSE(p.wgmma);
    EXPECT_FALSE(fd::gemm_launch_config(p, info).overlap_previous);
  }
}

// GemmArgs::b_constant marks the weight constant, whichever operand of the kernel it becomes
// (the small tiles' swap, the column-major D's swap, both); by default nothing is.
TEST(Fp8Plan, ConstantWeightReachesTheKernelsOperand) {
  const kjit::DeviceInfo h = h200();
  auto kernel_params = [&](f8::GemmArgs a) {
    const fd::GemmDims d = fd::validate_gemm(a);
    return fd::sm90_params(d, fd::plan_gemm(d, h));
  };
  f8::GemmArgs a = problem_args(1, 7168, 2048);  // small tile, swapped: the weight is the kernel's A
  EXPECT_EQ(kernel_params(a).const_a, 0);
  EXPECT_EQ(kernel_params(a).const_b, 0);
  a.b_constant = true;
  EXPECT_EQ(kernel_params(a).const_a, 1);
  EXPECT_EQ(kernel_params(a).const_b, 0);
  a = problem_args(256, 28672, 8192);  // large tiles, not swapped: the weight is the kernel's B
  a.b_constant = true;
  EXPECT_EQ(kernel_params(a).const_a, 0);
  EXPECT_EQ(kernel_params(a).const_b, 1);
  // Column-major D: validation swaps (the weight becomes A'), a large M keeps it there.
  a.d = TensorRef(fake_ptr(0x20000000), DType::kBF16, {256, 28672}, {1, 256}, 0);
  EXPECT_EQ(kernel_params(a).const_a, 1);
  EXPECT_EQ(kernel_params(a).const_b, 0);
  // Column-major D with M = 8: validation's swap puts the weight on A' and the 8 rows on N', the
  // small side already, so the planner does not swap back.
  a = problem_args(8, 4096, 7168);
  a.b_constant = true;
  a.d = TensorRef(fake_ptr(0x20000000), DType::kBF16, {8, 4096}, {1, 8}, 0);
  EXPECT_EQ(kernel_params(a).const_a, 1);
  EXPECT_EQ(kernel_params(a).const_b, 0);
}

// Deliberate: a tile outside the GemmTile values is rejected whichever kernel runs (the wgmma
// path used to take it as kAuto).
// The wave-fitting tiles: at M ≤ 256 the planner takes the weight-side height whose tiles make
// whole waves of the 132 SMs (the decoder layer's GEMMs, N × K), persistent, with no staging
// boxes and the deepest ring that fits; above M = 256 and for N ≤ 64 the plan is as before.
TEST(Fp8Plan, WaveFittingTilesAtDecodeM) {
  using T = f8::GemmTile;
  using K = f8::GemmKernel;
  const kjit::DeviceInfo h = h200();
  struct Case {
    int64_t m, n, k;
    int bn, grid, stages;
  };
  for (const Case& c : {Case{128, 10240, 8192, 80, 128, 6},    // QKV: 128 tiles, not 80 of 128 rows
                        Case{65, 10240, 8192, 80, 128, 6},     // the first M past the small tiles
                        Case{256, 10240, 8192, 160, 128, 6},   // two tile rows of 64 tiles
                        Case{128, 28672, 8192, 224, 128, 5},   // 128 tiles, not 112 of 256 rows
                        Case{128, 57344, 8192, 224, 132, 5},   // 256 tiles: 2 waves, not 448 of 128 in 4
                        Case{256, 57344, 8192, 224, 132, 5},   // 512 tiles: 4 waves (256 rows: 448 in 4)
                        }) {
    SCOPED_TRACE(testing::Message() << c.m << "x" << c.n << "x" << c.k);
    const fd::GemmPlan p = fd::plan_gemm(problem(c.m, c.n, c.k), h);
    ASSERT_TRUE(p.wgmma);
    EXPECT_FALSE(p.swap_ab);
    EXPECT_EQ(p.bm, 128);
    EXPECT_EQ(p.bn, c.bn);
    EXPECT_EQ(p.splits, 1);
    EXPECT_EQ(p.cluster_m, 1);
    EXPECT_EQ(p.grid, c.grid);
    EXPECT_EQ(p.stages, c.stages);
    EXPECT_EQ(p.smem_bytes, f8::sm90_smem_bytes(128, c.bn, c.stages));
    EXPECT_LE(p.smem_bytes, h.max_smem_per_block_optin);
    // The point names the tile as the family spells it, and it round-trips through the enum.
    const std::string name = "128x" + std::to_string(c.bn);
    EXPECT_EQ(f8::gemm_tile_name(f8::parse_gemm_tile(name)), name);
    EXPECT_EQ(f8::gemm_family().value(p.choice.point, "tile").text, name);
    // Direct stores: no TMA boxes for D.
    EXPECT_EQ(fd::sm90_params(problem(c.m, c.n, c.k), p).tma_store, 0);
  }
  // Above M = 256, and where split-K fills the SMs (N = 8192, K = 28672 at M = 128: 64 tiles of
  // 128 x 128 in clusters of 2), and for N ≤ 64 after the swap: as before.
  EXPECT_EQ(fd::plan_gemm(problem(4096, 10240, 8192), h).bn, 256);
  // K = 2048 (16 k-tiles, too few for split-K's two slices): 128 x 128, not a wave-fitting tile.
  EXPECT_EQ(fd::plan_gemm(problem(256, 7168, 2048), h).bn, 128);
  EXPECT_FALSE(f8::sm90_wave_tile(fd::plan_gemm(problem(512, 10240, 8192), h).bn));
  const fd::GemmPlan split = fd::plan_gemm(problem(128, 8192, 28672), h);
  EXPECT_EQ(split.bn, 128);
  EXPECT_EQ(split.splits, 2);
  EXPECT_EQ(split.cluster_m, 1);
  const fd::GemmPlan small = fd::plan_gemm(problem(16, 10240, 8192), h);
  EXPECT_TRUE(small.swap_ab);
  EXPECT_TRUE(f8::sm90_small_tile(small.bn));
  // Forced splits keep the staged tiles (the wave-fitting ones have none); so do pairs at K = 1024.
  const fd::GemmPlan split2 = gemm_plan(problem(190, 77, 144), T::kAuto, 0, h, K::kAuto, 2);
  EXPECT_EQ(split2.splits, 2);
  EXPECT_FALSE(f8::sm90_wave_tile(split2.bn));
  EXPECT_FALSE(f8::sm90_wave_tile(gemm_plan(problem(190, 1000, 1024), T::kAuto, 0, h, K::kAuto, 0, 2).bn));
  // Forced: every wave-fitting tile plans at any M, persistent only (no split-K).
  for (const T t : {T::k128x80, T::k128x96, T::k128x112, T::k128x160, T::k128x192, T::k128x224}) {
    SCOPED_TRACE(f8::gemm_tile_name(t));
    const fd::GemmPlan p = gemm_plan(problem(1000, 1008, 1024), t, 0, h);
    EXPECT_TRUE(p.wgmma);
    EXPECT_FALSE(p.swap_ab);  // M < N: a small tile would swap; these store D as is
    EXPECT_FALSE(gemm_plan(problem(8, 1008, 1024), t, 0, h).swap_ab);
    EXPECT_EQ(p.bn, fd::gemm_tile_shape(t).bn);
    EXPECT_EQ(p.splits, 1);
    EXPECT_THROW(gemm_plan(problem(128, 10240, 8192), t, 0, h, K::kAuto, 2), kjit::InvalidArgument);
    // CTA pairs share B over them: each CTA loads BN / 2 rows, whole swizzle atoms.
    const fd::GemmPlan paired = gemm_plan(problem(256, 10240, 8192), t, 0, h, K::kAuto, 0, 2);
    EXPECT_EQ(paired.cluster_m, 2);
    EXPECT_EQ(paired.bn, fd::gemm_tile_shape(t).bn);
    EXPECT_EQ(fd::gemm_tile_shape(t).bn / 2 % 8, 0);
    EXPECT_THROW(gemm_plan(problem(128, 10240, 8192), t, 0, h, K::kMmaSync), kjit::InvalidArgument);
    // Planned: the deepest ring up to kSm90LargeTileStages that fits; deeper ones (up to
    // kSm90LargeTileMaxStages) when forced and they fit.
    const int bn = fd::gemm_tile_shape(t).bn, optin = h.max_smem_per_block_optin;
    const int planned = gemm_plan(problem(128, 10240, 8192), t, 0, h).stages;
    EXPECT_LE(planned, f8::kSm90LargeTileStages);
    EXPECT_TRUE(planned == f8::kSm90LargeTileStages || f8::sm90_smem_bytes(128, bn, planned + 1) > optin);
    if (f8::sm90_smem_bytes(128, bn, 7) <= optin) {
      EXPECT_EQ(gemm_plan(problem(128, 10240, 8192), t, 7, h).stages, 7);
    } else {
      EXPECT_THROW(gemm_plan(problem(128, 10240, 8192), t, 7, h), kjit::InvalidArgument);
    }
    EXPECT_THROW(gemm_plan(problem(128, 10240, 8192), t, 9, h), kjit::InvalidArgument);
  }
  // The family rejects a wave-fitting tile on the mma.sync kernel and more than 8 stages.
  const kjit::Family& f = f8::gemm_family();
  auto parse_error = [&](const kjit::ParamMap& pm) -> std::string {
    try {
      f.parse(pm);
    } catch (const kjit::InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  kjit::ParamMap pm{{"impl", "mma"}, {"a", "e4m3"},      {"b", "e4m3"},    {"out", "bf16"},   {"scale", "tensor"},
                    {"tile", "128x80"}, {"stages", "3"}, {"a_major", "k"}, {"b_major", "k"}};
  EXPECT_NE(parse_error(pm).find("are wgmma tiles"), std::string::npos) << parse_error(pm);
  pm["impl"] = "wgmma";
  EXPECT_EQ(parse_error(pm), "");
  pm["stages"] = "8";
  EXPECT_EQ(parse_error(pm), "");
  pm["stages"] = "9";
  EXPECT_NE(parse_error(pm).find("2..8 stages"), std::string::npos) << parse_error(pm);
}

// One 128-row tile row (64 < M ≤ 128) in CTA pairs of 64-row halves sharing each 128-row weight
// tile, where 2 · ceil(N / 128) CTAs fill between half and all the SMs over at most 64 k-tiles;
// elsewhere the plans of before (split-K, the wave-fitting tiles, the small tiles).
TEST(Fp8Plan, PairsOfHalfTilesAtOneTileRow) {
  using T = f8::GemmTile;
  using K = f8::GemmKernel;
  const kjit::DeviceInfo h = h200();
  for (const int64_t m : {65, 100, 128}) {
    SCOPED_TRACE(m);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{8192, 8192}, {7168, 2048}}) {
      const fd::GemmPlan p = fd::plan_gemm(problem(m, n, k), h);
      EXPECT_TRUE(p.wgmma);
      EXPECT_FALSE(p.swap_ab);
      EXPECT_EQ(p.bm, 64);
      EXPECT_EQ(p.bn, 128);
      EXPECT_EQ(p.cluster_m, 2);
      EXPECT_EQ(p.splits, 1);
      EXPECT_EQ(p.tiles_m, 2);
      EXPECT_EQ(p.grid, 2 * ((n + 127) / 128));  // one pair per weight tile, all resident
      EXPECT_EQ(fd::gemm_assumed_cluster_size(p, p.force), 2);  // refined with the real capacity
      EXPECT_EQ(f8::gemm_family().value(p.choice.point, "tile").text, "64x128");
    }
  }
  // Fewer pairs than half the SMs (N = 4096), more than the SMs (N = 10240, 57344), K past 64
  // k-tiles (28672), M = 256 or ≤ 64, a forced tile, split count or multicast = 1: no pairs.
  EXPECT_EQ(fd::plan_gemm(problem(128, 4096, 7168), h).cluster_m, 1);
  EXPECT_EQ(fd::plan_gemm(problem(128, 10240, 8192), h).cluster_m, 1);
  EXPECT_EQ(fd::plan_gemm(problem(128, 57344, 8192), h).cluster_m, 1);
  EXPECT_EQ(fd::plan_gemm(problem(128, 8192, 28672), h).cluster_m, 1);
  EXPECT_EQ(fd::plan_gemm(problem(256, 8192, 8192), h).cluster_m, 1);
  EXPECT_EQ(fd::plan_gemm(problem(64, 8192, 8192), h).cluster_m, 1);
  EXPECT_EQ(gemm_plan(problem(128, 8192, 8192), T::k128x128, 0, h).cluster_m, 1);
  EXPECT_EQ(gemm_plan(problem(128, 8192, 8192), T::kAuto, 0, h, K::kAuto, 2).cluster_m, 1);
  EXPECT_EQ(gemm_plan(problem(128, 8192, 8192), T::kAuto, 0, h, K::kAuto, 0, 1).splits, 2);
  // Forced pairs at one tile row take the same 64-row tile; a forced 64-row tile pairs as asked.
  EXPECT_EQ(gemm_plan(problem(128, 4096, 7168), T::kAuto, 0, h, K::kAuto, 0, 2).bm, 64);
  EXPECT_EQ(gemm_plan(problem(333, 4096, 7168), T::k64x224, 0, h, K::kAuto, 0, 2).tiles_m, 6);
  // A device without clusters (sm_89) has no wgmma and no pairs.
  EXPECT_EQ(fd::plan_gemm(problem(128, 8192, 8192), l40s()).cluster_m, 1);
}

// CTA pairs sharing A (GemmArgs::multicast = 3): forced only. The pair takes adjacent tile
// columns (GemmPlan::cluster_n = 2, the kernel's Params too), over the tile chosen as unpaired
// among the large and wave-fitting ones, persistent; the grid is two CTAs per tile pair up to
// the resident clusters of 2; the launch is a cluster of 2 with PDL. The planner never picks it.
TEST(Fp8Plan, ForcedPairsSharingA) {
  using T = f8::GemmTile;
  using K = f8::GemmKernel;
  const kjit::DeviceInfo h = h200();
  // 8192 x 8192 at M = 256 in 128x128 tiles: 2 x 64 tiles, 2 x 32 pairs, 128 CTAs.
  const fd::GemmPlan p = gemm_plan(problem(256, 8192, 8192), T::k128x128, 0, h, K::kAuto, 0, 3);
  EXPECT_TRUE(p.wgmma);
  EXPECT_FALSE(p.swap_ab);
  EXPECT_EQ(p.bm, 128);
  EXPECT_EQ(p.bn, 128);
  EXPECT_EQ(p.cluster_m, 1);
  EXPECT_EQ(p.cluster_n, 2);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.tiles_m, 2);
  EXPECT_EQ(p.tiles_n, 64);
  EXPECT_EQ(p.grid, 128);
  EXPECT_EQ(p.stages, 6);
  EXPECT_EQ(fd::gemm_assumed_cluster_size(p, p.force), 2);
  const kjit::LaunchConfig lc = fd::gemm_launch_config(p, h);
  EXPECT_EQ(lc.grid[0], 128u);
  EXPECT_EQ(lc.cluster[0], 2u);
  EXPECT_TRUE(lc.overlap_previous);
  const kjit::fp8::GemmSm90Params kp = fd::sm90_params(problem(256, 8192, 8192), p);
  EXPECT_EQ(kp.cluster_m, 1);
  EXPECT_EQ(kp.cluster_n, 2);
  EXPECT_EQ(kp.splits, 1);
  // The capacity for clusters of 2 bounds the grid.
  fd::GemmClusterCapacity pairs60;
  pairs60.clusters[2] = 60;
  EXPECT_EQ(gemm_plan(problem(256, 8192, 8192), T::k128x128, 0, h, K::kAuto, 0, 3, pairs60).grid, 120);
  // An odd tile column count: 128x80 over N = 1000 is 13 columns, 7 pairs a tile row, 2 rows.
  const fd::GemmPlan odd = gemm_plan(problem(200, 1000, 4224), T::k128x80, 0, h, K::kAuto, 0, 3);
  EXPECT_EQ(odd.tiles_n, 13);
  EXPECT_EQ(odd.cluster_n, 2);
  EXPECT_EQ(odd.grid, 2 * 7 * 2);
  // The 64-row tiles pair on A too (each CTA loads 32 rows of A).
  const fd::GemmPlan half = gemm_plan(problem(100, 1000, 2176), T::k64x128, 0, h, K::kAuto, 0, 3);
  EXPECT_EQ(half.bm, 64);
  EXPECT_EQ(half.cluster_n, 2);
  EXPECT_EQ(half.cluster_m, 1);
  EXPECT_EQ(half.grid, 2 * 4 * 2);  // 2 tile rows x 8 columns: 4 pairs a row
  // Unforced tile: the unpaired choice among the large tiles (not B-pairs' 64x128 at M ≤ 128),
  // never split-K (M = 128, N = 4096, K = 7168 splits 3 unpaired), never a small tile or swapped
  // (M = 16: the planner's 128x16 with the operands swapped, unpaired).
  const fd::GemmPlan one_row = gemm_plan(problem(128, 8192, 8192), T::kAuto, 0, h, K::kAuto, 0, 3);
  EXPECT_EQ(one_row.bm, 128);
  EXPECT_EQ(one_row.cluster_n, 2);
  EXPECT_EQ(one_row.splits, 1);
  const fd::GemmPlan no_split = gemm_plan(problem(128, 4096, 7168), T::kAuto, 0, h, K::kAuto, 0, 3);
  EXPECT_EQ(no_split.splits, 1);
  EXPECT_EQ(no_split.cluster_n, 2);
  const fd::GemmPlan skinny = gemm_plan(problem(16, 7168, 2048), T::kAuto, 0, h, K::kAuto, 0, 3);
  EXPECT_FALSE(skinny.swap_ab);
  EXPECT_EQ(skinny.bm, 128);
  EXPECT_GE(skinny.bn, 80);
  EXPECT_EQ(skinny.cluster_n, 2);
  // Refused: split-K, the mma.sync kernel, a small tile (InvalidArgument, before the device);
  // a device without wgmma and clusters (sm_89: Unsupported, as multicast = 2).
  EXPECT_THROW(gemm_plan(problem(256, 8192, 8192), T::kAuto, 0, h, K::kAuto, 2, 3), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(256, 8192, 8192), T::kAuto, 0, h, K::kMmaSync, 0, 3), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(256, 8192, 8192), T::k128x64, 0, h, K::kWgmma, 0, 3), kjit::InvalidArgument);
  EXPECT_THROW(gemm_plan(problem(256, 8192, 8192), T::kAuto, 0, l40s(), K::kAuto, 0, 3), kjit::Unsupported);
  // Never planned: the decode shapes at M = 64, 128, 256 and others take no A-pairs.
  for (const int64_t m : {1, 64, 128, 256, 2048}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{8192, 8192}, {8192, 28672}, {10240, 8192}, {57344, 8192},
                               {7168, 2048}, {4096, 7168}}) {
      EXPECT_EQ(fd::plan_gemm(problem(m, n, k), h).cluster_n, 1) << m << " " << n << " " << k;
    }
  }
}

TEST(Fp8Plan, RejectsTileOutsideTheEnum) {
  const auto bad = static_cast<f8::GemmTile>(static_cast<int>(f8::GemmTile::k64x256) + 1);
  for (const kjit::DeviceInfo& info : {h200(), l40s()}) {
    try {
      gemm_plan(problem(4096, 4096, 4096), bad, 0, info);
      ADD_FAILURE() << "accepted";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("tile is not a GemmTile value"), std::string::npos) << e.what();
    }
  }
}

// Linear owns its memory through a move-only member: moves are the defaulted ones and noexcept.
static_assert(std::is_nothrow_move_constructible_v<f8::Linear> && std::is_nothrow_move_assignable_v<f8::Linear>);
static_assert(!std::is_copy_constructible_v<f8::Linear> && !std::is_copy_assignable_v<f8::Linear>);

TEST(Fp8Plan, QuantizeLaunches) {
  using G = f8::Granularity;
  fd::QuantizeDims q = fd::QuantizeOp::validate(quantize_args(G::kTensor));
  fd::QuantizePlan p = fd::QuantizeOp::plan(q, h200());
  EXPECT_TRUE(p.zero_amax);
  ASSERT_EQ(p.steps, 1);
  EXPECT_EQ(p.step[0].kernel, 0);
  EXPECT_EQ(p.step[0].block, 256u);
  EXPECT_EQ(p.step[0].grid[0], (kRows * kCols / 8 + 1023) / 1024);
  f8::QuantizeArgs a = quantize_args(G::kTensor);
  a.dynamic = true;
  q = fd::QuantizeOp::validate(a);
  p = fd::QuantizeOp::plan(q, h200());
  ASSERT_EQ(p.steps, 2);
  EXPECT_EQ(p.step[0].kernel, 2);  // amax pass first
  EXPECT_EQ(p.step[1].kernel, 1);
  // A large tensor still gets one CTA per 1024 vectors (no grid-stride wave).
  a = quantize_args(G::kTensor);
  a.x.shape[0] = a.y.shape[0] = 16384;
  a.x.shape[1] = a.y.shape[1] = 7168;
  a.x.strides[0] = a.y.strides[0] = 7168;
  p = fd::QuantizeOp::plan(fd::QuantizeOp::validate(a), h200());
  EXPECT_EQ(p.step[0].grid[0], 16384u * 7168u / 8u / 1024u);
  // Per row: a CTA per row sized to the row.
  a = quantize_args(G::kRow);
  a.x.shape[1] = a.y.shape[1] = 7168;
  a.x.strides[0] = a.y.strides[0] = 7168;
  p = fd::QuantizeOp::plan(fd::QuantizeOp::validate(a), h200());
  ASSERT_EQ(p.steps, 1);
  EXPECT_EQ(p.step[0].grid[0], uint32_t(kRows));
  EXPECT_EQ(p.step[0].block, 128u);  // 896 vectors / 8 cached per thread
  EXPECT_FALSE(p.zero_amax);
  // 1x128: 16 groups of 16 lanes per CTA, 4 blocks each → 64 blocks per CTA.
  p = fd::QuantizeOp::plan(fd::QuantizeOp::validate(quantize_args(G::kBlock1x128)), h200());
  EXPECT_EQ(p.step[0].grid[0], uint32_t((kRows * 3 + 63) / 64));
  p = fd::QuantizeOp::plan(fd::QuantizeOp::validate(quantize_args(G::kBlock128x128)), h200());
  EXPECT_EQ(p.step[0].grid[0], 3u);
  EXPECT_EQ(p.step[0].grid[1], 2u);
}

// --- families -------------------------------------------------------------------------------

TEST(Fp8Family, SpecsNameTheKernels) {
  const kjit::Family& q = f8::quantize_family();
  EXPECT_EQ(q.name, "fp8.quantize");
  EXPECT_EQ(q.min_sm, 89);
  kjit::ProgramSpec s = q.spec(quantize_params(f8::kInF32, f8::kFormatE5M2, f8::kGranTensor, true));
  ASSERT_EQ(s.name_expressions.size(), 4u);
  EXPECT_EQ(s.name_expressions[0], "kjit::fp8::quantize_tensor_kernel<2, 1, false, true>");
  EXPECT_EQ(s.name_expressions[1], "kjit::fp8::quantize_tensor_kernel<2, 1, true, true>");
  EXPECT_EQ(s.name_expressions[2], "kjit::fp8::amax_kernel<2>");
  EXPECT_EQ(s.name_expressions[3], "kjit::fp8::delayed_scaling_kernel<1>");
  s = q.spec(quantize_params(f8::kInBF16, f8::kFormatE4M3, f8::kGranBlock1x128, false));
  EXPECT_EQ(s.name_expressions.at(0), "kjit::fp8::quantize_block_kernel<0, 0, false>");
  EXPECT_EQ(s.source_name, "fp8/quantize.cu");
  EXPECT_THROW(q.spec({{"in", "bf16"}}), kjit::InvalidArgument);

  const kjit::Family& g = f8::gemm_family();
  EXPECT_EQ(g.name, "fp8.gemm");
  EXPECT_EQ(g.min_sm, 89);
  auto gp = [](const char* impl, const char* a, const char* out, const char* scale, const char* tile, const char* st,
               const char* am, const char* bm) {
    return kjit::ParamMap{{"impl", impl}, {"a", a},       {"b", "e4m3"},   {"out", out},    {"scale", scale},
                          {"tile", tile}, {"stages", st}, {"a_major", am}, {"b_major", bm}};
  };
  s = g.spec(gp("mma", "e5m2", "f32", "block", "128x64", "3", "m", "k"));
  ASSERT_EQ(s.name_expressions.size(), 1u);
  EXPECT_EQ(s.name_expressions[0], "kjit::fp8::gemm_kernel<1, 0, true, true, 128, 64, 3, true, false>");
  EXPECT_EQ(s.source_name, "fp8/gemm.cu");
  s = g.spec(gp("wgmma", "e5m2", "bf16", "tensor", "128x256", "4", "k", "k"));
  EXPECT_EQ(s.name_expressions.at(0), "kjit::fp8::gemm_sm90_kernel<1, 0, false, 128, 256, 4>");
  EXPECT_EQ(s.source_name, "fp8/gemm_sm90.cu");
  EXPECT_THROW(g.spec(gp("mma", "e4m3", "f32", "block", "128x128", "3", "k", "k")), kjit::InvalidArgument);
  EXPECT_THROW(g.spec(gp("mma", "e4m3", "f32", "tensor", "128x256", "3", "k", "k")), kjit::InvalidArgument);
  EXPECT_THROW(g.spec(gp("mma", "e4m3", "f32", "tensor", "128x128", "6", "k", "k")), kjit::InvalidArgument);
  EXPECT_THROW(g.spec(gp("wgmma", "e4m3", "f32", "block", "128x128", "4", "k", "k")), kjit::InvalidArgument);
  EXPECT_THROW(g.spec(gp("wgmma", "e4m3", "f32", "tensor", "128x128", "4", "m", "k")), kjit::InvalidArgument);
  EXPECT_THROW(g.spec(gp("mma", "e4m3", "f32", "tensor", "64x16", "4", "k", "k")), kjit::InvalidArgument);
  s = g.spec(gp("wgmma", "e4m3", "f32", "tensor", "64x64", "4", "k", "k"));  // a small wgmma tile
  EXPECT_EQ(s.name_expressions.at(0), "kjit::fp8::gemm_sm90_kernel<0, 0, true, 64, 64, 4>");
  EXPECT_THROW(g.spec(gp("wgmma", "e4m3", "f32", "tensor", "128x256", "9", "k", "k")), kjit::InvalidArgument);
  for (const auto& d : g.defaults) EXPECT_NO_THROW(g.spec(d));
  EXPECT_GE(g.defaults.size(), 2u);
  EXPECT_LE(g.defaults.size(), 18u);  // bounded: `kjit precompile` compiles each per arch
}

// Defaults for every arch the CI compiles, plus one specialization of each layout and format
// kind for sm_90a; ptxas must report no spills.
TEST(Fp8Family, CompilesWithoutSpills) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  auto gp = [](const char* a, const char* b, const char* out, const char* scale, const char* tile, const char* st,
               const char* am, const char* bm) {
    return kjit::ParamMap{{"impl", "mma"},  {"a", a},       {"b", b},        {"out", out},   {"scale", scale},
                          {"tile", tile},   {"stages", st}, {"a_major", am}, {"b_major", bm}};
  };
  std::vector<std::pair<const kjit::Family*, kjit::ParamMap>> extra = {
      {&f8::gemm_family(), gp("e4m3", "e4m3", "f32", "tensor", "128x128", "4", "m", "n")},
      {&f8::gemm_family(), gp("e5m2", "e4m3", "bf16", "tensor", "128x64", "3", "k", "n")},
      {&f8::gemm_family(), gp("e4m3", "e5m2", "bf16", "block", "128x64", "4", "m", "k")},
      {&f8::gemm_family(), gp("e5m2", "e5m2", "f32", "block", "64x64", "2", "m", "n")},
      {&f8::gemm_family(), kjit::ParamMap{{"impl", "wgmma"}, {"a", "e5m2"}, {"b", "e4m3"}, {"out", "f32"},
                                          {"scale", "tensor"}, {"tile", "128x256"}, {"stages", "3"},
                                          {"a_major", "k"}, {"b_major", "k"}}},
      {&f8::quantize_family(), quantize_params(f8::kInF32, f8::kFormatE5M2, f8::kGranRow, true)},
      {&f8::quantize_family(), quantize_params(f8::kInF16, f8::kFormatE4M3, f8::kGranBlock128x128, true)},
      {&f8::quantize_family(), quantize_params(f8::kInF32, f8::kFormatE4M3, f8::kGranBlock1x128, false)},
  };
  struct Job {
    std::string what;
    const kjit::Family* family;
    kjit::ParamMap params;
    kjit::Target target;
  };
  // The defaults already compile for every CI arch in kernels.families_compile_test; here only
  // the non-default corners of the space, on the arch that runs them (keeps CI time down).
  std::vector<Job> work;
  for (const char* arch : {"sm_90a"}) {
    const kjit::Target t = kjit::Target::parse(arch);
    const auto& list = extra;
    for (const auto& [family, params] : list) {
      // The wgmma kernel is a trap stub off sm_90a (the lead's family test still compiles it).
      if (params.count("impl") && params.at("impl") == "wgmma" && std::string(arch) != "sm_90a") continue;
      std::string what = std::string(arch) + " " + family->name;
      for (const auto& [k, v] : params) what += " " + k + "=" + v;
      work.push_back({what, family, params, t});
    }
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) {
      const Job& j = work[i];
      try {
        const auto prog = rt.compile(j.family->spec(j.params), j.target);
        std::lock_guard<std::mutex> lock(mutex);
        EXPECT_FALSE(prog->binary.empty()) << j.what;
        for (const auto& k : prog->kernels) {
          EXPECT_LE(k.spill_bytes, 0) << j.what << ": " << k.name_expression << " spills " << k.spill_bytes << " bytes";
          std::printf("%s: %s regs=%d spill=%d smem=%d\n", j.what.c_str(), k.name_expression.c_str(), k.registers,
                      k.spill_bytes, k.static_smem);
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        ADD_FAILURE() << j.what << ": " << e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  for (unsigned i = 0; i < n; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

}  // namespace
