// kjit::mla::swa_decode: validate → (driver) context, arch check → planner → kernel table →
// decode kernel (+ merge kernel when the window is split), or on Hopper the persistent wgmma
// kernel (head group 64).
#include "runtime/ops/mla/swa_decode.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "mla/swa_decode_params.h"
#include "runtime/driver.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace kjit::mla {
namespace {

constexpr const char* kOp = "kjit::mla::swa_decode";
constexpr const char* kFamily = "mla.swa_decode";
constexpr int kMinSm = 80;
constexpr int64_t kWindows[] = {64, 128, 256, 512};

/// The POD specialization key of the op's kernel table (zero-initialized before it is filled).
struct Choice {
  int32_t group;
  int32_t tile;
  int32_t window;
  int32_t cache;
};

const char* cache_name(int cache) { return cache == kSwaCacheE5M2 ? "e5m2" : "e4m3"; }

ProgramSpec make_spec(const ParamMap& params) {
  return swa_decode_family().spec(swa_decode_family().parse(params));
}

void check_pointer_aligned(const char* name, const TensorRef& t, int bytes) {
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  if (address % bytes != 0) {
    kjit::detail::fail(kOp, fmt::format("{} data pointer {:#x} must be {}-byte aligned, got {}", name, address,
                                        bytes, t.describe()));
  }
}

void check_strides_nonnegative(const char* name, const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] > 1 && t.strides[i] < 0) {
      kjit::detail::fail(kOp, fmt::format("{} must have non-negative strides, got {}", name, t.describe()));
    }
  }
}

/// A bf16 rank-3 [T, NH, HD] tensor with a contiguous last dim and 16-byte aligned rows.
void check_bf16_rows(const char* name, const TensorRef& t, int device) {
  kjit::detail::check_bf16_rows(kOp, name, t, 3, device);
  check_strides_nonnegative(name, t);
}

}  // namespace

