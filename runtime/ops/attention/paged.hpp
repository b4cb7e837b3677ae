#pragma once
/// \file runtime/ops/attention_paged.hpp
/// Internals of kjit::attention::paged_decode and kjit::attention::append_paged_kv
/// (include/kjit/ops/attention.hpp): their kernel families, host-only validation and the paged
/// split planner, exposed so tests can check every rejection and plan without a GPU.

#include <kjit/families.hpp>

#include "runtime/families/attention.hpp"
#include <kjit/ops/attention.hpp>

#include "runtime/ops/attention/common.hpp"
#include "runtime/ops/attention/decode.hpp"

#include <cstdint>

namespace kjit::attention {

namespace detail {

/// The shape of a validated PagedDecodeArgs.
struct PagedDecodeDims {
  int device = 0;
  int64_t batch = 0;
  int64_t q_heads = 0;
  int64_t head_dim = 0;
  int64_t group = 0;
  PagedCacheDims cache;
  bool has_lse = false;
};

/// Checks `args` against the contract. Host only. Throws InvalidArgument
/// "kjit::attention::paged_decode: <tensor> <rule>, got ...".
PagedDecodeDims validate_paged_decode(const PagedDecodeArgs& args);

/// CTAs per SM the paged decode planner counts as slots: every resident one (decode_resident_ctas;
/// measured, see the definition).
int paged_ctas_per_sm(int64_t head_dim, int max_smem_per_sm);

/// The split plan of a paged decode: plan_decode over the hint length (kv_len_hint, or
/// nnz · page_size / batch), or exactly `requested_splits` when positive. The kernels split each
/// request's own length into num_splits ranges (DecodeParams::split_tokens = 0).
DecodePlan plan_paged_decode(const PagedDecodeDims& dims, int requested_splits, int64_t kv_len_hint, int sm_count,
                             int ctas_per_sm);

/// The shape of validated AppendPagedKVArgs.
struct AppendDims {
  int device = 0;
  int64_t num_new = 0;
  bool indptr_mode = false;
  PagedCacheDims cache;
};

/// Checks `args`. Host only. Throws InvalidArgument "kjit::attention::append_paged_kv: ...".
AppendDims validate_append(const AppendPagedKVArgs& args);

}  // namespace detail
}  // namespace kjit::attention
