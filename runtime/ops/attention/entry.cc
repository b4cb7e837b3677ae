// kjit::attention::attention: classify the call → validate it once, as the classified op's
// arguments → resolve the variant for the device → run that op from the validated dims.
#include "runtime/ops/attention/entry.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/attention/variant.hpp"
#include "runtime/ops/pipeline.hpp"

namespace kjit::attention {
namespace {

constexpr const char* kOp = "kjit::attention::attention";

/// A [batch, q_heads, 1] lse seen as decode's [batch, q_heads]; 2-D passes through.
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

template <class OpArgs>
OpArgs op_args(const AttentionArgs& a) {
  OpArgs o;
#define KJIT_ATTENTION_COPY_FIELD(name) \
  if constexpr (has_field_##name<OpArgs>::value) o.name = a.name;
  KJIT_ATTENTION_SHARED_FIELDS(KJIT_ATTENTION_COPY_FIELD)
#undef KJIT_ATTENTION_COPY_FIELD
  if constexpr (std::is_same_v<OpArgs, DecodeArgs> || std::is_same_v<OpArgs, PagedDecodeArgs>) {
    o.lse = decode_lse(a.lse);
    if constexpr (has_field_mask<OpArgs>::value) o.mask = decode_mask(a.mask);
  }
  return o;
}

template DecodeArgs op_args<DecodeArgs>(const AttentionArgs&);
template PagedDecodeArgs op_args<PagedDecodeArgs>(const AttentionArgs&);
template PrefillArgs op_args<PrefillArgs>(const AttentionArgs&);
template PagedPrefillArgs op_args<PagedPrefillArgs>(const AttentionArgs&);

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
      return decode_workspace_bytes(detail::op_args<DecodeArgs>(args));
    case AttentionKind::kPagedDecode:
      return paged_decode_workspace_bytes(detail::op_args<PagedDecodeArgs>(args));
    case AttentionKind::kPrefill:
      detail::validate_prefill(detail::op_args<PrefillArgs>(args));
      return 0;
    case AttentionKind::kPagedPrefill:
      detail::validate_paged_prefill(detail::op_args<PagedPrefillArgs>(args), *args.plan);
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
      run_mma_op<detail::DecodeOp>(kind, detail::op_args<DecodeArgs>(args), args.variant, preferred, ws, stream,
                                   runtime);
      return;
    case AttentionKind::kPagedDecode:
      run_mma_op<detail::PagedDecodeOp>(kind, detail::op_args<PagedDecodeArgs>(args), args.variant, preferred, ws,
                                        stream, runtime);
      return;
    case AttentionKind::kPrefill: {
      const PrefillArgs a = detail::op_args<PrefillArgs>(args);
      detail::PrefillDims d = detail::validate_prefill(a);
      // The op's planner takes the resolved variant as a strict request (it re-checks, cheaply).
      d.variant = detail::resolve_variant(args.variant, preferred,
                                          detail::prefill_variant_call(d, device_info(d.device).target()));
      kjit::detail::run_validated<detail::PrefillOp>(a, d, {}, stream, runtime);
      return;
    }
    case AttentionKind::kPagedPrefill: {
      const PagedPrefillArgs a = detail::op_args<PagedPrefillArgs>(args);
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