namespace detail {

SwaDims validate_swa_decode(const SwaDecodeArgs& args) {
  using kjit::detail::check_dim;
  using kjit::detail::check_dtype;
  using kjit::detail::check_rank;
  using kjit::detail::fail;
  const TensorRef& q = args.q;
  const TensorRef& kv = args.kv_cache;
  const TensorRef& out = args.out;

  check_rank(kOp, "q", q, 3);
  if (q.device < 0) fail(kOp, fmt::format("q must be on a CUDA device, got host memory {}", q.describe()));
  SwaDims d;
  d.device = q.device;
  check_bf16_rows("q", q, d.device);
  d.tokens = q.shape[0];
  d.heads = q.shape[1];
  d.head_dim = q.shape[2];
  if (d.head_dim != kSwaHeadDim) {
    fail(kOp, fmt::format("q head_dim (dim 2) must be {} (the specialization space of {}), got {}", kSwaHeadDim,
                          kFamily, q.describe()));
  }
  if (d.heads < kSwaHeadsPerTile || d.heads % kSwaHeadsPerTile != 0) {
    fail(kOp, fmt::format("q heads (dim 1) must be a positive multiple of {} (heads share CTAs in groups of 16 "
                          "or 32), got {}",
                          kSwaHeadsPerTile, q.describe()));
  }

  check_rank(kOp, "kv_cache", kv, 3);
  kjit::detail::check_sizes(kOp, "kv_cache", kv);
  check_dtype(kOp, "kv_cache", kv, {DType::kU8, DType::kE4M3, DType::kE5M2});
  kjit::detail::check_device(kOp, "kv_cache", kv, d.device);
  check_dim(kOp, "kv_cache", kv, 2, d.head_dim, "head_dim (q dim 2)");
  kjit::detail::check_last_dim_contiguous(kOp, "kv_cache", kv);
  check_strides_nonnegative("kv_cache", kv);
  kjit::detail::check_rows_aligned(kOp, "kv_cache", kv, 16);
  kjit::detail::check_not_null(kOp, "kv_cache", kv);
  d.num_blocks = kv.shape[0];
  d.block_size = kv.shape[1];
  if (d.num_blocks > 0 && d.block_size < 1) {
    fail(kOp, fmt::format("kv_cache block_size (dim 1) must be at least 1, got {}", kv.describe()));
  }
  if (d.block_size > INT32_MAX) {
    fail(kOp, fmt::format("kv_cache block_size (dim 1) must be below 2^31, got {}", kv.describe()));
  }
  d.cache = kv.dtype == DType::kE5M2 ? kSwaCacheE5M2 : kSwaCacheE4M3;
  // Compact: the row of slot s sits at s · row_stride (one block, one row per block, or blocks
  // packed back to back), which spares the kernel a 64-bit division per row.
  d.kv_compact = kv.shape[0] <= 1 || kv.shape[1] <= 1 || kv.strides[0] == kv.shape[1] * kv.strides[1];

  const TensorRef& sc = args.inv_scale;
  check_rank(kOp, "inv_scale", sc, 2);
  kjit::detail::check_sizes(kOp, "inv_scale", sc);
  check_dtype(kOp, "inv_scale", sc, DType::kBF16);
  kjit::detail::check_device(kOp, "inv_scale", sc, d.device);
  check_dim(kOp, "inv_scale", sc, 1, 1, "1 (one multiplier per slot: [max_slots, 1])");
  check_strides_nonnegative("inv_scale", sc);
  check_pointer_aligned("inv_scale", sc, 2);
  kjit::detail::check_not_null(kOp, "inv_scale", sc);

  // indices: [>= T, W] or [1, >= T, W], int64, contiguous.
  const TensorRef& idx = args.indices;
  if (idx.ndim == 0) fail(kOp, "indices is required ([T, W] int64)");
  if (idx.ndim != 2 && idx.ndim != 3) {
    fail(kOp, fmt::format("indices must be 2-d [T, W] (or [1, T, W]), got {}", idx.describe()));
  }
  kjit::detail::check_sizes(kOp, "indices", idx);
  if (idx.ndim == 3 && idx.shape[0] != 1) {
    fail(kOp, fmt::format("indices of rank 3 must have a leading dim of 1 ([1, T, W]), got {}", idx.describe()));
  }
  check_dtype(kOp, "indices", idx, DType::kI64);
  kjit::detail::check_device(kOp, "indices", idx, d.device);
  kjit::detail::check_contiguous(kOp, "indices", idx);
  check_pointer_aligned("indices", idx, 8);
  kjit::detail::check_not_null(kOp, "indices", idx);
  const int64_t idx_rows = idx.size(-2);
  d.window = idx.size(-1);
  if (std::find(std::begin(kWindows), std::end(kWindows), d.window) == std::end(kWindows)) {
    fail(kOp, fmt::format("indices window W (last dim) must be 64, 128, 256 or 512 (the specialization space), "
                          "got {}",
                          idx.describe()));
  }
  if (idx_rows < d.tokens) {
    fail(kOp, fmt::format("indices must have at least T = {} rows (q dim 0), got {}", d.tokens, idx.describe()));
  }

  const TensorRef& lens = args.lens;
  check_rank(kOp, "lens", lens, 1);
  kjit::detail::check_sizes(kOp, "lens", lens);
  check_dtype(kOp, "lens", lens, {DType::kI64, DType::kI32});
  kjit::detail::check_device(kOp, "lens", lens, d.device);
  kjit::detail::check_contiguous(kOp, "lens", lens);
  check_pointer_aligned("lens", lens, dtype_size(lens.dtype));
  kjit::detail::check_not_null(kOp, "lens", lens);
  if (lens.shape[0] < d.tokens) {
    fail(kOp, fmt::format("lens must have at least T = {} entries (q dim 0), got {}", d.tokens, lens.describe()));
  }
  d.lens_i64 = lens.dtype == DType::kI64;

  check_bf16_rows("out", out, d.device);
  check_dim(kOp, "out", out, 0, d.tokens, "T (q dim 0)");
  check_dim(kOp, "out", out, 1, d.heads, "NH (q dim 1)");
  check_dim(kOp, "out", out, 2, d.head_dim, "head_dim (q dim 2)");

  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    const TensorRef& t = args.lse;
    check_rank(kOp, "lse", t, 2);
    kjit::detail::check_sizes(kOp, "lse", t);
    check_dtype(kOp, "lse", t, DType::kF32);
    kjit::detail::check_device(kOp, "lse", t, d.device);
    check_dim(kOp, "lse", t, 0, d.tokens, "T (q dim 0)");
    check_dim(kOp, "lse", t, 1, d.heads, "NH (q dim 1)");
    check_strides_nonnegative("lse", t);
    check_pointer_aligned("lse", t, 4);
    kjit::detail::check_not_null(kOp, "lse", t);
  }

