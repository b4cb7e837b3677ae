// The thread's memos of TMA tensor maps and of whole calls' maps (tma_map.hpp).
#include "runtime/ops/tma_map.hpp"

#include "runtime/driver.hpp"

#include <cuda.h>

#include <cstring>

namespace kjit::detail {

TmaMapKey swizzled_tma_map_key(const void* base, int32_t rank, int32_t dtype) {
  TmaMapKey key{};
  key.base = base;
  key.rank = rank;
  for (int32_t i = 0; i < rank; ++i) key.elem_strides[i] = 1;
  key.dtype = dtype;
  key.interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  key.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  key.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  key.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  return key;
}

void encode_tma_map(const TmaMapKey& key, TmaDescriptor* out) {
  static_assert(sizeof(CUtensorMap) == sizeof(TmaDescriptor), "CUtensorMap is 128 bytes");
  // Zeroed first: the bytes the driver leaves alone are then the same on every encode.
  CUtensorMap map{};
  KJIT_CU(cuTensorMapEncodeTiled(&map, static_cast<CUtensorMapDataType>(key.dtype), static_cast<cuuint32_t>(key.rank),
                                 const_cast<void*>(key.base), key.dims, key.strides, key.box, key.elem_strides,
                                 static_cast<CUtensorMapInterleave>(key.interleave),
                                 static_cast<CUtensorMapSwizzle>(key.swizzle),
                                 static_cast<CUtensorMapL2promotion>(key.l2_promotion),
                                 static_cast<CUtensorMapFloatOOBfill>(key.oob_fill)));
  std::memcpy(out, &map, sizeof(map));
}

TmaMapMemo& tma_map_memo() { return thread_memo<TmaMapMemo>(); }

TmaCallMemo& tma_call_memo() { return thread_memo<TmaCallMemo>(); }

const TmaDescriptor& tma_map(const TmaMapKey& key) {
  return tma_map_memo().get(key, [](const TmaMapKey& k) {
    TmaDescriptor d;
    encode_tma_map(k, &d);
    return d;
  });
}

}  // namespace kjit::detail
