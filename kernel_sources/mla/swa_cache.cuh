#pragma once
// Reading the fp8 SWA decode's KV cache (both kernels: mla/swa_decode.cu and
// mla/swa_decode_sm90.cu): where a slot's row lives and its dequantization multiplier.
#include "kjit/config.cuh"
#include "mla/swa_decode_params.h"

namespace kjit::mla {

/// Address of cache row `slot` (slot = block · block_size + offset).
KJIT_DEVICE const uint8_t* kv_row(const SwaDecodeParams& p, int64_t slot) {
  if (p.kv_compact) return p.kv + slot * p.kv_stride_row_bytes;
  const int64_t block = slot / p.block_size;
  const int64_t offset = slot - block * p.block_size;
  return p.kv + block * p.kv_stride_block_bytes + offset * p.kv_stride_row_bytes;
}

/// The bf16 inv_scale of `slot` as a float.
KJIT_DEVICE float inv_scale_of(const SwaDecodeParams& p, int64_t slot) {
  const uint16_t bits = __ldg(static_cast<const unsigned short*>(p.inv_scale) + slot * p.scale_stride);
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

}  // namespace kjit::mla
