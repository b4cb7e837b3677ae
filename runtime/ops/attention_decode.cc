// kjit::attention::decode: validate → (driver) context, arch check → split planner → kernel
// table → decode kernel (+ merge kernel when split).
#include "runtime/ops/attention_decode.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "attention/decode_params.h"
#include "runtime/driver.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace kjit::attention {
namespace {

constexpr const char* kOp = "kjit::attention::decode";
constexpr int kMinSm = 80;
/// Planner costs in units of one KV tile streamed by one CTA (see plan_decode).
constexpr int64_t kCtaOverheadTiles = 2;  // launch + first DRAM round trip + epilogue
constexpr int64_t kMergeCostTiles = 2;    // the merge kernel's launch and its partial traffic
constexpr int kMaxAutoSplits = 256;

/// The POD specialization key of the op's kernel table (zero-initialized before it is filled).
struct Choice {
  int32_t head_dim;
  int32_t rows;
};

ProgramSpec make_spec(const ParamMap& params) {
  check_params(decode_family(), params);
  const std::string& head_dim = params.at("head_dim");
  const std::string& rows = params.at("rows");
  ProgramSpec spec;
  spec.family = "attention.decode";
  spec.template_args = fmt::format("head_dim={} rows={}", head_dim, rows);
  spec.source_name = "attention/decode.cu";
  // Order matters: the op launches kernel(0) for the decode and kernel(1) for the merge.
  spec.name_expressions = {fmt::format("kjit::attention::decode_kernel<{}, {}>", head_dim, rows),
                           fmt::format("kjit::attention::decode_merge_kernel<{}>", head_dim)};
  return spec;
}

}  // namespace

namespace detail {

DecodeDims validate_decode(const DecodeArgs& args) {
  using kjit::detail::check_dim;
  using kjit::detail::check_dtype;
  using kjit::detail::check_rank;
  using kjit::detail::fail;
  const TensorRef& q = args.q;
  const TensorRef& k = args.k;
  const TensorRef& v = args.v;
  const TensorRef& out = args.out;

  check_rank(kOp, "q", q, 4);
  if (q.device < 0) fail(kOp, fmt::format("q must be on a CUDA device, got host memory {}", q.describe()));
  DecodeDims d;
  d.device = q.device;
  kjit::detail::check_bf16_rows(kOp, "q", q, 4, d.device);
  d.batch = q.shape[0];
  if (q.shape[1] != 1) {
    fail(kOp, fmt::format("q dim 1 must be 1 (one query token per sequence: [batch, 1, q_heads, head_dim]), "
                          "got {}",
                          q.describe()));
  }
  d.q_heads = q.shape[2];
  d.head_dim = q.shape[3];
  if (d.head_dim != 64 && d.head_dim != 128 && d.head_dim != 256) {
    fail(kOp, fmt::format("q head_dim (dim 3) must be 64, 128 or 256, got {}", q.describe()));
  }
  if (d.q_heads < 1) fail(kOp, fmt::format("q must have at least one head, got {}", q.describe()));

  kjit::detail::check_bf16_rows(kOp, "k", k, 4, d.device);
  check_dim(kOp, "k", k, 0, d.batch, "batch (q dim 0)");
  check_dim(kOp, "k", k, 3, d.head_dim, "head_dim (q dim 3)");
  d.max_kv_len = k.shape[1];
  d.kv_heads = k.shape[2];
  if (d.kv_heads < 1) fail(kOp, fmt::format("k must have at least one kv head, got {}", k.describe()));
  if (d.q_heads % d.kv_heads != 0) {
    fail(kOp, fmt::format("q_heads ({}, q dim 2) must be a multiple of kv_heads ({}, k dim 2), got q {} and k {}",
                          d.q_heads, d.kv_heads, q.describe(), k.describe()));
  }
  d.group = d.q_heads / d.kv_heads;

  kjit::detail::check_bf16_rows(kOp, "v", v, 4, d.device);
  check_dim(kOp, "v", v, 0, d.batch, "batch (q dim 0)");
  check_dim(kOp, "v", v, 1, d.max_kv_len, "max_kv_len (k dim 1)");
  check_dim(kOp, "v", v, 2, d.kv_heads, "kv_heads (k dim 2)");
  check_dim(kOp, "v", v, 3, d.head_dim, "head_dim (q dim 3)");

  kjit::detail::check_bf16_rows(kOp, "out", out, 4, d.device);
  check_dim(kOp, "out", out, 0, d.batch, "batch (q dim 0)");
  check_dim(kOp, "out", out, 1, 1, "1 (one query token)");
  check_dim(kOp, "out", out, 2, d.q_heads, "q_heads (q dim 2)");
  check_dim(kOp, "out", out, 3, d.head_dim, "head_dim (q dim 3)");

  d.has_kv_lens = args.kv_lens.ndim != 0;
  if (d.has_kv_lens) {
    const TensorRef& t = args.kv_lens;
    check_rank(kOp, "kv_lens", t, 1);
    kjit::detail::check_sizes(kOp, "kv_lens", t);
    check_dtype(kOp, "kv_lens", t, DType::kI32);
    kjit::detail::check_device(kOp, "kv_lens", t, d.device);
    check_dim(kOp, "kv_lens", t, 0, d.batch, "batch (q dim 0)");
    kjit::detail::check_contiguous(kOp, "kv_lens", t);
    if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
      fail(kOp, fmt::format("kv_lens data pointer must be 4-byte aligned, got {}", t.describe()));
    }
    kjit::detail::check_not_null(kOp, "kv_lens", t);
  }

