// Appends new tokens' K and V rows to a paged KV cache (family "attention.paged_append"): each
// new token n goes to position pos of request b, i.e. slot pos % page_size of page
// kv_page_indices[kv_indptr[b] + pos / page_size]. (b, pos) come from per-token batch_indices /
// positions (kIndptr = false) or from append_indptr (kIndptr = true): request b's new tokens are
// rows append_indptr[b] .. append_indptr[b+1) and take the last positions of its KV,
// pos = kv_len(b) − n_b + i. Positions outside [0, kv_len(b)) are skipped, so a stale or
// padded token never writes outside the request's pages.
//
// A pure copy: one thread per 16-byte chunk of a (token, kv head) row, grid-stride, so both the
// reads and the writes of a row are whole 16-byte vectors of consecutive threads.
#include "kjit/config.cuh"

#include "attention/paged_append_params.h"

namespace kjit::attention {

/// kHeadDim ∈ {64, 128, 256}. Launch: kPagedAppendThreads threads, any grid (grid-stride).
template <int kHeadDim, bool kIndptr>
__global__ void __launch_bounds__(kPagedAppendThreads) paged_append_kernel(KJIT_PARAMS PagedAppendParams p) {
  constexpr int kChunks = kHeadDim / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kPagedAppendThreads;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kPagedAppendThreads + threadIdx.x; item < p.num_items;
       item += stride) {
    const int chunk = static_cast<int>(item % kChunks);
    const int64_t row = item / kChunks;
    const int head = static_cast<int>(row % p.kv_heads);
    const int n = static_cast<int>(row / p.kv_heads);
    int b;
    int pos;
    if constexpr (kIndptr) {
      // The request whose range holds n: the last b with append_indptr[b] ≤ n (binary search).
      int lo = 0, hi = p.batch - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (__ldg(p.append_indptr + mid) <= n) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      b = lo;
      const int first = __ldg(p.append_indptr + b);
      const int count = __ldg(p.append_indptr + b + 1) - first;
      if (n - first >= count) continue;  // past append_indptr[batch]
      const int pages = __ldg(p.kv_indptr + b + 1) - __ldg(p.kv_indptr + b);
      const int last = min(max(__ldg(p.kv_last_page_len + b), 0), p.page_size);
      const int kv_len = pages > 0 ? (pages - 1) * p.page_size + last : 0;
      pos = kv_len - count + (n - first);
    } else {
      b = __ldg(p.batch_indices + n);
      pos = __ldg(p.positions + n);
      if (b < 0 || b >= p.batch) continue;
    }
    const int first_page = __ldg(p.kv_indptr + b);
    const int pages = __ldg(p.kv_indptr + b + 1) - first_page;
    const int last = min(max(__ldg(p.kv_last_page_len + b), 0), p.page_size);
    const int kv_len = pages > 0 ? (pages - 1) * p.page_size + last : 0;
    if (pos < 0 || pos >= kv_len) continue;
    const int page = __ldg(p.kv_page_indices + first_page + pos / p.page_size);
    const int64_t dst = static_cast<int64_t>(page) * p.pool_stride_page +
                        static_cast<int64_t>(pos % p.page_size) * p.pool_stride_slot +
                        static_cast<int64_t>(head) * p.pool_stride_h + chunk * 8;
    const uint4 k = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.k_new) + n * p.k_new_stride_n +
                                                        head * p.k_new_stride_h + chunk * 8));
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.v_new) + n * p.v_new_stride_n +
                                                        head * p.v_new_stride_h + chunk * 8));
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.k_pool) + dst) = k;
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.v_pool) + dst) = v;
  }
}

}  // namespace kjit::attention
