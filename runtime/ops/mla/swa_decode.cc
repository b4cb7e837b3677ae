// kjit::mla::swa_decode through the op pipeline: the plan on the device, the launch value (the
// decode kernel, then the merge kernel when the window is split over separate CTAs; a cluster
// split in one launch of clusters; on Hopper the persistent wgmma kernel alone) and the public
// entry points.
#include "runtime/ops/mla/swa_decode.hpp"

#include "runtime/ops/softmax_params.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace kjit::mla {
namespace detail {

SwaPlan SwaDecodeOp::plan(const SwaDims& d, const DeviceInfo& info) {
  SwaPlan plan = plan_swa_decode(d, info);
  if (d.tokens == 0) return plan;
  // Both before the kernel table: a kernel the device cannot run is never compiled.
  if (plan.heads_per_cta == kSwaWgmmaHeads && !info.target().has_wgmma()) {
    throw Unsupported(fmt::format("{}: head_group 64 is the wgmma kernel, which needs sm_90a (Hopper); device {} ({}) "
                                  "is sm_{}",
                                  kInfo.name, d.device, info.name, info.sm()));
  }
  if (plan.cluster_split > 1 && info.sm() < kSwaClusterMinSm) {
    throw Unsupported(fmt::format("{}: cluster_split {} needs thread-block clusters (sm_90+); device {} ({}) is sm_{}",
                                  kInfo.name, plan.cluster_split, d.device, info.name, info.sm()));
  }
  const int smem = swa_launch_shape(plan.heads_per_cta, plan.tile, plan.cluster_split).smem_bytes;
  if (smem > info.max_smem_per_block_optin) {
    throw Unsupported(fmt::format("{}: head_group {} needs {} bytes of shared memory per CTA; device {} ({}) allows "
                                  "{} (use head_group 16 or 0)",
                                  kInfo.name, plan.heads_per_cta, smem, d.device, info.name, info.max_smem_per_block_optin));
  }
  plan.choice.family = &swa_decode_family();
  plan.choice.point =
      swa_decode_family().point({kSwaHeadDim, plan.heads_per_cta, plan.tile, d.window, d.cache, plan.cluster_split});
  return plan;
}

SwaDecodeParams SwaDecodeOp::params(const SwaDecodeArgs& args, const SwaDims& d, const SwaPlan& plan,
                                    void* workspace) {
  SwaDecodeParams p{};
  p.q = args.q.data;
  p.kv = static_cast<const uint8_t*>(args.kv_cache.data);
  // A zero-filled copy reads nothing but still names a mapped address: the cache when it has
  // bytes, else q (T > 0 whenever a kernel runs, so q has at least NH · HD · 2 bytes).
  p.fill_src = args.kv_cache.numel() > 0 ? p.kv : static_cast<const uint8_t*>(args.q.data);
  p.inv_scale = args.inv_scale.data;
  p.indices = static_cast<const int64_t*>(args.indices.data);
  p.lens = args.lens.data;
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  kjit::detail::set_split_partials(p, plan.num_splits, plan.o_part_bytes, workspace);
  p.q_stride_t = args.q.strides[0];
  p.q_stride_h = args.q.strides[1];
  p.out_stride_t = args.out.strides[0];
  p.out_stride_h = args.out.strides[1];
  if (d.has_lse) {
    p.lse_stride_t = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
  }
  p.kv_stride_block_bytes = args.kv_cache.strides[0];  // 1-byte elements: strides are bytes
  // With one row per block, slot s is block s: step by the block stride.
  p.kv_stride_row_bytes = d.block_size == 1 ? args.kv_cache.strides[0] : args.kv_cache.strides[1];
  p.scale_stride = args.inv_scale.strides[0];
  p.tokens = static_cast<int32_t>(d.tokens);
  p.num_heads = static_cast<int32_t>(d.heads);
  p.head_groups = static_cast<int32_t>(d.heads / plan.heads_per_cta);
  p.block_size = static_cast<int32_t>(std::max<int64_t>(d.block_size, 1));
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.lens_i64 = d.lens_i64 ? 1 : 0;
  p.kv_compact = d.kv_compact ? 1 : 0;
  p.scale_log2 = kjit::detail::softmax_scale_log2(args.scale, d.head_dim);
  return p;
}

SwaDecodeOp::Launch SwaDecodeOp::build(const SwaDecodeArgs& args, const SwaDims& d, const SwaPlan& plan,
                                       const LoadedProgram* program, kjit::detail::Workspace workspace,
                                       const DeviceInfo& info) {
  Launch l;
  l.workspace_bytes = plan.workspace_bytes;
  if (program == nullptr) return l;
  check_swa_workspace(plan, workspace.data, workspace.bytes);
  if (plan.ctas > INT32_MAX) {
    kjit::detail::fail(kInfo.name, fmt::format("{} CTAs exceed one launch; split T", plan.ctas));
  }
  const bool wgmma = plan.heads_per_cta == kSwaWgmmaHeads;
  const SwaLaunchShape shape = swa_launch_shape(plan.heads_per_cta, plan.tile, plan.cluster_split);
  auto& decode = l.step<0>();
  decode.params = params(args, d, plan, workspace.data);
  decode.kernel = &program->kernel(0);
  // The wgmma kernel: one CTA per SM (its shared memory allows no second) looping over the
  // items, the next item's window rows in flight while it computes the current one.
  const int64_t grid = wgmma ? std::min<int64_t>(plan.ctas, std::max(info.sm_count, 1)) : plan.ctas;
  decode.config.grid[0] = static_cast<uint32_t>(grid);
  decode.config.block[0] = static_cast<uint32_t>(shape.threads);
  decode.config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  // A cluster split: the cluster_split consecutive CTAs of one (token, head group) are one cluster.
  decode.config.cluster[0] = static_cast<uint32_t>(plan.cluster_split);
  if (plan.num_splits > 1 && !wgmma) {
    // No programmatic dependent launch: the decode kernel does not signal early, so the merge
    // waits for the whole grid in stream order.
    auto& merge = l.step<1>();
    merge.kernel = &program->kernel(1);
    merge.params = decode.params;
    merge.config.grid[0] = static_cast<uint32_t>(kjit::detail::ceil_div(d.tokens * d.heads, kSwaMergeRowsPerCta));
    merge.config.block[0] = kSwaMergeThreads;
  }
  return l;
}

size_t swa_decode_workspace_bytes(const SwaDecodeArgs& args, const char* op) {
  const SwaDims d = validate_swa_decode(args, op);
  // No tokens: no partials, answered without the device (and without a driver). The pure
  // planner, not SwaDecodeOp::plan: a size query does not check that the heads per CTA can run. A tuned
  // plan (which the call will run) sizes its own partials.
  if (d.tokens == 0) return 0;
  const DeviceInfo& info = device_info(d.device);
  SwaPlan tuned;
  if (kjit::detail::tuned_plan<SwaDecodeOp>(d, info, &tuned)) return tuned.workspace_bytes;
  return plan_swa_decode(d, info).workspace_bytes;
}

}  // namespace detail

size_t swa_decode_workspace_bytes(const SwaDecodeArgs& args) {
  return detail::swa_decode_workspace_bytes(args, "kjit::mla::swa_decode_workspace_bytes");
}

void swa_decode(const SwaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                Runtime& runtime) {
  kjit::detail::run<detail::SwaDecodeOp>(args, {workspace, workspace_bytes}, stream, runtime);
}

}  // namespace kjit::mla
