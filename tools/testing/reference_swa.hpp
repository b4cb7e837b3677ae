#pragma once
/// \file reference_swa.hpp
/// Float64 reference of kjit::mla::swa_decode (include/kjit/ops/swa_decode.hpp) — gather each
/// token's window, dequantize, masked SDPA, as a PyTorch version does, in double precision — and a
/// random problem runner that the GPU tests, `kjit selftest` and the host emulator share.
///
/// Rounding: like a bf16 PyTorch version, the reference dequantizes each cached value as
///   k = round_to_bf16(fp8_value · inv_scale)
/// (`(kv_raw.to(bf16) * inv_scales).to(bf16)` in PyTorch: the fp8·bf16 product is exact in
/// f32, so that is one round-to-nearest-even to bf16) and then does everything else in float64.
/// The kernel multiplies the exact fp8 values and applies inv_scale in f32, so it differs from
/// this reference by that rounding: ~2^-9 relative per cached value, random in sign.

#include <kjit/ops/swa_decode.hpp>
#include <kjit/runtime.hpp>

#include "tools/testing/compare.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::testing {

// Fp8Format comes from reference_fp8.hpp (one definition, so a test may use both references).

/// The value of fp8 byte `b` (E4M3 "fn": no inf, 0x7f/0xff NaN; E5M2: IEEE-like).
double fp8_value(uint8_t b, Fp8Format format);
/// The fp8 byte nearest to `v` (ties to even), saturating to the largest finite value.
uint8_t fp8_encode(double v, Fp8Format format);
/// Rounds `v` to the nearest bf16 (ties to even), as a double.
double round_to_bf16(double v);

/// A decode problem as compact host arrays of the exact values the device sees.
struct SwaProblem {
  int64_t tokens = 0;      ///< T
  int64_t heads = 0;       ///< NH
  int64_t head_dim = 512;  ///< HD
  int64_t window = 0;      ///< W
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  Fp8Format format = Fp8Format::kE4M3;
  std::vector<float> q;           ///< [T][NH][HD], bf16 values
  std::vector<uint8_t> kv;        ///< [num_blocks][block_size][HD] fp8 bytes
  std::vector<float> inv_scale;   ///< [num_blocks · block_size], bf16 values
  std::vector<int64_t> indices;   ///< [T][W] slot ids, negative = masked
  std::vector<int64_t> lens;      ///< [T], any value (clamped to [0, W] as the op does)
  double scale = 0;               ///< softmax scale (resolved: never 0)
};

/// Reference outputs of a SwaProblem.
struct SwaReference {
  /// [T][NH][HD]: Σ_j p_j k_j over the valid window positions, zeros for a row with none.
  std::vector<double> out;
  /// [T][NH]: natural-log log-sum-exp of the valid scaled scores; −inf when there are none.
  std::vector<double> lse;
  /// [T]: the number of valid positions of each token (for describing cases).
  std::vector<int64_t> valid;
};

/// Computes the reference in float64 (max-subtracted exponentials; position j of token t is
/// valid when j < clamp(lens[t], 0, W) and indices[t][j] ≥ 0). Multithreaded over tokens.
/// `round_dequant` false skips that bf16 rounding of fp8 · inv_scale (the exact function,
/// which is what the kernel computes up to f32/f16 arithmetic): tests report both distances.
SwaReference swa_reference(const SwaProblem& problem, bool round_dequant = true);

/// One randomized swa_decode launch (see make_swa_problem / run_swa_case).
struct SwaCase {
  int tokens = 8;
  int heads = 128;
  int window = 128;
  int block_size = 256;
  /// Cache blocks; 0 = enough that the slots drawn are spread over many blocks (≥ 2 · T · W
  /// slots, at least 4 blocks).
  int num_blocks = 0;
  Fp8Format format = Fp8Format::kE4M3;
  /// Pass an E4M3 cache as DType::kU8 (raw bytes in a uint8 tensor) instead of kE4M3.
  bool u8_cache = true;
  /// Lengths: kFull = W; kRandom = uniform in [0, W]; kEdges = cycling 0, 1, W − 1, W, W + 5
  /// (clamped), −3 (clamped to 0), then random.
  enum class Lens { kFull, kRandom, kEdges } lens = Lens::kFull;
  bool lens_i32 = false;
  /// Fraction of window positions whose index is negative (−1 or another negative value).
  double invalid_fraction = 0.0;
  /// When T > 1, token 1's indices are all negative (an empty row: zeros, lse −inf).
  bool all_invalid_row = false;
  /// Draw every index from a pool of 5 slots, so rows repeat slots.
  bool repeated = false;
  /// fp8 bytes: false = round(N(0, 1) · 4) to fp8; true = uniform over every finite code
  /// (magnitudes from the smallest subnormal to the largest value).
  bool full_range = false;
  /// inv_scale: log-uniform in [scale_lo, scale_hi]; with mixed_scales, each slot picks
  /// 1e-3 · U(1, 2) or 300 · U(1, 2).
  float scale_lo = 0.25f;
  float scale_hi = 4.f;
  bool mixed_scales = false;
  /// Softmax scale: 0 = pass 0 (the op uses 1/sqrt(HD)); < 0 = choose it so that the scaled
  /// scores have standard deviation −softmax_scale (keeps softmax well conditioned whatever the
  /// fp8 range and inv_scale: near-ties of huge scores would amplify the kernel's and the
  /// reference's different rounding); > 0 = that value.
  float softmax_scale = -2.f;
  bool lse = false;
  /// q/out/lse as views of larger buffers (padded token and head strides) and a cache with a
  /// padded block stride (not compact); the padding is poisoned and must stay unread/unwritten.
  bool strided = false;
  int num_splits = 0;  ///< SwaDecodeArgs::num_splits (0 = auto)
  int head_group = 0;  ///< SwaDecodeArgs::head_group (0 = auto)
  int cluster_split = 0;  ///< SwaDecodeArgs::cluster_split (0 = auto)

