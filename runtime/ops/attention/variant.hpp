#pragma once
/// \file runtime/ops/attention/variant.hpp
/// Which kernel implementation ("variant": mma.sync or the sm_90a wgmma prefills, dense and
/// ragged paged) runs an attention call, as pure host functions: prefill() and the attention() entry both resolve it
/// here, and tests check every rule without a GPU. The success path builds no string.

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::attention::detail {

/// What the variant choice depends on.
struct VariantCall {
  AttentionKind kind = AttentionKind::kPrefill;
  Target target;             ///< the device's compile target (DeviceInfo::target())
  int64_t head_dim = 0;
  bool has_mask = false;     ///< a bool mask is given
  bool has_kv_lens = false;  ///< per-request kv_lens are given
  /// Why the call's q/k/v/out strides cannot be TMA tensor maps ("" when they can; see
  /// prefill_tma_layout_reason). Viewed, not owned: it must outlive the call.
  std::string_view tma_layout;
  int tile_rows = 0;  ///< paged prefill: the plan's query rows per work item
  int pack_group = 1;  ///< paged prefill: the plan's q heads packed per KV head (1: none)
};

/// "decode", "paged decode", "prefill", "paged prefill" (for messages).
const char* kind_name(AttentionKind kind) noexcept;

/// True when `variant` can run `call`; no string is built. kAuto never runs anything itself.
bool variant_runs(AttentionVariant variant, const VariantCall& call) noexcept;

/// Why `variant` cannot run `call` ("" when it can). kAuto never runs anything itself.
std::string variant_rejects(AttentionVariant variant, const VariantCall& call);

/// Parses a KJIT_ATTN_VARIANT value: "" and "auto" → kAuto, "mma" → kMma, "wgmma" → kWgmma
/// (case-sensitive); nullopt for anything else.
std::optional<AttentionVariant> parse_variant(std::string_view text);

/// The variant a call runs:
///   * `requested` ≠ kAuto is strict: it runs if capable, else Unsupported naming why;
///   * otherwise `preferred` (KJIT_ATTN_VARIANT, for the attention() entry) when ≠ kAuto and
///     capable, else the first capable variant in preference order (kWgmma, kMma); Unsupported
///     listing every variant's reason when none is.
/// Builds strings only to throw.
AttentionVariant resolve_variant(AttentionVariant requested, AttentionVariant preferred, const VariantCall& call);

/// Everything DeviceInfo::target() reads (the compile target, else the compute capability), as
/// POD: the key of a plan memo that looks at the target without choosing it on every call.
struct TargetKey {
  int32_t major, minor, arch_specific, ptx, cc_major, cc_minor;
};

/// The TargetKey of `info`.
TargetKey target_key(const DeviceInfo& info) noexcept;

/// RuntimeConfig::attention_variant (KJIT_ATTN_VARIANT) parsed; an unknown value warns once per
/// process and reads as kAuto. No allocation unless it warns.
AttentionVariant configured_variant(const RuntimeConfig& config);

}  // namespace kjit::attention::detail
