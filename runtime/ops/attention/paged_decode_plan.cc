// kjit::attention::paged_decode, the pure steps: validation and planning.
#include "runtime/ops/attention/paged_decode.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace kjit::attention {
namespace {

constexpr const char* kDecodeOp = detail::PagedDecodeOp::kInfo.name;

/// The mean request length the pages can hold, nnz · page_size / batch (0 for an empty batch).
int64_t mean_length(const detail::PagedDecodeDims& d) {
  return d.batch > 0 ? detail::ceil_div(d.cache.nnz * d.cache.page_size, d.batch) : 0;
}

/// The length the planner sizes splits for: `kv_len_hint`, or (0) the mean request length,
/// clamped to [1, 2^30).
int64_t plan_length(const detail::PagedDecodeDims& d, int64_t kv_len_hint) {
  const int64_t hint = kv_len_hint == 0 ? mean_length(d) : kv_len_hint;
  return std::clamp<int64_t>(hint, 1, INT32_MAX / 2);
}

/// The split count a ragged batch needs at least, or 0 for an even one. Each request splits its
/// own length, so the CTAs of the longest requests (kv_len_hint) run longest; where the longest
/// is 1.5× the mean or more, the split plan sized for full waves of equal CTAs (plan_decode)
/// leaves the SMs idle behind those few. ceil(2 · longest / mean) splits, at most
/// kDecodeMaxClusterSplits, keep every CTA within about half the mean. Measured on an H100
/// (graph µs, Hq 64, Hkv 8, head_dim 128, page 16, lengths 8191, 33, 4096, 1500, 6000, 700, 7000,
/// 5248 repeated; 1 / 2 / 3 / 4 / 8 splits): B32 215.5 / 213.8 / 200.2 / 202.0 / 199.6 (the
/// waves' plan: 1), B128 733.8 / 722.3 / 724.6 / 728.8 / 740.9 (1), B8 135.5 / 84.9 / 74.0 /
/// 68.8 / 65.5 (4).
int ragged_min_splits(const detail::PagedDecodeDims& d, int64_t kv_len_hint) {
  const int64_t mean = mean_length(d);
  if (kv_len_hint <= 0 || mean <= 0 || 2 * kv_len_hint < 3 * mean) return 0;
  return static_cast<int>(std::min<int64_t>(detail::ceil_div(2 * kv_len_hint, mean), kDecodeMaxClusterSplits));
}

}  // namespace

namespace detail {

PagedDecodeDims validate_paged_decode(const PagedDecodeArgs& args, const char* op) {
  const TensorRef& q = args.q;
  PagedDecodeDims d;
  check_decode_query(op, q, "request", d);
  d.cache = validate_paged_cache(op, args.cache, d.device, d.batch, d.head_dim);
  d.group = check_gqa(op, q, "cache.k", args.cache.k);

  check_decode_out(op, args.out, d.batch, d.q_heads, d.head_dim, d.device);

  d.has_lse = check_decode_lse(op, args.lse, d.batch, d.q_heads, d.device);
  kjit::detail::check_finite_scale(op, args.scale);
  check_num_splits(op, args.num_splits, kMaxPagedSplits);
  check_decode_merge_args(op, args.merge, args.num_splits);
  if (args.kv_len_hint < 0) fail(op, fmt::format("kv_len_hint must be >= 0, got {}", args.kv_len_hint));
  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.batch * d.q_heads > kMax || d.cache.nnz > kMax) {
    fail(op, fmt::format("sizes must stay below {} (batch·q_heads, nnz), got q {}", kMax, q.describe()));
  }
  d.requested_splits = args.num_splits;
  d.kv_len_hint = args.kv_len_hint;
  d.requested_merge = args.merge;
  return d;
}

PagedDecodeDims validate_paged_decode(const PagedDecodeArgs& args) { return validate_paged_decode(args, kDecodeOp); }

int paged_ctas_per_sm(int64_t head_dim, int max_smem_per_sm) {
  // Unlike the contiguous kernel, one paged CTA per SM leaves HBM idle while each tile waits on
  // its page ids, so the planner fills every resident slot. Measured on the H200 (2026-11-30,
  // graph-replayed, B16 Hq32 Hkv8 D128 L4096, contiguous 67.9 µs at 1 split): 1 / 2 / 3 / 4 splits
  // take 85.8 / 74.4 / 87.0 / 79.4 µs at page 1, 82.7 / 73.9 / 85.4 / 78.2 at page 16 and
  // 79.0 / 73.9 / 84.9 / 77.5 at page 64: two CTAs per SM (2 splits, 256 CTAs) are best.
  return decode_resident_ctas(head_dim, max_smem_per_sm);
}

int64_t paged_plan_length(const PagedDecodeDims& d) { return plan_length(d, d.kv_len_hint); }

DecodePlan plan_paged_decode(const PagedDecodeDims& d, int requested_splits, int64_t kv_len_hint, int sm_count,
                             int ctas_per_sm, int heads_per_cta, DecodeMerge merge, bool clusters) {
  DecodeDims dd;
  dd.device = d.device;
  dd.batch = d.batch;
  dd.q_heads = d.q_heads;
  dd.kv_heads = d.cache.kv_heads;
  dd.head_dim = d.head_dim;
  dd.group = d.group;
  dd.max_kv_len = plan_length(d, kv_len_hint);
  DecodePlan plan = plan_decode(dd, 0, sm_count, ctas_per_sm, heads_per_cta, merge, clusters);
  // Each request divides its own length into num_splits ranges on the device.
  plan.split_tokens = 0;
  const int splits = requested_splits > 0 ? requested_splits
                                          : std::max(plan.num_splits, ragged_min_splits(d, kv_len_hint));
  kjit::detail::set_split_plan(plan, splits, d.batch * d.cache.kv_heads * plan.m_tiles, d.batch * d.q_heads,
                               d.head_dim);
  plan.merge = plan_merge(merge, plan.num_splits, clusters);
  return plan;
}

DecodePlan PagedDecodeOp::plan(const PagedDecodeDims& d, const DeviceInfo& info) {
  check_decode_merge_request(kInfo.name, d.requested_merge, info);
  DecodePlan plan = plan_paged_decode(d, d.requested_splits, d.kv_len_hint, info.sm_count,
                                      paged_ctas_per_sm(d.head_dim, info.max_smem_per_sm), 0, d.requested_merge,
                                      info.target().has_clusters());
  if (d.batch > 0) {
    plan.choice.family = &paged_decode_family();
    plan.choice.point = decode_point(paged_decode_family(), d.head_dim, plan);
  }
  return plan;
}

}  // namespace detail
}  // namespace kjit::attention
