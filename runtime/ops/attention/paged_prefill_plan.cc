// kjit::attention::paged_prefill and plan_paged_prefill, the pure steps: validation, the kernel
// choice of both steps, and the ragged work map.
#include "runtime/ops/attention/paged_prefill.hpp"

#include "runtime/ops/pod_memo.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <queue>
#include <string>
#include <utility>

namespace kjit::attention {
namespace {

constexpr const char* kPagedOp = detail::PagedPrefillOp::kInfo.name;
constexpr const char* kPlanOp = "kjit::attention::plan_paged_prefill";

/// Everything PagedPrefillOp::plan reads.
struct PagedPrefillPlanKey {
  int64_t head_dim;
  int32_t tile_rows, variant, has_work, pack_group, page_load, tma_pages;
  detail::TargetKey target;
};

/// The page_load rules both steps check, failing as `op`: a PageLoad value, and for kTma pages
/// that hold whole boxes and (tile_rows ≠ 0: known) a tile of the wgmma kernel, which alone loads
/// pages with TMA. `field` names the page_load ("page_load" or "plan's page_load"); `pages` and
/// `pages_value` the page size.
void check_page_load(const char* op, const char* field, PageLoad load, int64_t page_size, const char* pages,
                     const std::string& pages_value, int tile_rows) {
  if (!enum_named(kPageLoadNames, load)) {
    kjit::detail::fail(op, fmt::format("{} must be auto, gather or tma, got {}", field, static_cast<int>(load)));
  }
  if (load != PageLoad::kTma) return;
  if (!detail::tma_page_size(page_size)) {
    kjit::detail::fail(op, fmt::format("{0} tma loads {1}-row boxes inside pages: {2} must be a multiple of {1}, "
                                       "got {3}",
                                       field, kPageBoxRows, pages, pages_value));
  }
  if (tile_rows != 0 && tile_rows < 128) {
    kjit::detail::fail(op, fmt::format("{} tma runs on the sm_90a wgmma kernel, whose tiles have 128 rows or more; "
                                       "got tile_rows {}",
                                       field, tile_rows));
  }
}

}  // namespace

namespace detail {

PagedPrefillDims validate_paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan) {
  const TensorRef& q = args.q;
  PagedPrefillDims d;
  d.device = check_query(kPagedOp, q, 3);
  check_query_heads(kPagedOp, q);
  d.total_q = q.shape[0];
  d.q_heads = q.shape[1];
  d.head_dim = q.shape[2];
  if (!kjit::detail::is_one_of(plan.tile_rows, kPagedTileRows)) {
    fail(kPagedOp, fmt::format("plan has tile_rows {} (not from plan_paged_prefill?)", plan.tile_rows));
  }
  if (plan.head_dim != d.head_dim) {
    fail(kPagedOp, fmt::format("plan was built for head_dim {}, q has {}", plan.head_dim, q.describe()));
  }
  if (plan.total_q != d.total_q) {
    fail(kPagedOp, fmt::format("q dim 0 must be the plan's total_q = qo_indptr[batch] = {}, got {}", plan.total_q,
                               q.describe()));
  }
  if (plan.q_tile_to_index.size() != plan.q_tile_to_batch.size()) fail(kPagedOp, "plan's work map is inconsistent");
  check_i32_vector(kPagedOp, "qo_indptr", args.qo_indptr, plan.batch + 1, d.device);
  d.cache = validate_paged_cache(kPagedOp, args.cache, d.device, plan.batch, d.head_dim);
  d.group = check_gqa(kPagedOp, q, "cache.k", args.cache.k);
  check_bf16_rows(kPagedOp, "out", args.out, 3, d.device);
  check_dim(kPagedOp, "out", args.out, 0, d.total_q, "total_q (q dim 0)");
  check_dim(kPagedOp, "out", args.out, 1, d.q_heads, "q_heads (q dim 1)");
  check_dim(kPagedOp, "out", args.out, 2, d.head_dim, "head_dim (q dim 2)");
  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    check_f32(kPagedOp, "lse", args.lse, 2, d.device);
    check_dim(kPagedOp, "lse", args.lse, 0, d.q_heads, "q_heads (q dim 1)");
    check_dim(kPagedOp, "lse", args.lse, 1, d.total_q, "total_q (q dim 0)");
  }
  resolve_scale(kPagedOp, args.scale, d.head_dim, false);
  if (plan.pack_group != 1 && (plan.pack_group != d.group || plan.tile_rows < 128)) {
    fail(kPagedOp, fmt::format("plan packs {} q heads per KV head at tile_rows {}; the call's q {} and cache.k {} "
                               "have group {} (plan with kv_heads = q_heads / group, or pack_gqa off)",
                               plan.pack_group, plan.tile_rows, q.describe(), args.cache.k.describe(), d.group));
  }
  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.total_q > kMax || d.q_heads > kMaxGridYZ || plan.num_work() * d.q_heads > kMax) {
    fail(kPagedOp, fmt::format("sizes out of range (total_q < 2^30, q_heads <= {}), got q {}", kMaxGridYZ,
                               q.describe()));
  }
  if (!plan.cta_work_indptr.empty() || !plan.cta_work.empty()) {
    const int64_t heads = paged_item_heads(d.q_heads, plan.pack_group);
    if (plan.schedule_heads != heads) {
      fail(kPagedOp, fmt::format("plan's persistent schedule was made for {} heads per work item, the call has {} "
                                 "({}; re-plan with this call's q_heads and kv_heads)",
                                 plan.schedule_heads, heads, plan.pack_group > 1 ? "kv_heads" : "q_heads"));
    }
    if (plan.cta_work_indptr.size() < 2 || plan.cta_work_indptr.front() != 0 ||
        plan.cta_work_indptr.back() != static_cast<int64_t>(plan.cta_work.size()) ||
        static_cast<int64_t>(plan.cta_work.size()) != plan.num_work() * heads) {
      fail(kPagedOp, fmt::format("plan's persistent schedule is inconsistent: {} CTAs over {} units for {} work items "
                                 "× {} heads (not from plan_paged_prefill?)",
                                 plan.ctas(), plan.cta_work.size(), plan.num_work(), heads));
    }
  }
  check_page_load(kPagedOp, "plan's page_load", plan.page_load, d.cache.page_size, "the page size",
                  "cache.k " + args.cache.k.describe(), plan.tile_rows);
  d.tile_rows = plan.tile_rows;
  d.pack_group = static_cast<int>(plan.pack_group);
  d.num_work = plan.num_work();
  d.variant = plan.variant;
  d.page_load = plan.page_load;
  return d;
}

