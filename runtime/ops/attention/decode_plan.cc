// kjit::attention::decode, the pure steps: validation and the split-KV planner.
#include "runtime/ops/attention/decode.hpp"

#include <kjit/error.hpp>

#include "runtime/ops/attention/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>

namespace kjit::attention {
namespace {

constexpr const char* kOp = detail::DecodeOp::kInfo.name;
/// Planner costs in units of one KV tile streamed by one CTA (see plan_decode).
constexpr int64_t kCtaOverheadTiles = 2;  // launch + first DRAM round trip + epilogue
constexpr int64_t kMergeCostTiles = 2;    // the merge kernel's launch and its partial traffic

}  // namespace

namespace detail {

DecodeDims validate_decode(const DecodeArgs& args, const char* op) {
  const TensorRef& q = args.q;
  const TensorRef& k = args.k;
  const TensorRef& v = args.v;
  const TensorRef& out = args.out;

  DecodeDims d;
  check_decode_query(op, q, "sequence", d);

  const ContiguousKvDims kv = check_contiguous_kv(op, q, k, v, d.batch, d.head_dim, d.device);
  d.max_kv_len = kv.max_kv_len;
  d.kv_heads = kv.kv_heads;
  d.group = kv.group;

  check_decode_out(op, out, d.batch, d.q_heads, d.head_dim, d.device);

  d.has_kv_lens = args.kv_lens.ndim != 0;
  if (d.has_kv_lens) {
    check_i32_vector(op, "kv_lens", args.kv_lens, -1, d.device);
    check_dim(op, "kv_lens", args.kv_lens, 0, d.batch, "batch (q dim 0)");
  }

  d.has_mask = args.mask.ndim != 0;
  if (d.has_mask) {
    const TensorRef& t = args.mask;
    kjit::detail::check_tensor(op, "mask", t, 2, {DType::kBool, DType::kU8}, d.device);
    check_dim(op, "mask", t, 0, d.batch, "batch (q dim 0)");
    check_dim(op, "mask", t, 1, d.max_kv_len, "max_kv_len (k dim 1)");
    kjit::detail::check_not_null(op, "mask", t);
  }

  d.has_lse = check_decode_lse(op, args.lse, d.batch, d.q_heads, d.device);
  kjit::detail::check_finite_scale(op, args.scale);
  check_num_splits(op, args.num_splits, -1);
  check_decode_merge_args(op, args.merge, args.num_splits);
  d.requested_splits = args.num_splits;
  d.requested_merge = args.merge;

  // The kernels index tokens, heads and rows with 32-bit integers.
  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.max_kv_len > kMax || d.batch * d.q_heads > kMax || d.batch * d.kv_heads > kMax) {
    fail(op, fmt::format("sizes must stay below {} (max_kv_len, batch·q_heads), got q {} and k {}", kMax,
                          q.describe(), k.describe()));
  }
  return d;
}

DecodeDims validate_decode(const DecodeArgs& args) { return validate_decode(args, kOp); }

int decode_resident_ctas(int64_t head_dim, int max_smem_per_sm) {
  const int smem = decode_launch_shape(static_cast<int>(head_dim)).smem_bytes;
  // The driver reserves 1 KiB of shared memory per CTA; __launch_bounds__(threads, 2) caps at 2.
  const int fit = smem > 0 ? max_smem_per_sm / (smem + 1024) : 1;
  return std::clamp(fit, 1, 2);
}

int decode_ctas_per_sm(int64_t head_dim, int max_smem_per_sm) {
  // Two CTAs fit, but one streaming CTA per SM already saturates HBM over a contiguous cache, so
  // the planner counts one slot per SM and a second resident CTA is a bonus rather than a target.
  // Measured on the H200 (2026-11-30, graph-replayed): B16 Hq32 Hkv8 D128 L4096 takes 68.3 µs
  // with 1 split (128 CTAs) and 71.6 µs with 2 (256 CTAs); B1 L8192 is fastest at 16 splits
  // (128 CTAs, 16.1 µs) against 17.7 µs at 32. The paged planner differs (paged_ctas_per_sm).
  return std::min(decode_resident_ctas(head_dim, max_smem_per_sm), 1);
}

int64_t search_split_chunk(int64_t tiles, int64_t base, int64_t slots, int64_t max_splits) {
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  int64_t best_chunk = tiles;
  for (int64_t s = 1; s <= std::min<int64_t>(tiles, std::clamp<int64_t>(max_splits, 1, kMaxDecodeSplits)); ++s) {
    const int64_t chunk = kjit::detail::ceil_div(tiles, s);
    if (kjit::detail::ceil_div(tiles, chunk) != s) continue;  // same partition as a smaller s
    const int64_t waves = kjit::detail::ceil_div(base * s, slots);
    const int64_t cost = waves * (chunk + kCtaOverheadTiles) + (s > 1 ? kMergeCostTiles : 0);
    if (cost < best_cost) {
      best_cost = cost;
      best_chunk = chunk;
    }
  }
  return best_chunk;
}

SplitChunkMemo& split_chunk_memo() { return kjit::detail::thread_memo<SplitChunkMemo>(); }

int64_t split_chunk(int64_t tiles, int64_t base, int64_t slots, int64_t max_splits) {
  SplitSearchKey key{};
  key.tiles = tiles;
  key.base = base;
  key.slots = slots;
  key.max_splits = max_splits;
  return split_chunk_memo().get(
      key, [](const SplitSearchKey& k) { return search_split_chunk(k.tiles, k.base, k.slots, k.max_splits); });
}

DecodeMerge plan_merge(DecodeMerge requested, int num_splits, bool clusters) {
  if (num_splits <= 1) return DecodeMerge::kKernel;
  if (requested != DecodeMerge::kAuto) return requested;
  return clusters && num_splits <= kDecodeMaxClusterSplits ? DecodeMerge::kCluster : DecodeMerge::kKernel;
}

void check_decode_merge_args(const char* op, DecodeMerge merge, int num_splits) {
  if (!enum_named(kDecodeMergeNames, merge)) {
    fail(op, fmt::format("merge must be one of {}, got DecodeMerge({})", enum_choices(kDecodeMergeNames),
                         static_cast<int32_t>(merge)));
  }
  if (merge == DecodeMerge::kCluster && num_splits > kDecodeMaxClusterSplits) {
    fail(op, fmt::format("merge 'cluster' combines at most {} splits (one thread-block cluster per split group), "
                         "got num_splits={}",
                         kDecodeMaxClusterSplits, num_splits));
  }
}

void check_decode_merge_request(const char* op, DecodeMerge merge, const DeviceInfo& info) {
  if (merge == DecodeMerge::kCluster && !info.target().has_clusters()) {
    throw Unsupported(fmt::format("{}: merge 'cluster' needs thread-block clusters (sm_90+); device {} is {}", op,
                                  info.ordinal, info.target().str()));
  }
}

DecodePlan plan_decode(const DecodeDims& d, int requested_splits, int sm_count, int ctas_per_sm, int heads_per_cta,
                       DecodeMerge merge, bool clusters) {
  DecodePlan plan;
  plan.heads_per_cta = heads_per_cta > 0 ? heads_per_cta : d.group <= 8 ? 8 : 16;
  plan.m_tiles = static_cast<int>(kjit::detail::ceil_div(d.group, plan.heads_per_cta));
  const int64_t len = std::max<int64_t>(d.max_kv_len, 1);
  const int64_t tile = decode_launch_shape(static_cast<int>(d.head_dim)).tile_tokens;
  const int64_t base = d.batch * d.kv_heads * plan.m_tiles;

  int64_t split_tokens = len;
  if (requested_splits > 0) {
    split_tokens = kjit::detail::ceil_div(len, std::min<int64_t>(requested_splits, len));
  } else if (tile > 0 && base > 0) {
    const int64_t tiles = kjit::detail::ceil_div(len, tile);
    const int64_t slots = std::max<int64_t>(1, int64_t{sm_count} * std::max(ctas_per_sm, 1));
    const int64_t max_splits = merge == DecodeMerge::kCluster ? kDecodeMaxClusterSplits : kMaxDecodeSplits;
    split_tokens = split_chunk(tiles, base, slots, max_splits) * tile;
  }
  plan.split_tokens = static_cast<int>(std::min<int64_t>(split_tokens, INT32_MAX));
  kjit::detail::set_split_plan(plan, kjit::detail::ceil_div(len, split_tokens), base, d.batch * d.q_heads,
                               d.head_dim);
  plan.merge = plan_merge(merge, plan.num_splits, clusters);
  return plan;
}

void check_decode_workspace(const DecodePlan& plan, const void* workspace, size_t workspace_bytes) {
  kjit::detail::check_workspace(kOp, plan.workspace_bytes, workspace, workspace_bytes,
                                "the KV split partials (decode_workspace_bytes)");
}

}  // namespace detail
}  // namespace kjit::attention
