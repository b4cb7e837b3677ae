// C entry point for tools/bench/bench_rotary.py (ctypes): kjit::rotary in place on raw device
// pointers that PyTorch owns, on PyTorch's current stream, so kjit and torch run on one tensor
// in one process. Contiguous tensors only:
//   q [tokens, q_heads, head_dim] bf16, k [tokens, kv_heads, head_dim] bf16 (null or kv_heads 0:
//   none), cos/sin [max_position, rotary_dim / 2] f32, pos [tokens] int32 or int64.
// Returns 0 on success, 1 after printing the error to stderr.
#include <kjit/ops/rotary.hpp>
#include <kjit/tensor.hpp>

#include <cstdio>
#include <exception>

extern "C" int kjit_bench_rotary(void* q, void* k, void* cos, void* sin, void* pos, int tokens,
                                 int q_heads, int kv_heads, int head_dim, int rotary_dim,
                                 int max_position, int neox, int pos_is_i64, void* stream) {
  try {
    kjit::RotaryArgs a;
    const int rd = rotary_dim == 0 ? head_dim : rotary_dim;
    a.q = kjit::TensorRef(q, kjit::DType::kBF16, {tokens, q_heads, head_dim});
    if (k != nullptr && kv_heads > 0) {
      a.k = kjit::TensorRef(k, kjit::DType::kBF16, {tokens, kv_heads, head_dim});
    }
    a.cos = kjit::TensorRef(cos, kjit::DType::kF32, {max_position, rd / 2});
    a.sin = kjit::TensorRef(sin, kjit::DType::kF32, {max_position, rd / 2});
    a.positions = kjit::TensorRef(pos, pos_is_i64 ? kjit::DType::kI64 : kjit::DType::kI32, {tokens});
    a.rotary_dim = rotary_dim;
    a.style = neox ? kjit::RotaryStyle::kNeoX : kjit::RotaryStyle::kGPTJ;
    kjit::rotary(a, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kjit_bench_rotary: %s\n", e.what());
    return 1;
  }
}
