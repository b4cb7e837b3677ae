// C entry points for tools/bench/bench_decode.py: the Python script hands raw device pointers
// of torch tensors and torch's current stream, so kjit and the PyTorch peers run in one process
// on the same memory. Every function returns 0 on success and 1 after printing the error.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>

namespace {

/// Contiguous tensors as the script allocates them: q/out [B, 1, Hq, D], k/v [B, L, Hkv, D] bf16,
/// kv_lens [B] int32 (null: all L), mask [B, L] bool (null: none), lse [B, Hq] f32 (null: none).
kjit::attention::DecodeArgs make_args(void* q, void* k, void* v, void* kv_lens, void* mask, void* out, void* lse,
                                      int batch, int max_kv_len, int q_heads, int kv_heads, int head_dim,
                                      float scale, int num_splits) {
  using kjit::DType;
  using kjit::TensorRef;
  kjit::attention::DecodeArgs a;
  a.q = TensorRef(q, DType::kBF16, {batch, 1, q_heads, head_dim});
  a.k = TensorRef(k, DType::kBF16, {batch, max_kv_len, kv_heads, head_dim});
  a.v = TensorRef(v, DType::kBF16, {batch, max_kv_len, kv_heads, head_dim});
  if (kv_lens != nullptr) a.kv_lens = TensorRef(kv_lens, DType::kI32, {batch});
  if (mask != nullptr) a.mask = TensorRef(mask, DType::kBool, {batch, max_kv_len});
  a.out = TensorRef(out, DType::kBF16, {batch, 1, q_heads, head_dim});
  if (lse != nullptr) a.lse = TensorRef(lse, DType::kF32, {batch, q_heads});
  a.scale = scale;
  a.num_splits = num_splits;
  return a;
}

int report(const char* fn, const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", fn, e.what());
  std::fflush(stderr);
  return 1;
}

}  // namespace

extern "C" {

/// Writes the workspace bytes kjit_bench_decode_ex needs for this shape to *bytes.
int kjit_bench_decode_workspace_ex(int batch, int max_kv_len, int q_heads, int kv_heads, int head_dim,
                                   int num_splits, size_t* bytes) {
  try {
    // Shape-only query: any 16-byte aligned non-null pointers pass validation.
    void* p = reinterpret_cast<void*>(uintptr_t{1} << 20);
    *bytes = kjit::attention::decode_workspace_bytes(
        make_args(p, p, p, nullptr, nullptr, p, nullptr, batch, max_kv_len, q_heads, kv_heads, head_dim, 0.f,
                  num_splits));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_decode_workspace_ex", e);
  }
}

/// kjit_bench_decode_workspace_ex with num_splits = 0 (the planner's choice).
int kjit_bench_decode_workspace(int batch, int max_kv_len, int q_heads, int kv_heads, int head_dim, size_t* bytes) {
  return kjit_bench_decode_workspace_ex(batch, max_kv_len, q_heads, kv_heads, head_dim, 0, bytes);
}

/// Full-option decode: optional kv_lens / mask / lse (null = none), scale (0 = 1/sqrt(D)),
/// num_splits (0 = auto), on `stream` (a CUstream; null = the legacy default stream).
int kjit_bench_decode_ex(void* q, void* k, void* v, void* kv_lens, void* mask, void* out, void* lse,
                         void* workspace, size_t ws_bytes, int batch, int max_kv_len, int q_heads, int kv_heads,
                         int head_dim, float scale, int num_splits, void* stream) {
  try {
    kjit::attention::decode(make_args(q, k, v, kv_lens, mask, out, lse, batch, max_kv_len, q_heads, kv_heads,
                                      head_dim, scale, num_splits),
                            workspace, ws_bytes, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_decode_ex", e);
  }
}

/// The benchmarked call: per-sequence lengths, no mask, no lse, default scale, auto splits.
int kjit_bench_decode(void* q, void* k, void* v, void* kv_lens, void* out, void* workspace, size_t ws_bytes,
                      int batch, int max_kv_len, int q_heads, int kv_heads, int head_dim, void* stream) {
  return kjit_bench_decode_ex(q, k, v, kv_lens, nullptr, out, nullptr, workspace, ws_bytes, batch, max_kv_len,
                              q_heads, kv_heads, head_dim, 0.f, 0, stream);
}

}  // extern "C"
