#pragma once
/// \file ops/fp8.hpp
/// FP8 quantization, FP8 GEMM and an FP8 linear layer, sm_89+.
///
/// Formats (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", arXiv:2209.05433):
///   E4M3 ("fn"): max ±448, smallest denormal 2^-9, no inf, NaN = S.1111.111.
///   E5M2:        max ±57344, smallest denormal 2^-16, IEEE-style ±inf and NaN.
///
/// Conversion (every op here): y = sat(f32(x) · multiplier), one f32 rounding of the product,
/// then round to nearest even into the format, saturating: a finite value beyond the format's
/// max, and ±inf, become ±max (never NaN, never inf); NaN stays NaN; magnitudes below half the
/// smallest denormal become (signed) zero. This is CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
/// fmt) (cvt.rn.satfinite on sm_89+); tools/testing/reference_fp8.hpp reproduces it bit for bit.
///
/// Scale semantics: quantize takes or computes the quantization *multiplier*
/// (fp8 = sat(x · multiplier)) and reports the dequant scale scale_inv = 1 / multiplier (f32,
/// correctly rounded); the GEMM takes dequant scales (D = A_fp8 · B_fp8ᵀ · sa · sb). amax is
/// always max |x| of the *input* (NaN elements are ignored by it and stay NaN in y).

#include <kjit/names.hpp>
#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kjit::fp8 {

/// Largest finite values of the formats.
inline constexpr float kE4M3Max = 448.f;
inline constexpr float kE5M2Max = 57344.f;

/// The FP8 formats' names, as the fp8 families declare their format values: DType names
/// ("e4m3", "e5m2"); kjit.fp8.FORMATS in Python.
std::vector<const char*> format_names();

/// Which elements share one multiplier.
enum class Granularity : uint8_t {
  kTensor,        ///< one multiplier for the whole tensor
  kRow,           ///< one per row ("per token" for activations, "per channel" for [N, K] weights)
  kBlock1x128,    ///< one per 1×128 block of a row (activations, DeepSeek-V3 style)
  kBlock128x128,  ///< one per 128×128 block (weights)
};

/// The granularity's name as the fp8.quantize family spells its `granularity` values ("tensor",
/// "row", "block1x128", "block128x128").
const char* granularity_name(Granularity granularity) noexcept;
/// The granularity named `name` (a granularity_name). Throws InvalidArgument "<op>: granularity
/// must be one of ..., got '<name>'".
Granularity parse_granularity(std::string_view name, const char* op = "kjit::fp8");
/// Every granularity's name, in Granularity's order: kjit.fp8.GRANULARITIES in Python.
std::vector<const char*> granularity_names();

/// The shape of the f32 scale groups (scale_inv, amax) of an x of [rows, cols] at `granularity`.
struct ScaleShape {
  int ndim = 1;
  int64_t shape[2] = {1, 0};
};
/// kTensor [1]; kRow [rows]; kBlock1x128 [rows, ceil(cols/128)]; kBlock128x128
/// [ceil(rows/128), ceil(cols/128)].
ScaleShape scale_shape(Granularity granularity, int64_t rows, int64_t cols) noexcept;

/// Arguments of quantize(). All tensors on one CUDA device.
struct QuantizeArgs {
  /// [rows, cols] bf16, f16 or f32; last dim contiguous; cols % 16 == 0; the data pointer and the
  /// row stride (in bytes) multiples of 16.
  TensorRef x;
  /// [rows, cols] e4m3 or e5m2 (the dtype picks the format); same layout rules as x.
  TensorRef y;
  Granularity granularity = Granularity::kTensor;

