#pragma once
/// \file runtime/ops/attention_prefill.hpp
/// Internals of kjit::attention::prefill and kjit::attention::paged_prefill
/// (include/kjit/ops/attention.hpp): their kernel families (one kernel body,
/// kernel_sources/attention/prefill.cu), host-only validation and the tile-size choice, exposed so
/// tests can check every rejection and plan without a GPU.

#include <kjit/families.hpp>

#include "runtime/families/attention.hpp"
#include <kjit/ops/attention.hpp>

#include "runtime/ops/attention/common.hpp"

#include <cstdint>
#include <string>

namespace kjit::attention {

namespace detail {

/// The shape of validated PrefillArgs.
struct PrefillDims {
  int device = 0;
  int64_t batch = 0;
  int64_t q_len = 0;
  int64_t max_kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t group = 0;
  bool has_kv_lens = false;
  int mask_rank = 0;  ///< 0 (none), 2 or 3
  bool has_lse = false;
};

/// Checks `args` against the contract. Host only: no driver call. Throws InvalidArgument
/// "kjit::attention::prefill: <tensor> <rule>, got ...".
PrefillDims validate_prefill(const PrefillArgs& args);

/// Why the wgmma prefill cannot address q/k/v/out through TMA tensor maps ("" when it can):
/// negative strides or strides of 2^39 elements or more. Host only.
std::string prefill_tma_layout_reason(const PrefillArgs& args);

/// Query rows per CTA for a dense prefill: 64 when q_len ≤ 64 or when 128-row tiles would not
/// fill one wave of the device (sm_count · ctas_per_sm CTAs), else 128 (two m16 tiles per warp
/// share every K/V fragment, halving shared-memory traffic per MMA).
int choose_prefill_block_m(const PrefillDims& dims, int sm_count, int ctas_per_sm);

/// CTAs of the prefill kernel resident per SM (shared memory bound, 1..2).
int prefill_ctas_per_sm(int64_t head_dim, int block_m, int max_smem_per_sm);

/// The shape of validated PagedPrefillArgs.
struct PagedPrefillDims {
  int device = 0;
  int64_t total_q = 0;
  int64_t q_heads = 0;
  int64_t head_dim = 0;
  int64_t group = 0;
  PagedCacheDims cache;
  bool has_lse = false;
};

/// Checks `args` against the contract and against `plan`. Host only.
PagedPrefillDims validate_paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan);

}  // namespace detail
}  // namespace kjit::attention
