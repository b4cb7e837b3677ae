// kjit::mla::swa_decode's tuning: bucket, knobs, candidates and stored plans
// (runtime/ops/tuned.hpp). The space: heads per CTA (group 16 / 32, or 64: the sm_90a wgmma
// kernel, whole window, never split), the window tile, the cluster split (sm_90+: the window cut
// over one thread-block cluster, merged in the kernel) and the split count (split over separate
// CTAs merged by the second kernel; 1 with a cluster split).
#include "runtime/ops/mla/swa_decode.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kjit::mla::detail {
namespace {

using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

int code(const TunedChoice& c, const char* name) { return static_cast<int>(c.family->value(c.point, name).code); }

std::string fits(const TunedChoice& c, const DeviceInfo& info) {
  if (c.family != &swa_decode_family()) {
    return fmt::format("family {} is not mla.swa_decode", c.family ? c.family->name : std::string("(none)"));
  }
  if (std::string why = c.family->invalid_reason(c.point); !why.empty()) return why;
  if (std::string why = c.family->unsupported_reason(c.point, info.target()); !why.empty()) return why;
  const int cluster = code(c, "cluster_split");
  const SwaLaunchShape shape = swa_launch_shape(code(c, "group"), code(c, "kv_tile"), cluster);
  if (shape.smem_bytes > info.max_smem_per_block_optin) {
    return fmt::format("{} bytes of shared memory per CTA, the device allows {}", shape.smem_bytes,
                       info.max_smem_per_block_optin);
  }
  if (info.max_threads_per_block > 0 && shape.threads > info.max_threads_per_block) {
    return fmt::format("{} threads per CTA, the device allows {}", shape.threads, info.max_threads_per_block);
  }
  const int window = code(c, "window"), tile = code(c, "kv_tile"), splits = c.knobs[0];
  const bool one = code(c, "group") == kSwaWgmmaHeads || cluster > 1;  // the window is never split otherwise
  const int lo = one ? 1 : (window + tile - 1) / tile;
  const int hi = one ? 1 : swa_max_splits(window);
  if (splits < lo || splits > hi) return fmt::format("splits={} is outside {}..{} for window {} tile {}", splits, lo, hi, window, tile);
  return {};
}

}  // namespace

const kjit::detail::TuneOpSpec& SwaDecodeOp::tune_spec() {
  static const kjit::detail::TuneOpSpec spec{
      kjit::detail::TuneOpId::kSwaDecode,
      "swa_decode",
      &kInfo,
      {"splits", nullptr, nullptr, nullptr},
      "[window, cache, pow2(T), NH]: exact window, cache format (0 e4m3, 1 e5m2) and head count; the token count "
      "rounded up to a power of two",
      "tokens=8 heads=128 window=128 cache=e4m3",
      fits,
      // 2: cluster splits (T ≤ 16 at NH 128 on sm_90+)
      2};
  return spec;
}

bool SwaDecodeOp::tune_key(const SwaDims& d, TunedKey* key) {
  if (d.requested_splits != 0 || d.requested_heads_per_cta != 0 || d.requested_cluster_split != 0 || d.tokens == 0) {
    return false;
  }
  key->op = static_cast<int32_t>(kjit::detail::TuneOpId::kSwaDecode);
  key->bucket[0] = kjit::detail::bucket_exact(d.window);
  key->bucket[1] = d.cache;
  key->bucket[2] = kjit::detail::bucket_pow2(d.tokens);
  key->bucket[3] = kjit::detail::bucket_exact(d.heads);
  return true;
}

bool SwaDecodeOp::apply_tuned(const SwaDims& d, const DeviceInfo& info, const TunedChoice& c, SwaPlan* out) {
  if (c.family != &swa_decode_family() || d.tokens == 0) return false;
  const int heads_per_cta = code(c, "group"), tile = code(c, "kv_tile");
  if (code(c, "window") != d.window || code(c, "cache") != d.cache || d.heads % heads_per_cta != 0) return false;
  // Checked again per call: the table was checked against the device, not against this call.
  if (!fits(c, info).empty()) return false;
  SwaPlan plan;
  if (const int cluster = code(c, "cluster_split"); cluster > 1) {
    plan = swa_cluster_plan(d, heads_per_cta, cluster);
  } else if (heads_per_cta == kSwaWgmmaHeads) {
    plan.heads_per_cta = heads_per_cta;
    plan.tile = tile;
    plan.num_splits = 1;
    plan.split_len = static_cast<int>(d.window);
    plan.ctas = d.tokens * (d.heads / heads_per_cta);
  } else {
    plan = partition_swa_window(d, heads_per_cta, tile, c.knobs[0]);
  }
  plan.choice.family = c.family;
  plan.choice.point = c.point;
  *out = plan;
  return true;
}

TunedChoice SwaDecodeOp::tuned_choice(const SwaDims& /*d*/, const SwaPlan& plan) {
  return kjit::detail::split_choice(plan);
}

std::vector<TunedChoice> SwaDecodeOp::tune_candidates(const SwaDims& d, const DeviceInfo& info) {
  if (d.tokens == 0) return {};
  std::vector<int> splits(kSwaMaxSplits);
  for (int s = 1; s <= kSwaMaxSplits; ++s) splits[static_cast<size_t>(s - 1)] = s;
  return kjit::detail::split_candidates<SwaDecodeOp>(
      swa_decode_family(), d, info,
      [&](const TunedChoice& c) {
        return code(c, "window") == d.window && code(c, "cache") == d.cache && d.heads % code(c, "group") == 0;
      },
      splits, kSwaMaxSplits);
}

}  // namespace kjit::mla::detail
