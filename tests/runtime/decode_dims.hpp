#pragma once
// The decode planner's input for a contiguous GQA decode of `batch` requests of `len` tokens, as
// the planner tests build it (runtime/ops/attention/decode.hpp).
#include "runtime/ops/attention/decode.hpp"

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
