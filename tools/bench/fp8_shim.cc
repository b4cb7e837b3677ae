// C entry points for tools/bench/bench_fp8.py: the script hands raw device pointers of torch
// tensors and torch's current stream, so kjit and PyTorch (cuBLASLt through torch._scaled_mm) run
// in one process on the same memory. Every function returns 0 on success and 1 after printing
// the error.
#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <exception>

namespace {

int report(const char* fn, const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", fn, e.what());
  std::fflush(stderr);
  return 1;
}

kjit::DType in_dtype(int code) {
  return code == 0 ? kjit::DType::kBF16 : code == 1 ? kjit::DType::kF16 : kjit::DType::kF32;
}

kjit::DType fp8_dtype(int code) { return code == 0 ? kjit::DType::kE4M3 : kjit::DType::kE5M2; }

}  // namespace

extern "C" {

/// Quantizes a contiguous [rows, cols] tensor. in: 0 bf16, 1 f16, 2 f32; fmt: 0 e4m3, 1 e5m2;
/// granularity: 0 tensor, 1 row, 2 block 1x128, 3 block 128x128. multiplier: device f32 [1] or
/// null (then multiplier_value); dynamic: per-tensor multiplier from this call's amax. amax and
/// scale_inv: device f32 buffers of the granularity's group shape (null = not wanted, where the
/// op allows it).
int kjit_bench_fp8_quantize(void* x, int in, void* y, int fmt, int64_t rows, int64_t cols, int granularity,
                            void* multiplier, float multiplier_value, int dynamic, void* amax, void* scale_inv,
                            int pow2, void* stream) {
  try {
    using kjit::DType;
    using kjit::TensorRef;
    namespace f8 = kjit::fp8;
    f8::QuantizeArgs a;
    a.x = TensorRef(x, in_dtype(in), {rows, cols});
    a.y = TensorRef(y, fp8_dtype(fmt), {rows, cols});
    a.granularity = static_cast<f8::Granularity>(granularity);
    a.dynamic = dynamic != 0;
    a.pow2_scale = pow2 != 0;
    a.multiplier_value = multiplier_value;
    if (multiplier) a.multiplier = TensorRef(multiplier, DType::kF32, {1});
    const int64_t cb = (cols + 127) / 128;
    auto groups = [&](void* p) {
      switch (a.granularity) {
        case f8::Granularity::kTensor: return TensorRef(p, DType::kF32, {1});
        case f8::Granularity::kRow: return TensorRef(p, DType::kF32, {rows});
        case f8::Granularity::kBlock1x128: return TensorRef(p, DType::kF32, {rows, cb});
        default: return TensorRef(p, DType::kF32, {(rows + 127) / 128, cb});
      }
    };
    if (amax) a.amax = groups(amax);
    if (scale_inv) a.scale_inv = groups(scale_inv);
    f8::quantize(a, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_fp8_quantize", e);
  }
}

/// D[M, N] = A · Bᵀ · scales. a: [M, K] contiguous, or with a_trans a contiguous [K, M] buffer;
/// b: [N, K], or with b_trans a contiguous [K, N] buffer. fmt 0 e4m3 / 1 e5m2; out_f32: 0 bf16,
/// 1 f32 (D contiguous [M, N]). block = 0: scale_a has sa_len ∈ {1, M} floats and scale_b
/// sb_len ∈ {1, N}; block = 1: scale_a [M, K/128], scale_b [ceil(N/128), K/128]. bias: null or
/// [N] (bias_bf16 picks bf16 over f32). tile: a GemmTile (0 auto, 1 64x64, 2 128x64, 3 128x128,
/// 4 128x256, 5 128x16, 6 128x32, 7 64x16, 8 64x32);
/// stages: 0 auto; kernel: 0 auto, 1 mma.sync, 2 wgmma (sm_90); splits: 0 auto, 1..4 the wgmma
/// kernel's split-K factor; multicast: 0 auto, 1 off, 2 B shared by CTA pairs (wgmma).
int kjit_bench_fp8_gemm(void* a, int fmt_a, int a_trans, void* b, int fmt_b, int b_trans, void* d, int out_f32,
                        void* scale_a, int64_t sa_len, void* scale_b, int64_t sb_len, int block, int64_t m, int64_t n,
                        int64_t k, void* bias, int bias_bf16, int tile, int stages, int kernel, int splits,
                        int multicast, void* stream) {
  try {
    using kjit::DType;
    using kjit::TensorRef;
    namespace f8 = kjit::fp8;
    f8::GemmArgs g;
    g.a = a_trans ? TensorRef(a, fp8_dtype(fmt_a), {m, k}, {1, m}) : TensorRef(a, fp8_dtype(fmt_a), {m, k});
    g.b = b_trans ? TensorRef(b, fp8_dtype(fmt_b), {n, k}, {1, n}) : TensorRef(b, fp8_dtype(fmt_b), {n, k});
    g.d = TensorRef(d, out_f32 ? DType::kF32 : DType::kBF16, {m, n});
    if (block) {
      g.scale_mode = f8::ScaleMode::kBlockwise;
      g.scale_a = TensorRef(scale_a, DType::kF32, {m, k / 128});
      g.scale_b = TensorRef(scale_b, DType::kF32, {(n + 127) / 128, k / 128});
    } else {
      g.scale_a = TensorRef(scale_a, DType::kF32, {sa_len});
      g.scale_b = TensorRef(scale_b, DType::kF32, {sb_len});
    }
    if (bias) g.bias = TensorRef(bias, bias_bf16 ? DType::kBF16 : DType::kF32, {n});
    g.tile = static_cast<f8::GemmTile>(tile);
    g.stages = stages;
    g.kernel = static_cast<f8::GemmKernel>(kernel);
    g.splits = splits;
    g.multicast = multicast;
    f8::gemm(g, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_fp8_gemm", e);
  }
}

}  // extern "C"