  if (!std::isfinite(args.scale)) {
    fail(kOp, fmt::format("scale must be finite (0 = 1/sqrt(head_dim)), got {}", args.scale));
  }
  const int64_t max_splits = std::min<int64_t>(kSwaMaxSplits, d.window / kSwaStepTokens);
  if (args.num_splits < 0 || args.num_splits > max_splits) {
    fail(kOp, fmt::format("num_splits must be in [0, {}] (0 = auto; at most min(32, W / 16) for W = {}), got {}",
                          max_splits, d.window, args.num_splits));
  }
  if (args.head_group != 0 && args.head_group != 16 && args.head_group != 32 && args.head_group != 64) {
    fail(kOp, fmt::format("head_group must be 0 (auto), 16, 32 or 64 (64: the sm_90a wgmma kernel), got {}",
                          args.head_group));
  }
  if (args.head_group == 64 && d.window > kSwaWgmmaTile) {
    fail(kOp, fmt::format("head_group 64 (the sm_90a wgmma kernel) takes windows of at most {} positions, got "
                          "indices {}",
                          kSwaWgmmaTile, idx.describe()));
  }
  if (args.head_group == 64 && args.num_splits > 1) {
    fail(kOp, fmt::format("head_group 64 (the sm_90a wgmma kernel) does not split the window; num_splits must be 0 "
                          "or 1, got {}",
                          args.num_splits));
  }
  if (args.head_group != 0 && d.heads % args.head_group != 0) {
    fail(kOp, fmt::format("head_group {} must divide the head count NH = {} (q dim 1), got q {}", args.head_group,
                          d.heads, q.describe()));
  }
  // The kernels index tokens and (token, head, split) rows with 32-bit integers.
  constexpr int64_t kMax = INT32_MAX / 64;
  if (d.tokens > kMax || d.tokens * d.heads > kMax) {
    fail(kOp, fmt::format("T · NH must stay below {}, got q {}", kMax, q.describe()));
  }
  return d;
}

