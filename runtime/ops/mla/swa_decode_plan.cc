// kjit::mla::swa_decode, the pure steps: validation and the window-partition planner.
#include "runtime/ops/mla/swa_decode.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

namespace kjit::mla {
namespace {

constexpr const char* kOp = detail::SwaDecodeOp::kInfo.name;

void check_strides_nonnegative(const char* op, const char* name, const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] > 1 && t.strides[i] < 0) {
      kjit::detail::fail(op, fmt::format("{} must have non-negative strides, got {}", name, t.describe()));
    }
  }
}

/// A bf16 rank-3 [T, NH, HD] tensor with a contiguous last dim and 16-byte aligned rows.
void check_bf16_rows(const char* op, const char* name, const TensorRef& t, int device) {
  kjit::detail::check_bf16_rows(op, name, t, 3, device);
  check_strides_nonnegative(op, name, t);
}

using detail::swa_max_splits;
using detail::SwaDims;
using kjit::detail::check_dim;
using kjit::detail::check_dtype;
using kjit::detail::check_pointer_aligned;
using kjit::detail::check_tensor;
using kjit::detail::fail;

/// q: [T, NH, 512] bf16 on a device; sets the device, T, NH and HD.
void check_query(const char* op, const TensorRef& q, SwaDims& d) {
  d.device = kjit::detail::check_leading(op, "q", q, 3);
  check_bf16_rows(op, "q", q, d.device);
  d.tokens = q.shape[0];
  d.heads = q.shape[1];
  d.head_dim = q.shape[2];
  if (d.head_dim != kSwaHeadDim) {
    fail(op, fmt::format("q head_dim (dim 2) must be {} (the specialization space of {}), got {}", kSwaHeadDim,
                          swa_decode_family().name, q.describe()));
  }
  if (d.heads < kSwaHeadsPerTile || d.heads % kSwaHeadsPerTile != 0) {
    fail(op, fmt::format("q heads (dim 1) must be a positive multiple of {} (heads share CTAs in groups of 16 "
                          "or 32), got {}",
                          kSwaHeadsPerTile, q.describe()));
  }
}

/// The fp8 cache [blocks, block_size, HD] and its per-slot bf16 inverse scales [max_slots, 1];
/// sets the block shape, the cache format and whether the rows are compact.
void check_cache(const char* op, const SwaDecodeArgs& args, SwaDims& d) {
  const TensorRef& kv = args.kv_cache;
  check_tensor(op, "kv_cache", kv, 3, {DType::kU8, DType::kE4M3, DType::kE5M2}, d.device);
  check_dim(op, "kv_cache", kv, 2, d.head_dim, "head_dim (q dim 2)");
  kjit::detail::check_last_dim_contiguous(op, "kv_cache", kv);
  check_strides_nonnegative(op, "kv_cache", kv);
  kjit::detail::check_rows_aligned(op, "kv_cache", kv, 16);
  kjit::detail::check_not_null(op, "kv_cache", kv);
  d.num_blocks = kv.shape[0];
  d.block_size = kv.shape[1];
  if (d.num_blocks > 0 && d.block_size < 1) {
    fail(op, fmt::format("kv_cache block_size (dim 1) must be at least 1, got {}", kv.describe()));
  }
  if (d.block_size > INT32_MAX) {
    fail(op, fmt::format("kv_cache block_size (dim 1) must be below 2^31, got {}", kv.describe()));
  }
  d.cache = kv.dtype == DType::kE5M2 ? kSwaCacheE5M2 : kSwaCacheE4M3;
  // Compact: the row of slot s sits at s · row_stride (one block, one row per block, or blocks
  // packed back to back), which spares the kernel a 64-bit division per row.
  d.kv_compact = kv.shape[0] <= 1 || kv.shape[1] <= 1 || kv.strides[0] == kv.shape[1] * kv.strides[1];

  const TensorRef& sc = args.inv_scale;
  check_tensor(op, "inv_scale", sc, 2, {DType::kBF16}, d.device);
  check_dim(op, "inv_scale", sc, 1, 1, "1 (one multiplier per slot: [max_slots, 1])");
  check_strides_nonnegative(op, "inv_scale", sc);
  check_pointer_aligned(op, "inv_scale", sc, 2);
  kjit::detail::check_not_null(op, "inv_scale", sc);
}

