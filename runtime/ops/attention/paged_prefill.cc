// kjit::attention::paged_prefill through the op pipeline: the launch value (either kernel takes
// the same Params and grid) and the public entry points of both steps (plan, upload, run).
#include "runtime/ops/attention/paged_prefill.hpp"

#include "runtime/driver.hpp"
#include "runtime/ops/attention/params.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/tma_map.hpp"

#include <fmt/format.h>

#include <cuda.h>

namespace kjit::attention {
namespace detail {

PrefillParams PagedPrefillOp::params(const Args& call, const PagedPrefillDims& d) {
  const PagedPrefillArgs& args = call.args;
  PrefillParams p{};
  set_prefill_io(p, args.q, args.out, d.has_lse ? &args.lse : nullptr);
  // The packed Q schedule: the requests' query rows and the plan's work map.
  p.qo_indptr = static_cast<const int32_t*>(args.qo_indptr.data);
  p.q_tile_to_batch = static_cast<const int32_t*>(call.workspace);
  p.q_tile_to_index =
      reinterpret_cast<const int32_t*>(static_cast<const char*>(call.workspace) + call.plan.map_index_offset);
  set_heads(p, d.q_heads, d.cache.kv_heads, d.group, args.scale, d.head_dim);
  set_paged_kv(p, args.cache, d.cache);
  p.batch = static_cast<int32_t>(call.plan.batch);
  p.q_tiles = static_cast<int32_t>(d.num_work);
  p.causal = args.causal ? 1 : 0;
  // A packed plan's CTAs take KV heads (each the group's q heads), an unpacked one's q heads;
  // heads fastest over the plan's work items either way.
  p.pack_group = static_cast<int32_t>(d.pack_group);
  p.pack_div = fast_div_of(static_cast<uint32_t>(d.pack_group));
  p.head_group = static_cast<int32_t>(paged_item_heads(d.q_heads, d.pack_group));
  return p;
}

namespace {

// The call key of the two page-pool maps: everything blhd_tma_map_key reads of cache.k and cache.v
// (address, the four sizes, the strides of dims 0..2).
kjit::detail::TmaCallKey page_tma_call_key(const PagedKVCache& c) {
  static const char kOp = 0;
  kjit::detail::TmaCallKey key{};
  key.op = &kOp;
  const TensorRef* pools[2] = {&c.k, &c.v};
  int w = 0;
  for (const TensorRef* t : pools) key.words[w++] = reinterpret_cast<uintptr_t>(t->data);
  for (const TensorRef* t : pools) {
    for (int i = 0; i < 4; ++i) key.words[w++] = static_cast<uint64_t>(t->shape[i]);
    for (int i = 0; i < 3; ++i) key.words[w++] = static_cast<uint64_t>(t->strides[i]);
  }
  return key;
}

}  // namespace

PagedPrefillOp::Launch PagedPrefillOp::build(const Args& call, const PagedPrefillDims& d,
                                             const PagedPrefillOpPlan& plan, const LoadedProgram* program,
                                             kjit::detail::Workspace /*workspace*/, const DeviceInfo& /*info*/) {
  Launch l;
  if (program == nullptr) return l;
  // Both kernels take the same Params and grid (a CTA per work item and q head, or KV head when
  // the plan packs: then only the wgmma kernel runs), unless the wgmma kernel runs the plan's
  // persistent schedule.
  auto& step = l.step<0>();
  step.params = params(call, d);
  step.kernel = &program->kernel(0);
  int threads = 0, smem_bytes = 0;
  if (plan.variant == AttentionVariant::kWgmma) {
    const PrefillSm90LaunchShape shape = prefill_sm90_launch_shape(static_cast<int>(d.head_dim), true, d.tile_rows);
    threads = shape.threads;
    smem_bytes = shape.smem_bytes;
  } else {
    const PrefillLaunchShape shape = prefill_launch_shape(static_cast<int>(d.head_dim), d.tile_rows);
    threads = shape.threads;
    smem_bytes = shape.smem_bytes;
  }
  if (plan.kv_tma) {
    // A pool [num_pages, page_size, kv_heads, head_dim] is a BLHD tensor whose "batch" is the page
    // and whose "tokens" are its slots; validate_paged_cache checked the 16-byte alignment TMA needs.
    const kjit::detail::TmaCallMaps& maps =
        kjit::detail::tma_call_maps(page_tma_call_key(call.args.cache), 2, [&](kjit::detail::TmaMapKey(&keys)[4]) {
          keys[0] = blhd_tma_map_key(call.args.cache.k, kPageBoxRows);
          keys[1] = blhd_tma_map_key(call.args.cache.v, kPageBoxRows);
        });
    step.params.tma_k_pages = maps.map[0];
    step.params.tma_v_pages = maps.map[1];
  }
  step.config.grid[0] = static_cast<uint32_t>(d.num_work);
  step.config.grid[1] = static_cast<uint32_t>(step.params.head_group);  // all heads, packed or not
  if (plan.variant == AttentionVariant::kWgmma && !call.plan.cta_work.empty()) {
    // The persistent schedule (validated against the call): a CTA per list.
    const char* ws = static_cast<const char*>(call.workspace);
    step.params.cta_work_indptr = reinterpret_cast<const int32_t*>(ws + call.plan.schedule_indptr_offset);
    step.params.cta_work = reinterpret_cast<const int32_t*>(ws + call.plan.schedule_work_offset);
    step.config.grid[0] = static_cast<uint32_t>(call.plan.ctas());
    step.config.grid[1] = 1;
  }
  step.config.block[0] = static_cast<uint32_t>(threads);
  step.config.dynamic_smem_bytes = static_cast<uint32_t>(smem_bytes);
  return l;
}

}  // namespace detail

namespace {

constexpr const char* kPlanOp = "kjit::attention::plan_paged_prefill";

/// The ordinal whose tuning table plans for PagedPrefillPlanArgs::device, or -1 when no table can
/// be read (no driver, no device).
int table_device(int device) {
  if (!driver_available()) return -1;
  const int count = device_count();
  if (count == 0) return -1;
  if (device >= 0) {
    if (device >= count) {
      kjit::detail::fail(kPlanOp, fmt::format("device {} out of range ({} CUDA devices)", device, count));
    }
    return device;
  }
  CUcontext current = nullptr;
  KJIT_CU(cuCtxGetCurrent(&current));
  return current != nullptr ? kjit::detail::context_device(current) : 0;
}

}  // namespace

PagedPrefillPlan plan_paged_prefill(const PagedPrefillPlanArgs& args) {
  detail::PagedPrefillPlanDims d = detail::paged_prefill_plan_dims(args);
  if (args.device < -1) {
    kjit::detail::fail(kPlanOp, fmt::format("device must be an ordinal or -1 (the current context's), got {}", args.device));
  }
  if (args.variant == AttentionVariant::kMma) {
    // The mma.sync kernel does not pack.
    if (d.pack_gqa == PackGqa::kOn) kjit::detail::fail(kPlanOp, "pack_gqa on runs the sm_90a wgmma kernel; variant is mma");
    if (args.page_load == PageLoad::kTma) kjit::detail::fail(kPlanOp, "page_load tma runs on the sm_90a wgmma kernel; variant is mma");
    d.pack_gqa = PackGqa::kOff;
  }
  // The device is asked only where it decides something: the table (no forced tile), the wide
  // tile's and packing's rule, the persistent schedule.
  const int device = d.tile_rows == 0 || d.tile_rows == kWideTileRows ||
                             (d.group > 1 && d.pack_gqa != PackGqa::kOff) ||
                             (args.persistent && args.variant != AttentionVariant::kMma)
                         ? table_device(args.device)
                         : -1;
  // Only the sm_90a kernel runs the wide tile and packed plans: refuse them where the device
  // (when there is one to ask) cannot.
  const auto refuse = [&](const char* what, int rows, int pack) {
    const detail::VariantCall call =
        detail::paged_prefill_variant_call(device_info(device).target(), d.head_dim, rows, pack);
    if (!detail::variant_runs(AttentionVariant::kWgmma, call)) {
      kjit::detail::fail(kPlanOp, fmt::format("{} cannot run on device {}: {}", what, device,
                                              detail::variant_rejects(AttentionVariant::kWgmma, call)));
    }
  };
  if (device >= 0 && d.tile_rows == kWideTileRows) {
    refuse(fmt::format("tile_rows {}", kWideTileRows).c_str(), d.tile_rows, 1);
  }
  if (device >= 0 && d.pack_gqa == PackGqa::kOn) {
    refuse("pack_gqa on", d.tile_rows != 0 ? d.tile_rows : 128, static_cast<int>(d.group));
  }
  PagedPrefillPlan plan;
  PageLoad page_load = args.page_load;
  if (d.tile_rows != 0) {
    // A forced tile is never tuned: the built-in rule decides the packing (on the device where
    // one is at hand).
    const DeviceInfo info = device >= 0 ? device_info(device) : DeviceInfo{};
    const int pack = detail::PagedPrefillPlanner::plan(d, info).pack_group;
    plan = detail::paged_prefill_work_map(args.qo_indptr_host, d, d.tile_rows, pack);
    plan.variant = args.variant;
  } else {
    const detail::PagedPrefillOpPlan tile =
        device >= 0 ? kjit::detail::choose_plan<detail::PagedPrefillPlanner>(d, device_info(device))
                    : detail::PagedPrefillPlanner::plan(d, DeviceInfo{});
    int rows = tile.tile_rows;
    // A forced kernel gets a tile it runs: mma.sync has no wide tile, the Hopper kernel (and so
    // forced TMA page loads) no 64.
    if ((args.variant == AttentionVariant::kMma && !kjit::detail::is_one_of(rows, kBlockMs)) ||
        ((args.variant == AttentionVariant::kWgmma || args.page_load == PageLoad::kTma) && rows < 128)) {
      rows = 128;
    }
    plan = detail::paged_prefill_work_map(args.qo_indptr_host, d, rows, tile.pack_group);
    // The forced kernel, else kAuto unless a tuning table chose the kernel.
    plan.variant = args.variant != AttentionVariant::kAuto ? args.variant : tile.variant;
    // A tuning table's wgmma choice says how its pages loaded (apply_tuned): the plan records it,
    // so that the run step runs the kernel that was timed.
    if (args.page_load == PageLoad::kAuto && tile.variant == AttentionVariant::kWgmma) {
      page_load = tile.kv_tma ? PageLoad::kTma : PageLoad::kGather;
    }
  }
  plan.page_load = page_load;
  if (args.persistent && device >= 0) {
    detail::paged_prefill_device_schedule(plan, args.qo_indptr_host, d.kv_lens, args.causal,
                                          args.q_heads, device_info(device), args.max_ctas);
  }
  return plan;
}

void upload_paged_prefill_plan(const PagedPrefillPlan& plan, void* workspace, size_t workspace_bytes, int device) {
  detail::check_workspace("kjit::attention::upload_paged_prefill_plan", plan.workspace_bytes, workspace,
                          workspace_bytes, "the plan's work map");
  if (plan.q_tile_to_batch.empty()) return;
  kjit::detail::ensure_context(device);
  const size_t bytes = plan.q_tile_to_batch.size() * sizeof(int32_t);
  const auto base = reinterpret_cast<CUdeviceptr>(workspace);
  KJIT_CU(cuMemcpyHtoD(base, plan.q_tile_to_batch.data(), bytes));
  KJIT_CU(cuMemcpyHtoD(base + plan.map_index_offset, plan.q_tile_to_index.data(), bytes));
  if (!plan.cta_work.empty()) {
    KJIT_CU(cuMemcpyHtoD(base + plan.schedule_indptr_offset, plan.cta_work_indptr.data(),
                         plan.cta_work_indptr.size() * sizeof(int32_t)));
    KJIT_CU(cuMemcpyHtoD(base + plan.schedule_work_offset, plan.cta_work.data(), plan.cta_work.size() * sizeof(int32_t)));
  }
}

void paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan, const void* workspace,
                   size_t workspace_bytes, CUstream stream, Runtime& runtime) {
  kjit::detail::run<detail::PagedPrefillOp>({args, plan, workspace, workspace_bytes}, {}, stream, runtime);
}

}  // namespace kjit::attention
