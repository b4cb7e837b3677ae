// kjit::attention::paged_decode through the op pipeline: the launch value (the decode kernel with
// the PagedKV source, then the attention.decode_merge kernel when split) and the public entry
// points.
#include "runtime/ops/attention/paged_decode.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <climits>

namespace kjit::attention {
namespace detail {

DecodeParams PagedDecodeOp::params(const PagedDecodeArgs& args, const PagedDecodeDims& d, const DecodePlan& plan,
                                   void* workspace) {
  const float scale = resolve_scale(kInfo.name, args.scale, d.head_dim, true);
  const PagedKVCache& c = args.cache;
  DecodeParams p{};
  p.q = args.q.data;
  p.k = c.k.data;
  p.v = c.v.data;
  p.kv_indptr = static_cast<const int32_t*>(c.indptr.data);
  p.kv_page_indices = static_cast<const int32_t*>(c.page_indices.data);
  p.kv_last_page_len = static_cast<const int32_t*>(c.last_page_len.data);
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  if (plan.num_splits > 1) {
    p.o_part = kjit::detail::o_part(workspace);
    p.lse_part = kjit::detail::lse_part(workspace, plan.o_part_bytes);
  }
  p.q_stride_b = args.q.strides[0];
  p.q_stride_h = args.q.strides[2];
  p.k_stride_b = p.v_stride_b = c.k.strides[0];
  p.k_stride_l = p.v_stride_l = d.cache.slot_stride;
  p.k_stride_h = p.v_stride_h = c.k.strides[2];
  p.out_stride_b = args.out.strides[0];
  p.out_stride_h = args.out.strides[2];
  if (d.has_lse) {
    p.lse_stride_b = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
  }
  p.batch = static_cast<int32_t>(d.batch);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.kv_heads = static_cast<int32_t>(d.cache.kv_heads);
  p.group = static_cast<int32_t>(d.group);
  p.max_kv_len = 0;
  p.num_splits = plan.num_splits;
  p.split_tokens = 0;
  p.m_tiles = plan.m_tiles;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.page_size = static_cast<int32_t>(d.cache.page_size);
  p.page_div = d.cache.page_div;
  p.page_rows = d.cache.page_rows;
  set_grid_divisors(p);
  return p;
}

PagedDecodeOp::Launch PagedDecodeOp::build(const PagedDecodeArgs& args, const PagedDecodeDims& d,
                                           const DecodePlan& plan, const LoadedProgram* program,
                                           const LoadedProgram* merge, kjit::detail::Workspace workspace,
                                           const DeviceInfo& info) {
  Launch l;
  l.workspace_bytes = plan.workspace_bytes;
  if (program == nullptr) return l;
  check_workspace(kInfo.name, plan.workspace_bytes, workspace.data, workspace.bytes,
                  "the KV split partials (paged_decode_workspace_bytes)");
  if (plan.ctas > INT32_MAX) kjit::detail::fail(kInfo.name, fmt::format("{} CTAs exceed one launch", plan.ctas));
  decode_steps(l, kInfo.name, *program, merge, params(args, d, plan, workspace.data), plan, d.head_dim, info);
  return l;
}

}  // namespace detail

size_t paged_decode_workspace_bytes(const PagedDecodeArgs& args) {
  const detail::PagedDecodeDims d = detail::validate_paged_decode(args);
  // One split or no request needs no partials: answer without the device (and without a driver).
  if (args.num_splits == 1 || d.batch == 0) return 0;
  return kjit::detail::workspace_bytes_validated<detail::PagedDecodeOp>(d);
}

void paged_decode(const PagedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                  Runtime& runtime) {
  kjit::detail::run<detail::PagedDecodeOp>(args, {workspace, workspace_bytes}, stream, runtime);
}

}  // namespace kjit::attention