  /// kTensor only. false: a given multiplier (`multiplier`, else `multiplier_value`), one pass
  /// that also reduces amax. true: multiplier = fmt_max / amax of this call (two passes: amax,
  /// then convert; `amax` is required and receives it).
  bool dynamic = false;
  /// kTensor, not dynamic: [1] f32 on the device holding the multiplier (read by the kernel, so a
  /// delayed-scaling state or a captured graph can update it); ndim == 0 uses multiplier_value.
  /// The multiplier must be positive, finite and normal (a device value is not checked).
  TensorRef multiplier;
  float multiplier_value = 1.f;

  /// f32 output, max |x| per scale group: kTensor [1]; kRow [rows]; kBlock1x128 [rows,
  /// ceil(cols/128)]; kBlock128x128 [ceil(rows/128), ceil(cols/128)]. Any strides. Optional
  /// (ndim == 0) except for dynamic kTensor. For kTensor the op zeroes it (cuMemsetD8Async on
  /// `stream`) and the kernel reduces into it with atomicMax: stream-ordered, graph-capturable.
  TensorRef amax;
  /// f32 output, 1 / multiplier per scale group, same shapes as amax. Required for kRow and the
  /// block granularities (it is what the GEMM consumes), optional for kTensor.
  TensorRef scale_inv;

  /// Round every multiplier down to a power of two (UE8M0 scales; exact dequantization).
  bool pow2_scale = false;
};

/// Quantizes x into y on `stream`.
///
/// Computed multipliers (kRow, blocks, dynamic kTensor), for a group with amax a:
///   multiplier = fmt_max / a   (IEEE f32 division) when 0 < a < inf, clamped to FLT_MAX
///   multiplier = 1             when a == 0 (all-zero or all-NaN group) or a == inf
///   multiplier = 2^floor(log2(multiplier))   additionally when pow2_scale
/// and scale_inv = 1 / multiplier (f32, round to nearest). So |x| · multiplier ≤ fmt_max: only a
/// group containing ±inf saturates.
///
/// Never allocates or synchronizes (graph-capturable). Throws InvalidArgument naming the tensor
/// and the rule it broke, Unsupported below sm_89 (FP8 conversion instructions), DriverError.
void quantize(const QuantizeArgs& args, CUstream stream, Runtime& runtime = Runtime::global());

/// How the GEMM's operands are scaled.
enum class ScaleMode : uint8_t {
  /// scale_a is [1] (per tensor) or [M] (per row of A); scale_b is [1] or [N] (per row of B,
  /// i.e. per output channel): D[m, n] = (Σ_k A[m, k] · B[n, k]) · sa[m] · sb[n].
  kTensorwise,
  /// scale_a is [M, K/128] (1×128 blocks of A), scale_b is [ceil(N/128), K/128] (128×128
  /// blocks of B): D[m, n] = Σ_kb (Σ_{k in kb} A[m, k] · B[n, k]) · sa[m, kb] · sb[n/128, kb].
  /// Needs K % 128 == 0.
  kBlockwise,
};

/// ScaleMode's names, in enumerator order (kjit/names.hpp): kjit.fp8.SCALE_MODES in Python.
inline constexpr EnumName<ScaleMode> kScaleModeNames[] = {{ScaleMode::kTensorwise, "tensorwise"},
                                                          {ScaleMode::kBlockwise, "blockwise"}};

