#pragma once
/// \file runtime/ops/attention/paged_append.hpp
/// kjit::attention::append_paged_kv (include/kjit/ops/attention.hpp) as an op of the pipeline
/// (runtime/ops/pipeline.hpp): the pure validate and plan steps (paged_append_plan.cc) and the launch
/// value (paged_append.cc), exposed so tests check every rejection and plan without a GPU.

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "attention/paged_append_params.h"
#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/common.hpp"
#include "runtime/ops/pipeline.hpp"

#include <cstdint>

namespace kjit::attention {

namespace detail {

/// The shape of validated AppendPagedKVArgs.
struct AppendDims {
  int device = 0;
  int64_t num_new = 0;
  bool indptr_mode = false;
  PagedCacheDims cache;
};

/// Checks `args`. Pure host code. Throws InvalidArgument "kjit::attention::append_paged_kv: ...".
AppendDims validate_append(const AppendPagedKVArgs& args);

/// How an append runs: one thread per 16-byte chunk of a new row (head_dim / 8 per token and
/// head), grid-strided over at most 8 CTAs per SM.
struct AppendPlan {
  kjit::detail::Choice choice;  ///< no family when there is nothing to write
  int64_t items = 0;            ///< num_new · kv_heads · head_dim / 8
  uint32_t grid = 0;            ///< CTAs of kPagedAppendThreads
};

/// kjit::attention::append_paged_kv in the op pipeline.
struct AppendOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::append_paged_kv", kMinSm, "the attention family's floor",
                                               {&paged_append_family}};
  using Args = AppendPagedKVArgs;
  using Dims = AppendDims;
  using Plan = AppendPlan;
  using Launch = kjit::detail::Launches<PagedAppendParams>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.k, a.v, a.cache, a.batch_indices, a.positions, a.append_indptr);
  }

  static Dims validate(const Args& args) { return validate_append(args); }
  /// The grid and the family point (head_dim, index mode); pure.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  static PagedAppendParams params(const Args& args, const Dims& dims, const Plan& plan);
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);
};

}  // namespace detail
}  // namespace kjit::attention
