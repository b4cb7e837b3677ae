// kjit::attention::paged_decode's tuning: bucket, knobs, candidates and stored plans
// (runtime/ops/tuned.hpp). The same knobs as the contiguous decode (decode_tune.cc) over the
// paged decode family; the split count divides each request's own length on the device.
#include "runtime/ops/attention/paged_decode.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kjit::attention::detail {
namespace {

using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

std::string fits(const TunedChoice& c, const DeviceInfo& info) {
  return decode_choice_fits(paged_decode_family(), c, info);
}

}  // namespace

const kjit::detail::TuneOpSpec& PagedDecodeOp::tune_spec() {
  static const kjit::detail::TuneOpSpec spec{
      kjit::detail::TuneOpId::kPagedDecode,
      "paged_decode",
      &kInfo,
      {"splits", nullptr, nullptr, nullptr},
      "[head_dim, group, pow2(batch * kv_heads), pow2(max(kv_len, 64)), page_size]: exact head_dim, GQA group and "
      "page size; the CTA count per split and the planned length (kv_len_hint, else pages * page_size / batch) "
      "rounded up to powers of two",
      "batch=1 kv_len=4096 q_heads=32 kv_heads=8 head_dim=128 page_size=16",
      fits,
      2};  // planner 2: on sm_90+ a plan of 2..8 splits merges them in clusters (and points name merge)
  return spec;
}

bool PagedDecodeOp::tune_key(const PagedDecodeDims& d, TunedKey* key) {
  if (d.requested_splits != 0 || d.requested_merge != DecodeMerge::kAuto || d.batch == 0) return false;
  key->op = static_cast<int32_t>(kjit::detail::TuneOpId::kPagedDecode);
  key->bucket[0] = kjit::detail::bucket_exact(d.head_dim);
  key->bucket[1] = kjit::detail::bucket_exact(d.group);
  key->bucket[2] = kjit::detail::bucket_pow2(d.batch * d.cache.kv_heads);
  key->bucket[3] = kjit::detail::bucket_pow2(std::max<int64_t>(paged_plan_length(d), 64));
  key->bucket[4] = kjit::detail::bucket_exact(d.cache.page_size);
  return true;
}

bool PagedDecodeOp::apply_tuned(const PagedDecodeDims& d, const DeviceInfo& info, const TunedChoice& c,
                                DecodePlan* out) {
  if (c.family != &paged_decode_family() || c.family->value(c.point, "head_dim").code != d.head_dim ||
      c.knobs[0] < 1 || c.knobs[0] > kMaxPagedSplits || d.batch == 0) {
    return false;
  }
  const int heads_per_cta = static_cast<int>(c.family->value(c.point, "rows").code);
  DecodePlan plan = plan_paged_decode(d, c.knobs[0], d.kv_len_hint, info.sm_count,
                                      paged_ctas_per_sm(d.head_dim, info.max_smem_per_sm), heads_per_cta, merge_of(c),
                                      info.target().has_clusters());
  plan.choice.family = c.family;
  plan.choice.point = decode_point(paged_decode_family(), d.head_dim, plan);
  *out = plan;
  return true;
}

TunedChoice PagedDecodeOp::tuned_choice(const PagedDecodeDims& /*d*/, const DecodePlan& plan) {
  return kjit::detail::split_choice(plan);
}

std::vector<TunedChoice> PagedDecodeOp::tune_candidates(const PagedDecodeDims& d, const DeviceInfo& info) {
  if (d.batch == 0) return {};
  const int64_t tile = std::max(decode_launch_shape(static_cast<int>(d.head_dim)).tile_tokens, 1);
  // Splits past the planned length's tile count leave splits without a tile to stream.
  const int64_t tiles = std::max<int64_t>(1, (paged_plan_length(d) + tile - 1) / tile);
  std::vector<int> splits(std::begin(kDecodeSplitGrid), std::end(kDecodeSplitGrid));
  splits.push_back(plan(d, info).num_splits);
  return kjit::detail::split_candidates<PagedDecodeOp>(
      paged_decode_family(), d, info,
      [&](const TunedChoice& c) { return c.family->value(c.point, "head_dim").code == d.head_dim; }, splits, tiles);
}

}  // namespace kjit::attention::detail
