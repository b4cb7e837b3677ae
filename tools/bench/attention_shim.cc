// C entry points for tools/bench/bench_attention.py: prefill, paged decode, the ragged paged
// prefill (plan + run) and the paged append, on raw device pointers of torch tensors and torch's
// current stream, so kjit and the PyTorch peers run in one process on the same memory. Every
// function returns 0 on success and 1 after printing the error. Tensors are contiguous as the
// script allocates them (see each function).
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>

namespace {

using kjit::DType;
using kjit::TensorRef;

int report(const char* fn, const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", fn, e.what());
  std::fflush(stderr);
  return 1;
}

/// Pools k/v [num_pages, page_size, kv_heads, head_dim] (separate contiguous tensors), indptr
/// [batch + 1], indices [nnz], last [batch] int32.
kjit::attention::PagedKVCache make_cache(void* k_pool, void* v_pool, void* indptr, void* indices, void* last,
                                         int batch, int kv_heads, int head_dim, int num_pages, int page_size,
                                         int nnz) {
  kjit::attention::PagedKVCache c;
  c.k = TensorRef(k_pool, DType::kBF16, {num_pages, page_size, kv_heads, head_dim});
  c.v = TensorRef(v_pool, DType::kBF16, {num_pages, page_size, kv_heads, head_dim});
  c.indptr = TensorRef(indptr, DType::kI32, {batch + 1});
  c.page_indices = TensorRef(indices, DType::kI32, {nnz});
  c.last_page_len = TensorRef(last, DType::kI32, {batch});
  return c;
}

kjit::attention::PagedDecodeArgs decode_args(void* q, void* k_pool, void* v_pool, void* indptr, void* indices,
                                             void* last, void* out, void* lse, int batch, int q_heads, int kv_heads,
                                             int head_dim, int num_pages, int page_size, int nnz, long long hint,
                                             int num_splits) {
  kjit::attention::PagedDecodeArgs a;
  a.q = TensorRef(q, DType::kBF16, {batch, 1, q_heads, head_dim});
  a.cache = make_cache(k_pool, v_pool, indptr, indices, last, batch, kv_heads, head_dim, num_pages, page_size, nnz);
  a.out = TensorRef(out, DType::kBF16, {batch, 1, q_heads, head_dim});
  if (lse != nullptr) a.lse = TensorRef(lse, DType::kF32, {batch, q_heads});
  a.num_splits = num_splits;
  a.kv_len_hint = hint;
  return a;
}

/// The scripts' variant codes: 1 mma, 2 wgmma, anything else auto.
kjit::attention::AttentionVariant variant_of(int variant) {
  return variant == 1   ? kjit::attention::AttentionVariant::kMma
         : variant == 2 ? kjit::attention::AttentionVariant::kWgmma
                        : kjit::attention::AttentionVariant::kAuto;
}

}  // namespace