PagedPrefillDims PagedPrefillOp::validate(const Args& call) {
  const PagedPrefillDims d = validate_paged_prefill(call.args, call.plan);
  check_workspace(kPagedOp, call.plan.workspace_bytes, call.workspace, call.workspace_bytes,
                  "the plan's work map (upload_paged_prefill_plan)");
  return d;
}

VariantCall paged_prefill_variant_call(const Target& target, int64_t head_dim, int tile_rows, int pack_group) {
  VariantCall call;
  call.kind = AttentionKind::kPagedPrefill;
  call.target = target;
  call.head_dim = head_dim;
  call.tile_rows = tile_rows;
  call.pack_group = pack_group;
  return call;
}

VariantCall paged_prefill_variant_call(const PagedPrefillDims& d, const Target& target) {
  return paged_prefill_variant_call(target, d.head_dim, d.tile_rows, d.pack_group);
}

kjit::detail::Choice paged_prefill_choice(AttentionVariant kernel, int64_t head_dim, int tile_rows, bool kv_tma) {
  kjit::detail::Choice choice;
  if (kernel == AttentionVariant::kWgmma) {
    choice.family = &paged_prefill_sm90_family();
    choice.point = paged_prefill_sm90_family().point({head_dim, tile_rows, kv_tma ? 1 : 0});
  } else {
    choice.family = &paged_prefill_family();
    choice.point = paged_prefill_family().point({head_dim, tile_rows});
  }
  return choice;
}

bool paged_prefill_kv_tma(AttentionVariant kernel, PageLoad load, int64_t page_size) {
  return kernel == AttentionVariant::kWgmma && load != PageLoad::kGather && tma_page_size(page_size);
}