  /// "T8 NH128 W128 bs256 e4m3/u8 lens=edges inv=0.1 mixed-scales lse strided splits=3 cluster=4".
  std::string describe() const;
};

/// Builds the host problem of `c` from `seed` (deterministic).
SwaProblem make_swa_problem(const SwaCase& c, uint64_t seed);

/// What run_swa_case found.
struct SwaCaseResult {
  Comparison out;              ///< bf16 output vs reference (poisoned = NaN counts as non-finite)
  /// The output against the reference without the bf16 rounding of dequantized values
  /// (reported, not checked: it shows how much of `out`'s error that rounding explains).
  Comparison out_exact;
  /// When the case asks for lse: against the reference without the bf16 rounding of dequantized
  /// values, which is the function the kernels compute (a row with one valid position has its one
  /// score as lse, where that rounding alone moved it by up to 2^-9 relative).
  Comparison lse;
  size_t padding_written = 0;  ///< out/lse padding elements that lost their poison
  uint64_t seed = 0;
  int num_splits = 0;          ///< the split count the op used (from the planner)
  /// True when out.rel_l2 ≤ out_tol, lse.rel_l2 ≤ lse_tol, nothing non-finite, no padding written.
  bool ok(double out_tol, double lse_tol) const;
  std::string describe() const;
};

/// Output tolerance (relative L2) for the checks: bf16 output rounding (≈ 1e-3 relative L2),
/// the reference's bf16 rounding of each dequantized value that the kernel does not do
/// (≈ 1e-3), f16 P (≈ 3e-4); 1e-2 leaves margin while any indexing bug shows as O(1).
constexpr double kSwaOutTol = 1e-2;
/// LSE tolerance (against the unrounded reference): the scores' f16 / fp8-split arithmetic and the
/// f32 sums, well under 1e-3 of |lse|; 2e-3 leaves margin while a wrong weight or a lost position
/// shows as O(1e-2) or more.
constexpr double kSwaLseTol = 2e-3;

/// How a case lays its tensors out (element strides): q and out [T, NH, HD] rows `head_stride`
/// and tokens `token_stride` apart, cache blocks `block_rows` rows apart, lse tokens
/// `lse_token_stride` apart. Compact, or padded when SwaCase::strided (the padding poisoned, so
/// reading or writing it shows).
struct SwaLayout {
  int64_t head_stride = 0;
  int64_t token_stride = 0;
  int64_t block_rows = 0;
  int64_t lse_token_stride = 0;
};
SwaLayout swa_layout(const SwaCase& c, const SwaProblem& p);

/// q as bf16 bits laid out as `layout` says, padding 0xFFFF (NaN); max(T · token_stride, 8)
/// elements, the size of the out buffer too.
std::vector<uint16_t> swa_q_bf16(const SwaProblem& p, const SwaLayout& layout);

/// Where a case's tensors live: device pointers, or host ones for the emulator. lse may be
/// null when the case has none.
struct SwaBuffers {
  void* q = nullptr;
  void* kv = nullptr;
  void* inv_scale = nullptr;
  void* indices = nullptr;
  void* lens = nullptr;
  void* out = nullptr;
  void* lse = nullptr;
};

/// The op's arguments for `c` (its cache dtype, lens dtype, scale, requests) over `buffers`
/// laid out as `layout` says, on CUDA device `device`.
mla::SwaDecodeArgs swa_args(const SwaCase& c, const SwaProblem& p, const SwaLayout& layout, const SwaBuffers& buffers,
                            int device = 0);

/// Compares what the op wrote with swa_reference(p): `out` the bf16 bits of the whole out buffer
/// and `lse` the whole lse buffer (rows lse_token_stride apart), both laid out as `layout` and
/// poisoned (0xFFFF / NaN) before the run; padding that lost its poison is counted. seed and
/// num_splits are left for the caller.
SwaCaseResult swa_check(const SwaCase& c, const SwaProblem& p, const SwaLayout& layout,
                        const std::vector<uint16_t>& out, const std::vector<float>& lse);

/// Builds `c` from `seed`, uploads it (outputs, padding and workspace 0xFF-poisoned), runs
/// kjit::mla::swa_decode on the default stream, synchronizes and compares with swa_reference.
/// Runs on the current context's device (testing::current_device). Throws what swa_decode throws.
SwaCaseResult run_swa_case(const SwaCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

}  // namespace kjit::testing
