#pragma once
/// \file runtime/ops/tma_map.hpp
/// The TMA tensor maps (CUtensorMap) of the Hopper kernels' Params, memoized per thread. The key
/// is the whole argument list of cuTensorMapEncodeTiled, the base address included: a map
/// embeds its tensor's global address, so a map is reused only for the very tensor (pointer,
/// shape, strides, element type, box and modes) it was encoded for, and a call on another
/// buffer of the same geometry encodes its own.
///
/// The maps travel inside the kernels' Params, passed by value in the kernel parameter space
/// (KJIT_PARAMS: __grid_constant__): cuLaunchKernelEx copies the Params when it is called, and a
/// CUDA graph captured from that launch keeps its own copy, so no launched or captured kernel
/// refers to the memo's storage.

#include "fp8/gemm_sm90_params.h"  // TmaDescriptor: a CUtensorMap's 128 bytes
#include "runtime/ops/pod_memo.hpp"

#include <cstdint>
#include <type_traits>

namespace kjit::detail {

using kjit::fp8::TmaDescriptor;

/// Every argument of cuTensorMapEncodeTiled for a map of rank 1..5. Zero-initialize it
/// (`TmaMapKey k{}`) before filling: entries past the rank stay 0 and the memo compares bytes.
struct TmaMapKey {
  const void* base;
  uint64_t dims[5];          ///< elements, innermost first
  uint64_t strides[4];       ///< bytes between consecutive indices of dims 1..rank-1
  uint32_t box[5];           ///< elements per copy, per dim
  uint32_t elem_strides[5];  ///< traversal strides, per dim
  int32_t rank;
  int32_t dtype;         ///< CUtensorMapDataType
  int32_t interleave;    ///< CUtensorMapInterleave
  int32_t swizzle;       ///< CUtensorMapSwizzle
  int32_t l2_promotion;  ///< CUtensorMapL2promotion
  int32_t oob_fill;      ///< CUtensorMapFloatOOBfill
};
static_assert(std::is_trivially_copyable_v<TmaMapKey> && sizeof(TmaMapKey) == 144, "keyed by its bytes, no padding");

/// A key of kjit's one TMA layout, everything else zero: `base`, `rank` and `dtype`
/// (a CUtensorMapDataType), unit traversal strides, no interleave, 128-byte swizzle, 256-byte L2
/// promotion, no NaN fill. The caller fills dims, strides and box (and may change l2_promotion).
TmaMapKey swizzled_tma_map_key(const void* base, int32_t rank, int32_t dtype);

/// Encodes `key` with cuTensorMapEncodeTiled (a host-only driver call, no allocation), every
/// time. Throws DriverError naming the call when the driver refuses the geometry.
void encode_tma_map(const TmaMapKey& key, TmaDescriptor* out);

/// The thread's memo of encode_tma_map: 64 slots of 320 bytes, 4 ways a set.
using TmaMapMemo = PodMemo<TmaMapKey, TmaDescriptor, 64>;
TmaMapMemo& tma_map_memo();

/// The map of `key` from the thread's memo, encoded on a miss (encode_tma_map, whose
/// DriverError it passes on, storing nothing). Valid until the thread's next tma_map call:
/// copy it into the Params at once.
const TmaDescriptor& tma_map(const TmaMapKey& key);

}  // namespace kjit::detail