PagedPrefillOpPlan PagedPrefillOp::plan(const PagedPrefillDims& d, const DeviceInfo& info) {
  PagedPrefillPlanKey key{};
  key.head_dim = d.head_dim;
  key.tile_rows = d.tile_rows;
  key.variant = static_cast<int32_t>(d.variant);
  key.has_work = d.num_work > 0 ? 1 : 0;
  key.pack_group = d.pack_group;
  key.page_load = static_cast<int32_t>(d.page_load);
  key.tma_pages = tma_page_size(d.cache.page_size) ? 1 : 0;
  key.target = target_key(info);
  // Per thread, as PrefillOp::plan.
  using Memo = kjit::detail::PodMemo<PagedPrefillPlanKey, PagedPrefillOpPlan, 16>;
  return kjit::detail::thread_memo<Memo>().get(key,
                                               [&](const PagedPrefillPlanKey&) { return plan_paged_prefill_run(d, info); });
}

int PagedPrefillOp::fallback_plans(const PagedPrefillDims& d, const DeviceInfo& info,
                                   PagedPrefillOpPlan (&out)[kjit::detail::kMaxOpFallbackPlans]) {
  int n = 0;
  for (AttentionVariant v : {AttentionVariant::kWgmma, AttentionVariant::kMma}) {
    if (d.num_work == 0 || !variant_runs(v, paged_prefill_variant_call(d, info.target()))) continue;
    PagedPrefillDims other = d;
    other.variant = v;
    out[n++] = plan(other, info);
  }
  return n;
}

PagedPrefillOpPlan plan_paged_prefill_run(const PagedPrefillDims& d, const DeviceInfo& info) {
  PagedPrefillOpPlan plan;
  // Resolved before the empty-call shortcut: a strict request fails the same with or without work.
  plan.variant = resolve_variant(d.variant, AttentionVariant::kAuto, paged_prefill_variant_call(d, info.target()));
  plan.tile_rows = d.tile_rows;
  plan.pack_group = d.pack_group;
  if (d.page_load == PageLoad::kTma && plan.variant != AttentionVariant::kWgmma) {
    throw Unsupported(fmt::format("{}: plan's page_load tma runs on the sm_90a wgmma kernel; this call runs the "
                                  "mma.sync kernel on device {} ({}): page_load auto or gather runs there",
                                  kPagedOp, info.ordinal, info.target().str()));
  }
  plan.kv_tma = paged_prefill_kv_tma(plan.variant, d.page_load, d.cache.page_size);
  if (d.num_work > 0) plan.choice = paged_prefill_choice(plan.variant, d.head_dim, d.tile_rows, plan.kv_tma);
  return plan;
}

PagedPrefillPlanDims paged_prefill_plan_dims(const int32_t* qo_indptr_host, int64_t batch, int64_t head_dim,
                                             int tile_rows) {
  if (batch < 0) fail(kPlanOp, fmt::format("batch must be >= 0, got {}", batch));
  if (!supported_head_dim(head_dim)) fail(kPlanOp, fmt::format("head_dim must be {}, got {}", head_dims_text(), head_dim));
  if (tile_rows != 0 && !kjit::detail::is_one_of(tile_rows, kPagedTileRows)) {
    fail(kPlanOp, fmt::format("tile_rows must be 0 (choose), {}, got {}", kjit::detail::one_of_text(kPagedTileRows),
                              tile_rows));
  }
  if (tile_rows != 0 && !paged_tile_rows_fit(head_dim, tile_rows)) {
    fail(kPlanOp, fmt::format("tile_rows {} runs only at head_dim {} (the sm_90a wgmma kernel's three-consumer "
                              "tile), got head_dim {}",
                              tile_rows, kWideTileHeadDim, head_dim));
  }
  if (qo_indptr_host == nullptr) fail(kPlanOp, "qo_indptr_host is null (the plan needs the host copy)");
  if (qo_indptr_host[0] != 0) fail(kPlanOp, fmt::format("qo_indptr[0] must be 0, got {}", qo_indptr_host[0]));
  PagedPrefillPlanDims d;
  for (int64_t b = 0; b < batch; ++b) {
    if (qo_indptr_host[b + 1] < qo_indptr_host[b]) {
      fail(kPlanOp, fmt::format("qo_indptr must be non-decreasing, got qo_indptr[{}] = {} > qo_indptr[{}] = {}", b,
                                qo_indptr_host[b], b + 1, qo_indptr_host[b + 1]));
    }
    d.nonempty += qo_indptr_host[b + 1] > qo_indptr_host[b];
  }
  d.batch = batch;
  d.head_dim = head_dim;
  d.total_q = qo_indptr_host[batch];
  if (d.total_q > INT32_MAX / 2) fail(kPlanOp, fmt::format("total_q must stay below 2^30, got {}", d.total_q));
  d.tile_rows = tile_rows;
  return d;
}

