// C entry points for tools/bench/bench_swa.py: the Python script hands raw device pointers of
// torch tensors and torch's current stream, so kjit and the batched PyTorch fallback run in one
// process on the same memory. Every function returns 0 on success and 1 after printing the error.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/swa_decode.hpp>

#include "runtime/internal.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>

namespace {

/// Contiguous tensors as the script allocates them: q/out [T, NH, 512] bf16, kv_cache
/// [num_blocks, block_size, 512] uint8 (E4M3 bytes; cache_format 1 = E5M2), inv_scale
/// [num_blocks · block_size, 1] bf16, indices [T, W] int64, lens [T] int64 (lens_i32: int32),
/// lse [T, NH] f32 (null: none).
kjit::mla::SwaDecodeArgs make_args(void* q, void* kv, void* inv_scale, void* indices, void* lens, void* out,
                                   void* lse, int tokens, int heads, int num_blocks, int block_size, int window,
                                   int lens_i32, int cache_format, float scale, int num_splits, int head_group) {
  using kjit::DType;
  using kjit::TensorRef;
  constexpr int64_t kHd = 512;
  kjit::mla::SwaDecodeArgs a;
  a.q = TensorRef(q, DType::kBF16, {tokens, heads, kHd});
  a.kv_cache = TensorRef(kv, cache_format == 1 ? DType::kE5M2 : DType::kU8, {num_blocks, block_size, kHd});
  a.inv_scale = TensorRef(inv_scale, DType::kBF16, {int64_t{num_blocks} * block_size, 1});
  a.indices = TensorRef(indices, DType::kI64, {tokens, window});
  a.lens = TensorRef(lens, lens_i32 ? DType::kI32 : DType::kI64, {tokens});
  a.out = TensorRef(out, DType::kBF16, {tokens, heads, kHd});
  if (lse != nullptr) a.lse = TensorRef(lse, DType::kF32, {tokens, heads});
  a.scale = scale;
  a.num_splits = num_splits;
  a.head_group = head_group;
  return a;
}

int report(const char* fn, const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", fn, e.what());
  std::fflush(stderr);
  return 1;
}

}  // namespace

extern "C" {

/// Writes the workspace bytes kjit_bench_swa needs for this shape to *bytes (a shape-only query:
/// it validates fake pointers, then asks the planner with device 0's SM count).
int kjit_bench_swa_workspace(int tokens, int heads, int num_blocks, int block_size, int window, int num_splits,
                             int head_group, size_t* bytes) {
  try {
    void* p = reinterpret_cast<void*>(uintptr_t{1} << 20);
    *bytes = kjit::mla::swa_decode_workspace_bytes(make_args(p, p, p, p, p, p, nullptr, tokens, heads, num_blocks,
                                                             block_size, window, 0, 0, 0.f, num_splits, head_group));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_swa_workspace", e);
  }
}

/// The plan kjit_bench_swa would run for this shape and these requests on device 0 (the sweep
/// prints it next to each timing, since the planner clamps a requested split count):
/// out[0..5] = group, kv_tile, num_splits, split_len, decode CTAs, launches (1 or 2).
int kjit_bench_swa_plan(int tokens, int heads, int num_blocks, int block_size, int window, int num_splits,
                        int head_group, long long* out) {
  try {
    void* p = reinterpret_cast<void*>(uintptr_t{1} << 20);
    const kjit::mla::detail::SwaDims d = kjit::mla::detail::validate_swa_decode(make_args(
        p, p, p, p, p, p, nullptr, tokens, heads, num_blocks, block_size, window, 0, 0, 0.f, num_splits, head_group));
    const kjit::mla::detail::SwaPlan plan = kjit::mla::detail::plan_swa_decode(d, kjit::device_info(d.device));
    out[0] = plan.heads_per_cta;
    out[1] = plan.tile;
    out[2] = plan.num_splits;
    out[3] = plan.split_len;
    out[4] = plan.ctas;
    out[5] = plan.num_splits > 1 ? 2 : 1;
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_swa_plan", e);
  }
}

/// One decode on `stream` (a CUstream; null = the legacy default stream). scale 0 = 1/sqrt(512),
/// num_splits / head_group 0 = the planner's choice.
int kjit_bench_swa(void* q, void* kv, void* inv_scale, void* indices, void* lens, void* out, void* lse,
                   void* workspace, size_t workspace_bytes, int tokens, int heads, int num_blocks, int block_size,
                   int window, int lens_i32, int cache_format, float scale, int num_splits, int head_group,
                   void* stream) {
  try {
    kjit::mla::swa_decode(make_args(q, kv, inv_scale, indices, lens, out, lse, tokens, heads, num_blocks, block_size,
                                    window, lens_i32, cache_format, scale, num_splits, head_group),
                          workspace, workspace_bytes, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_swa", e);
  }
}

}  // extern "C"
