// kjit::attention::prefill, the pure steps: validation and the variant and tile choice.
#include "runtime/ops/attention/prefill.hpp"

#include "runtime/ops/pod_memo.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>

namespace kjit::attention {
namespace {

constexpr const char* kPrefillOp = detail::PrefillOp::kInfo.name;

/// TMA's limit on a global stride (bytes), cuTensorMapEncodeTiled: below 2^40.
constexpr int64_t kTmaMaxStrideBytes = int64_t{1} << 40;

/// The first dim of BLHD bf16 tensor `t` whose stride a 4-D (d, token, head, batch) tensor map
/// cannot take, or -1. Rows are already 16-byte aligned (check_bf16_rows); TMA also wants
/// non-negative strides below 2^40 bytes. A dim of extent 1 is never stepped, so its stride does
/// not matter. Builds nothing: validation asks it on every call.
int tma_bad_stride_dim(const TensorRef& t) noexcept {
  for (int dim = 0; dim < 3; ++dim) {
    if (t.shape[dim] > 1 && (t.strides[dim] < 0 || t.strides[dim] * 2 >= kTmaMaxStrideBytes)) return dim;
  }
  return -1;
}

/// Why `t` cannot be that tensor map ("" when it can).
std::string tma_reason(const char* name, const TensorRef& t) {
  const int dim = tma_bad_stride_dim(t);
  if (dim < 0) return {};
  return fmt::format("{} stride of dim {} must be in [0, 2^39) elements, got {}", name, dim, t.describe());
}

/// Whether prefill_tma_layout_reason finds nothing for q, k, v and out, building no string.
bool tma_addressable(const PrefillArgs& args) noexcept {
  for (const TensorRef* t : {&args.q, &args.k, &args.v, &args.out}) {
    if (t->ndim != 4 || tma_bad_stride_dim(*t) >= 0) return false;
  }
  return true;
}

/// Everything PrefillOp::plan reads: the Dims fields (the layout only as "TMA can address it")
/// and the DeviceInfo fields (its target, SMs and shared memory per SM). By value, not by device:
/// tests and tuners plan for DeviceInfos filled by hand.
struct PrefillPlanKey {
  int64_t batch, q_len, q_heads, head_dim;
  int32_t block_m, variant, mask, kv_lens, tma_ok, sm_count, max_smem_per_sm, zero;
  detail::TargetKey target;
};

/// Row strides the kernels keep in 32 bits (ContigKV/PagedKV row bytes).
void check_row_bytes(const char* op, const char* name, const TensorRef& t, int dim) {
  if (t.shape[dim] > 1 && std::abs(t.strides[dim]) * 2 >= INT32_MAX) {
    kjit::detail::fail(op, fmt::format("{} stride of dim {} must stay below 2^30 elements, got {}", name, dim,
                                       t.describe()));
  }
}

}  // namespace

namespace detail {

PrefillDims validate_prefill(const PrefillArgs& args) {
  const TensorRef& q = args.q;
  PrefillDims d;
  d.device = check_query(kPrefillOp, q, 4);
  check_query_heads(kPrefillOp, q);
  d.batch = q.shape[0];
  d.q_len = q.shape[1];
  d.q_heads = q.shape[2];
  d.head_dim = q.shape[3];

  const ContiguousKvDims kv = check_contiguous_kv(kPrefillOp, q, args.k, args.v, d.batch, d.head_dim, d.device);
  d.max_kv_len = kv.max_kv_len;
  d.kv_heads = kv.kv_heads;
  d.group = kv.group;
  check_row_bytes(kPrefillOp, "k", args.k, 1);
  check_row_bytes(kPrefillOp, "v", args.v, 1);

  check_bf16_rows(kPrefillOp, "out", args.out, 4, d.device);
  check_dim(kPrefillOp, "out", args.out, 0, d.batch, "batch (q dim 0)");
  check_dim(kPrefillOp, "out", args.out, 1, d.q_len, "q_len (q dim 1)");
  check_dim(kPrefillOp, "out", args.out, 2, d.q_heads, "q_heads (q dim 2)");
  check_dim(kPrefillOp, "out", args.out, 3, d.head_dim, "head_dim (q dim 3)");

  d.has_kv_lens = args.kv_lens.ndim != 0;
  if (d.has_kv_lens) check_i32_vector(kPrefillOp, "kv_lens", args.kv_lens, d.batch, d.device);

  if (args.mask.ndim != 0) {
    const TensorRef& m = args.mask;
    if (m.ndim != 2 && m.ndim != 3) {
      fail(kPrefillOp, fmt::format("mask must be 2-d [batch, max_kv_len] or 3-d [batch, q_len, max_kv_len], got {}",
                                   m.describe()));
    }
    d.mask_rank = m.ndim;
    check_sizes(kPrefillOp, "mask", m);
    kjit::detail::check_dtype(kPrefillOp, "mask", m, {DType::kBool, DType::kU8});
    kjit::detail::check_device(kPrefillOp, "mask", m, d.device);
    check_dim(kPrefillOp, "mask", m, 0, d.batch, "batch (q dim 0)");
    if (m.ndim == 3) check_dim(kPrefillOp, "mask", m, 1, d.q_len, "q_len (q dim 1)");
    check_dim(kPrefillOp, "mask", m, m.ndim - 1, d.max_kv_len, "max_kv_len (k dim 1)");
    check_not_null(kPrefillOp, "mask", m);
  }

  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    check_f32(kPrefillOp, "lse", args.lse, 3, d.device);
    check_dim(kPrefillOp, "lse", args.lse, 0, d.batch, "batch (q dim 0)");
    check_dim(kPrefillOp, "lse", args.lse, 1, d.q_heads, "q_heads (q dim 2)");
    check_dim(kPrefillOp, "lse", args.lse, 2, d.q_len, "q_len (q dim 1)");
  }
  resolve_scale(kPrefillOp, args.scale, d.head_dim, false);
  if (args.block_m != 0 && !kjit::detail::is_one_of(args.block_m, kBlockMs)) {
    fail(kPrefillOp, fmt::format("block_m must be 0 (choose), {}, got {}", kjit::detail::one_of_text(kBlockMs),
                                 args.block_m));
  }

  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.q_len > kMax || d.max_kv_len > kMax || d.q_heads > kMaxGridYZ || d.batch > kMaxGridYZ ||
      ceil_div(d.q_len, 64) * d.q_heads > kMax) {
    fail(kPrefillOp, fmt::format("sizes out of range (q_len, max_kv_len < 2^30; q_heads, batch <= {}), got q {} and k {}",
                                 kMaxGridYZ, q.describe(), args.k.describe()));
  }
  d.block_m = args.block_m;
  d.causal = args.causal;
  d.variant = args.variant;
  // The reason is text for a message: built only for a layout TMA cannot address.
  if (!tma_addressable(args)) d.tma_layout = prefill_tma_layout_reason(args);
  return d;
}