PagedPrefillPlanDims paged_prefill_plan_dims(const PagedPrefillPlanArgs& a) {
  PagedPrefillPlanDims d = paged_prefill_plan_dims(a.qo_indptr_host, a.batch, a.head_dim, a.tile_rows);
  if (a.q_heads < 1 || a.q_heads > kMaxGridYZ) {
    fail(kPlanOp, fmt::format("q_heads must be in [1, {}], got {}", kMaxGridYZ, a.q_heads));
  }
  if (a.page_size < 1) fail(kPlanOp, fmt::format("page_size must be >= 1, got {}", a.page_size));
  if (a.kv_indptr_host == nullptr) fail(kPlanOp, "kv_indptr_host is null (the plan needs the page table's host indptr)");
  if (a.last_page_len_host == nullptr) fail(kPlanOp, "last_page_len_host is null (the plan needs its host copy)");
  const int32_t* kv = a.kv_indptr_host;
  if (kv[0] != 0) fail(kPlanOp, fmt::format("kv_indptr[0] must be 0, got {}", kv[0]));
  for (int64_t b = 0; b < a.batch; ++b) {
    if (kv[b + 1] < kv[b]) {
      fail(kPlanOp, fmt::format("kv_indptr must be non-decreasing, got kv_indptr[{}] = {} > kv_indptr[{}] = {}", b,
                                kv[b], b + 1, kv[b + 1]));
    }
  }
  d.kv_lens = paged_kv_lens(a);
  for (int64_t len : d.kv_lens) d.max_kv_len = std::max(d.max_kv_len, len);
  d.q_heads = a.q_heads;
  d.page_size = a.page_size;
  d.causal = a.causal;
  if (a.kv_heads < 0 || (a.kv_heads > 0 && a.q_heads % a.kv_heads != 0)) {
    fail(kPlanOp, fmt::format("kv_heads must be 0 (unknown) or a divisor of q_heads = {}, got {}", a.q_heads,
                              a.kv_heads));
  }
  d.group = a.kv_heads > 0 ? a.q_heads / a.kv_heads : 0;
  if (!enum_named(kPackGqaNames, a.pack_gqa)) {
    fail(kPlanOp, fmt::format("pack_gqa must be auto, on or off, got {}", static_cast<int>(a.pack_gqa)));
  }
  if (a.max_ctas < 0) fail(kPlanOp, fmt::format("max_ctas must be >= 0 (0: one per SM), got {}", a.max_ctas));
  if (a.pack_gqa == PackGqa::kOn) {
    if (d.group < 2) {
      fail(kPlanOp, fmt::format("pack_gqa on needs kv_heads giving a group q_heads / kv_heads > 1, got q_heads {} "
                                "and kv_heads {}",
                                a.q_heads, a.kv_heads));
    }
    if (d.tile_rows != 0 && d.tile_rows < 128) {
      fail(kPlanOp, fmt::format("pack_gqa on runs the sm_90a wgmma kernel, whose tiles have 128 rows or more; got "
                                "tile_rows {}",
                                d.tile_rows));
    }
  }
  d.pack_gqa = a.pack_gqa;
  check_page_load(kPlanOp, "page_load", a.page_load, a.page_size, "page_size", std::to_string(a.page_size),
                  d.tile_rows);
  d.page_load = a.page_load;
  return d;
}

const char* pack_gqa_name(PackGqa pack) noexcept { return enum_name(kPackGqaNames, pack); }