/// indices [>= T, W] (or [1, >= T, W]) int64 with a declared window W, and lens [>= T]; sets W
/// and the lens dtype.
void check_window(const char* op, const SwaDecodeArgs& args, SwaDims& d) {
  // indices: [>= T, W] or [1, >= T, W], int64, contiguous.
  const TensorRef& idx = args.indices;
  if (idx.ndim == 0) fail(op, "indices is required ([T, W] int64)");
  if (idx.ndim != 2 && idx.ndim != 3) {
    fail(op, fmt::format("indices must be 2-d [T, W] (or [1, T, W]), got {}", idx.describe()));
  }
  kjit::detail::check_sizes(op, "indices", idx);
  if (idx.ndim == 3 && idx.shape[0] != 1) {
    fail(op, fmt::format("indices of rank 3 must have a leading dim of 1 ([1, T, W]), got {}", idx.describe()));
  }
  check_dtype(op, "indices", idx, DType::kI64);
  kjit::detail::check_device(op, "indices", idx, d.device);
  kjit::detail::check_contiguous(op, "indices", idx);
  check_pointer_aligned(op, "indices", idx, 8);
  kjit::detail::check_not_null(op, "indices", idx);
  const int64_t idx_rows = idx.size(-2);
  d.window = idx.size(-1);
  if (!kjit::detail::is_one_of(d.window, kSwaWindows)) {
    fail(op, fmt::format("indices window W (last dim) must be {} (the specialization space), got {}",
                          kjit::detail::one_of_text(kSwaWindows), idx.describe()));
  }
  if (idx_rows < d.tokens) {
    fail(op, fmt::format("indices must have at least T = {} rows (q dim 0), got {}", d.tokens, idx.describe()));
  }

  const TensorRef& lens = args.lens;
  check_tensor(op, "lens", lens, 1, {DType::kI64, DType::kI32}, d.device);
  kjit::detail::check_contiguous(op, "lens", lens);
  check_pointer_aligned(op, "lens", lens, dtype_size(lens.dtype));
  kjit::detail::check_not_null(op, "lens", lens);
  if (lens.shape[0] < d.tokens) {
    fail(op, fmt::format("lens must have at least T = {} entries (q dim 0), got {}", d.tokens, lens.describe()));
  }
  d.lens_i64 = lens.dtype == DType::kI64;
}

/// out [T, NH, HD] bf16 and the optional lse [T, NH] f32.
void check_outputs(const char* op, const SwaDecodeArgs& args, SwaDims& d) {
  const TensorRef& out = args.out;
  check_bf16_rows(op, "out", out, d.device);
  check_dim(op, "out", out, 0, d.tokens, "T (q dim 0)");
  check_dim(op, "out", out, 1, d.heads, "NH (q dim 1)");
  check_dim(op, "out", out, 2, d.head_dim, "head_dim (q dim 2)");

  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    const TensorRef& t = args.lse;
    check_tensor(op, "lse", t, 2, {DType::kF32}, d.device);
    check_dim(op, "lse", t, 0, d.tokens, "T (q dim 0)");
    check_dim(op, "lse", t, 1, d.heads, "NH (q dim 1)");
    check_strides_nonnegative(op, "lse", t);
    check_pointer_aligned(op, "lse", t, 4);
    kjit::detail::check_not_null(op, "lse", t);
  }
}

/// cluster_split: 0 (auto) or a declared value; more than 1 only with the mma.sync kernel's
/// groups, no separate splits, and a window it cuts into whole steps of at most a tile.
void check_cluster_split(const char* op, const SwaDecodeArgs& args, const SwaDims& d) {
  const int c = args.cluster_split;
  if (c != 0 && !kjit::detail::is_one_of(c, kSwaClusterSplits)) {
    fail(op, fmt::format("cluster_split must be 0 (auto) or {}, got {}", kjit::detail::one_of_text(kSwaClusterSplits), c));
  }
  if (c <= 1) return;
  if (args.num_splits > 1) {
    fail(op, fmt::format("cluster_split {} merges the window inside its cluster; num_splits must be 0 or 1, got {}", c,
                          args.num_splits));
  }
  const int group = args.head_group != 0 ? args.head_group : 16;
  if (std::string why = swa_cluster_split_rule(group, swa_cluster_tile(d.window, c), d.window, c); !why.empty()) {
    fail(op, fmt::format("cluster_split {} cannot run head_group {} over indices {}: {}", c, args.head_group,
                          args.indices.describe(), why));
  }
}

