// kjit::attention::plan_paged_prefill's tuning: bucket, candidates and stored tiles
// (runtime/ops/tuned.hpp). The choice is the kernel point: attention.paged_prefill at block_m
// (the plan's tile_rows) 64 or 128, or on sm_90a attention.paged_prefill_sm90 at block_m 128 or
// (head_dim 64) 192 and page_load gather or (page sizes that take them) tma; and knob 0, pack_gqa (0/1: whether the sm_90a kernel's work items pack the
// group's q heads). The work map and the plan's variant follow from them.
#include "runtime/ops/attention/paged_prefill.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kjit::attention::detail {
namespace {

using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

std::string fits(const TunedChoice& c, const DeviceInfo& info) {
  const bool sm90 = c.family == &paged_prefill_sm90_family();
  if (c.family != &paged_prefill_family() && !sm90) {
    return fmt::format("family {} is not attention.paged_prefill or attention.paged_prefill_sm90",
                       c.family ? c.family->name : std::string("(none)"));
  }
  if (std::string why = c.family->invalid_reason(c.point); !why.empty()) return why;
  if (std::string why = c.family->unsupported_reason(c.point, info.target()); !why.empty()) return why;
  if (c.knobs[0] != 0 && c.knobs[0] != 1) return fmt::format("pack_gqa={} is not 0 or 1", c.knobs[0]);
  if (c.knobs[0] == 1 && !sm90) return "pack_gqa=1 runs only on attention.paged_prefill_sm90";
  const int head_dim = static_cast<int>(c.family->value(c.point, "head_dim").code);
  const int rows = static_cast<int>(c.family->value(c.point, "block_m").code);
  int smem = 0, threads = 0;
  if (sm90) {
    const PrefillSm90LaunchShape s = prefill_sm90_launch_shape(head_dim, true, rows);
    smem = s.smem_bytes;
    threads = s.threads;
  } else {
    const PrefillLaunchShape s = prefill_launch_shape(head_dim, rows);
    smem = s.smem_bytes;
    threads = s.threads;
  }
  if (smem > info.max_smem_per_block_optin) {
    return fmt::format("{} bytes of shared memory per CTA, the device allows {}", smem, info.max_smem_per_block_optin);
  }
  if (info.max_threads_per_block > 0 && threads > info.max_threads_per_block) {
    return fmt::format("{} threads per CTA, the device allows {}", threads, info.max_threads_per_block);
  }
  return {};
}

}  // namespace

const kjit::detail::TuneOpSpec& PagedPrefillPlanner::tune_spec() {
  static const kjit::detail::TuneOpSpec spec{
      kjit::detail::TuneOpId::kPagedPrefill,
      "paged_prefill",
      &PagedPrefillOp::kInfo,
      {"pack_gqa", nullptr, nullptr, nullptr},
      "[head_dim, causal + 2 * group, pow2(max(total_q * q_heads, 64)), pow2(max(mean q rows, 16)), pow2(max(max_kv_len, 64)), "
      "page_size]: exact head_dim, causal as 0/1 plus twice the group q_heads / kv_heads (0 where kv_heads is not "
      "given), and page size; the query rows times q_heads (the grid's work before "
      "tiling), the mean query rows of a non-empty request and the longest request's KV length rounded up to powers "
      "of two. Only plans from plan_paged_prefill(PagedPrefillPlanArgs) with tile_rows 0, pack_gqa auto and page_load "
      "auto are tuned",
      "batch=4 q_len=256 kv_len=1024 q_heads=32 kv_heads=8 head_dim=128 page_size=16 causal=1 ragged=1",
      fits,
      4};  // planner 2: the built-in rule takes the 192-row wgmma tile at hd64 (and points name block_m);
           // 3: the pack_gqa knob, the group in the bucket; 4: wgmma points name page_load
  return spec;
}