/// CTA tile (M × N). kAuto lets the planner choose. mma.sync kernel: k64x64, k128x64,
/// k128x128 (not with ScaleMode::kBlockwise). Hopper wgmma kernel: k128x128, k128x256, and the
/// small tiles k128x16, k128x32, k128x64, k64x16, k64x32, k64x64 (k128x64 and k64x64 with
/// GemmKernel::kWgmma), which put the smaller of M and N on the tile's 16–64 side: when that is
/// M, the operands are swapped (Dᵀ = B · Aᵀ, D stored transposed), so the weight fills the
/// 128- or 64-row side. The planner takes them for M or N ≤ 64, with 64 rows when 128-row tiles
/// would leave more than half the SMs idle. The wave-fitting wgmma tiles k128x80, k128x96,
/// k128x112, k128x160, k128x192, k128x224 (N side not a power of two: the weight's rows when the
/// activations are A) make whole waves of the SMs at M ≤ 256; persistent only (no split-K); the
/// planner takes one there when its wave count beats 128x128 and 128x256. The 64-row tiles
/// k64x80, k64x96, k64x112, k64x128, k64x160, k64x192, k64x224, k64x256 are for CTA pairs
/// (GemmArgs::multicast = 2) at 64 < M ≤ 128: the two CTAs of a pair take the two 64-row halves
/// of M and share each weight tile, loaded once from L2; the planner pairs k64x128 tiles there
/// when that makes half to all the SMs' worth of CTAs over K ≤ 8192.
enum class GemmTile : uint8_t {
  kAuto,
  k64x64,
  k128x64,
  k128x128,
  k128x256,
  k128x16,
  k128x32,
  k64x16,
  k64x32,
  k128x80,
  k128x96,
  k128x112,
  k128x160,
  k128x192,
  k128x224,
  k64x80,
  k64x96,
  k64x112,
  k64x128,
  k64x160,
  k64x192,
  k64x224,
  k64x256,
};

/// The tile's name as the fp8.gemm family spells its `tile` values ("64x64", ...), "auto" for
/// kAuto.
const char* gemm_tile_name(GemmTile tile) noexcept;
/// The tile named `name` ("auto" or a gemm_tile_name). Throws InvalidArgument "<op>: tile must be
/// one of ..., got '<name>'".
GemmTile parse_gemm_tile(std::string_view name, const char* op = "kjit::fp8::gemm");
/// Every tile's name, in GemmTile's order ("auto" first): kjit.fp8.GEMM_TILES in Python.
std::vector<const char*> gemm_tile_names();

/// Which GEMM kernel runs.
enum class GemmKernel : uint8_t {
  /// The planner's choice: on sm_90, kWgmma for kTensorwise scales with A and B both K-major
  /// (large problems persistent, small M with split-K); kMmaSync otherwise.
  kAuto,
  /// mma.sync m16n8k32 + cp.async pipeline (sm_89+): every layout and scale mode.
  kMmaSync,
  /// Hopper (sm_90a): TMA loads, mbarrier ring, wgmma.mma_async m64nNk32, one producer and two
  /// consumer warpgroups; persistent CTAs (one per SM) over the output tiles, or, when there are
  /// fewer tiles than SMs, split-K: the CTAs of a tile form a cluster and sum their partial tiles
  /// in a fixed order through distributed shared memory (deterministic, no workspace);
  /// optionally (GemmArgs::multicast) pairs of CTAs share B or A through TMA multicast.
  /// kTensorwise scales, A and B K-major only (wgmma reads FP8 operands K-major only);
  /// InvalidArgument otherwise, Unsupported on other archs.
  kWgmma,
};

/// GemmKernel's names, in enumerator order (kjit/names.hpp): kjit.fp8.GEMM_KERNELS in Python;
/// past kAuto, the fp8.gemm family's `impl` values.
inline constexpr EnumName<GemmKernel> kGemmKernelNames[] = {
    {GemmKernel::kAuto, "auto"}, {GemmKernel::kMmaSync, "mma"}, {GemmKernel::kWgmma, "wgmma"}};