SwaPlan plan_swa_decode(const SwaDims& d, int requested_splits, int requested_group, int sm_count,
                        int max_smem_per_block, int sm) {
  SwaPlan plan;
  const int64_t sms = std::max(sm_count, 1);
  const int max_smem = max_smem_per_block > 0 ? max_smem_per_block : INT_MAX;
  auto fits = [&](int group, int tile) { return swa_launch_shape(group, tile).smem_bytes <= max_smem; };
  // Hopper: the wgmma kernel (persistent CTAs over (token, 64 heads) items, the whole window,
  // no K conversion) when its shape fits, no split was asked for, and there are at least half
  // as many items as SMs. With few items each CTA is one latency chain, which the mma.sync
  // kernel's smaller CTAs run faster (H200, one run, eager µs mma.sync / wgmma: T = 1 13.8 /
  // 15.5, T = 8 13.8 / 15.9; T = 64, 128 items: 22.4 / 18.8; T = 512: 136.2 / 95.2). The
  // crossover between 16 and 128 items was not measured; half the SMs is the guess.
  const bool wgmma_ok = sm == 90 && d.heads % kSwaWgmmaHeads == 0 && d.window <= kSwaWgmmaTile &&
                        requested_splits <= 1 && fits(kSwaWgmmaHeads, kSwaWgmmaTile) &&
                        2 * d.tokens * (d.heads / kSwaWgmmaHeads) >= sms;
  if (requested_group == kSwaWgmmaHeads || (requested_group == 0 && wgmma_ok)) {
    plan.group = kSwaWgmmaHeads;
    plan.tile = kSwaWgmmaTile;
    plan.num_splits = 1;
    plan.split_len = static_cast<int>(d.window);
    plan.ctas = d.tokens * (d.heads / kSwaWgmmaHeads);
    return plan;
  }
  auto tile_for = [&](int group) {
    if (group == 16 && d.window <= 64) return 64;
    return fits(group, 128) || !fits(group, 64) ? 128 : 64;
  };
  if (requested_group != 0) {
    plan.group = requested_group;
  } else {
    // Groups of 32 only with the full tile: on a small shared memory (sm_86/89: 99 KiB) the
    // 64-position tile would force a split and the merge for every W = 128 token.
    plan.group = d.heads % 32 == 0 && d.tokens * (d.heads / 32) >= sms && fits(32, 128) ? 32 : 16;
  }
  plan.tile = tile_for(plan.group);
  const int64_t base = d.tokens * (d.heads / plan.group);
  const int64_t min_splits = kjit::detail::ceil_div(d.window, plan.tile);
  const int64_t max_splits = std::min<int64_t>(kSwaMaxSplits, d.window / kSwaStepTokens);
  int64_t splits = min_splits;
  if (requested_splits > 0) {
    splits = std::clamp<int64_t>(requested_splits, min_splits, max_splits);
  }
  // No splitting for occupancy: measured on the H200 (docs/perf-notes.md, fp8 SWA decode), a
  // CTA costs about the same whatever slice it reads (its fixed part: DRAM round trips for the
  // indices and rows, q load and conversion, softmax barriers, a 32 KiB f32 partial), so at
  // T = 1 8 splits of 16 took 18.2 µs against 14.0 µs unsplit, and at T = 8 3 splits took
  // 22.6 µs against 15.1 µs; the merge launch comes on top. `sms` stays in the signature for
  // the group choice.
  const int64_t split_len = kjit::detail::ceil_div(kjit::detail::ceil_div(d.window, splits), kSwaStepTokens) * kSwaStepTokens;
  plan.split_len = static_cast<int>(split_len);
  plan.num_splits = static_cast<int>(kjit::detail::ceil_div(d.window, split_len));
  plan.ctas = base * plan.num_splits;
  if (plan.num_splits > 1 && d.tokens > 0) {
    const size_t rows = static_cast<size_t>(d.tokens * d.heads) * static_cast<size_t>(plan.num_splits);
    plan.o_part_bytes = rows * static_cast<size_t>(d.head_dim) * sizeof(float);
    const size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
    plan.workspace_bytes = plan.o_part_bytes + lse_bytes;
  }
  return plan;
}

void check_swa_workspace(const SwaPlan& plan, const void* workspace, size_t workspace_bytes) {
  kjit::detail::check_workspace(kOp, plan.workspace_bytes, workspace, workspace_bytes,
                                "the window split partials (swa_decode_workspace_bytes)");
}

}  // namespace detail

size_t swa_decode_workspace_bytes(const SwaDecodeArgs& args) {
  const detail::SwaDims d = detail::validate_swa_decode(args);
  if (d.tokens == 0) return 0;
  const DeviceInfo& info = device_info(d.device);
  return detail::plan_swa_decode(d, args.num_splits, args.head_group, info.sm_count, info.max_smem_per_block_optin,
                                 info.cc_major * 10 + info.cc_minor)
      .workspace_bytes;
}

