#pragma once
// Parameters of paged_append_kernel (attention/paged_append.cu): writes new tokens' K/V rows into
// the page pools of a paged KV cache. Compiled by g++ and NVRTC: PODs only.
#include "kjit/types.h"

namespace kjit::attention {

/// Threads per CTA of paged_append_kernel.
constexpr int kPagedAppendThreads = 256;

/// Strides in elements. The kernel walks (token, kv head, 16-byte chunk) items grid-stride.
struct PagedAppendParams {
  const void* k_new;             ///< bf16 [num_new, kv_heads, head_dim]
  const void* v_new;
  void* k_pool;                  ///< bf16 [num_pages, page_size, kv_heads, head_dim]
  void* v_pool;
  const int32_t* kv_indptr;      ///< [batch + 1]
  const int32_t* kv_page_indices;
  const int32_t* kv_last_page_len;  ///< [batch]
  const int32_t* batch_indices;  ///< per-token mode: [num_new]
  const int32_t* positions;      ///< per-token mode: [num_new]
  const int32_t* append_indptr;  ///< indptr mode: [batch + 1]
  int64_t k_new_stride_n, k_new_stride_h;
  int64_t v_new_stride_n, v_new_stride_h;
  int64_t pool_stride_page, pool_stride_slot, pool_stride_h;  ///< shared by k_pool and v_pool
  int64_t num_items;             ///< num_new · kv_heads · head_dim / 8
  int32_t num_new;
  int32_t batch;
  int32_t kv_heads;
  int32_t page_size;
};

}  // namespace kjit::attention