std::optional<PackGqa> parse_pack_gqa(std::string_view text) {
  for (const EnumName<PackGqa>& row : kPackGqaNames) {
    if (text == row.name) return row.value;
  }
  return std::nullopt;
}

PagedPrefillPlan paged_prefill_work_map(const int32_t* qo_indptr_host, const PagedPrefillPlanDims& d, int tile_rows,
                                        int pack_group) {
  PagedPrefillPlan plan;
  plan.batch = d.batch;
  plan.head_dim = d.head_dim;
  plan.total_q = d.total_q;
  plan.tile_rows = tile_rows;
  plan.pack_group = pack_group;
  for (int64_t b = 0; b < d.batch; ++b) {
    // The request's rows: its tokens, each `pack_group` times when packed.
    const int64_t len = int64_t{qo_indptr_host[b + 1] - qo_indptr_host[b]} * pack_group;
    for (int32_t t = 0; int64_t{t} * plan.tile_rows < len; ++t) {
      plan.q_tile_to_batch.push_back(static_cast<int32_t>(b));
      plan.q_tile_to_index.push_back(t);
    }
  }
  const size_t map_bytes = (plan.q_tile_to_batch.size() * sizeof(int32_t) + 255) / 256 * 256;
  plan.map_index_offset = map_bytes;
  plan.workspace_bytes = 2 * map_bytes;
  return plan;
}

std::vector<int64_t> paged_kv_lens(const PagedPrefillPlanArgs& a) {
  std::vector<int64_t> lens(static_cast<size_t>(a.batch));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t pages = a.kv_indptr_host[b + 1] - a.kv_indptr_host[b];
    // The length formula of the paged layout, last_page_len clamped as the device clamps it.
    lens[b] = pages == 0 ? 0 : (pages - 1) * a.page_size + std::clamp<int64_t>(a.last_page_len_host[b], 0, a.page_size);
  }
  return lens;
}

void paged_prefill_schedule(PagedPrefillPlan& plan, const int32_t* qo_indptr_host, const std::vector<int64_t>& kv_lens,
                            bool causal, int64_t heads, int sm_count) {
  const int64_t units = plan.num_work() * heads;
  if (units == 0 || sm_count < 1) return;
  constexpr int64_t kKeysPerTile = PrefillSm90Shape<128, true>::kBlockN;
  const int64_t ctas = std::min<int64_t>(sm_count, units);
  // The CTAs by the cost given them so far: (cost, CTA), least first.
  using Load = std::pair<int64_t, int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> free_first;
  for (int32_t c = 0; c < ctas; ++c) free_first.push({0, c});
  std::vector<std::vector<int32_t>> lists(static_cast<size_t>(ctas));
  // The one-CTA-per-unit grid's order (attention/work_order.cuh with every head in one group):
  // work items from the last (a request's heaviest q tile under causal), heads fastest, so the
  // CTAs at work at once share the K/V of one or two requests.
  for (int64_t t = 0; t < plan.num_work(); ++t) {
    const int64_t item = plan.num_work() - 1 - t;
    const int64_t b = plan.q_tile_to_batch[item];
    const int64_t q_len = qo_indptr_host[b + 1] - qo_indptr_host[b];
    const int64_t rows = q_len * plan.pack_group;
    const int64_t last_row = std::min<int64_t>(rows, (plan.q_tile_to_index[item] + 1) * int64_t{plan.tile_rows}) - 1;
    const int64_t kv_len = kv_lens[b];
    const int64_t kv_end =
        causal ? std::clamp<int64_t>(last_row / plan.pack_group + 1 + kv_len - q_len, 0, kv_len) : kv_len;
    const int64_t cost = (kv_end + kKeysPerTile - 1) / kKeysPerTile + 1;
    for (int64_t head = 0; head < heads; ++head) {
      const Load least = free_first.top();
      free_first.pop();
      lists[least.second].push_back(static_cast<int32_t>(item * heads + head));
      free_first.push({least.first + cost, least.second});
    }
  }
  plan.schedule_heads = heads;
  plan.cta_work_indptr.assign(1, 0);
  plan.cta_work.clear();
  plan.cta_work.reserve(static_cast<size_t>(units));
  for (const std::vector<int32_t>& list : lists) {
    plan.cta_work.insert(plan.cta_work.end(), list.begin(), list.end());
    plan.cta_work_indptr.push_back(static_cast<int32_t>(plan.cta_work.size()));
  }
  const auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  plan.schedule_indptr_offset = plan.workspace_bytes;
  plan.schedule_work_offset = plan.schedule_indptr_offset + aligned(plan.cta_work_indptr.size() * sizeof(int32_t));
  plan.workspace_bytes = plan.schedule_work_offset + aligned(plan.cta_work.size() * sizeof(int32_t));
}

