// kjit::attention::append_paged_kv through the op pipeline: the launch value (the append kernel)
// and the public entry point.
#include "runtime/ops/attention/paged_append.hpp"

#include "runtime/ops/attention/params.hpp"

namespace kjit::attention {
namespace detail {

PagedAppendParams AppendOp::params(const AppendPagedKVArgs& args, const AppendDims& d, const AppendPlan& plan) {
  const PagedKVCache& c = args.cache;
  PagedAppendParams p{};
  p.k_new = args.k.data;
  p.v_new = args.v.data;
  p.k_pool = c.k.data;
  p.v_pool = c.v.data;
  set_page_table(p, c);
  if (d.indptr_mode) {
    p.append_indptr = static_cast<const int32_t*>(args.append_indptr.data);
  } else {
    p.batch_indices = static_cast<const int32_t*>(args.batch_indices.data);
    p.positions = static_cast<const int32_t*>(args.positions.data);
  }
  p.k_new_stride_n = args.k.strides[0];
  p.k_new_stride_h = args.k.strides[1];
  p.v_new_stride_n = args.v.strides[0];
  p.v_new_stride_h = args.v.strides[1];
  // Pool row of (page, slot) = page · page_rows + slot, at slot_stride elements per row.
  p.pool_stride_page = static_cast<int64_t>(d.cache.page_rows) * d.cache.slot_stride;
  p.pool_stride_slot = d.cache.slot_stride;
  p.pool_stride_h = c.k.strides[2];
  p.num_items = plan.items;
  p.num_new = static_cast<int32_t>(d.num_new);
  p.batch = static_cast<int32_t>(d.cache.batch);
  p.kv_heads = static_cast<int32_t>(d.cache.kv_heads);
  p.page_size = static_cast<int32_t>(d.cache.page_size);
  return p;
}

AppendOp::Launch AppendOp::build(const AppendPagedKVArgs& args, const AppendDims& d, const AppendPlan& plan,
                                 const LoadedProgram* program, kjit::detail::Workspace /*workspace*/,
                                 const DeviceInfo& /*info*/) {
  Launch l;
  if (program == nullptr) return l;
  auto& step = l.step<0>();
  step.params = params(args, d, plan);
  step.kernel = &program->kernel(0);
  step.config.grid[0] = plan.grid;
  step.config.block[0] = kPagedAppendThreads;
  return l;
}

}  // namespace detail

void append_paged_kv(const AppendPagedKVArgs& args, CUstream stream, Runtime& runtime) {
  kjit::detail::run<detail::AppendOp>(args, {}, stream, runtime);
}

}  // namespace kjit::attention