extern "C" {

/// Dense prefill: q/out [B, Lq, Hq, D], k/v [B, Lkv, Hkv, D] bf16; lse [B, Hq, Lq] f32 or null;
/// mask bool [B, Lq, Lkv] (mask_rank 3), [B, Lkv] (2) or null (0); block_m 0 = choose;
/// variant 0 = auto, 1 = mma (mma.sync), 2 = wgmma (Hopper).
int kjit_bench_prefill(void* q, void* k, void* v, void* mask, int mask_rank, void* out, void* lse, int batch,
                       int q_len, int kv_len, int q_heads, int kv_heads, int head_dim, int causal, int block_m,
                       int variant, void* stream) {
  try {
    kjit::attention::PrefillArgs a;
    a.q = TensorRef(q, DType::kBF16, {batch, q_len, q_heads, head_dim});
    a.k = TensorRef(k, DType::kBF16, {batch, kv_len, kv_heads, head_dim});
    a.v = TensorRef(v, DType::kBF16, {batch, kv_len, kv_heads, head_dim});
    if (mask != nullptr && mask_rank == 3) a.mask = TensorRef(mask, DType::kBool, {batch, q_len, kv_len});
    if (mask != nullptr && mask_rank == 2) a.mask = TensorRef(mask, DType::kBool, {batch, kv_len});
    a.out = TensorRef(out, DType::kBF16, {batch, q_len, q_heads, head_dim});
    if (lse != nullptr) a.lse = TensorRef(lse, DType::kF32, {batch, q_heads, q_len});
    a.causal = causal != 0;
    a.block_m = block_m;
    a.variant = variant_of(variant);
    kjit::attention::prefill(a, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_prefill", e);
  }
}

/// Workspace bytes of kjit_bench_paged_decode for this shape (pointer-free query).
int kjit_bench_paged_decode_workspace(int batch, int q_heads, int kv_heads, int head_dim, int num_pages,
                                      int page_size, int nnz, long long hint, int num_splits, size_t* bytes) {
  try {
    void* p = reinterpret_cast<void*>(uintptr_t{1} << 20);
    *bytes = kjit::attention::paged_decode_workspace_bytes(decode_args(p, p, p, p, p, p, p, nullptr, batch, q_heads,
                                                                       kv_heads, head_dim, num_pages, page_size, nnz,
                                                                       hint, num_splits));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_paged_decode_workspace", e);
  }
}

/// Paged decode: q/out [B, 1, Hq, D] bf16, lse [B, Hq] f32 or null, pools and table as make_cache.
int kjit_bench_paged_decode(void* q, void* k_pool, void* v_pool, void* indptr, void* indices, void* last, void* out,
                            void* lse, void* workspace, size_t ws_bytes, int batch, int q_heads, int kv_heads,
                            int head_dim, int num_pages, int page_size, int nnz, long long hint, int num_splits,
                            void* stream) {
  try {
    kjit::attention::paged_decode(decode_args(q, k_pool, v_pool, indptr, indices, last, out, lse, batch, q_heads,
                                              kv_heads, head_dim, num_pages, page_size, nnz, hint, num_splits),
                                  workspace, ws_bytes, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_paged_decode", e);
  }
}

/// Plans a ragged prefill from the host qo_indptr [batch + 1]; returns an opaque plan handle in
/// *plan (free with kjit_bench_plan_free), its workspace bytes and work count.
int kjit_bench_paged_prefill_plan(const int32_t* qo_indptr_host, int batch, int head_dim, int tile_rows,
                                  void** plan, size_t* workspace_bytes, int* num_work) {
  try {
    auto p = std::make_unique<kjit::attention::PagedPrefillPlan>(
        kjit::attention::plan_paged_prefill(qo_indptr_host, batch, head_dim, tile_rows));
    *workspace_bytes = p->workspace_bytes;
    *num_work = static_cast<int>(p->num_work());
    *plan = p.release();
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_paged_prefill_plan", e);
  }
}

/// Uploads the plan's work map into `workspace` (synchronous).
int kjit_bench_plan_upload(void* plan, void* workspace, size_t ws_bytes) {
  try {
    kjit::attention::upload_paged_prefill_plan(*static_cast<kjit::attention::PagedPrefillPlan*>(plan), workspace,
                                               ws_bytes);
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_plan_upload", e);
  }
}

void kjit_bench_plan_free(void* plan) { delete static_cast<kjit::attention::PagedPrefillPlan*>(plan); }

/// Forces the plan's kernel: variant 0 auto, 1 mma.sync, 2 wgmma (PagedPrefillPlan::variant; a
/// kernel that cannot run the plan makes kjit_bench_paged_prefill fail).
void kjit_bench_plan_set_variant(void* plan, int variant) {
  static_cast<kjit::attention::PagedPrefillPlan*>(plan)->variant = variant_of(variant);
}

/// Ragged paged prefill: q/out [total_q, Hq, D] bf16, qo_indptr [B + 1] int32 on the device,
/// lse [Hq, total_q] f32 or null, pools and table as make_cache.
int kjit_bench_paged_prefill(void* plan, void* q, void* qo_indptr, void* k_pool, void* v_pool, void* indptr,
                             void* indices, void* last, void* out, void* lse, void* workspace, size_t ws_bytes,
                             int batch, int total_q, int q_heads, int kv_heads, int head_dim, int num_pages,
                             int page_size, int nnz, int causal, void* stream) {
  try {
    kjit::attention::PagedPrefillArgs a;
    a.q = TensorRef(q, DType::kBF16, {total_q, q_heads, head_dim});
    a.qo_indptr = TensorRef(qo_indptr, DType::kI32, {batch + 1});
    a.cache = make_cache(k_pool, v_pool, indptr, indices, last, batch, kv_heads, head_dim, num_pages, page_size, nnz);
    a.causal = causal != 0;
    a.out = TensorRef(out, DType::kBF16, {total_q, q_heads, head_dim});
    if (lse != nullptr) a.lse = TensorRef(lse, DType::kF32, {q_heads, total_q});
    kjit::attention::paged_prefill(a, *static_cast<kjit::attention::PagedPrefillPlan*>(plan), workspace, ws_bytes,
                                   static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_paged_prefill", e);
  }
}

/// Appends new k/v [num_new, Hkv, D] bf16 at the end of each request (append_indptr [B + 1]).
int kjit_bench_append_paged_kv(void* k_new, void* v_new, void* append_indptr, int num_new, void* k_pool, void* v_pool,
                               void* indptr, void* indices, void* last, int batch, int kv_heads, int head_dim,
                               int num_pages, int page_size, int nnz, void* stream) {
  try {
    kjit::attention::AppendPagedKVArgs a;
    a.k = TensorRef(k_new, DType::kBF16, {num_new, kv_heads, head_dim});
    a.v = TensorRef(v_new, DType::kBF16, {num_new, kv_heads, head_dim});
    a.cache = make_cache(k_pool, v_pool, indptr, indices, last, batch, kv_heads, head_dim, num_pages, page_size, nnz);
    a.append_indptr = TensorRef(append_indptr, DType::kI32, {batch + 1});
    kjit::attention::append_paged_kv(a, static_cast<CUstream>(stream));
    return 0;
  } catch (const std::exception& e) {
    return report("kjit_bench_append_paged_kv", e);
  }
}

}  // extern "C"
