// kjit::attention::prefill through the op pipeline: the launch values (the split-Q mma.sync
// kernel, or the sm_90a kernel whose Params prefill_sm90.cc encodes) and the public entry point.
#include "runtime/ops/attention/prefill.hpp"

#include "runtime/ops/attention/params.hpp"

#include <cuda.h>

namespace kjit::attention {
namespace detail {

PrefillParams PrefillOp::params(const PrefillArgs& args, const PrefillDims& d, const PrefillPlan& plan) {
  PrefillParams p{};
  set_prefill_io(p, args.q, args.out, d.has_lse ? &args.lse : nullptr);
  if (d.mask_rank != 0) {
    p.mask = static_cast<const uint8_t*>(args.mask.data);
    // A 2-D mask [batch, max_kv_len] is the same for every query row.
    p.mask_stride_b = args.mask.strides[0];
    p.mask_stride_q = d.mask_rank == 3 ? args.mask.strides[1] : 0;
    p.mask_stride_k = args.mask.strides[d.mask_rank - 1];
  }
  set_heads(p, d.q_heads, d.kv_heads, d.group, args.scale, d.head_dim);
  set_contiguous_kv(p, args.k, args.v, d.has_kv_lens ? &args.kv_lens : nullptr, d.max_kv_len);
  p.batch = static_cast<int32_t>(d.batch);
  p.q_len = static_cast<int32_t>(d.q_len);
  p.q_tiles = static_cast<int32_t>(plan.q_tiles);
  p.causal = args.causal ? 1 : 0;
  p.head_group = prefill_head_group(d, AttentionVariant::kMma);
  return p;
}

PrefillOp::Launch PrefillOp::build(const PrefillArgs& args, const PrefillDims& d, const PrefillPlan& plan,
                                   const LoadedProgram* program, kjit::detail::Workspace /*workspace*/,
                                   const DeviceInfo& /*info*/) {
  Launch l;
  if (program == nullptr) return l;
  // Both kernels: a CTA per (q tile, q head, request).
  const auto grid = [&](LaunchConfig& c, int threads, int smem_bytes) {
    c.grid[0] = static_cast<uint32_t>(plan.q_tiles);
    c.grid[1] = static_cast<uint32_t>(d.q_heads);
    c.grid[2] = static_cast<uint32_t>(d.batch);
    c.block[0] = static_cast<uint32_t>(threads);
    c.dynamic_smem_bytes = static_cast<uint32_t>(smem_bytes);
  };
  if (plan.variant == AttentionVariant::kWgmma) {
    auto& step = l.step<1>();
    fill_params_sm90(args, d, plan, &step.params);
    step.kernel = &program->kernel(0);
    const PrefillSm90LaunchShape shape = prefill_sm90_launch_shape(static_cast<int>(d.head_dim));
    grid(step.config, shape.threads, shape.smem_bytes);
  } else {
    auto& step = l.step<0>();
    step.params = params(args, d, plan);
    step.kernel = &program->kernel(0);
    const PrefillLaunchShape shape = prefill_launch_shape(static_cast<int>(d.head_dim), plan.block_m);
    grid(step.config, shape.threads, shape.smem_bytes);
  }
  return l;
}

}  // namespace detail

void prefill(const PrefillArgs& args, CUstream stream, Runtime& runtime) {
  kjit::detail::run<detail::PrefillOp>(args, {}, stream, runtime);
}

}  // namespace kjit::attention
