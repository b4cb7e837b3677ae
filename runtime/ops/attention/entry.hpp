#pragma once
/// \file runtime/ops/attention/entry.hpp
/// Internals of kjit::attention::attention (include/kjit/ops/attention.hpp): how a call is
/// classified into a kernel, as a pure host function so tests check every rule without a GPU.
/// The variant rules are the prefill op's (variant.hpp); the entry validates the call once, as
/// the classified op's arguments, and runs that op from the validated dims.

#include <kjit/ops/attention.hpp>

namespace kjit::attention::detail {

/// The kernel `args` name (see AttentionArgs). Throws InvalidArgument for a combination no
/// kernel takes (no q, contiguous and paged K/V at once, ragged q without a paged cache or plan).
AttentionKind classify_attention(const AttentionArgs& args);

}  // namespace kjit::attention::detail
