#pragma once
// The decode planners' inputs as the planner tests build them (runtime/ops/attention/decode.hpp
// and paged_decode.hpp): a contiguous GQA decode's dims, a paged one's, and the device.
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"

#include <cstdint>

inline kjit::attention::detail::DecodeDims decode_dims(int64_t batch, int64_t len, int64_t q_heads, int64_t kv_heads,
                                                       int64_t head_dim) {
  kjit::attention::detail::DecodeDims d;
  d.batch = batch;
  d.max_kv_len = len;
  d.q_heads = q_heads;
  d.kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.group = q_heads / kv_heads;
  return d;
}

/// The paged decode of `batch` requests of `len` tokens each at `page_size`: a pool of exactly
/// their pages, each in the page table once.
inline kjit::attention::detail::PagedDecodeDims paged_decode_dims(int64_t batch, int64_t len, int64_t q_heads,
                                                                  int64_t kv_heads, int64_t head_dim,
                                                                  int64_t page_size) {
  kjit::attention::detail::PagedDecodeDims d;
  d.batch = batch;
  d.q_heads = q_heads;
  d.head_dim = head_dim;
  d.group = q_heads / kv_heads;
  d.cache.batch = batch;
  d.cache.kv_heads = kv_heads;
  d.cache.head_dim = head_dim;
  d.cache.page_size = page_size;
  d.cache.nnz = batch * ((len + page_size - 1) / page_size);
  d.cache.num_pages = d.cache.nnz;
  return d;
}

/// A device as the decode planners see it: compute capability `major`.`minor`, an H200's 132
/// SMs, 227 KiB of opt-in shared memory per CTA and 228 KiB per SM, 1024 threads per CTA.
inline kjit::DeviceInfo planner_device(int major, int minor) {
  kjit::DeviceInfo info;
  info.cc_major = major;
  info.cc_minor = minor;
  info.sm_count = 132;
  info.max_smem_per_block_optin = 232448;
  info.max_smem_per_sm = 233472;
  info.max_threads_per_block = 1024;
  return info;
}