  d.has_mask = args.mask.ndim != 0;
  if (d.has_mask) {
    const TensorRef& t = args.mask;
    check_rank(kOp, "mask", t, 2);
    kjit::detail::check_sizes(kOp, "mask", t);
    check_dtype(kOp, "mask", t, {DType::kBool, DType::kU8});
    kjit::detail::check_device(kOp, "mask", t, d.device);
    check_dim(kOp, "mask", t, 0, d.batch, "batch (q dim 0)");
    check_dim(kOp, "mask", t, 1, d.max_kv_len, "max_kv_len (k dim 1)");
    kjit::detail::check_not_null(kOp, "mask", t);
  }

  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    const TensorRef& t = args.lse;
    check_rank(kOp, "lse", t, 2);
    kjit::detail::check_sizes(kOp, "lse", t);
    check_dtype(kOp, "lse", t, DType::kF32);
    kjit::detail::check_device(kOp, "lse", t, d.device);
    check_dim(kOp, "lse", t, 0, d.batch, "batch (q dim 0)");
    check_dim(kOp, "lse", t, 1, d.q_heads, "q_heads (q dim 2)");
    if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
      fail(kOp, fmt::format("lse data pointer must be 4-byte aligned, got {}", t.describe()));
    }
    kjit::detail::check_not_null(kOp, "lse", t);
  }

  if (!std::isfinite(args.scale)) fail(kOp, fmt::format("scale must be finite (0 = 1/sqrt(head_dim)), got {}", args.scale));
  if (args.num_splits < 0) fail(kOp, fmt::format("num_splits must be >= 0 (0 = auto), got {}", args.num_splits));

  // The kernels index tokens, heads and rows with 32-bit integers.
  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.max_kv_len > kMax || d.batch * d.q_heads > kMax || d.batch * d.kv_heads > kMax) {
    fail(kOp, fmt::format("sizes must stay below {} (max_kv_len, batch·q_heads), got q {} and k {}", kMax,
                          q.describe(), k.describe()));
  }
  return d;
}

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