/// Arguments of gemm(). All tensors on one CUDA device.
struct GemmArgs {
  /// [M, K] e4m3 or e5m2. Either dim may be the contiguous one: K-major (stride(1) == 1, e.g. a
  /// row-major activation) or M-major (stride(0) == 1, a transposed view of a [K, M] buffer).
  /// The data pointer and the other stride (in bytes) must be multiples of 16.
  TensorRef a;
  /// [N, K] e4m3 or e5m2 (the nn.Linear weight layout: D = A · Bᵀ), K-major (stride(1) == 1) or
  /// N-major (stride(0) == 1, a transposed view of a [K, N] buffer); same alignment rules.
  /// All four layout combinations are native specializations.
  TensorRef b;
  /// [M, N] bf16 or f32, row-major (stride(1) == 1) or, with kTensorwise scales, column-major
  /// (stride(0) == 1; computed as Dᵀ = B · Aᵀ by swapping the operands).
  TensorRef d;
  /// f32 dequant scales on the device (see ScaleMode); any strides.
  TensorRef scale_a;
  TensorRef scale_b;
  ScaleMode scale_mode = ScaleMode::kTensorwise;
  /// Optional [N] bf16 or f32, added after scaling: D[m, n] += bias[n].
  TensorRef bias;
  /// Planner overrides for tests and tuning: kernel, tile (kAuto = plan) and pipeline stages
  /// (0 = the deepest that fits the device's shared memory: up to 4 for mma.sync, 6 for wgmma,
  /// 8 for its 16/32/64-wide tiles; else 2..4 resp. 2..8, 2..12 for those tiles). A forced tile
  /// of the mma.sync kind (k64x64, k128x64, k128x128) selects the mma.sync kernel unless
  /// `kernel` is kWgmma. Every override's range (stages 0 or
  /// 2..12, splits 0..4, multicast 0..3) and every combination below that is an InvalidArgument
  /// is checked with the tensors, before the device is queried; what depends on the device (the
  /// chosen tile's own stage limit, shared memory, wgmma there) is checked when planning.
  GemmKernel kernel = GemmKernel::kAuto;
  GemmTile tile = GemmTile::kAuto;
  int stages = 0;
  /// Split-K factor of the wgmma kernel: 0 = plan (> 1 only when the output has fewer tiles than
  /// half the SMs), 1 = none, 2..4 = that many CTAs per output tile, each over ~K/splits (at
  /// least one 128-k tile each: splits ≤ ceil(K/128)). Forcing splits > 1 on a problem that
  /// runs the mma.sync kernel is an InvalidArgument.
  int splits = 0;
  /// Operand sharing of the wgmma kernel's persistent mode (splits 1), for tuning: 0 = plan
  /// (pairs sharing B for some problems at 64 < M ≤ 128, else none), 1 = none, 2 = clusters of
  /// two CTAs on vertically adjacent tiles (m-tiles 2u, 2u + 1 of one tile column), each loading
  /// half of their common B tile and multicasting it to both (a third less L2 → SM traffic,
  /// docs/perf-notes.md R78a), 3 = pairs on horizontally adjacent tiles (n-tiles 2v, 2v + 1 of
  /// one tile row) that share A: each loads half (BM / 2 rows) of the common A tile and
  /// multicasts it to both, and loads its own B (cuBLASLt's 1x2 clusters; forced only, never
  /// planned). 2 or 3 with splits > 1, on the mma.sync kernel or with a tile other than the
  /// wgmma ones of N side 80 ... 256 is an InvalidArgument; off sm_90a, Unsupported.
  int multicast = 0;
  /// Declares B (a model weight) constant: its bytes are written by no work on `stream` that can
  /// still be running when this call's kernel starts. On sm_90 the wgmma kernel is launched with
  /// programmatic dependent launch (it may start while the previous kernel in the stream runs,
  /// and waits for it before reading A, the scales or the bias and before writing D); with
  /// b_constant it also loads its first pipeline stages of B before that wait, overlapping the
  /// weight's DRAM stream with the previous kernel's tail. Under PDL a kernel can start while
  /// kernels two or more launches back still run, so "no work that can still be running" means
  /// every earlier kernel on the stream, not only the last one. false (the default) reads nothing
  /// before the wait. scale_b is always read after it.
  bool b_constant = false;
};

