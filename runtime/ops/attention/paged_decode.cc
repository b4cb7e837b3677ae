// kjit::attention::paged_decode through the op pipeline: the launch value (the decode kernel with
// the PagedKV source, then the attention.decode_merge kernel when split) and the public entry
// points.
#include "runtime/ops/attention/paged_decode.hpp"

#include "runtime/ops/attention/params.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <climits>

namespace kjit::attention {
namespace detail {

DecodeParams PagedDecodeOp::params(const PagedDecodeArgs& args, const PagedDecodeDims& d, const DecodePlan& plan,
                                   void* workspace) {
  DecodeParams p = decode_query_params(args.q, args.out, d.has_lse ? &args.lse : nullptr, d.batch, plan, workspace);
  set_heads(p, d.q_heads, d.cache.kv_heads, d.group, args.scale, d.head_dim);
  set_paged_kv(p, args.cache, d.cache);
  // max_kv_len and split_tokens stay 0: the kernel splits each request's own length.
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

size_t paged_decode_workspace_bytes(const PagedDecodeArgs& args, const char* op) {
  const PagedDecodeDims d = validate_paged_decode(args, op);
  // One split or no request needs no partials: answer without the device (and without a driver).
  if (args.num_splits == 1 || d.batch == 0) return 0;
  return kjit::detail::workspace_bytes_validated<PagedDecodeOp>(d);
}

}  // namespace detail

size_t paged_decode_workspace_bytes(const PagedDecodeArgs& args) {
  return detail::paged_decode_workspace_bytes(args, "kjit::attention::paged_decode_workspace_bytes");
}

void paged_decode(const PagedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                  Runtime& runtime) {
  kjit::detail::run<detail::PagedDecodeOp>(args, {workspace, workspace_bytes}, stream, runtime);
}

}  // namespace kjit::attention
