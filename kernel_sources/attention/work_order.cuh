#pragma once
// The order in which the prefill kernels (attention/prefill.cu, attention/prefill_sm90.cu) walk
// the (q head, q tile) work of one request. CTAs that run at the same time take neighbouring
// indices, so the order decides how many heads' K and V are read at once: walking the heads in
// small groups keeps that K/V in L2 (all heads at once re-read it from DRAM once it outgrows L2).
#include "kjit/config.cuh"

namespace kjit::attention {

/// Maps `flat` ∈ [0, q_heads · q_tiles) to (head, q_tile): the heads in groups of `head_group`
/// (1..q_heads; the last group may be smaller), one group after another; inside a group the heads
/// fastest and the q tiles in order, or under `causal` the heaviest (latest) q tile first, so the
/// longest work starts earliest and the tail stays short. head_group = q_heads is the plain
/// head-fastest order.
KJIT_DEVICE void head_group_order(int flat, int q_heads, int q_tiles, int head_group, bool causal, int& head,
                                  int& q_tile) {
  const int group_first = flat / (head_group * q_tiles) * head_group;
  const int group_heads = min(head_group, q_heads - group_first);
  const int in_group = flat - group_first * q_tiles;
  head = group_first + in_group % group_heads;
  const int t = in_group / group_heads;
  q_tile = causal ? q_tiles - 1 - t : t;
}

}  // namespace kjit::attention
