#pragma once
/// \file runtime/ops/attention/params.hpp
/// The kernel Params fields the attention ops fill alike, written once. DecodeParams and
/// PrefillParams (kernel_sources/attention/*_params.h) spell their heads and their KV source the
/// same way (kv_source.cuh reads ContigKV or PagedKV from either), so each helper is a template
/// over the Params struct; an op's params() calls the helpers for what it shares with the others
/// and fills only its own fields (its query and output layout, its plan's numbers). Pure host
/// code: no check (the op's validate did), no allocation.

#include <kjit/ops/attention.hpp>
#include <kjit/tensor.hpp>

#include "attention/prefill_params.h"
#include "runtime/ops/attention/common.hpp"
#include "runtime/ops/softmax_params.hpp"

#include <cstdint>

namespace kjit::attention::detail {

/// q_heads, kv_heads, group (q_heads / kv_heads) and the base-2 softmax scale (`scale`, 0 for
/// 1 / sqrt(head_dim)).
template <class Params>
void set_heads(Params& p, int64_t q_heads, int64_t kv_heads, int64_t group, float scale, int64_t head_dim) {
  p.q_heads = static_cast<int32_t>(q_heads);
  p.kv_heads = static_cast<int32_t>(kv_heads);
  p.group = static_cast<int32_t>(group);
  p.scale_log2 = kjit::detail::softmax_scale_log2(scale, head_dim);
}

/// The contiguous (ContigKV) source: BLHD k and v [batch, max_kv_len, kv_heads, head_dim] with
/// their batch, token and head strides, and the per-request lengths (`kv_lens`, null: every
/// request has max_kv_len).
template <class Params>
void set_contiguous_kv(Params& p, const TensorRef& k, const TensorRef& v, const TensorRef* kv_lens,
                       int64_t max_kv_len) {
  p.k = k.data;
  p.v = v.data;
  p.kv_lens = kv_lens != nullptr ? static_cast<const int32_t*>(kv_lens->data) : nullptr;
  p.k_stride_b = k.strides[0];
  p.k_stride_l = k.strides[1];
  p.k_stride_h = k.strides[2];
  p.v_stride_b = v.strides[0];
  p.v_stride_l = v.strides[1];
  p.v_stride_h = v.strides[2];
  p.max_kv_len = static_cast<int32_t>(max_kv_len);
}

/// The CSR page table of `c` (indptr, page ids, last page lengths): the decode, prefill and
/// append kernels' kv_indptr, kv_page_indices and kv_last_page_len.
template <class Params>
void set_page_table(Params& p, const PagedKVCache& c) {
  p.kv_indptr = static_cast<const int32_t*>(c.indptr.data);
  p.kv_page_indices = static_cast<const int32_t*>(c.page_indices.data);
  p.kv_last_page_len = static_cast<const int32_t*>(c.last_page_len.data);
}

/// The paged (PagedKV) source of validated cache `c` (shape `d`): the pools, the page table, the
/// pool strides (a page's stride is its page_rows slots) and the page geometry.
template <class Params>
void set_paged_kv(Params& p, const PagedKVCache& c, const PagedCacheDims& d) {
  p.k = c.k.data;
  p.v = c.v.data;
  set_page_table(p, c);
  p.k_stride_b = p.v_stride_b = c.k.strides[0];
  p.k_stride_l = p.v_stride_l = d.slot_stride;
  p.k_stride_h = p.v_stride_h = c.k.strides[2];
  p.page_size = static_cast<int32_t>(d.page_size);
  p.page_div = d.page_div;
  p.page_rows = d.page_rows;
}

/// The LSE output of a prefill (PrefillParams, PrefillSm90Params): null, or f32 `*lse`, dense
/// [batch, q_heads, q_len] or packed [q_heads, total_q] (whose batch stride stays 0).
template <class Params>
void set_prefill_lse(Params& p, const TensorRef* lse) {
  if (lse == nullptr) {
    p.lse = nullptr;
    return;
  }
  p.lse = static_cast<float*>(lse->data);
  const int h = lse->ndim - 2;  // the head dim: 1 dense, 0 packed
  if (h == 1) p.lse_stride_b = lse->strides[0];
  p.lse_stride_h = lse->strides[h];
  p.lse_stride_l = lse->strides[h + 1];
}

/// The query side of a prefill's PrefillParams: q and out, dense BLHD [batch, q_len, q_heads, D]
/// or packed [total_q, q_heads, D] (whose batch strides stay 0), and the LSE (set_prefill_lse).
inline void set_prefill_io(PrefillParams& p, const TensorRef& q, const TensorRef& out, const TensorRef* lse) {
  p.q = q.data;
  p.out = out.data;
  const int l = q.ndim - 3;  // the token dim: 1 dense, 0 packed
  if (l == 1) {
    p.q_stride_b = q.strides[0];
    p.out_stride_b = out.strides[0];
  }
  p.q_stride_l = q.strides[l];
  p.q_stride_h = q.strides[l + 1];
  p.out_stride_l = out.strides[l];
  p.out_stride_h = out.strides[l + 1];
  set_prefill_lse(p, lse);
}

}  // namespace kjit::attention::detail