DecodePlan plan_decode(const DecodeDims& d, int requested_splits, int sm_count, int ctas_per_sm) {
  DecodePlan plan;
  plan.rows = d.group <= 8 ? 8 : 16;
  plan.m_tiles = static_cast<int>(kjit::detail::ceil_div(d.group, plan.rows));
  const int64_t len = std::max<int64_t>(d.max_kv_len, 1);
  const int64_t tile = decode_launch_shape(static_cast<int>(d.head_dim)).tile_tokens;
  const int64_t base = d.batch * d.kv_heads * plan.m_tiles;

  int64_t split_tokens = len;
  if (requested_splits > 0) {
    split_tokens = kjit::detail::ceil_div(len, std::min<int64_t>(requested_splits, len));
  } else if (tile > 0 && base > 0) {
    const int64_t tiles = kjit::detail::ceil_div(len, tile);
    const int64_t slots = std::max<int64_t>(1, int64_t{sm_count} * std::max(ctas_per_sm, 1));
    int64_t best_cost = std::numeric_limits<int64_t>::max();
    int64_t best_chunk = tiles;
    for (int64_t s = 1; s <= std::min<int64_t>(tiles, kMaxAutoSplits); ++s) {
      const int64_t chunk = kjit::detail::ceil_div(tiles, s);
      if (kjit::detail::ceil_div(tiles, chunk) != s) continue;  // same partition as a smaller s
      const int64_t waves = kjit::detail::ceil_div(base * s, slots);
      const int64_t cost = waves * (chunk + kCtaOverheadTiles) + (s > 1 ? kMergeCostTiles : 0);
      if (cost < best_cost) {
        best_cost = cost;
        best_chunk = chunk;
      }
    }
    split_tokens = best_chunk * tile;
  }
  plan.split_tokens = static_cast<int>(std::min<int64_t>(split_tokens, INT32_MAX));
  plan.num_splits = static_cast<int>(kjit::detail::ceil_div(len, split_tokens));
  plan.ctas = base * plan.num_splits;
  if (plan.num_splits > 1) {
    const size_t rows = static_cast<size_t>(d.batch * d.q_heads) * static_cast<size_t>(plan.num_splits);
    plan.o_part_bytes = rows * static_cast<size_t>(d.head_dim) * sizeof(float);
    const size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
    plan.workspace_bytes = plan.o_part_bytes + lse_bytes;
  }
  return plan;
}

void launch_decode_merge(const Kernel& merge_kernel, const DecodeParams& p, const DeviceInfo& info, CUstream stream) {
  DecodeMergeParams m{};
  m.o_part = p.o_part;
  m.lse_part = p.lse_part;
  m.out = p.out;
  m.lse = p.lse;
  m.out_stride_b = p.out_stride_b;
  m.out_stride_h = p.out_stride_h;
  m.lse_stride_b = p.lse_stride_b;
  m.lse_stride_h = p.lse_stride_h;
  m.batch = p.batch;
  m.q_heads = p.q_heads;
  m.num_splits = p.num_splits;
  LaunchConfig merge;
  merge.grid[0] = static_cast<uint32_t>(kjit::detail::ceil_div(int64_t{p.batch} * p.q_heads, kDecodeMergeRowsPerCta));
  merge.block[0] = kDecodeMergeThreads;
  merge.stream = stream;
  // sm_90+: the merge launches while the decode grid drains (the decode kernel signals after its
  // KV loop; the merge waits for the grid before reading the partials), hiding its launch latency.
  merge.overlap_previous = info.cc_major >= 9;
  launch(merge_kernel, merge, m);
}

void check_decode_workspace(const DecodePlan& plan, const void* workspace, size_t workspace_bytes) {
  kjit::detail::check_workspace(kOp, plan.workspace_bytes, workspace, workspace_bytes,
                                "the KV split partials (decode_workspace_bytes)");
}

}  // namespace detail

const Family& decode_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.decode";
    f.doc = "GQA decode attention over a contiguous BLHD bf16 KV cache: split-KV mma.sync kernel "
            "plus merge (kernel_sources/attention/decode.cu)";
    f.params = {
        {"head_dim", {"64", "128", "256"}, "head dimension (elements)"},
        {"rows", {"8", "16"}, "query heads per CTA: 8 when q_heads / kv_heads <= 8, else 16"},
    };
    f.min_sm = kMinSm;
    f.make = make_spec;
    // Llama-3/Mistral/Qwen (hd128, group 4–8), small models (hd64), Gemma (hd256, group 2–8),
    // MHA-heavy or group-16 models (hd128 rows 16).
    f.defaults = {
        {{"head_dim", "128"}, {"rows", "8"}},
        {{"head_dim", "64"}, {"rows", "8"}},
        {{"head_dim", "256"}, {"rows", "8"}},
        {{"head_dim", "128"}, {"rows", "16"}},
    };
    return f;
  }();
  return family;
}

