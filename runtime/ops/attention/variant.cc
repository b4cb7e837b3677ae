// The attention variant rules: which kernel implementation can run a call, and which one does.
#include "runtime/ops/attention/variant.hpp"

#include <kjit/error.hpp>

#include "cache/echo.hpp"
#include "cache/warn.hpp"
#include "runtime/ops/attention/common.hpp"

#include <fmt/format.h>

#include <atomic>

namespace kjit::attention {
namespace {

constexpr const char* kOp = "kjit::attention::attention";

/// Preference order of the automatic choice.
constexpr AttentionVariant kPreference[] = {AttentionVariant::kWgmma, AttentionVariant::kMma};

/// The first rule a variant breaks for a call: a code, so that the success path and the
/// automatic fallback compare instead of formatting.
enum class Gap {
  kNone,
  kNotAKernel,
  kMmaArch,
  kMmaHeadDim,
  kMmaTile,
  kMmaPacked,
  kNotPrefill,
  kWgmmaArch,
  kWgmmaHeadDim,
  kWgmmaTile,
  kMask,
  kKvLens,
  kTmaLayout,
  kUnknown,
};

Gap gap(AttentionVariant variant, const detail::VariantCall& call) noexcept {
  switch (variant) {
    case AttentionVariant::kAuto:
      return Gap::kNotAKernel;
    case AttentionVariant::kMma:
      if (!call.target.has_bf16_mma()) return Gap::kMmaArch;
      if (!detail::supported_head_dim(call.head_dim)) return Gap::kMmaHeadDim;
      if (call.kind == AttentionKind::kPagedPrefill && !kjit::detail::is_one_of(call.tile_rows, kBlockMs)) {
        return Gap::kMmaTile;
      }
      if (call.pack_group > 1) return Gap::kMmaPacked;
      return Gap::kNone;
    case AttentionVariant::kWgmma:
      if (call.kind != AttentionKind::kPrefill && call.kind != AttentionKind::kPagedPrefill) return Gap::kNotPrefill;
      if (!call.target.has_wgmma()) return Gap::kWgmmaArch;
      if (!kjit::detail::is_one_of(call.head_dim, kSm90HeadDims)) return Gap::kWgmmaHeadDim;
      if (call.kind == AttentionKind::kPagedPrefill) {
        return sm90_paged_tile(call.head_dim, call.tile_rows) ? Gap::kNone : Gap::kWgmmaTile;
      }
      if (call.has_mask) return Gap::kMask;
      if (call.has_kv_lens) return Gap::kKvLens;
      if (!call.tma_layout.empty()) return Gap::kTmaLayout;
      return Gap::kNone;
  }
  return Gap::kUnknown;
}

std::string describe(Gap g, const detail::VariantCall& call) {
  switch (g) {
    case Gap::kNone:
      return {};
    case Gap::kNotAKernel:
      return "auto is not a kernel";
    case Gap::kMmaArch:
      return fmt::format("mma needs sm_{}+ ({}), the device is sm_{}", kMinSm, kMinSmNeeds, call.target.sm());
    case Gap::kMmaHeadDim:
      return fmt::format("mma is specialized for head_dim {}, not {}", detail::head_dims_text(), call.head_dim);
    case Gap::kMmaTile:
      return fmt::format("mma runs paged prefill plans with tile_rows {}, the plan has {} ({}-row tiles are the "
                         "sm_90a wgmma kernel's, at head_dim {})",
                         kjit::detail::one_of_text(kBlockMs), call.tile_rows, kWideTileRows, kWideTileHeadDim);
    case Gap::kMmaPacked:
      return fmt::format("mma does not pack GQA heads; the plan packs {} q heads per KV head (plan with pack_gqa "
                         "off to run it)",
                         call.pack_group);
    case Gap::kNotPrefill:
      return fmt::format("wgmma is a prefill kernel, not a {} one", detail::kind_name(call.kind));
    case Gap::kWgmmaArch:
      return fmt::format("wgmma needs sm_90a (Hopper wgmma, TMA), the device is sm_{}", call.target.sm());
    case Gap::kWgmmaHeadDim:
      return fmt::format("wgmma is specialized for head_dim {}, not {}", kjit::detail::one_of_text(kSm90HeadDims),
                         call.head_dim);
    case Gap::kWgmmaTile:
      return fmt::format("wgmma runs paged prefill plans of 128-row tiles, or {0}-row tiles at head_dim {1}; the plan "
                         "has {2} at head_dim {3} (plan with tile_rows 0, 128 or, at head_dim {1}, {0})",
                         kWideTileRows, kWideTileHeadDim, call.tile_rows, call.head_dim);
    case Gap::kMask:
      return "wgmma takes no bool mask (causal or full only)";
    case Gap::kKvLens:
      return "wgmma takes no per-request kv_lens (every request has max_kv_len keys)";
    case Gap::kTmaLayout:
      return fmt::format("wgmma cannot address the tensors with TMA: {}", call.tma_layout);
    case Gap::kUnknown:
      break;
  }
  return "unknown variant";
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

const char* kind_name(AttentionKind kind) noexcept {
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

bool variant_runs(AttentionVariant variant, const VariantCall& call) noexcept {
  return gap(variant, call) == Gap::kNone;
}

std::string variant_rejects(AttentionVariant variant, const VariantCall& call) {
  return describe(gap(variant, call), call);
}

std::optional<AttentionVariant> parse_variant(std::string_view text) {
  if (text.empty() || text == "auto") return AttentionVariant::kAuto;
  if (text == "mma") return AttentionVariant::kMma;
  if (text == "wgmma") return AttentionVariant::kWgmma;
  return std::nullopt;
}

AttentionVariant resolve_variant(AttentionVariant requested, AttentionVariant preferred, const VariantCall& call) {
  if (requested != AttentionVariant::kAuto) {
    if (variant_runs(requested, call)) return requested;
    throw Unsupported(fmt::format("{}: the requested variant {} cannot run this {} call: {}", kOp,
                                  variant_name(requested), kind_name(call.kind), variant_rejects(requested, call)));
  }
  if (preferred != AttentionVariant::kAuto && variant_runs(preferred, call)) return preferred;
  for (AttentionVariant v : kPreference) {
    if (variant_runs(v, call)) return v;
  }
  std::string reasons;
  for (AttentionVariant v : kPreference) reasons += fmt::format("{}{}", reasons.empty() ? "" : "; ", variant_rejects(v, call));
  throw Unsupported(fmt::format("{}: no variant can run this {} call: {}", kOp, kind_name(call.kind), reasons));
}

AttentionVariant configured_variant(const RuntimeConfig& config) {
  const std::optional<AttentionVariant> v = parse_variant(config.attention_variant);
  if (v) return *v;
  // A misspelt override is survivable (the automatic choice is always correct): say it once.
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    warn(fmt::format("ignoring KJIT_ATTN_VARIANT={} (expected auto, mma or wgmma)",
                     cache::printable(config.attention_variant)));
  }
  return AttentionVariant::kAuto;
}

TargetKey target_key(const DeviceInfo& info) noexcept {
  const Target& t = info.compile_target;
  return {t.major, t.minor, t.arch_specific ? 1 : 0, t.ptx ? 1 : 0, info.cc_major, info.cc_minor};
}

}  // namespace detail
}  // namespace kjit::attention
