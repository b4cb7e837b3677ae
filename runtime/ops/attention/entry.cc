// kjit::attention::attention: classify the call → resolve the variant for the device → run the
// op (decode, paged_decode, prefill, paged_prefill) with the call's tensors.
#include "runtime/ops/attention/entry.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace kjit::attention {
namespace {

constexpr const char* kOp = "kjit::attention::attention";

/// Preference order of the automatic choice.
constexpr AttentionVariant kPreference[] = {AttentionVariant::kWgmma, AttentionVariant::kMma};

const char* kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kDecode:
      return "decode";
    case AttentionKind::kPagedDecode:
      return "paged decode";
    case AttentionKind::kPrefill:
      return "prefill";
    case AttentionKind::kPagedPrefill:
      return "paged prefill";
  }
  return "?";
}

/// A [batch, q_heads, 1] LSE seen as decode's [batch, q_heads]; 2-D passes through.
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

/// Host-only validation of the call as its kernel's op sees it (before any driver call).
void validate_call(AttentionKind kind, const AttentionArgs& a) {
  switch (kind) {
    case AttentionKind::kDecode:
      detail::validate_decode(to_decode(a));
      break;
    case AttentionKind::kPagedDecode:
      detail::validate_paged_decode(to_paged_decode(a));
      break;
    case AttentionKind::kPrefill:
      detail::validate_prefill(to_prefill(a));
      break;
    case AttentionKind::kPagedPrefill:
      detail::validate_paged_prefill(to_paged_prefill(a), *a.plan);
      break;
  }
}

}  // namespace

const char* variant_name(AttentionVariant variant) noexcept {
  switch (variant) {
    case AttentionVariant::kAuto:
      return "auto";
    case AttentionVariant::kMma:
      return "mma";
    case AttentionVariant::kWgmma:
      return "wgmma";
  }
  return "?";
}

namespace detail {

AttentionKind classify_attention(const AttentionArgs& a) {
  using kjit::detail::fail;
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

std::string variant_rejects(AttentionVariant variant, const VariantCall& call) {
  switch (variant) {
    case AttentionVariant::kAuto:
      return "auto is not a kernel";
    case AttentionVariant::kMma:
      if (call.sm < 80) return fmt::format("mma needs sm_80+ (mma.sync bf16, cp.async), the device is sm_{}", call.sm);
      if (call.head_dim != 64 && call.head_dim != 128 && call.head_dim != 256) {
        return fmt::format("mma is specialized for head_dim 64, 128 or 256, not {}", call.head_dim);
      }
      return {};
    case AttentionVariant::kWgmma:
      if (call.kind != AttentionKind::kPrefill) {
        return fmt::format("wgmma is a dense prefill kernel, not a {} one", kind_name(call.kind));
      }
      if (call.sm != 90) return fmt::format("wgmma needs sm_90a (Hopper wgmma, TMA), the device is sm_{}", call.sm);
      if (call.head_dim != 64 && call.head_dim != 128) {
        return fmt::format("wgmma is specialized for head_dim 64 or 128, not {}", call.head_dim);
      }
      if (call.has_mask) return "wgmma takes no bool mask (causal or full only)";
      if (call.has_kv_lens) return "wgmma takes no per-request kv_lens (every request has max_kv_len keys)";
      if (!call.tma_layout.empty()) return "wgmma cannot address the tensors with TMA: " + call.tma_layout;
      return {};
  }
  return "unknown variant";
}

std::optional<AttentionVariant> parse_variant(std::string_view text) {
  if (text.empty() || text == "auto") return AttentionVariant::kAuto;
  if (text == "mma") return AttentionVariant::kMma;
  if (text == "wgmma") return AttentionVariant::kWgmma;
  return std::nullopt;
}

AttentionVariant resolve_variant(AttentionVariant requested, AttentionVariant env, const VariantCall& call) {
  if (requested != AttentionVariant::kAuto) {
    const std::string why = variant_rejects(requested, call);
    if (!why.empty()) {
      throw Unsupported(fmt::format("{}: the requested variant {} cannot run this {} call: {}", kOp,
                                    variant_name(requested), kind_name(call.kind), why));
    }
    return requested;
  }
  if (env != AttentionVariant::kAuto && variant_rejects(env, call).empty()) return env;
  std::string reasons;
  for (AttentionVariant v : kPreference) {
    const std::string why = variant_rejects(v, call);
    if (why.empty()) return v;
    reasons += fmt::format("{}{}", reasons.empty() ? "" : "; ", why);
  }
  throw Unsupported(fmt::format("{}: no variant can run this {} call: {}", kOp, kind_name(call.kind), reasons));
}

AttentionVariant env_variant() {
  static const AttentionVariant variant = [] {
    const char* text = std::getenv("KJIT_ATTN_VARIANT");
    if (text == nullptr) return AttentionVariant::kAuto;
    const std::optional<AttentionVariant> v = parse_variant(text);
    if (!v) {
      std::fprintf(stderr, "kjit: ignoring KJIT_ATTN_VARIANT=%s (expected auto, mma or wgmma)\n", text);
      return AttentionVariant::kAuto;
    }
    return *v;
  }();
  return variant;
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
  validate_call(kind, args);
  const DeviceInfo& info = device_info(args.q.device);
  detail::VariantCall call;
  call.kind = kind;
  call.sm = info.cc_major * 10 + info.cc_minor;
  call.head_dim = args.q.shape[args.q.ndim - 1];
  if (kind == AttentionKind::kPrefill) {
    call.has_mask = args.mask.ndim != 0;
    call.has_kv_lens = args.kv_lens.ndim != 0;
    call.tma_layout = detail::prefill_tma_layout_reason(to_prefill(args));
  }
  const AttentionVariant variant = detail::resolve_variant(args.variant, detail::env_variant(), call);
  // Decode and the paged kernels run on mma.sync (the only variant that takes them); prefill
  // runs the resolved kernel.
  switch (kind) {
    case AttentionKind::kDecode:
      decode(to_decode(args), workspace, workspace_bytes, stream, runtime);
      break;
    case AttentionKind::kPagedDecode:
      paged_decode(to_paged_decode(args), workspace, workspace_bytes, stream, runtime);
      break;
    case AttentionKind::kPrefill: {
      PrefillArgs p = to_prefill(args);
      p.variant = variant;
      prefill(p, stream, runtime);
      break;
    }
    case AttentionKind::kPagedPrefill:
      paged_prefill(to_paged_prefill(args), *args.plan, workspace, workspace_bytes, stream, runtime);
      break;
  }
}

}  // namespace kjit::attention