/// scale, num_splits and head_group against the window and the declared groups, and the 32-bit
/// index range of the kernels.
void check_options(const char* op, const SwaDecodeArgs& args, const SwaDims& d) {
  const TensorRef& q = args.q;
  kjit::detail::check_finite_scale(op, args.scale);
  const int max_splits = swa_max_splits(d.window);
  if (args.num_splits < 0 || args.num_splits > max_splits) {
    fail(op, fmt::format("num_splits must be in [0, {}] (0 = auto; at most min({}, W / {}) for W = {}), got {}",
                          max_splits, kSwaMaxSplits, kSwaStepTokens, d.window, args.num_splits));
  }
  if (args.head_group != 0 && !kjit::detail::is_one_of(args.head_group, kSwaGroups)) {
    fail(op, fmt::format("head_group must be 0 (auto), {} ({}: the sm_90a wgmma kernel), got {}",
                          kjit::detail::one_of_text(kSwaGroups), kSwaWgmmaHeads, args.head_group));
  }
  if (args.head_group == kSwaWgmmaHeads && d.window > kSwaWgmmaTile) {
    fail(op, fmt::format("head_group 64 (the sm_90a wgmma kernel) takes windows of at most {} positions, got "
                          "indices {}",
                          kSwaWgmmaTile, args.indices.describe()));
  }
  if (args.head_group == kSwaWgmmaHeads && args.num_splits > 1) {
    fail(op, fmt::format("head_group 64 (the sm_90a wgmma kernel) does not split the window; num_splits must be 0 "
                          "or 1, got {}",
                          args.num_splits));
  }
  if (args.head_group != 0 && d.heads % args.head_group != 0) {
    fail(op, fmt::format("head_group {} must divide the head count NH = {} (q dim 1), got q {}", args.head_group,
                          d.heads, q.describe()));
  }
  check_cluster_split(op, args, d);
  // The kernels index tokens and (token, head, split) rows with 32-bit integers.
  constexpr int64_t kMax = INT32_MAX / 64;
  if (d.tokens > kMax || d.tokens * d.heads > kMax) {
    fail(op, fmt::format("T · NH must stay below {}, got q {}", kMax, q.describe()));
  }
}

}  // namespace

