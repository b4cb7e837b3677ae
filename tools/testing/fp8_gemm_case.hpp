#pragma once
/// \file fp8_gemm_case.hpp
/// One check of kjit::fp8::gemm against the float64 reference (reference_fp8.hpp), run by the GPU
/// suite (tests/gpu/fp8_test.cc) and by the sm90 emulator (tests/emulation/sm90/): fresh random
/// fp8 operands (every finite value of the format) and dequant scales (not powers of two), the
/// operands stored with 16-byte-multiple strides (more when padded) whose padding holds NaN
/// bytes, D poisoned with 0xFF and its padding checked unwritten afterwards.

#include <kjit/ops/fp8.hpp>

#include "tools/testing/compare.hpp"

#include <cstdint>
#include <string>

namespace kjit::testing {

/// How the case scales A and B: one scale each, one per row of A and of B, or per 128-block
/// (ScaleMode::kBlockwise).
enum class GemmScales { kTensor, kChannel, kBlock };

/// One FP8 GEMM call D[m, n] = A[m, k] · B[n, k]ᵀ and its forced options (GemmArgs).
struct Fp8GemmCase {
  int64_t m = 0, n = 0, k = 0;
  bool a_trans = false, b_trans = false;  ///< A stored [k, m], B stored [k, n]
  DType fa = DType::kE4M3, fb = DType::kE4M3;
  DType out = DType::kBF16;
  GemmScales scales = GemmScales::kTensor;
  fp8::GemmTile tile = fp8::GemmTile::kAuto;
  int stages = 0;
  DType bias = DType::kU8;  ///< kU8: none
  bool d_colmajor = false;  ///< D stored column-major
  bool padded = true;       ///< strides beyond the rows' bytes, the padding poisoned
  fp8::GemmKernel kernel = fp8::GemmKernel::kAuto;
  int splits = 0;           ///< wgmma split-K (0: the planner's)
  int multicast = 0;        ///< wgmma CTA pairs (0: the planner's, 1 off, 2 sharing B, 3 sharing A)
  bool b_constant = false;  ///< GemmArgs::b_constant

  std::string describe() const;
};

/// What run_fp8_gemm_case found.
struct Fp8GemmResult {
  Comparison cmp;
  double tol = 0;               ///< relative L2 allowed: 2e-3 for f32 output, 1e-2 for bf16
  size_t padding_written = 0;   ///< bytes of D's padding the call changed
  int64_t n = 0;                ///< D's columns (for the worst element's row and column)
  bool ok() const { return cmp.ok(tol) && padding_written == 0; }
  /// The comparison, the worst element's row and column, and any padding written.
  std::string describe() const;
};

/// Runs case `c` with inputs from `seed` on the current device (or the stand-in driver), waits
/// for it, and compares D with the float64 reference.
Fp8GemmResult run_fp8_gemm_case(const Fp8GemmCase& c, uint64_t seed);

}  // namespace kjit::testing
