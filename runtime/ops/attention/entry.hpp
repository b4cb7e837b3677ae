#pragma once
/// \file runtime/ops/attention_entry.hpp
/// Internals of kjit::attention::attention (include/kjit/ops/attention.hpp): how a call is
/// classified into a kernel and how the variant is resolved, as pure host functions so tests can
/// check every rule without a GPU.

#include <kjit/ops/attention.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::attention::detail {

/// The kernel `args` name (see AttentionArgs). Throws InvalidArgument for a combination no
/// kernel takes (no q, contiguous and paged K/V at once, ragged q without a paged cache or plan).
AttentionKind classify_attention(const AttentionArgs& args);

/// What the variant choice depends on.
struct VariantCall {
  AttentionKind kind = AttentionKind::kPrefill;
  int sm = 0;             ///< 10 · major + minor of the device
  int64_t head_dim = 0;
  bool has_mask = false;     ///< a bool mask is given
  bool has_kv_lens = false;  ///< per-request kv_lens are given
  /// Why the call's q/k/v/out strides cannot be TMA tensor maps ("" when they can; see
  /// prefill_tma_layout_reason).
  std::string tma_layout;
};

/// Why `variant` cannot run `call` ("" when it can). kAuto never runs anything itself.
std::string variant_rejects(AttentionVariant variant, const VariantCall& call);

/// Parses a KJIT_ATTN_VARIANT value: "" and "auto" → kAuto, "mma" → kMma, "wgmma" → kWgmma
/// (case-sensitive);
/// nullopt for anything else.
std::optional<AttentionVariant> parse_variant(std::string_view text);

/// The variant attention() runs:
///   * `requested` ≠ kAuto is strict: it runs if capable, else Unsupported naming why;
///   * otherwise `env` (KJIT_ATTN_VARIANT) when ≠ kAuto and capable, else the first capable
///     variant in preference order (kWgmma, kMma); Unsupported listing every variant's reason
///     when none is.
AttentionVariant resolve_variant(AttentionVariant requested, AttentionVariant env, const VariantCall& call);

/// KJIT_ATTN_VARIANT, read once per process (an unknown value warns once on stderr and reads as
/// kAuto).
AttentionVariant env_variant();

}  // namespace kjit::attention::detail
