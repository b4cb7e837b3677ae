#pragma once
/// \file runtime/ops/attention/entry.hpp
/// Internals of kjit::attention::attention (include/kjit/ops/attention.hpp): how a call is
/// classified into a kernel, as a pure host function so tests check every rule without a GPU.
/// The variant rules are the prefill op's (variant.hpp); the entry validates the call once, as
/// the classified op's arguments, and runs that op from the validated dims.

#include <kjit/ops/attention.hpp>

#include <type_traits>

/// The fields AttentionArgs shares by name with the ops' own arguments (DecodeArgs,
/// PagedDecodeArgs, PrefillArgs, PagedPrefillArgs), as an X-macro: X(field) for each. Every
/// field of an op's arguments is one of these (a test counts them), so the one projection,
/// detail::op_args, fills each op's arguments completely. The one exception is
/// PrefillArgs::variant: the entry resolves the variant itself and hands the op the result.
#define KJIT_ATTENTION_SHARED_FIELDS(X) \
  X(q) X(k) X(v) X(kv_lens) X(cache) X(qo_indptr) X(mask) X(causal) X(out) X(lse) X(scale) X(num_splits) \
  X(kv_len_hint) X(merge) X(block_m)

namespace kjit::attention::detail {

/// The kernel `args` name (see AttentionArgs). Throws InvalidArgument for a combination no
/// kernel takes (no q, contiguous and paged K/V at once, ragged q without a paged cache or plan).
AttentionKind classify_attention(const AttentionArgs& args);

// has_field_<name><T>: whether T has a member <name>, for each KJIT_ATTENTION_SHARED_FIELDS name.
#define KJIT_ATTENTION_HAS_FIELD(name)                                                        \
  template <class T, class = void>                                                            \
  struct has_field_##name : std::false_type {};                                               \
  template <class T>                                                                          \
  struct has_field_##name<T, std::void_t<decltype(&T::name)>> : std::true_type {};
KJIT_ATTENTION_SHARED_FIELDS(KJIT_ATTENTION_HAS_FIELD)
#undef KJIT_ATTENTION_HAS_FIELD

/// How many of the KJIT_ATTENTION_SHARED_FIELDS op-argument type `OpArgs` has.
template <class OpArgs>
constexpr int shared_field_count() {
#define KJIT_ATTENTION_COUNT_FIELD(name) +(has_field_##name<OpArgs>::value ? 1 : 0)
  return 0 KJIT_ATTENTION_SHARED_FIELDS(KJIT_ATTENTION_COUNT_FIELD);
#undef KJIT_ATTENTION_COUNT_FIELD
}

/// attention()'s arguments as op `OpArgs`'s own (DecodeArgs, PagedDecodeArgs, PrefillArgs or
/// PagedPrefillArgs): each field OpArgs has is the same-named field of `args`, except that the
/// decode ops read a [batch, q_heads, 1] lse as their [batch, q_heads] one and a
/// [batch, 1, kv_len] mask as their [batch, kv_len] one. Host only; checks nothing (the op's
/// validation does).
template <class OpArgs>
OpArgs op_args(const AttentionArgs& args);

}  // namespace kjit::attention::detail