void swa_decode(const SwaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                Runtime& runtime) {
  // All argument checks come before the first driver call.
  const detail::SwaDims d = detail::validate_swa_decode(args);
  const CUcontext context = kjit::detail::ensure_context(d.device);
  const DeviceInfo& info = device_info(d.device);
  kjit::detail::check_arch(kOp, info, d.device, kMinSm, "mma.sync, cp.async");
  if (d.tokens == 0) return;
  const int sm = info.cc_major * 10 + info.cc_minor;
  const detail::SwaPlan plan = detail::plan_swa_decode(d, args.num_splits, args.head_group, info.sm_count,
                                                       info.max_smem_per_block_optin, sm);
  if (plan.group == kSwaWgmmaHeads && sm != 90) {
    throw Unsupported(fmt::format("{}: head_group 64 is the wgmma kernel, which needs sm_90a (Hopper); device {} ({}) "
                                  "is sm_{}",
                                  kOp, d.device, info.name, sm));
  }
  const SwaLaunchShape shape = swa_launch_shape(plan.group, plan.tile);
  if (shape.smem_bytes > info.max_smem_per_block_optin) {
    throw Unsupported(fmt::format("{}: head_group {} needs {} bytes of shared memory per CTA; device {} ({}) allows "
                                  "{} (use head_group 16 or 0)",
                                  kOp, plan.group, shape.smem_bytes, d.device, info.name,
                                  info.max_smem_per_block_optin));
  }
  detail::check_swa_workspace(plan, workspace, workspace_bytes);
  if (plan.ctas > INT32_MAX) kjit::detail::fail(kOp, fmt::format("{} CTAs exceed one launch; split T", plan.ctas));

  Choice choice{};
  choice.group = plan.group;
  choice.tile = plan.tile;
  choice.window = static_cast<int32_t>(d.window);
  choice.cache = d.cache;
  static kjit::detail::KernelTable<Choice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_spec({{"head_dim", std::to_string(kSwaHeadDim)},
                      {"group", std::to_string(choice.group)},
                      {"kv_tile", std::to_string(choice.tile)},
                      {"window", std::to_string(choice.window)},
                      {"cache", cache_name(choice.cache)}});
  });

  const float scale = args.scale != 0.f ? args.scale : 1.f / std::sqrt(static_cast<float>(d.head_dim));
  SwaDecodeParams p{};
  p.q = args.q.data;
  p.kv = static_cast<const uint8_t*>(args.kv_cache.data);
  // A zero-filled copy reads nothing but still names a mapped address: the cache when it has
  // bytes, else q (T > 0 here, so q has at least NH · HD · 2 bytes).
  p.fill_src = args.kv_cache.numel() > 0 ? p.kv : static_cast<const uint8_t*>(args.q.data);
  p.inv_scale = args.inv_scale.data;
  p.indices = static_cast<const int64_t*>(args.indices.data);
  p.lens = args.lens.data;
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  if (plan.num_splits > 1) {
    p.o_part = static_cast<float*>(workspace);
    p.lse_part = reinterpret_cast<float*>(static_cast<char*>(workspace) + plan.o_part_bytes);
  }
  p.q_stride_t = args.q.strides[0];
  p.q_stride_h = args.q.strides[1];
  p.out_stride_t = args.out.strides[0];
  p.out_stride_h = args.out.strides[1];
  if (d.has_lse) {
    p.lse_stride_t = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
  }
  p.kv_stride_block_bytes = args.kv_cache.strides[0];  // 1-byte elements: strides are bytes
  // With one row per block, slot s is block s: step by the block stride.
  p.kv_stride_row_bytes = d.block_size == 1 ? args.kv_cache.strides[0] : args.kv_cache.strides[1];
  p.scale_stride = args.inv_scale.strides[0];
  p.tokens = static_cast<int32_t>(d.tokens);
  p.num_heads = static_cast<int32_t>(d.heads);
  p.head_groups = static_cast<int32_t>(d.heads / plan.group);
  p.block_size = static_cast<int32_t>(std::max<int64_t>(d.block_size, 1));
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.lens_i64 = d.lens_i64 ? 1 : 0;
  p.kv_compact = d.kv_compact ? 1 : 0;
  p.scale_log2 = scale * 1.4426950408889634f;

  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.ctas);
  if (plan.group == kSwaWgmmaHeads) {
    // One CTA per SM (its shared memory allows no second) looping over the items, the next
    // item's window rows in flight while it computes the current one.
    config.grid[0] = static_cast<uint32_t>(std::min<int64_t>(plan.ctas, std::max(info.sm_count, 1)));
  }
  config.block[0] = static_cast<uint32_t>(shape.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  config.stream = stream;
  launch(program.kernel(0), config, p);

  if (plan.num_splits > 1 && plan.group != kSwaWgmmaHeads) {
    LaunchConfig merge;
    merge.grid[0] = static_cast<uint32_t>(kjit::detail::ceil_div(d.tokens * d.heads, kSwaMergeRowsPerCta));
    merge.block[0] = kSwaMergeThreads;
    merge.stream = stream;
    launch(program.kernel(1), merge, p);
  }
}

}  // namespace kjit::mla
