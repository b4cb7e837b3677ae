#pragma once
/// \file runtime/ops/attention/paged_decode.hpp
/// kjit::attention::paged_decode (include/kjit/ops/attention.hpp) as an op of the pipeline
/// (runtime/ops/pipeline.hpp): the pure validate and plan steps (paged_decode_plan.cc) and the launch
/// value (paged_decode.cc), exposed so tests check every rejection and plan without a GPU. Paged decode is the decode kernel over the
/// PagedKV source: it reuses the decode planner and merge step (decode.hpp), and the contiguous
/// decode's merge program (attention.decode_merge) when its plan splits.

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "attention/decode_params.h"
#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/common.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/pipeline.hpp"

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
  int requested_splits = 0;  ///< PagedDecodeArgs::num_splits (0 = choose)
  int64_t kv_len_hint = 0;   ///< PagedDecodeArgs::kv_len_hint (0 = nnz · page_size / batch)
  DecodeMerge requested_merge = DecodeMerge::kAuto;  ///< PagedDecodeArgs::merge
};

/// Checks `args` against the contract. Pure host code: no driver call, no allocation unless it
/// throws. Throws InvalidArgument "kjit::attention::paged_decode: <tensor> <rule>, got ...".
PagedDecodeDims validate_paged_decode(const PagedDecodeArgs& args);
/// validate_paged_decode, its messages naming `op` instead (a static string: the workspace
/// query validates the same arguments under its own name).
PagedDecodeDims validate_paged_decode(const PagedDecodeArgs& args, const char* op);

/// The most splits a paged decode takes (PagedDecodeArgs::num_splits, the tuner's knob).
inline constexpr int kMaxPagedSplits = 1024;

/// CTAs per SM the paged decode planner counts as slots: every resident one (decode_resident_ctas;
/// measured, see the definition).
int paged_ctas_per_sm(int64_t head_dim, int max_smem_per_sm);

/// The split plan of a paged decode: plan_decode over the hint length (kv_len_hint, or
/// nnz · page_size / batch), or exactly `requested_splits` when positive. The kernels split each
/// request's own length into num_splits ranges (DecodeParams::split_tokens = 0). `heads_per_cta` (8 or
/// 16) forces the query heads per CTA (a tuned plan); 0 lets plan_decode choose. `merge` and
/// `clusters` as plan_decode takes them (plan_merge of the final split count).
DecodePlan plan_paged_decode(const PagedDecodeDims& dims, int requested_splits, int64_t kv_len_hint, int sm_count,
                             int ctas_per_sm, int heads_per_cta = 0, DecodeMerge merge = DecodeMerge::kAuto,
                             bool clusters = false);

/// The length the paged planner plans for: kv_len_hint, or nnz · page_size / batch, in
/// [1, 2^30).
int64_t paged_plan_length(const PagedDecodeDims& dims);

/// kjit::attention::paged_decode in the op pipeline.
struct PagedDecodeOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::attention::paged_decode", kMinSm, "mma.sync bf16, cp.async",
                                               {&paged_decode_family}};
  using Args = PagedDecodeArgs;
  using Dims = PagedDecodeDims;
  using Plan = DecodePlan;
  using Launch = kjit::detail::Launches<DecodeParams, DecodeMergeParams>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.q, a.cache, a.out, a.lse, a.scale, a.num_splits, a.kv_len_hint, a.merge);
  }

  static Dims validate(const Args& args) { return validate_paged_decode(args, kInfo.name); }
  /// plan_paged_decode on the device's SMs (paged_ctas_per_sm slots each) and clusters, and the
  /// family point; no family for an empty batch. Pure. Throws Unsupported for a forced cluster
  /// merge on a device without clusters.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// settle_decode_merge over the paged decode family (the pipeline's hook after loading).
  static bool settle(const Dims& dims, const LoadedProgram& program, Plan* plan) {
    return settle_decode_merge(kInfo.name, paged_decode_family(), dims.head_dim, dims.requested_merge, dims.device,
                               program, plan);
  }
  /// The decode kernel's Params (PagedKV source) for `args` under `plan`, partials in `workspace`.
  static DecodeParams params(const Args& args, const Dims& dims, const Plan& plan, void* workspace);
  /// The merge program when `plan` splits (decode_merge_choice, the same program as the
  /// contiguous decode's at this head_dim): the pipeline's second program.
  static kjit::detail::Choice second_choice(const Dims& dims, const Plan& plan) {
    return decode_merge_choice(dims.head_dim, plan);
  }
  /// Checks the workspace and the grid, then the decode step from `program` and (split) the
  /// merge step from `merge`.
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      const LoadedProgram* merge, kjit::detail::Workspace workspace, const DeviceInfo& info);

  // Tuning (runtime/ops/tuned.hpp; paged_decode_tune.cc). Knob: splits. Point: rows (heads per
  // CTA) and merge. Bucket: head_dim, group, batch · kv_heads and the planned length
  // (paged_plan_length) rounded up to powers of two (the length at least 64), and page_size
  // exactly. A call that requests a split count or a merge is not tuned.
  static const kjit::detail::TuneOpSpec& tune_spec();
  static bool tune_key(const Dims& dims, kjit::detail::TunedKey* key);
  static bool apply_tuned(const Dims& dims, const DeviceInfo& info, const kjit::detail::TunedChoice& choice, Plan* plan);
  static kjit::detail::TunedChoice tuned_choice(const Dims& dims, const Plan& plan);
  static std::vector<kjit::detail::TunedChoice> tune_candidates(const Dims& dims, const DeviceInfo& info);
};

/// kjit::attention::paged_decode_workspace_bytes, its argument errors naming `op` (a static
/// string): the public query passes its own name, a binding that sizes the workspace of the
/// paged_decode call it is about to make passes the op's (PagedDecodeOp::kInfo.name).
size_t paged_decode_workspace_bytes(const PagedDecodeArgs& args, const char* op);

}  // namespace detail
}  // namespace kjit::attention
