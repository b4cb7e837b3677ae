// kjit::attention::decode through the op pipeline: the plan on the device, the launch value
// (decode kernel, in clusters under the cluster merge, then the merge kernel of the
// attention.decode_merge program when the plan merges with it) and the public entry points.
#include "runtime/ops/attention/decode.hpp"

#include "runtime/ops/attention/params.hpp"
#include "runtime/ops/cluster_occupancy.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace kjit::attention {

const char* decode_merge_name(DecodeMerge merge) noexcept { return enum_name(kDecodeMergeNames, merge); }

namespace detail {

DecodePlan DecodeOp::plan(const DecodeDims& d, const DeviceInfo& info) {
  check_decode_merge_request(kInfo.name, d.requested_merge, info);
  DecodePlan plan = plan_decode(d, d.requested_splits, info.sm_count, decode_ctas_per_sm(d.head_dim, info.max_smem_per_sm),
                                0, d.requested_merge, info.target().has_clusters());
  if (d.batch > 0) {
    plan.choice.family = &decode_family();
    plan.choice.point = decode_point(decode_family(), d.head_dim, plan);
  }
  return plan;
}

Point decode_point(const Family& family, int64_t head_dim, const DecodePlan& plan) {
  return family.point({head_dim, plan.heads_per_cta, static_cast<int64_t>(plan.merge)});
}

bool settle_decode_merge(const char* op, const Family& family, int64_t head_dim, DecodeMerge requested, int device,
                         const LoadedProgram& program, DecodePlan* plan) {
  if (plan->merge != DecodeMerge::kCluster || plan->num_splits <= 1) return false;
  const DecodeLaunchShape shape = decode_launch_shape(static_cast<int>(head_dim));
  const int clusters = kjit::detail::max_active_clusters(program.kernel(0), device, family, plan->choice.point,
                                                         plan->num_splits, shape.threads, shape.smem_bytes);
  if (clusters > 0) return false;
  const std::string why =
      fmt::format("device {} cannot hold a thread-block cluster of {} decode CTAs ({} bytes of shared memory each)",
                  device, plan->num_splits, shape.smem_bytes);
  if (requested == DecodeMerge::kCluster) throw Unsupported(fmt::format("{}: merge 'cluster': {}", op, why));
  // The same splits through the merge kernel: the workspace was sized for its partials.
  plan->merge = DecodeMerge::kKernel;
  plan->choice.point = decode_point(family, head_dim, *plan);
  return true;
}

DecodeParams decode_query_params(const TensorRef& q, const TensorRef& out, const TensorRef* lse, int64_t batch,
                                 const DecodePlan& plan, void* workspace) {
  DecodeParams p{};
  p.q = q.data;
  p.out = out.data;
  p.q_stride_b = q.strides[0];
  p.q_stride_h = q.strides[2];
  p.out_stride_b = out.strides[0];
  p.out_stride_h = out.strides[2];
  if (lse != nullptr) {
    p.lse = static_cast<float*>(lse->data);
    p.lse_stride_b = lse->strides[0];
    p.lse_stride_h = lse->strides[1];
  }
  // The cluster merge keeps its partials in shared memory: the kernel gets no workspace.
  if (plan.merge == DecodeMerge::kKernel) kjit::detail::set_split_partials(p, plan.num_splits, plan.o_part_bytes, workspace);
  p.batch = static_cast<int32_t>(batch);
  p.num_splits = plan.num_splits;
  p.m_tiles = plan.m_tiles;
  return p;
}

DecodeParams DecodeOp::params(const DecodeArgs& args, const DecodeDims& d, const DecodePlan& plan, void* workspace) {
  DecodeParams p = decode_query_params(args.q, args.out, d.has_lse ? &args.lse : nullptr, d.batch, plan, workspace);
  set_heads(p, d.q_heads, d.kv_heads, d.group, args.scale, d.head_dim);
  set_contiguous_kv(p, args.k, args.v, d.has_kv_lens ? &args.kv_lens : nullptr, d.max_kv_len);
  if (d.has_mask) {
    p.mask = static_cast<const uint8_t*>(args.mask.data);
    p.mask_stride_b = args.mask.strides[0];
    p.mask_stride_l = args.mask.strides[1];
  }
  p.split_tokens = plan.split_tokens;
  set_grid_divisors(p);
  return p;
}

void set_grid_divisors(DecodeParams& p) {
  // An empty launch may carry zeros; a FastDiv needs a divisor ≥ 1.
  p.m_tiles_div = fast_div_of(static_cast<uint32_t>(std::max(p.m_tiles, 1)));
  p.num_splits_div = fast_div_of(static_cast<uint32_t>(std::max(p.num_splits, 1)));
  p.kv_heads_div = fast_div_of(static_cast<uint32_t>(std::max(p.kv_heads, 1)));
}

kjit::detail::Choice decode_merge_choice(int64_t head_dim, const DecodePlan& plan) {
  kjit::detail::Choice choice;
  if (plan.num_splits > 1 && plan.merge == DecodeMerge::kKernel) {
    choice.family = &decode_merge_family();
    choice.point = decode_merge_family().point({head_dim});
  }
  return choice;
}

kjit::detail::Step<DecodeMergeParams> decode_merge_step(const Kernel& merge_kernel, const DecodeParams& p,
                                                         const DeviceInfo& info) {
  kjit::detail::Step<DecodeMergeParams> step;
  step.kernel = &merge_kernel;
  DecodeMergeParams& m = step.params;
  m.o_part = p.o_part;
  m.lse_part = p.lse_part;
  m.out = p.out;
  m.lse = p.lse;
  m.out_stride_b = p.out_stride_b;
  m.out_stride_h = p.out_stride_h;
  m.lse_stride_b = p.lse_stride_b;
  m.lse_stride_h = p.lse_stride_h;
  m.batch = p.batch;
  m.q_heads = p.q_heads;
  m.num_splits = p.num_splits;
  step.config.grid[0] = static_cast<uint32_t>(kjit::detail::ceil_div(int64_t{p.batch} * p.q_heads, kDecodeMergeRowsPerCta));
  step.config.block[0] = kDecodeMergeThreads;
  // The merge launches while the decode grid drains (the decode kernel signals after its KV
  // loop; the merge waits for the grid before reading the partials), hiding its launch latency.
  step.config.overlap_previous = info.target().has_pdl();
  return step;
}

void decode_steps(kjit::detail::Launches<DecodeParams, DecodeMergeParams>& launch, const char* op,
                  const LoadedProgram& program, const LoadedProgram* merge, const DecodeParams& p,
                  const DecodePlan& plan, int64_t head_dim, const DeviceInfo& info) {
  auto& decode = launch.step<0>();
  decode.params = p;
  const DecodeLaunchShape shape = decode_launch_shape(static_cast<int>(head_dim));
  decode.kernel = &program.kernel(0);
  decode.config.grid[0] = static_cast<uint32_t>(plan.ctas);
  decode.config.block[0] = static_cast<uint32_t>(shape.threads);
  decode.config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  if (plan.num_splits <= 1) return;
  if (plan.merge == DecodeMerge::kCluster) {
    // The splits of one (b, kv head, M tile) are consecutive CTAs (split innermost): one cluster.
    decode.config.cluster[0] = static_cast<uint32_t>(plan.num_splits);
  } else {
    if (merge == nullptr) {
      kjit::detail::fail(op, fmt::format("the plan splits the KV {} ways but no attention.decode_merge program was "
                                         "loaded (build the launch through the pipeline)",
                                         plan.num_splits));
    }
    launch.step<1>() = decode_merge_step(merge->kernel(0), p, info);
  }
}

DecodeOp::Launch DecodeOp::build(const DecodeArgs& args, const DecodeDims& d, const DecodePlan& plan,
                                 const LoadedProgram* program, const LoadedProgram* merge,
                                 kjit::detail::Workspace workspace, const DeviceInfo& info) {
  Launch l;
  l.workspace_bytes = plan.workspace_bytes;
  if (program == nullptr) return l;
  check_decode_workspace(plan, workspace.data, workspace.bytes);
  if (plan.ctas > INT32_MAX) {
    kjit::detail::fail(kInfo.name, fmt::format("{} CTAs exceed one launch; split the batch", plan.ctas));
  }
  decode_steps(l, kInfo.name, *program, merge, params(args, d, plan, workspace.data), plan, d.head_dim, info);
  return l;
}

size_t decode_workspace_bytes(const DecodeArgs& args, const char* op) {
  const DecodeDims d = validate_decode(args, op);
  // One split needs no partials: answer without the device (and without a driver).
  if (args.num_splits == 1) return 0;
  // The plan the call makes (Plan::workspace_bytes is the same whatever its merge).
  return kjit::detail::workspace_bytes_validated<DecodeOp>(d);
}

}  // namespace detail

size_t decode_workspace_bytes(const DecodeArgs& args) {
  return detail::decode_workspace_bytes(args, "kjit::attention::decode_workspace_bytes");
}

void decode(const DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream, Runtime& runtime) {
  kjit::detail::run<detail::DecodeOp>(args, {workspace, workspace_bytes}, stream, runtime);
}

}  // namespace kjit::attention
