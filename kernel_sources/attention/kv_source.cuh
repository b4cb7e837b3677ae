#pragma once
// Where an attention kernel's K and V rows live: the KV-source policies of the decode and prefill
// kernels (ContigKV: one contiguous cache per sequence; PagedKV: a page table into a page pool).
// A policy only answers "how long is this sequence" and "where is token j's K (V) row of this
// KV head"; it schedules nothing.
//
//   ContigKV  k/v [batch, max_kv_len, kv_heads, head_dim] (any batch/token/head strides), with
//             optional per-sequence lengths kv_lens[b] (clamped to [0, max_kv_len]).
//   PagedKV   a page pool k/v [num_pages, page_size, kv_heads, head_dim]; sequence b owns pages
//             kv_page_indices[kv_indptr[b] .. kv_indptr[b+1]) in order (CSR), the last of them
//             holding kv_last_page_len[b] tokens (clamped to [0, page_size]):
//               kv_len(b) = (kv_indptr[b+1] − kv_indptr[b] − 1) · page_size + kv_last_page_len[b]
//             (0 with no pages). Token j sits at slot j % page_size of page
//             kv_page_indices[kv_indptr[b] + j / page_size].
//
// Both turn a token into a 32-bit "pool row" r whose K row starts at k_head + r · k_row_bytes:
// the token itself (ContigKV; the batch is folded into the base pointer) or
// page · page_rows + slot (PagedKV; page_rows = the page stride over the slot stride, so layouts
// with K and V interleaved per page, [num_pages, 2, page_size, ...], work too). PagedKV::locate
// reads the page table, so kernels call it one tile ahead of the copies that use its result
// (kLookup tells them to) and the table load's latency hides behind a tile of math.
//
// The policies read their inputs from the kernel's Params by field name (DecodeParams and
// PrefillParams both carry k, v, k_stride_b/l/h, v_stride_b/l/h, max_kv_len, kv_lens, kv_indptr,
// kv_page_indices, kv_last_page_len, page_size, page_div, page_rows); for PagedKV the *_stride_b
// fields are the page strides and *_stride_l the slot strides, and K and V share one layout.
#include "kjit/config.cuh"
#include "kjit/fast_div.h"

namespace kjit::attention {

/// K/V of sequence b in one [batch, max_kv_len, kv_heads, head_dim] tensor each.
struct ContigKV {
  /// Pool rows need no table: kernels compute them at issue time.
  static constexpr bool kLookup = false;

  const char* k_;
  const char* v_;
  int k_row_bytes_;  // row strides in bytes (< 2^31: the ops check)
  int v_row_bytes_;
  int len_;

  template <class Params>
  KJIT_DEVICE ContigKV(const Params& p, int b, int kv_head) {
    k_ = static_cast<const char*>(p.k) +
         (static_cast<int64_t>(b) * p.k_stride_b + static_cast<int64_t>(kv_head) * p.k_stride_h) * 2;
    v_ = static_cast<const char*>(p.v) +
         (static_cast<int64_t>(b) * p.v_stride_b + static_cast<int64_t>(kv_head) * p.v_stride_h) * 2;
    k_row_bytes_ = static_cast<int>(p.k_stride_l * 2);
    v_row_bytes_ = static_cast<int>(p.v_stride_l * 2);
    len_ = p.max_kv_len;
    if (p.kv_lens != nullptr) len_ = min(max(__ldg(p.kv_lens + b), 0), p.max_kv_len);
  }

  /// Tokens of this sequence.
  KJIT_DEVICE int length() const { return len_; }
  /// The pool row of token `token` (< length()).
  KJIT_DEVICE int locate(int token) const { return token; }
  /// PagedKV's split locate() (see there): no table, so no load.
  KJIT_DEVICE int page_id(int /*token*/) const { return 0; }
  KJIT_DEVICE int row_on_page(int /*id*/, int token) const { return token; }
  KJIT_DEVICE const char* k_row(int row) const { return k_ + static_cast<int64_t>(row) * static_cast<int64_t>(k_row_bytes_); }
  KJIT_DEVICE const char* v_row(int row) const { return v_ + static_cast<int64_t>(row) * static_cast<int64_t>(v_row_bytes_); }
};

/// K/V of sequence b scattered over the pages of a page pool (see the file comment).
struct PagedKV {
  /// locate() reads the page table: kernels call it a tile ahead.
  static constexpr bool kLookup = true;

  const char* k_;
  const char* v_;
  int k_row_bytes_;  // row strides in bytes (< 2^31: the ops check)
  int v_row_bytes_;
  const int32_t* pages_;  // this sequence's page ids
  int len_;
  int page_size_;
  FastDiv page_div_;  // token / page_size_ without a division (kjit/fast_div.h)
  int page_rows_;

  template <class Params>
  KJIT_DEVICE PagedKV(const Params& p, int b, int kv_head) {
    k_ = static_cast<const char*>(p.k) + static_cast<int64_t>(kv_head) * p.k_stride_h * 2;
    v_ = static_cast<const char*>(p.v) + static_cast<int64_t>(kv_head) * p.v_stride_h * 2;
    k_row_bytes_ = static_cast<int>(p.k_stride_l * 2);
    v_row_bytes_ = static_cast<int>(p.v_stride_l * 2);
    const int first = __ldg(p.kv_indptr + b);
    const int num_pages = __ldg(p.kv_indptr + b + 1) - first;
    pages_ = p.kv_page_indices + first;
    page_size_ = p.page_size;
    page_div_ = p.page_div;
    page_rows_ = p.page_rows;
    const int last = min(max(__ldg(p.kv_last_page_len + b), 0), p.page_size);
    len_ = num_pages > 0 ? (num_pages - 1) * p.page_size + last : 0;
  }

  KJIT_DEVICE int length() const { return len_; }
  /// The pool row of token `token` (< length()): one page-table load.
  KJIT_DEVICE int locate(int token) const { return row_on_page(page_id(token), token); }
  /// The two halves of locate(), for kernels that want the table load and the math it feeds in
  /// different loop iterations: page_id(token) is the load (the id of token's page) and
  /// row_on_page(page_id(token), token) == locate(token) is math only.
  KJIT_DEVICE int page_id(int token) const { return __ldg(pages_ + page_of(token)); }
  KJIT_DEVICE int row_on_page(int id, int token) const {
    return id * page_rows_ + (token - page_of(token) * page_size_);
  }
  /// The index of token's page within the sequence: one code path for every page size.
  KJIT_DEVICE int page_of(int token) const {
    return static_cast<int>(fast_quotient(static_cast<uint32_t>(token), page_div_));
  }
  KJIT_DEVICE const char* k_row(int row) const { return k_ + static_cast<int64_t>(row) * static_cast<int64_t>(k_row_bytes_); }
  KJIT_DEVICE const char* v_row(int row) const { return v_ + static_cast<int64_t>(row) * static_cast<int64_t>(v_row_bytes_); }
  /// k_row / v_row of a pool row (never negative) as one 32 × 32 → 64-bit multiply-add, for copy
  /// loops over many rows.
  KJIT_DEVICE const char* k_row_u(uint32_t row) const { return k_ + static_cast<uint64_t>(row) * static_cast<uint32_t>(k_row_bytes_); }
  KJIT_DEVICE const char* v_row_u(uint32_t row) const { return v_ + static_cast<uint64_t>(row) * static_cast<uint32_t>(v_row_bytes_); }
};

}  // namespace kjit::attention