bool PagedPrefillPlanner::tune_key(const PagedPrefillPlanDims& d, TunedKey* key) {
  if (d.tile_rows != 0 || d.pack_gqa != PackGqa::kAuto || d.page_load != PageLoad::kAuto || d.q_heads <= 0 ||
      d.total_q == 0 || d.nonempty == 0) {
    return false;
  }
  key->op = static_cast<int32_t>(kjit::detail::TuneOpId::kPagedPrefill);
  key->bucket[0] = kjit::detail::bucket_exact(d.head_dim);
  key->bucket[1] = (d.causal ? 1 : 0) + 2 * static_cast<int32_t>(d.group);
  key->bucket[2] = kjit::detail::bucket_pow2(std::max<int64_t>(d.total_q * d.q_heads, 64));
  key->bucket[3] = kjit::detail::bucket_pow2(std::max<int64_t>((d.total_q + d.nonempty - 1) / d.nonempty, 16));
  key->bucket[4] = kjit::detail::bucket_pow2(std::max<int64_t>(d.max_kv_len, 64));
  key->bucket[5] = kjit::detail::bucket_exact(d.page_size);
  return true;
}

bool PagedPrefillPlanner::apply_tuned(const PagedPrefillPlanDims& d, const DeviceInfo& /*info*/, const TunedChoice& c,
                                      PagedPrefillOpPlan* out) {
  const bool sm90 = c.family == &paged_prefill_sm90_family();
  if ((c.family != &paged_prefill_family() && !sm90) || c.family->value(c.point, "head_dim").code != d.head_dim ||
      d.total_q == 0 || c.knobs[0] < 0 || c.knobs[0] > 1 || (c.knobs[0] == 1 && (!sm90 || d.group < 2))) {
    return false;
  }
  // TMA page loads only where the pages hold whole boxes.
  if (sm90 && c.family->value(c.point, "page_load").code == 1 &&
      !paged_prefill_kv_tma(AttentionVariant::kWgmma, d.page_load, d.page_size)) {
    return false;
  }
  PagedPrefillOpPlan t;
  t.choice.family = c.family;
  t.choice.point = c.point;
  // A measured choice is strict: the run step runs the kernel that was timed.
  t.tile_rows = static_cast<int>(c.family->value(c.point, "block_m").code);
  t.variant = sm90 ? AttentionVariant::kWgmma : AttentionVariant::kMma;
  t.pack_group = c.knobs[0] == 1 ? static_cast<int>(d.group) : 1;
  t.kv_tma = sm90 && c.family->value(c.point, "page_load").code == 1;
  *out = t;
  return true;
}

TunedChoice PagedPrefillPlanner::tuned_choice(const PagedPrefillPlanDims& /*d*/, const PagedPrefillOpPlan& plan) {
  TunedChoice c;
  c.family = plan.choice.family;
  c.point = plan.choice.point;
  c.knobs[0] = plan.pack_group > 1 ? 1 : 0;
  return c;
}

std::vector<TunedChoice> PagedPrefillPlanner::tune_candidates(const PagedPrefillPlanDims& d, const DeviceInfo& info) {
  std::vector<TunedChoice> out;
  if (d.total_q == 0) return out;
  const Target target = info.target();
  for (const Family* f : {&paged_prefill_family(), &paged_prefill_sm90_family()}) {
    for (const Point& p : f->enumerate(&target)) {
      if (f->value(p, "head_dim").code != d.head_dim) continue;
      // TMA page loads where the pages hold whole boxes and the caller left page_load open.
      if (f == &paged_prefill_sm90_family() && f->value(p, "page_load").code == 1 &&
          !paged_prefill_kv_tma(AttentionVariant::kWgmma, d.page_load, d.page_size)) {
        continue;
      }
      TunedChoice c;
      c.family = f;
      c.point = p;
      // Unpacked, and packed where the kernel and the group allow it.
      for (int pack = 0; pack <= (f == &paged_prefill_sm90_family() && d.group > 1 ? 1 : 0); ++pack) {
        c.knobs[0] = pack;
        if (fits(c, info).empty()) out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace kjit::attention::detail