/// D = (A · Bᵀ) · scales (+ bias) on `stream`, f32 accumulation on the tensor cores
/// (mma.sync m16n8k32 e4m3/e5m2 on sm_89+, wgmma on sm_90; see GemmKernel). On the wgmma path
/// the op takes its TMA descriptors of A, B and D from a per-thread memo keyed on their
/// addresses and geometry, encoding them (host-only cuTensorMapEncodeTiled, no allocation) the
/// first time a thread sees them. Requirements: K % 16 == 0 (16-byte cp.async chunks;
/// M and N are free, partial tiles are zero-filled and masked); K % 128 == 0 with kBlockwise.
/// Never allocates or synchronizes (graph-capturable). Throws InvalidArgument naming the tensor
/// and the rule it broke, Unsupported below sm_89 (naming the device's arch), DriverError.
void gemm(const GemmArgs& args, CUstream stream, Runtime& runtime = Runtime::global());

/// How Linear scales its input activations.
enum class Recipe : uint8_t {
  /// Per-tensor multiplier from this call's amax: multiplier = fmt_max / amax(x) (quantize
  /// with dynamic = true). Weights: kTensor or kRow.
  kDynamicTensor,
  /// Per-row (per-token) multipliers from each row's amax. Weights: kTensor or kRow.
  kDynamicRow,
  /// 1×128 block multipliers; weights must be kBlock128x128 (the DeepSeek-V3 recipe).
  kDynamicBlock,
  /// Delayed scaling (Micikevicius et al. 2022, §4.3; NVIDIA Transformer Engine's
  /// DelayedScaling with amax_compute_algo = "max"): step t quantizes x_t with the multiplier
  /// m_t derived from *past* amaxes, records amax(x_t) into a ring of `history_len` entries,
  /// then sets
  ///   m_{t+1} = fmt_max / (max(history) · 2^margin)   when 0 < max(history) < inf
  ///   m_{t+1} = m_t                                   otherwise (kept, as TE does)
  /// computed in f32 as (fmt_max / max(history)) / 2^margin (TE's order) and clamped to
  /// [FLT_MIN, FLT_MAX]; m_0 = 1 (so step 0 saturates inputs beyond fmt_max, as in TE). The
  /// history starts all zero and the ring slot of step t is t mod history_len. Weights: kTensor
  /// or kRow.
  kDelayed,
};

/// Recipe's names, in enumerator order (kjit/names.hpp): kjit.fp8.RECIPES in Python.
inline constexpr EnumName<Recipe> kRecipeNames[] = {{Recipe::kDynamicTensor, "dynamic_tensor"},
                                                    {Recipe::kDynamicRow, "dynamic_row"},
                                                    {Recipe::kDynamicBlock, "dynamic_block"},
                                                    {Recipe::kDelayed, "delayed"}};

/// Configuration of a Linear.
struct LinearConfig {
  int64_t in_features = 0;   ///< K, a multiple of 16 (of 128 for kDynamicBlock)
  int64_t out_features = 0;  ///< N
  int64_t max_tokens = 0;    ///< largest M forward() accepts (sizes the activation buffers)
  Recipe recipe = Recipe::kDelayed;
  Granularity weight_granularity = Granularity::kRow;  ///< kTensor, kRow or kBlock128x128
  DType activation_format = DType::kE4M3;              ///< kE4M3 or kE5M2
  DType weight_format = DType::kE4M3;
  int history_len = 16;  ///< kDelayed: amax history length (≥ 1)
  int margin = 0;        ///< kDelayed: the multiplier is divided by 2^margin (≥ 0)
  int device = 0;        ///< CUDA device of the weight and of every buffer
};