namespace detail {

SwaDims validate_swa_decode(const SwaDecodeArgs& args, const char* op) {
  SwaDims d;
  check_query(op, args.q, d);
  check_cache(op, args, d);
  check_window(op, args, d);
  check_outputs(op, args, d);
  check_options(op, args, d);
  d.requested_splits = args.num_splits;
  d.requested_heads_per_cta = args.head_group;
  d.requested_cluster_split = args.cluster_split;
  return d;
}

SwaDims validate_swa_decode(const SwaDecodeArgs& args) { return validate_swa_decode(args, kOp); }

SwaPlan plan_swa_decode(const SwaDims& d, const DeviceInfo& info) {
  SwaPlan plan;
  const int64_t sms = std::max(info.sm_count, 1);
  const int max_smem = info.max_smem_per_block_optin > 0 ? info.max_smem_per_block_optin : INT_MAX;
  auto fits = [&](int heads_per_cta, int tile) { return swa_launch_shape(heads_per_cta, tile).smem_bytes <= max_smem; };
  // Few tokens: each (token, head group) CTA is one latency chain (indices → rows → Q·Kᵀ →
  // softmax → P·V → store) on an otherwise idle GPU, ≈ 13-14 µs at T = 1 on an H100 / H200.
  // A thread-block cluster cuts that chain's window work by its size and merges in the same
  // launch (no merge kernel, no workspace); it pays a DSMEM merge of the partials. Clusters of 4
  // while their CTAs fill at most half the SMs, else of 2 while theirs fit one per SM. Measured on
  // an H100 (ncu kernel µs, NH 128, W 128; cluster 1 / 2 / 4 / 8): T = 1 11.3 / 10.6 / 9.8 / 10.1,
  // T = 8 12.2 / 11.2 / 15.2 / 28.5, T = 16 13.0 / 14.0 / 26.1 / 43.8; graph µs at T = 2 / 4:
  // 13.8 / 14.4, 12.7 / 13.3, 12.2 / 15.1: past that the cluster's CTAs queue behind each other
  // and the split costs more than it saves.
  if (d.requested_cluster_split > 1) {
    return swa_cluster_plan(d, d.requested_heads_per_cta != 0 ? d.requested_heads_per_cta : 16,
                            d.requested_cluster_split);
  }
  if (d.requested_cluster_split == 0 && d.requested_splits == 0 && d.requested_heads_per_cta == 0 &&
      info.sm() >= kSwaClusterMinSm) {
    const int64_t items = d.tokens * (d.heads / 16);
    for (int c : {4, 2}) {
      const int tile = swa_cluster_tile(d.window, c);
      if (swa_cluster_split_rule(16, tile, d.window, c).empty() && items * c <= (c == 4 ? sms / 2 : sms) &&
          swa_launch_shape(16, tile, c).smem_bytes <= max_smem) {
        return swa_cluster_plan(d, 16, c);
      }
    }
  }
  // Hopper: the wgmma kernel (persistent CTAs over (token, 64 heads) items, the whole window,
  // no K conversion) when its shape fits, no split was asked for, and there are at least half
  // as many items as SMs. With few items each CTA is one latency chain, which the mma.sync
  // kernel's smaller CTAs run faster (H200, one run, eager µs mma.sync / wgmma: T = 1 13.8 /
  // 15.5, T = 8 13.8 / 15.9; T = 64, 128 items: 22.4 / 18.8; T = 512: 136.2 / 95.2). The
  // crossover between 16 and 128 items was not measured; half the SMs is the guess.
  const bool wgmma_ok = info.target().has_wgmma() && d.heads % kSwaWgmmaHeads == 0 && d.window <= kSwaWgmmaTile &&
                        d.requested_splits <= 1 && fits(kSwaWgmmaHeads, kSwaWgmmaTile) &&
                        2 * d.tokens * (d.heads / kSwaWgmmaHeads) >= sms;
  if (d.requested_heads_per_cta == kSwaWgmmaHeads || (d.requested_heads_per_cta == 0 && wgmma_ok)) {
    plan.heads_per_cta = kSwaWgmmaHeads;
    plan.tile = kSwaWgmmaTile;
    plan.num_splits = 1;
    plan.split_len = static_cast<int>(d.window);
    plan.ctas = d.tokens * (d.heads / kSwaWgmmaHeads);
    return plan;
  }
  auto tile_for = [&](int heads_per_cta) {
    if (heads_per_cta == 16 && d.window <= 64) return 64;
    return fits(heads_per_cta, 128) || !fits(heads_per_cta, 64) ? 128 : 64;
  };
  if (d.requested_heads_per_cta != 0) {
    plan.heads_per_cta = d.requested_heads_per_cta;
  } else {
    // Groups of 32 only with the full tile: on a small shared memory (sm_86/89: 99 KiB) the
    // 64-position tile would force a split and the merge for every W = 128 token.
    plan.heads_per_cta = d.heads % 32 == 0 && d.tokens * (d.heads / 32) >= sms && fits(32, 128) ? 32 : 16;
  }
  plan.tile = tile_for(plan.heads_per_cta);
  const int64_t min_splits = kjit::detail::ceil_div(d.window, plan.tile);
  const int64_t max_splits = swa_max_splits(d.window);
  int64_t splits = min_splits;
  if (d.requested_splits > 0) {
    splits = std::clamp<int64_t>(d.requested_splits, min_splits, max_splits);
  }
  // No splitting for occupancy: measured on the H200 (docs/perf-notes.md, fp8 SWA decode), a
  // CTA costs about the same whatever slice it reads (its fixed part: DRAM round trips for the
  // indices and rows, q load and conversion, softmax barriers, a 32 KiB f32 partial), so at
  // T = 1 8 splits of 16 took 18.2 µs against 14.0 µs unsplit, and at T = 8 3 splits took
  // 22.6 µs against 15.1 µs; the merge launch comes on top. The SM count only picks the group.
  return partition_swa_window(d, plan.heads_per_cta, plan.tile, static_cast<int>(splits));
}

SwaPlan partition_swa_window(const SwaDims& d, int heads_per_cta, int tile, int splits) {
  SwaPlan plan;
  plan.heads_per_cta = heads_per_cta;
  plan.tile = tile;
  const int64_t base = d.tokens * (d.heads / plan.heads_per_cta);
  const int64_t split_len = kjit::detail::ceil_div(kjit::detail::ceil_div(d.window, splits), kSwaStepTokens) * kSwaStepTokens;
  plan.split_len = static_cast<int>(split_len);
  kjit::detail::set_split_plan(plan, kjit::detail::ceil_div(d.window, split_len), base, d.tokens * d.heads,
                               d.head_dim);
  return plan;
}

SwaPlan swa_cluster_plan(const SwaDims& d, int heads_per_cta, int cluster_split) {
  SwaPlan plan;
  plan.heads_per_cta = heads_per_cta;
  plan.tile = swa_cluster_tile(d.window, cluster_split);
  plan.cluster_split = cluster_split;
  plan.num_splits = 1;
  plan.split_len = static_cast<int>(d.window / cluster_split);
  plan.ctas = d.tokens * (d.heads / heads_per_cta) * cluster_split;
  return plan;
}

void check_swa_workspace(const SwaPlan& plan, const void* workspace, size_t workspace_bytes) {
  kjit::detail::check_workspace(kOp, plan.workspace_bytes, workspace, workspace_bytes,
                                "the window split partials (swa_decode_workspace_bytes)");
}

}  // namespace detail
}  // namespace kjit::mla
