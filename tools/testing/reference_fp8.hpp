#pragma once
/// \file reference_fp8.hpp
/// Host references of the FP8 ops (include/kjit/ops/fp8.hpp): E4M3/E5M2 encode/decode bit-exact
/// with CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt), the quantize formulas (multiplier,
/// amax, scale_inv, fp8 bytes: bit-exact with the kernels, which do the same f32 operations) and a
/// float64 GEMM on the dequantized operands.

#include <kjit/runtime.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::testing {

enum class Fp8Format { kE4M3, kE5M2 };

/// "e4m3" / "e5m2".
const char* fp8_name(Fp8Format f);
/// 448 / 57344.
float fp8_max(Fp8Format f);

/// float → fp8 byte, as __nv_cvt_float_to_fp8(x, __NV_SATFINITE, f): round to nearest even on
/// the format's value grid; |x| above the largest finite value by at least half an ulp of it
/// (E4M3: > 464; E5M2: ≥ 61440) and ±inf give ±max; |x| ≤ half the smallest denormal gives ±0;
/// NaN gives the canonical NaN 0x7f (sign dropped, as CUDA's software path does).
uint8_t fp8_encode(float x, Fp8Format f);
/// fp8 byte → float (exact): E4M3 0x7f/0xff are NaN; E5M2 0x7c/0xfc are ±inf, 0x7d..0x7f NaN.
float fp8_decode(uint8_t v, Fp8Format f);
/// True when `v` encodes NaN in `f`.
bool fp8_is_nan(uint8_t v, Fp8Format f);

/// The documented multiplier of a group with amax `amax` (f32 arithmetic, as the kernels):
/// fmt_max / amax for 0 < amax < inf (clamped to FLT_MAX), else 1; pow2 keeps the exponent only.
float fp8_multiplier_from_amax(float amax, Fp8Format f, bool pow2);
/// `m` with the power-of-two rounding applied when `pow2`.
float fp8_round_multiplier(float m, bool pow2);

/// The delayed-scaling update (include/kjit/ops/fp8.hpp, Recipe::kDelayed) in the kernel's f32
/// arithmetic: with h = max(history), (fmt_max / h) / 2^margin clamped to [FLT_MIN, FLT_MAX]
/// when 0 < h < inf, else `current`.
float fp8_delayed_multiplier(const std::vector<float>& history, float current, Fp8Format f, int margin);

/// Granularities, numbered as kjit::fp8::Granularity.
enum class Fp8Granularity { kTensor, kRow, kBlock1x128, kBlock128x128 };

/// What quantize must produce for `x` ([rows][cols] floats that are exact in the input dtype).
struct Fp8QuantizeReference {
  std::vector<uint8_t> y;          ///< [rows][cols]
  std::vector<float> amax;         ///< per group (row-major over the group grid); [1] for kTensor
  std::vector<float> scale_inv;    ///< per group, 1 / multiplier
  std::vector<float> multiplier;   ///< per group
  int64_t group_rows = 1;          ///< the group grid: [group_rows][group_cols]
  int64_t group_cols = 1;
};

/// The reference quantization. kTensor: `dynamic` computes the multiplier from the tensor's
/// amax, else `multiplier` is used (rounded when pow2). Other granularities compute theirs.
Fp8QuantizeReference fp8_quantize_reference(const std::vector<float>& x, int64_t rows, int64_t cols, Fp8Format f,
                                            Fp8Granularity g, bool pow2, bool dynamic = false,
                                            float multiplier = 1.f);

/// One randomized quantize launch of bf16 `x` (see run_quantize_case).
struct QuantizeCase {
  int64_t rows = 128;
  int64_t cols = 512;  ///< a multiple of 16
  Fp8Format format = Fp8Format::kE4M3;
  /// kTensor runs dynamic (the multiplier from this call's amax); the others compute theirs.
  Fp8Granularity granularity = Fp8Granularity::kRow;

  /// "128x512 bf16->e4m3 row".
  std::string describe() const;
};

/// What run_quantize_case found: outputs that differ from fp8_quantize_reference bit for bit.
struct QuantizeCaseResult {
  size_t bad_bytes = 0;     ///< y bytes (NaN matches NaN of the format)
  size_t bad_groups = 0;    ///< groups whose amax or scale_inv differs
  size_t written_past = 0;  ///< amax / scale_inv elements past the groups that lost their poison
  uint64_t seed = 0;
  bool ok() const { return bad_bytes == 0 && bad_groups == 0 && written_past == 0; }
  std::string describe() const;
};

/// Builds `c` from `seed` (x ~ N(0, 1) · (1 + i mod 97) in bf16: groups of unlike ranges), runs
/// kjit::fp8::quantize with amax and scale_inv on the default stream of the current context's
/// device (testing::current_device; y, amax and scale_inv 0xFF-poisoned, one poisoned element
/// past the groups), synchronizes and compares every output with fp8_quantize_reference.
/// Throws what quantize throws.
QuantizeCaseResult run_quantize_case(const QuantizeCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

/// A GEMM problem in logical layout: a [m][k], b [n][k] fp8 bytes (row-major host copies).
struct Fp8GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  Fp8Format fa = Fp8Format::kE4M3, fb = Fp8Format::kE4M3;
  std::vector<uint8_t> a;   ///< [m][k]
  std::vector<uint8_t> b;   ///< [n][k]
  bool block = false;       ///< blockwise scales
  /// Tensorwise: [1] or [m] / [1] or [n]. Blockwise: [m][k/128] / [ceil(n/128)][k/128].
  std::vector<float> scale_a;
  std::vector<float> scale_b;
  std::vector<double> bias; ///< [n] or empty
};

/// D[m][n] in float64 on the dequantized operands: Σ_k (A·sa)(B·sb) (+ bias[n]), with the scale
/// of each element's row / column / block. Multithreaded over rows.
std::vector<double> fp8_gemm_reference(const Fp8GemmProblem& p);

}  // namespace kjit::testing