std::string prefill_tma_layout_reason(const PrefillArgs& args) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef&>{"q", args.q}, {"k", args.k}, {"v", args.v},
                                {"out", args.out}}) {
    if (t.ndim != 4) return fmt::format("{} must be 4-d", name);
    std::string why = tma_reason(name, t);
    if (!why.empty()) return why;
  }
  return {};
}

VariantCall prefill_variant_call(const PrefillDims& d, const Target& target) {
  VariantCall call;
  call.kind = AttentionKind::kPrefill;
  call.target = target;
  call.head_dim = d.head_dim;
  call.has_mask = d.mask_rank != 0;
  call.has_kv_lens = d.has_kv_lens;
  call.tma_layout = d.tma_layout;
  return call;
}

int prefill_ctas_per_sm(int64_t head_dim, int block_m, int max_smem_per_sm) {
  const int smem = prefill_launch_shape(static_cast<int>(head_dim), block_m).smem_bytes;
  const int fit = smem > 0 ? max_smem_per_sm / (smem + 1024) : 1;
  return std::clamp(fit, 1, 2);
}

int choose_prefill_block_m(const PrefillDims& d, int sm_count, int ctas_per_sm) {
  if (d.q_len <= 64) return 64;
  const int64_t ctas = ceil_div(d.q_len, 128) * d.q_heads * d.batch;
  return ctas < int64_t{sm_count} * std::max(ctas_per_sm, 1) ? 64 : 128;
}

int prefill_head_group(const PrefillDims& d, AttentionVariant kernel) {
  if (!d.causal || d.q_heads <= 1) return 1;
  if (kernel != AttentionVariant::kWgmma) return static_cast<int>(d.q_heads);
  constexpr int64_t kBudget = int64_t{4} << 20;
  const int64_t kv_head_bytes = std::max<int64_t>(2 * d.max_kv_len * d.head_dim * 2, 1);  // K and V, bf16
  const int64_t kv_heads = std::max<int64_t>(kBudget / kv_head_bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(kv_heads * d.group, 2, d.q_heads));
}

PrefillPlan plan_prefill(const PrefillDims& d, const DeviceInfo& info) {
  PrefillPlan plan;
  // Resolved before the empty-call shortcut: a strict request fails the same with or without work.
  plan.variant = resolve_variant(d.variant, AttentionVariant::kAuto, prefill_variant_call(d, info.target()));
  if (d.batch == 0 || d.q_len == 0) return plan;
  if (plan.variant == AttentionVariant::kWgmma) {
    plan.block_m = prefill_sm90_launch_shape(static_cast<int>(d.head_dim)).block_m;
    plan.choice.family = &prefill_sm90_family();
    plan.choice.point = prefill_sm90_family().point({d.head_dim});
  } else {
    plan.block_m = d.block_m != 0 ? d.block_m
                                  : choose_prefill_block_m(d, info.sm_count,
                                                           prefill_ctas_per_sm(d.head_dim, 128, info.max_smem_per_sm));
    plan.choice.family = &prefill_family();
    plan.choice.point = prefill_family().point({d.head_dim, plan.block_m, d.mask_rank != 0 ? 1 : 0});
  }
  plan.q_tiles = ceil_div(d.q_len, plan.block_m);
  return plan;
}

PrefillPlan PrefillOp::plan(const PrefillDims& d, const DeviceInfo& info) {
  // Per thread: a repeat shape resolves no variant and searches no family (a strict request that
  // cannot run throws every time: a failure stores nothing).
  PrefillPlanKey key{};
  key.batch = d.batch;
  key.q_len = d.q_len;
  key.q_heads = d.q_heads;
  key.head_dim = d.head_dim;
  key.block_m = d.block_m;
  key.variant = static_cast<int32_t>(d.variant);
  key.mask = d.mask_rank != 0 ? 1 : 0;
  key.kv_lens = d.has_kv_lens ? 1 : 0;
  key.tma_ok = d.tma_layout.empty() ? 1 : 0;
  key.sm_count = info.sm_count;
  key.max_smem_per_sm = info.max_smem_per_sm;
  key.target = target_key(info);
  using Memo = kjit::detail::PodMemo<PrefillPlanKey, PrefillPlan, 16>;
  return kjit::detail::thread_memo<Memo>().get(key, [&](const PrefillPlanKey&) { return plan_prefill(d, info); });
}

}  // namespace detail

}  // namespace kjit::attention