namespace {

/// The plan for `d` on `device` (reads the cached DeviceInfo).
detail::DecodePlan plan_for_device(const detail::DecodeDims& d, int requested_splits, const DeviceInfo& info) {
  return detail::plan_decode(d, requested_splits, info.sm_count,
                             detail::decode_ctas_per_sm(d.head_dim, info.max_smem_per_sm));
}

}  // namespace

size_t decode_workspace_bytes(const DecodeArgs& args, Runtime& /*runtime*/) {
  const detail::DecodeDims d = detail::validate_decode(args);
  if (args.num_splits == 1 || d.batch == 0) return 0;
  const DeviceInfo& info = device_info(d.device);
  return plan_for_device(d, args.num_splits, info).workspace_bytes;
}

void decode(const DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream, Runtime& runtime) {
  // All argument checks come before the first driver call.
  const detail::DecodeDims d = detail::validate_decode(args);
  const CUcontext context = kjit::detail::ensure_context(d.device);
  const DeviceInfo& info = device_info(d.device);
  kjit::detail::check_arch(kOp, info, d.device, kMinSm, "mma.sync bf16, cp.async");
  if (d.batch == 0) return;
  const detail::DecodePlan plan = plan_for_device(d, args.num_splits, info);
  detail::check_decode_workspace(plan, workspace, workspace_bytes);
  if (plan.ctas > INT32_MAX) {
    kjit::detail::fail(kOp, fmt::format("{} CTAs exceed one launch; split the batch", plan.ctas));
  }

  Choice choice{};
  choice.head_dim = static_cast<int32_t>(d.head_dim);
  choice.rows = plan.rows;
  static kjit::detail::KernelTable<Choice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_spec({{"head_dim", std::to_string(choice.head_dim)}, {"rows", std::to_string(choice.rows)}});
  });

  const float scale = args.scale != 0.f ? args.scale : 1.f / std::sqrt(static_cast<float>(d.head_dim));
  DecodeParams p{};
  p.q = args.q.data;
  p.k = args.k.data;
  p.v = args.v.data;
  p.kv_lens = d.has_kv_lens ? static_cast<const int32_t*>(args.kv_lens.data) : nullptr;
  p.mask = d.has_mask ? static_cast<const uint8_t*>(args.mask.data) : nullptr;
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  if (plan.num_splits > 1) {
    p.o_part = static_cast<float*>(workspace);
    p.lse_part = reinterpret_cast<float*>(static_cast<char*>(workspace) + plan.o_part_bytes);
  }
  p.q_stride_b = args.q.strides[0];
  p.q_stride_h = args.q.strides[2];
  p.k_stride_b = args.k.strides[0];
  p.k_stride_l = args.k.strides[1];
  p.k_stride_h = args.k.strides[2];
  p.v_stride_b = args.v.strides[0];
  p.v_stride_l = args.v.strides[1];
  p.v_stride_h = args.v.strides[2];
  if (d.has_mask) {
    p.mask_stride_b = args.mask.strides[0];
    p.mask_stride_l = args.mask.strides[1];
  }
  p.out_stride_b = args.out.strides[0];
  p.out_stride_h = args.out.strides[2];
  if (d.has_lse) {
    p.lse_stride_b = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
  }
  p.batch = static_cast<int32_t>(d.batch);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.kv_heads = static_cast<int32_t>(d.kv_heads);
  p.group = static_cast<int32_t>(d.group);
  p.max_kv_len = static_cast<int32_t>(d.max_kv_len);
  p.num_splits = plan.num_splits;
  p.split_tokens = plan.split_tokens;
  p.m_tiles = plan.m_tiles;
  p.scale_log2 = scale * 1.4426950408889634f;

  const DecodeLaunchShape shape = decode_launch_shape(static_cast<int>(d.head_dim));
  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.ctas);
  config.block[0] = static_cast<uint32_t>(shape.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  config.stream = stream;
  launch(program.kernel(0), config, p);

  if (plan.num_splits > 1) detail::launch_decode_merge(program.kernel(1), p, info, stream);
}

}  // namespace kjit::attention
