// kjit::attention::decode's tuning: bucket, knobs, candidates and stored plans (runtime/ops/tuned.hpp).
#include "runtime/ops/attention/decode.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kjit::attention::detail {
namespace {

using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

int heads_per_cta_of(const TunedChoice& c) { return static_cast<int>(c.family->value(c.point, "rows").code); }
int64_t head_dim_of(const TunedChoice& c) { return c.family->value(c.point, "head_dim").code; }

std::string fits(const TunedChoice& c, const DeviceInfo& info) { return decode_choice_fits(decode_family(), c, info); }

}  // namespace

std::string decode_choice_fits(const Family& family, const TunedChoice& c, const DeviceInfo& info) {
  if (c.family != &family) {
    return fmt::format("family {} is not {}", c.family ? c.family->name : std::string("(none)"), family.name);
  }
  if (std::string why = c.family->invalid_reason(c.point); !why.empty()) return why;
  if (std::string why = c.family->unsupported_reason(c.point, info.target()); !why.empty()) return why;
  const DecodeLaunchShape shape = decode_launch_shape(static_cast<int>(head_dim_of(c)));
  if (shape.smem_bytes > info.max_smem_per_block_optin) {
    return fmt::format("{} bytes of shared memory per CTA, the device allows {}", shape.smem_bytes,
                       info.max_smem_per_block_optin);
  }
  if (info.max_threads_per_block > 0 && shape.threads > info.max_threads_per_block) {
    return fmt::format("{} threads per CTA, the device allows {}", shape.threads, info.max_threads_per_block);
  }
  if (c.knobs[0] < 1 || c.knobs[0] > kMaxDecodeSplits) return fmt::format("splits={} is outside 1..{}", c.knobs[0], kMaxDecodeSplits);
  if (merge_of(c) == DecodeMerge::kCluster && (c.knobs[0] < 2 || c.knobs[0] > kDecodeMaxClusterSplits)) {
    return fmt::format("merge=cluster combines 2..{} splits (one cluster each), not splits={}", kDecodeMaxClusterSplits,
                       c.knobs[0]);
  }
  return {};
}

DecodeMerge merge_of(const TunedChoice& c) { return static_cast<DecodeMerge>(c.family->value(c.point, "merge").code); }

const kjit::detail::TuneOpSpec& DecodeOp::tune_spec() {
  static const kjit::detail::TuneOpSpec spec{
      kjit::detail::TuneOpId::kDecode,
      "decode",
      &kInfo,
      {"splits", nullptr, nullptr, nullptr},
      "[head_dim, group, pow2(batch * kv_heads), pow2(max(kv_len, 64))]: exact head_dim and GQA group; the CTA "
      "count per split and the KV length rounded up to powers of two",
      "batch=1 kv_len=4096 q_heads=32 kv_heads=8 head_dim=128",
      fits,
      2};  // planner 2: on sm_90+ a plan of 2..8 splits merges them in clusters (and points name merge)
  return spec;
}

bool DecodeOp::tune_key(const DecodeDims& d, TunedKey* key) {
  if (d.requested_splits != 0 || d.requested_merge != DecodeMerge::kAuto || d.batch == 0) return false;
  key->op = static_cast<int32_t>(kjit::detail::TuneOpId::kDecode);
  key->bucket[0] = kjit::detail::bucket_exact(d.head_dim);
  key->bucket[1] = kjit::detail::bucket_exact(d.group);
  key->bucket[2] = kjit::detail::bucket_pow2(d.batch * d.kv_heads);
  key->bucket[3] = kjit::detail::bucket_pow2(std::max<int64_t>(d.max_kv_len, 64));
  return true;
}

bool DecodeOp::apply_tuned(const DecodeDims& d, const DeviceInfo& info, const TunedChoice& c, DecodePlan* out) {
  if (c.family != &decode_family() || head_dim_of(c) != d.head_dim || c.knobs[0] < 1) return false;
  DecodePlan plan = plan_decode(d, c.knobs[0], info.sm_count, decode_ctas_per_sm(d.head_dim, info.max_smem_per_sm),
                                heads_per_cta_of(c), merge_of(c), info.target().has_clusters());
  plan.choice.family = c.family;
  // The choice's rows and merge (a cluster choice whose count the call's length cuts to one
  // split merges nothing: the merge=kernel point).
  plan.choice.point = decode_point(decode_family(), d.head_dim, plan);
  *out = plan;
  return true;
}

TunedChoice DecodeOp::tuned_choice(const DecodeDims& /*d*/, const DecodePlan& plan) {
  return kjit::detail::split_choice(plan);
}

std::vector<TunedChoice> DecodeOp::tune_candidates(const DecodeDims& d, const DeviceInfo& info) {
  if (d.batch == 0) return {};
  const int64_t tile = std::max(decode_launch_shape(static_cast<int>(d.head_dim)).tile_tokens, 1);
  // Every split streams at least one KV tile.
  const int64_t tiles = std::max<int64_t>(1, (std::max<int64_t>(d.max_kv_len, 1) + tile - 1) / tile);
  std::vector<int> splits(std::begin(kDecodeSplitGrid), std::end(kDecodeSplitGrid));
  splits.push_back(plan(d, info).num_splits);
  return kjit::detail::split_candidates<DecodeOp>(
      decode_family(), d, info, [&](const TunedChoice& c) { return head_dim_of(c) == d.head_dim; }, splits, tiles);
}

}  // namespace kjit::attention::detail
