// kjit::attention::attention: classify the call → validate it once, as the classified op's
// arguments → resolve the variant for the device → run that op from the validated dims.
#include "runtime/ops/attention/entry.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/attention/variant.hpp"
#include "runtime/ops/pipeline.hpp"

namespace kjit::attention {
namespace {

constexpr const char* kOp = "kjit::attention::attention";

TensorRef decode_lse(const TensorRef& lse) {
  if (lse.ndim != 3 || lse.shape[2] != 1) return lse;
  TensorRef t = lse;
  t.ndim = 2;
  return t;
}

/// A [batch, 1, kv_len] mask seen as decode's [batch, kv_len]; 2-D passes through.
TensorRef decode_mask(const TensorRef& mask) {
  if (mask.ndim != 3 || mask.shape[1] != 1) return mask;
  TensorRef t = mask;
  t.ndim = 2;
  t.shape[1] = mask.shape[2];
  t.strides[1] = mask.strides[2];
  return t;
}

DecodeArgs to_decode(const AttentionArgs& a) {
  DecodeArgs d;
  d.q = a.q;
  d.k = a.k;
  d.v = a.v;
  d.kv_lens = a.kv_lens;
  d.mask = decode_mask(a.mask);
  d.out = a.out;
  d.lse = decode_lse(a.lse);
  d.scale = a.scale;
  d.num_splits = a.num_splits;
  return d;
}

PagedDecodeArgs to_paged_decode(const AttentionArgs& a) {
  PagedDecodeArgs d;
  d.q = a.q;
  d.cache = a.cache;
  d.out = a.out;
  d.lse = decode_lse(a.lse);
  d.scale = a.scale;
  d.num_splits = a.num_splits;
  d.kv_len_hint = a.kv_len_hint;
  return d;
}

PrefillArgs to_prefill(const AttentionArgs& a) {
  PrefillArgs p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.kv_lens = a.kv_lens;
  p.mask = a.mask;
  p.causal = a.causal;
  p.out = a.out;
  p.lse = a.lse;
  p.scale = a.scale;
  p.block_m = a.block_m;
  return p;
}

PagedPrefillArgs to_paged_prefill(const AttentionArgs& a) {
  PagedPrefillArgs p;
  p.q = a.q;
  p.qo_indptr = a.qo_indptr;
  p.cache = a.cache;
  p.causal = a.causal;
  p.out = a.out;
  p.lse = a.lse;
  p.scale = a.scale;
  return p;
}

/// Runs an op whose only kernel is mma.sync (decode, paged decode) for its arguments `a`:
/// validated once, then the variant rules, which still reject a request for wgmma or a device
/// no variant runs on before any context is made, then the op from the validated dims.
template <class Op>
void run_mma_op(AttentionKind kind, const typename Op::Args& a, AttentionVariant requested,
                AttentionVariant preferred, kjit::detail::Workspace workspace, CUstream stream, Runtime& runtime) {
  const typename Op::Dims d = Op::validate(a);
  detail::VariantCall call;
  call.kind = kind;
  call.target = device_info(d.device).target();
  call.head_dim = d.head_dim;
  detail::resolve_variant(requested, preferred, call);
  kjit::detail::run_validated<Op>(a, d, workspace, stream, runtime);
}

}  // namespace

namespace detail {

AttentionKind classify_attention(const AttentionArgs& a) {
  if (a.q.ndim == 0) fail(kOp, "q is required");
  const bool paged = a.cache.indptr.ndim != 0 || a.cache.k.ndim != 0;
  const bool contiguous = a.k.ndim != 0 || a.v.ndim != 0;
  const bool ragged = a.qo_indptr.ndim != 0;
  if (paged && contiguous) fail(kOp, "give either contiguous k/v or a paged cache, not both");
  if (!paged && !contiguous) fail(kOp, "k/v (contiguous) or cache (paged) is required");
  if (paged) {
    if (a.kv_lens.ndim != 0) fail(kOp, "kv_lens is for contiguous k/v; a paged cache carries its lengths");
    if (a.mask.ndim != 0) fail(kOp, "masks are supported with contiguous k/v only");
    if (ragged) {
      if (a.plan == nullptr) fail(kOp, "a ragged (qo_indptr) call needs its plan (plan_paged_prefill)");
      return AttentionKind::kPagedPrefill;
    }
    return AttentionKind::kPagedDecode;
  }
  if (ragged) fail(kOp, "ragged q (qo_indptr) needs a paged cache");
  if (a.q.ndim == 4 && a.q.shape[1] == 1) return AttentionKind::kDecode;
  return AttentionKind::kPrefill;
}

}  // namespace detail

AttentionKind attention_kind(const AttentionArgs& args) { return detail::classify_attention(args); }

size_t attention_workspace_bytes(const AttentionArgs& args) {
  switch (detail::classify_attention(args)) {
    case AttentionKind::kDecode:
      return decode_workspace_bytes(to_decode(args));
    case AttentionKind::kPagedDecode:
      return paged_decode_workspace_bytes(to_paged_decode(args));
    case AttentionKind::kPrefill:
      detail::validate_prefill(to_prefill(args));
      return 0;
    case AttentionKind::kPagedPrefill:
      detail::validate_paged_prefill(to_paged_prefill(args), *args.plan);
      return args.plan->workspace_bytes;
  }
  return 0;
}

void attention(const AttentionArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
               Runtime& runtime) {
  const AttentionKind kind = detail::classify_attention(args);
  const AttentionVariant preferred = detail::configured_variant(runtime.config());
  const kjit::detail::Workspace ws{workspace, workspace_bytes};
  // Each case validates the call once, as its op's arguments (argument errors name that op and
  // come before any driver call), resolves the variant, then runs the op from those dims.
  switch (kind) {
    case AttentionKind::kDecode:
      run_mma_op<detail::DecodeOp>(kind, to_decode(args), args.variant, preferred, ws, stream, runtime);
      return;
    case AttentionKind::kPagedDecode:
      run_mma_op<detail::PagedDecodeOp>(kind, to_paged_decode(args), args.variant, preferred, ws, stream, runtime);
      return;
    case AttentionKind::kPrefill: {
      const PrefillArgs a = to_prefill(args);
      detail::PrefillDims d = detail::validate_prefill(a);
      // The op's planner takes the resolved variant as a strict request (it re-checks, cheaply).
      d.variant = detail::resolve_variant(args.variant, preferred,
                                          detail::prefill_variant_call(d, device_info(d.device).target()));
      kjit::detail::run_validated<detail::PrefillOp>(a, d, {}, stream, runtime);
      return;
    }
    case AttentionKind::kPagedPrefill: {
      const PagedPrefillArgs a = to_paged_prefill(args);
      const detail::PagedPrefillOp::Args call{a, *args.plan, workspace, workspace_bytes};
      detail::PagedPrefillDims d = detail::PagedPrefillOp::validate(call);
      // The call's request, else the plan's (a tuned or forced kernel), else the configured
      // preference; the op's planner takes the result as a strict request.
      const AttentionVariant requested = args.variant != AttentionVariant::kAuto ? args.variant : d.variant;
      d.variant = detail::resolve_variant(requested, preferred,
                                          detail::paged_prefill_variant_call(d, device_info(d.device).target()));
      kjit::detail::run_validated<detail::PagedPrefillOp>(call, d, {}, stream, runtime);
      return;
    }
  }
}

}  // namespace kjit::attention
