// kjit::attention::append_paged_kv, the pure steps: validation and planning.
#include "runtime/ops/attention/paged_append.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace kjit::attention {
namespace {

constexpr const char* kAppendOp = detail::AppendOp::kInfo.name;

}  // namespace

namespace detail {

AppendDims validate_append(const AppendPagedKVArgs& args) {
  AppendDims d;
  d.device = kjit::detail::check_leading(kAppendOp, "k", args.k, 3);
  check_bf16_rows(kAppendOp, "k", args.k, 3, d.device);
  check_bf16_rows(kAppendOp, "v", args.v, 3, d.device);
  kjit::detail::check_same_shape(kAppendOp, "v", args.v, "k", args.k);
  d.num_new = args.k.shape[0];
  const int64_t head_dim = args.k.shape[2];
  check_head_dim(kAppendOp, "k", args.k);
  d.cache = validate_paged_cache(kAppendOp, args.cache, d.device, -1, head_dim);
  check_dim(kAppendOp, "k", args.k, 1, d.cache.kv_heads, "kv_heads (cache.k dim 2)");
  const bool per_token = args.batch_indices.ndim != 0 || args.positions.ndim != 0;
  d.indptr_mode = args.append_indptr.ndim != 0;
  if (per_token == d.indptr_mode) {
    fail(kAppendOp, "give either batch_indices and positions (per token) or append_indptr, not both or neither");
  }
  if (per_token) {
    check_i32_vector(kAppendOp, "batch_indices", args.batch_indices, d.num_new, d.device);
    check_i32_vector(kAppendOp, "positions", args.positions, d.num_new, d.device);
  } else {
    check_i32_vector(kAppendOp, "append_indptr", args.append_indptr, d.cache.batch + 1, d.device);
  }
  if (d.num_new > INT32_MAX / 2) fail(kAppendOp, fmt::format("num_new must stay below 2^30, got {}", args.k.describe()));
  return d;
}

AppendPlan AppendOp::plan(const AppendDims& d, const DeviceInfo& info) {
  AppendPlan plan;
  plan.items = d.num_new * d.cache.kv_heads * (d.cache.head_dim / 8);
  if (plan.items == 0 || d.cache.batch == 0) return plan;
  // Grid-stride: more CTAs than fill the SMs only add launch work.
  plan.grid = static_cast<uint32_t>(
      std::min<int64_t>(ceil_div(plan.items, kPagedAppendThreads), int64_t{info.sm_count} * 8));
  plan.choice.family = &paged_append_family();
  plan.choice.point = paged_append_family().point({d.cache.head_dim, d.indptr_mode ? 1 : 0});
  return plan;
}

}  // namespace detail
}  // namespace kjit::attention
