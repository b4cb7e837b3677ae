#pragma once
/// \file runtime/ops/tma_map.hpp
/// The TMA tensor maps (CUtensorMap) of the Hopper kernels' Params, memoized per thread at two
/// levels. The map memo's key is the whole argument list of cuTensorMapEncodeTiled, the base
/// address included: a map embeds its tensor's global address, so a map is reused only for the
/// very tensor (pointer, shape, strides, element type, box and modes) it was encoded for, and a
/// call on another buffer of the same geometry encodes its own. In front of it, the call memo
/// keeps all the maps of one op call under a key the op packs from what its map keys are
/// computed from (the tensors' addresses, sizes and strides and the op's box choices): a repeat
/// call builds no map key and probes once for all its maps.
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

/// The thread's memo of encode_tma_map: 256 slots of 320 bytes (80 KB), 4 ways a set: the maps
/// of a call-memo miss (up to 4 a call) for a model of up to ~64 layers stay encoded.
using TmaMapMemo = PodMemo<TmaMapKey, TmaDescriptor, 256>;
TmaMapMemo& tma_map_memo();

/// The map of `key` from the thread's memo, encoded on a miss (encode_tma_map, whose
/// DriverError it passes on, storing nothing). Valid until the thread's next tma_map call:
/// copy it into the Params at once.
const TmaDescriptor& tma_map(const TmaMapKey& key);

/// The inputs of one op call's TMA maps, packed by the op: `op` names the op (the address of
/// something of its own, so two ops never share an entry), `words` hold what its map keys are
/// computed from, tensor addresses first (the memo picks the set by the first 64 bytes). Every
/// input of every map key must be in it, directly or as something it is a function of: a value
/// built from anything else would be served for a call it does not describe. Zero-initialize it
/// (`TmaCallKey k{}`) before filling.
struct TmaCallKey {
  static constexpr int kWords = 33;
  const void* op;
  uint64_t words[kWords];
};
static_assert(std::has_unique_object_representations_v<TmaCallKey>, "keyed by its bytes, no padding");

/// The maps of one call, in the order the op's key maker lists them (up to 4: the wgmma prefill's
/// q, k, v and out).
struct TmaCallMaps {
  static constexpr int kMaps = 4;
  TmaDescriptor map[kMaps];
};

/// The thread's memo of whole calls' maps: 256 slots of 832 bytes (208 KB), 4 ways a set: a
/// per-layer call of a 96- or 126-layer model (each layer its own K and V) stays in it.
using TmaCallMemo = PodMemo<TmaCallKey, TmaCallMaps, 256>;
TmaCallMemo& tma_call_memo();

/// The `count` maps of the call `key` describes: from the thread's call memo, else each map of
/// the keys `make_keys(TmaMapKey (&keys)[TmaCallMaps::kMaps])` fills (its first `count`) through
/// tma_map, stored together. A DriverError of an encode passes on, storing nothing. Valid until
/// the thread's next tma_call_maps call: copy the maps into the Params at once.
template <class MakeKeys>
const TmaCallMaps& tma_call_maps(const TmaCallKey& key, int count, MakeKeys&& make_keys) {
  return tma_call_memo().get(key, [&](const TmaCallKey&) {
    TmaMapKey keys[TmaCallMaps::kMaps] = {};
    make_keys(keys);
    TmaCallMaps maps{};
    for (int i = 0; i < count; ++i) maps.map[i] = tma_map(keys[i]);
    return maps;
  });
}

}  // namespace kjit::detail