/// y = x · Wᵀ (+ bias) with FP8 operands: the weight is quantized once at construction, the
/// input on every call per `recipe`, then one FP8 GEMM (bf16 or f32 out).
///
/// Memory: everything is allocated once in the constructor (cuMemAlloc on `device`) and freed by
/// the destructor: the fp8 weight [N, K] and its dequant scales; the fp8 activation buffer
/// [max_tokens, K] and its scales ([1], [max_tokens] or [max_tokens, K/128]); a [1] amax; for
/// kDelayed the state: amax history [history_len], step counter, multiplier. forward() allocates
/// nothing and never synchronizes, so it can be captured in a CUDA graph (the delayed-scaling
/// state advances on the device, once per replay). Calls must be stream-ordered with each other
/// (they share the activation buffers). Not copyable; movable.
class Linear {
 public:
  /// Quantizes `weight` ([out_features, in_features] bf16, f16 or f32, row-major, on `device`)
  /// per config.weight_granularity on `stream` and waits for it. Throws InvalidArgument for an
  /// inconsistent config or weight, Unsupported below sm_89, DriverError.
  Linear(const LinearConfig& config, const TensorRef& weight, CUstream stream,
         Runtime& runtime = Runtime::global());
  /// A moved-from Linear owns nothing: its views have no data and forward() throws
  /// InvalidArgument.
  Linear(Linear&& other) noexcept = default;
  Linear& operator=(Linear&& other) noexcept = default;
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;
  ~Linear() = default;

  /// y[M, N] = x[M, K] · Wᵀ (+ bias[N]) on `stream`. x: bf16, f16 or f32, row-major with 16-byte
  /// aligned rows, 1 ≤ M ≤ max_tokens; y: bf16 or f32, row-major; bias: optional [N] bf16/f32.
  void forward(const TensorRef& x, const TensorRef& y, CUstream stream, const TensorRef& bias = {});

  const LinearConfig& config() const noexcept { return config_; }
  /// Views of the owned device buffers (for inspection and tests).
  TensorRef weight_fp8() const;        ///< [N, K] fp8
  TensorRef weight_scale_inv() const;  ///< [1], [N] or [ceil(N/128), K/128] f32
  /// The activation buffers of the last forward: fp8 x [max_tokens, K] and its scale_inv
  /// ([1], [max_tokens] or [max_tokens, K/128] f32).
  TensorRef input_fp8() const;
  TensorRef input_scale_inv() const;
  /// kDelayed state: [history_len] f32 amax ring, [1] int32 steps taken, [1] f32 multiplier for
  /// the next call. ndim == 0 for the dynamic recipes.
  TensorRef amax_history() const;
  TensorRef step() const;
  TensorRef multiplier() const;
  /// [1] f32 amax of the last forward's input (kDynamicTensor and kDelayed; else ndim == 0).
  TensorRef amax() const;

 private:
  /// One cuMemAlloc'd block, freed (cuMemFree) when its owner goes; move-only, empty when
  /// moved from.
  class DeviceMemory {
   public:
    DeviceMemory() = default;
    /// Throws DriverError when the allocation fails.
    explicit DeviceMemory(size_t bytes);
    DeviceMemory(DeviceMemory&& other) noexcept;
    DeviceMemory& operator=(DeviceMemory&& other) noexcept;
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    ~DeviceMemory();
    /// The address `offset` bytes into the block, or null when the block is empty.
    void* at(size_t offset) const noexcept;

   private:
    CUdeviceptr base_ = 0;
  };

  /// Where each buffer starts in `memory_` (bytes); kNone for a buffer this recipe lacks.
  struct Layout {
    static constexpr size_t kNone = ~size_t{0};
    size_t w_q = 0, w_scale_inv = 0, x_q = 0, x_scale_inv = 0, amax = 0;
    size_t history = kNone, step = kNone, multiplier = kNone;
  };

  template <class T>
  T* buffer(size_t offset) const noexcept {
    return offset == Layout::kNone ? nullptr : static_cast<T*>(memory_.at(offset));
  }

  LinearConfig config_;
  Runtime* runtime_ = nullptr;
  DeviceMemory memory_;  // every buffer, carved from one allocation at `layout_`
  Layout layout_;
  int64_t w_scale_shape_[2] = {1, 1};
  int w_scale_ndim_ = 1;
};

}  // namespace kjit::fp8