void paged_prefill_device_schedule(PagedPrefillPlan& plan, const int32_t* qo_indptr_host,
                                   const std::vector<int64_t>& kv_lens, bool causal, int64_t q_heads,
                                   const DeviceInfo& info, int max_ctas) {
  if (plan.variant == AttentionVariant::kMma) return;
  const VariantCall call = paged_prefill_variant_call(info.target(), plan.head_dim, plan.tile_rows,
                                                      static_cast<int>(plan.pack_group));
  if (!variant_runs(AttentionVariant::kWgmma, call)) return;
  const int ctas = max_ctas > 0 ? std::min(max_ctas, info.sm_count) : info.sm_count;
  paged_prefill_schedule(plan, qo_indptr_host, kv_lens, causal, paged_item_heads(q_heads, plan.pack_group), ctas);
}

PagedPrefillOpPlan PagedPrefillPlanner::plan(const PagedPrefillPlanDims& d, const DeviceInfo& info) {
  PagedPrefillOpPlan t;
  t.variant = AttentionVariant::kAuto;  // the run step chooses; `choice` says what it will take here
  const Target target = info.target();
  const bool pack =
      d.group > 1 && (d.pack_gqa == PackGqa::kOn ||
                      (d.pack_gqa == PackGqa::kAuto && (d.tile_rows == 0 || d.tile_rows >= 128) &&
                       variant_runs(AttentionVariant::kWgmma, paged_prefill_variant_call(target, d.head_dim, 128))));
  t.pack_group = pack ? static_cast<int>(d.group) : 1;
  if (d.tile_rows != 0) {
    t.tile_rows = d.tile_rows;
  } else {
    const int64_t mean = d.nonempty > 0 ? d.total_q * t.pack_group / d.nonempty : 0;
    const bool wide =
        mean > 128 &&
        variant_runs(AttentionVariant::kWgmma, paged_prefill_variant_call(target, d.head_dim, kWideTileRows));
    t.tile_rows = d.nonempty > 0 && mean <= 64 && !pack ? 64 : wide ? kWideTileRows : 128;
  }
  if (d.total_q > 0) {
    const bool wgmma = variant_runs(AttentionVariant::kWgmma,
                                    paged_prefill_variant_call(target, d.head_dim, t.tile_rows, t.pack_group));
    // A forced wide (kWideTileRows) tile or a packed plan for a target without wgmma (or for none:
    // the legacy overload) names no kernel: only the wgmma kernel runs it, and the run step fails
    // with Unsupported naming both kernels' rules where that cannot run.
    if (wgmma || (kjit::detail::is_one_of(t.tile_rows, kBlockMs) && !pack)) {
      const AttentionVariant kernel = wgmma ? AttentionVariant::kWgmma : AttentionVariant::kMma;
      t.choice = paged_prefill_choice(kernel, d.head_dim, t.tile_rows,
                                      paged_prefill_kv_tma(kernel, d.page_load, d.page_size));
    }
  }
  return t;
}

}  // namespace detail

PagedPrefillPlan plan_paged_prefill(const int32_t* qo_indptr_host, int64_t batch, int64_t head_dim, int tile_rows) {
  const detail::PagedPrefillPlanDims d = detail::paged_prefill_plan_dims(qo_indptr_host, batch, head_dim, tile_rows);
  return detail::paged_prefill_work_map(qo_indptr_host, d, detail::PagedPrefillPlanner::plan(d, DeviceInfo{}).tile_rows);
}

}  // namespace kjit::attention
