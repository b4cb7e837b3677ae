// kjit::attention::prefill's tuning: bucket, candidates and stored plans (runtime/ops/tuned.hpp).
// The choice is the kernel alone: the mma.sync family's block_m (64 or 128 query rows per CTA)
// or the sm_90a wgmma family; the planner has no other knob.
#include "runtime/ops/attention/prefill.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kjit::attention::detail {
namespace {

using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

std::string over(const char* what, int need, int allowed) {
  return fmt::format("{} {} per CTA, the device allows {}", need, what, allowed);
}

std::string fits(const TunedChoice& c, const DeviceInfo& info) {
  const bool mma = c.family == &prefill_family();
  if (!mma && c.family != &prefill_sm90_family()) {
    return fmt::format("family {} is not attention.prefill or attention.prefill_sm90",
                       c.family ? c.family->name : std::string("(none)"));
  }
  if (std::string why = c.family->invalid_reason(c.point); !why.empty()) return why;
  if (std::string why = c.family->unsupported_reason(c.point, info.target()); !why.empty()) return why;
  const int head_dim = static_cast<int>(c.family->value(c.point, "head_dim").code);
  int threads = 0, smem = 0;
  if (mma) {
    const PrefillLaunchShape s = prefill_launch_shape(head_dim, static_cast<int>(c.family->value(c.point, "block_m").code));
    threads = s.threads;
    smem = s.smem_bytes;
  } else {
    const PrefillSm90LaunchShape s = prefill_sm90_launch_shape(head_dim);
    threads = s.threads;
    smem = s.smem_bytes;
  }
  if (smem > info.max_smem_per_block_optin) return over("bytes of shared memory", smem, info.max_smem_per_block_optin);
  if (info.max_threads_per_block > 0 && threads > info.max_threads_per_block) {
    return over("threads", threads, info.max_threads_per_block);
  }
  return {};
}

}  // namespace

const kjit::detail::TuneOpSpec& PrefillOp::tune_spec() {
  static const kjit::detail::TuneOpSpec spec{
      kjit::detail::TuneOpId::kPrefill,
      "prefill",
      &kInfo,
      {nullptr, nullptr, nullptr, nullptr},
      "[head_dim, mask, causal, pow2(max(q_len, 64)), pow2(max(kv_len, 64)), pow2(batch * q_heads)]: exact "
      "head_dim, mask and causal as 0/1; q_len, kv_len and the (request, head) count (the grid's y and z) rounded "
      "up to powers of two",
      "batch=1 q_len=1024 kv_len=1024 q_heads=32 kv_heads=8 head_dim=128 causal=1",
      fits};
  return spec;
}

bool PrefillOp::tune_key(const PrefillDims& d, TunedKey* key) {
  if (d.block_m != 0 || d.variant != AttentionVariant::kAuto || d.batch == 0 || d.q_len == 0) return false;
  key->op = static_cast<int32_t>(kjit::detail::TuneOpId::kPrefill);
  key->bucket[0] = kjit::detail::bucket_exact(d.head_dim);
  key->bucket[1] = d.mask_rank != 0 ? 1 : 0;
  key->bucket[2] = d.causal ? 1 : 0;
  key->bucket[3] = kjit::detail::bucket_pow2(std::max<int64_t>(d.q_len, 64));
  key->bucket[4] = kjit::detail::bucket_pow2(std::max<int64_t>(d.max_kv_len, 64));
  key->bucket[5] = kjit::detail::bucket_pow2(d.batch * d.q_heads);
  return true;
}

bool PrefillOp::apply_tuned(const PrefillDims& d, const DeviceInfo& info, const TunedChoice& c, PrefillPlan* out) {
  if (c.family == nullptr || c.family->value(c.point, "head_dim").code != d.head_dim || d.batch == 0 || d.q_len == 0) {
    return false;
  }
  PrefillPlan plan;
  if (c.family == &prefill_sm90_family()) {
    if (!variant_runs(AttentionVariant::kWgmma, prefill_variant_call(d, info.target()))) return false;
    plan.variant = AttentionVariant::kWgmma;
    plan.block_m = prefill_sm90_launch_shape(static_cast<int>(d.head_dim)).block_m;
  } else if (c.family == &prefill_family()) {
    if (c.family->value(c.point, "mask").code != (d.mask_rank != 0 ? 1 : 0)) return false;
    if (!variant_runs(AttentionVariant::kMma, prefill_variant_call(d, info.target()))) return false;
    plan.variant = AttentionVariant::kMma;
    plan.block_m = static_cast<int>(c.family->value(c.point, "block_m").code);
  } else {
    return false;
  }
  plan.choice.family = c.family;
  plan.choice.point = c.point;
  plan.q_tiles = ceil_div(d.q_len, plan.block_m);
  *out = plan;
  return true;
}

TunedChoice PrefillOp::tuned_choice(const PrefillDims& /*d*/, const PrefillPlan& plan) {
  TunedChoice c;
  c.family = plan.choice.family;
  c.point = plan.choice.point;
  return c;
}

std::vector<TunedChoice> PrefillOp::tune_candidates(const PrefillDims& d, const DeviceInfo& info) {
  std::vector<TunedChoice> out;
  if (d.batch == 0 || d.q_len == 0) return out;
  const Target target = info.target();
  for (const Family* f : {&prefill_family(), &prefill_sm90_family()}) {
    for (const Point& p : f->enumerate(&target)) {
      TunedChoice c;
      c.family = f;
      c.point = p;
      PrefillPlan plan;
      if (fits(c, info).empty() && apply_tuned(d, info, c, &plan)) out.push_back(c);
    }
  }
  return out;
}

}  // namespace kjit::attention::detail
