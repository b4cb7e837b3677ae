// The sm_90a prefill kernel's Params: its four TMA tensor maps over the BLHD tensors, from the
// thread's call memo of maps (runtime/ops/tma_map.hpp): a repeat call finds all four with one
// probe keyed by the tensors' addresses, sizes and strides.
#include "runtime/ops/attention/prefill.hpp"

#include "runtime/ops/attention/params.hpp"
#include "runtime/ops/softmax_params.hpp"
#include "runtime/ops/tma_map.hpp"

#include <cuda.h>

#include <algorithm>

namespace kjit::attention {
namespace detail {

kjit::detail::TmaMapKey blhd_tma_map_key(const TensorRef& t, int box_rows) {
  kjit::detail::TmaMapKey key = kjit::detail::swizzled_tma_map_key(t.data, 4, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  // TMA rejects empty dims; a K/V of no tokens (kv_len 0) is never loaded (the kernel walks no
  // tile), so its map just has to encode.
  key.dims[0] = static_cast<uint64_t>(t.shape[3]);
  key.dims[1] = static_cast<uint64_t>(std::max<int64_t>(t.shape[1], 1));
  key.dims[2] = static_cast<uint64_t>(t.shape[2]);
  key.dims[3] = static_cast<uint64_t>(t.shape[0]);
  int64_t extent = t.shape[3] * 2;  // bytes spanned by the dims inside, for extent-1 dims
  for (int i = 0; i < 3; ++i) {
    const int dim = i == 0 ? 1 : i == 1 ? 2 : 0;
    const int64_t bytes = t.shape[dim] > 1 ? t.strides[dim] * 2 : (extent + 15) / 16 * 16;
    key.strides[i] = static_cast<uint64_t>(bytes);
    extent = std::max(extent, bytes * t.shape[dim]);
  }
  key.box[0] = 64;
  key.box[1] = static_cast<uint32_t>(box_rows);
  key.box[2] = key.box[3] = 1;
  return key;
}

namespace {

// The call key of the four maps: everything blhd_tma_map_key reads of q, k, v and out (address,
// the four sizes, the strides of dims 0..2) and the box rows.
kjit::detail::TmaCallKey prefill_tma_call_key(const PrefillArgs& args, const PrefillSm90LaunchShape& shape) {
  static const char kOp = 0;
  kjit::detail::TmaCallKey key{};
  key.op = &kOp;
  const TensorRef* tensors[4] = {&args.q, &args.k, &args.v, &args.out};
  int w = 0;
  for (const TensorRef* t : tensors) key.words[w++] = reinterpret_cast<uintptr_t>(t->data);
  for (const TensorRef* t : tensors) {
    for (int i = 0; i < 4; ++i) key.words[w++] = static_cast<uint64_t>(t->shape[i]);
    for (int i = 0; i < 3; ++i) key.words[w++] = static_cast<uint64_t>(t->strides[i]);
  }
  key.words[w++] = static_cast<uint64_t>(shape.block_m) << 32 | static_cast<uint32_t>(shape.block_n);
  return key;
}
static_assert(4 + 4 * 7 + 1 == kjit::detail::TmaCallKey::kWords, "the prefill call key fills every word");

}  // namespace

PrefillSm90Params PrefillOp::params_sm90(const PrefillArgs& args, const PrefillDims& d, const PrefillPlan& plan) {
  PrefillSm90Params p{};
  fill_params_sm90(args, d, plan, &p);
  return p;
}

void PrefillOp::fill_params_sm90(const PrefillArgs& args, const PrefillDims& d, const PrefillPlan& plan,
                                 PrefillSm90Params* out) {
  const PrefillSm90LaunchShape shape = prefill_sm90_launch_shape(static_cast<int>(d.head_dim));
  PrefillSm90Params& p = *out;
  const kjit::detail::TmaCallMaps& maps =
      kjit::detail::tma_call_maps(prefill_tma_call_key(args, shape), 4, [&](kjit::detail::TmaMapKey(&keys)[4]) {
        keys[0] = blhd_tma_map_key(args.q, shape.block_m);
        keys[1] = blhd_tma_map_key(args.k, shape.block_n);
        keys[2] = blhd_tma_map_key(args.v, shape.block_n);
        keys[3] = blhd_tma_map_key(args.out, 64);
      });
  p.tma_q = maps.map[0];
  p.tma_k = maps.map[1];
  p.tma_v = maps.map[2];
  p.tma_out = maps.map[3];
  set_prefill_lse(p, d.has_lse ? &args.lse : nullptr);
  p.q_len = static_cast<int32_t>(d.q_len);
  p.kv_len = static_cast<int32_t>(d.max_kv_len);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.group = static_cast<int32_t>(d.group);
  p.q_tiles = static_cast<int32_t>(plan.q_tiles);
  p.causal = args.causal ? 1 : 0;
  p.scale_log2 = kjit::detail::softmax_scale_log2(args.scale, d.head_dim);
  // Pingpong measured on the H200: hd64 causal 300 -> 333 TFLOP/s with two consumer warpgroups
  // (2026-11-30), 336 -> 356 with three (2026-12-02, R50); hd128 ±1%.
  p.pingpong = 1;
  p.head_group = prefill_head_group(d, AttentionVariant::kWgmma);
}

}  // namespace detail
}  // namespace kjit::attention
