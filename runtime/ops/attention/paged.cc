// kjit::attention::paged_decode (validate → context, arch → split plan → kernel table → decode
// kernel with the PagedKV source (+ merge)) and kjit::attention::append_paged_kv.
#include "runtime/ops/attention/paged.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "attention/decode_params.h"
#include "attention/paged_append_params.h"
#include "runtime/driver.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

namespace kjit::attention {
namespace {

constexpr const char* kDecodeOp = "kjit::attention::paged_decode";
constexpr const char* kAppendOp = "kjit::attention::append_paged_kv";
constexpr int kMinSm = 80;
constexpr int kMaxSplits = 1024;

struct DecodeChoice {
  int32_t head_dim;
  int32_t rows;
};

struct AppendChoice {
  int32_t head_dim;
  int32_t indptr;
};

ProgramSpec make_decode_spec(const ParamMap& params) {
  return paged_decode_family().spec(paged_decode_family().parse(params));
}

ProgramSpec make_append_spec(const ParamMap& params) {
  return paged_append_family().spec(paged_append_family().parse(params));
}

bool supported_head_dim(int64_t d) { return d == 64 || d == 128 || d == 256; }

}  // namespace

namespace detail {

PagedDecodeDims validate_paged_decode(const PagedDecodeArgs& args) {
  using kjit::detail::check_dim;
  using kjit::detail::check_rank;
  using kjit::detail::fail;
  const TensorRef& q = args.q;
  check_rank(kDecodeOp, "q", q, 4);
  if (q.device < 0) fail(kDecodeOp, fmt::format("q must be on a CUDA device, got host memory {}", q.describe()));
  PagedDecodeDims d;
  d.device = q.device;
  check_bf16_rows(kDecodeOp, "q", q, 4, d.device);
  d.batch = q.shape[0];
  if (q.shape[1] != 1) {
    fail(kDecodeOp, fmt::format("q dim 1 must be 1 (one query token per request: [batch, 1, q_heads, head_dim]), "
                                "got {}",
                                q.describe()));
  }
  d.q_heads = q.shape[2];
  d.head_dim = q.shape[3];
  if (!supported_head_dim(d.head_dim)) {
    fail(kDecodeOp, fmt::format("q head_dim (dim 3) must be 64, 128 or 256, got {}", q.describe()));
  }
  if (d.q_heads < 1) fail(kDecodeOp, fmt::format("q must have at least one head, got {}", q.describe()));
  d.cache = validate_paged_cache(kDecodeOp, args.cache, d.device, d.batch, d.head_dim);
  if (d.q_heads % d.cache.kv_heads != 0) {
    fail(kDecodeOp, fmt::format("q_heads ({}, q dim 2) must be a multiple of kv_heads ({}, cache.k dim 2), got q {} "
                                "and cache.k {}",
                                d.q_heads, d.cache.kv_heads, q.describe(), args.cache.k.describe()));
  }
  d.group = d.q_heads / d.cache.kv_heads;

  check_bf16_rows(kDecodeOp, "out", args.out, 4, d.device);
  check_dim(kDecodeOp, "out", args.out, 0, d.batch, "batch (q dim 0)");
  check_dim(kDecodeOp, "out", args.out, 1, 1, "1 (one query token)");
  check_dim(kDecodeOp, "out", args.out, 2, d.q_heads, "q_heads (q dim 2)");
  check_dim(kDecodeOp, "out", args.out, 3, d.head_dim, "head_dim (q dim 3)");

  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    check_f32(kDecodeOp, "lse", args.lse, 2, d.device);
    check_dim(kDecodeOp, "lse", args.lse, 0, d.batch, "batch (q dim 0)");
    check_dim(kDecodeOp, "lse", args.lse, 1, d.q_heads, "q_heads (q dim 2)");
  }
  resolve_scale(kDecodeOp, args.scale, d.head_dim, true);
  if (args.num_splits < 0 || args.num_splits > kMaxSplits) {
    fail(kDecodeOp, fmt::format("num_splits must be in [0, {}] (0 = auto), got {}", kMaxSplits, args.num_splits));
  }
  if (args.kv_len_hint < 0) fail(kDecodeOp, fmt::format("kv_len_hint must be >= 0, got {}", args.kv_len_hint));
  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.batch * d.q_heads > kMax || d.cache.nnz > kMax) {
    fail(kDecodeOp, fmt::format("sizes must stay below {} (batch·q_heads, nnz), got q {}", kMax, q.describe()));
  }
  return d;
}

int paged_ctas_per_sm(int64_t head_dim, int max_smem_per_sm) {
  // Unlike the contiguous kernel, one paged CTA per SM leaves HBM idle while each tile waits on
  // its page ids, so the planner fills every resident slot. Measured on the H200 (2026-11-30,
  // graph-replayed, B16 Hq32 Hkv8 D128 L4096, contiguous 67.9 µs at 1 split): 1 / 2 / 3 / 4 splits
  // take 85.8 / 74.4 / 87.0 / 79.4 µs at page 1, 82.7 / 73.9 / 85.4 / 78.2 at page 16 and
  // 79.0 / 73.9 / 84.9 / 77.5 at page 64: two CTAs per SM (2 splits, 256 CTAs) are best.
  return decode_resident_ctas(head_dim, max_smem_per_sm);
}

DecodePlan plan_paged_decode(const PagedDecodeDims& d, int requested_splits, int64_t kv_len_hint, int sm_count,
                             int ctas_per_sm) {
  DecodeDims dd;
  dd.device = d.device;
  dd.batch = d.batch;
  dd.q_heads = d.q_heads;
  dd.kv_heads = d.cache.kv_heads;
  dd.head_dim = d.head_dim;
  dd.group = d.group;
  int64_t hint = kv_len_hint;
  if (hint == 0 && d.batch > 0) hint = ceil_div(d.cache.nnz * d.cache.page_size, d.batch);
  dd.max_kv_len = std::clamp<int64_t>(hint, 1, INT32_MAX / 2);
  DecodePlan plan = plan_decode(dd, 0, sm_count, ctas_per_sm);
  if (requested_splits > 0) plan.num_splits = requested_splits;
  // Each request divides its own length into num_splits ranges on the device.
  plan.split_tokens = 0;
  plan.ctas = d.batch * d.cache.kv_heads * plan.m_tiles * plan.num_splits;
  plan.o_part_bytes = 0;
  plan.workspace_bytes = 0;
  if (plan.num_splits > 1) {
    const size_t rows = static_cast<size_t>(d.batch * d.q_heads) * static_cast<size_t>(plan.num_splits);
    plan.o_part_bytes = rows * static_cast<size_t>(d.head_dim) * sizeof(float);
    plan.workspace_bytes = plan.o_part_bytes + (rows * sizeof(float) + 255) / 256 * 256;
  }
  return plan;
}

AppendDims validate_append(const AppendPagedKVArgs& args) {
  using kjit::detail::check_dim;
  using kjit::detail::check_rank;
  using kjit::detail::fail;
  check_rank(kAppendOp, "k", args.k, 3);
  if (args.k.device < 0) fail(kAppendOp, fmt::format("k must be on a CUDA device, got host memory {}", args.k.describe()));
  AppendDims d;
  d.device = args.k.device;
  check_bf16_rows(kAppendOp, "k", args.k, 3, d.device);
  check_bf16_rows(kAppendOp, "v", args.v, 3, d.device);
  for (int i = 0; i < 3; ++i) {
    if (args.v.shape[i] != args.k.shape[i]) {
      fail(kAppendOp, fmt::format("v must have the shape of k, got k {} and v {}", args.k.describe(), args.v.describe()));
    }
  }
  d.num_new = args.k.shape[0];
  const int64_t head_dim = args.k.shape[2];
  if (!supported_head_dim(head_dim)) {
    fail(kAppendOp, fmt::format("k head_dim (dim 2) must be 64, 128 or 256, got {}", args.k.describe()));
  }
  d.cache = validate_paged_cache(kAppendOp, args.cache, d.device, -1, head_dim);
  check_dim(kAppendOp, "k", args.k, 1, d.cache.kv_heads, "kv_heads (cache.k dim 2)");
  const bool per_token = args.batch_indices.ndim != 0 || args.positions.ndim != 0;
  d.indptr_mode = args.append_indptr.ndim != 0;
  if (per_token == d.indptr_mode) {
    fail(kAppendOp, "give either batch_indices and positions (per token) or append_indptr, not both or neither");
  }
  if (per_token) {
    check_i32_vector(kAppendOp, "batch_indices", args.batch_indices, d.num_new, d.device);
    check_i32_vector(kAppendOp, "positions", args.positions, d.num_new, d.device);
  } else {
    check_i32_vector(kAppendOp, "append_indptr", args.append_indptr, d.cache.batch + 1, d.device);
  }
  if (d.num_new > INT32_MAX / 2) fail(kAppendOp, fmt::format("num_new must stay below 2^30, got {}", args.k.describe()));
  return d;
}

}  // namespace detail

namespace {

detail::DecodePlan paged_plan_for_device(const detail::PagedDecodeDims& d, const PagedDecodeArgs& args,
                                         const DeviceInfo& info) {
  return detail::plan_paged_decode(d, args.num_splits, args.kv_len_hint, info.sm_count,
                                   detail::paged_ctas_per_sm(d.head_dim, info.max_smem_per_sm));
}

}  // namespace

size_t paged_decode_workspace_bytes(const PagedDecodeArgs& args) {
  const detail::PagedDecodeDims d = detail::validate_paged_decode(args);
  if (args.num_splits == 1 || d.batch == 0) return 0;
  return paged_plan_for_device(d, args, device_info(d.device)).workspace_bytes;
}

void paged_decode(const PagedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                  Runtime& runtime) {
  const detail::PagedDecodeDims d = detail::validate_paged_decode(args);
  const CUcontext context = kjit::detail::ensure_context(d.device);
  const DeviceInfo& info = device_info(d.device);
  detail::check_arch(kDecodeOp, info, d.device, kMinSm, "mma.sync bf16, cp.async");
  if (d.batch == 0) return;
  const detail::DecodePlan plan = paged_plan_for_device(d, args, info);
  detail::check_workspace(kDecodeOp, plan.workspace_bytes, workspace, workspace_bytes,
                          "the KV split partials (paged_decode_workspace_bytes)");
  if (plan.ctas > INT32_MAX) kjit::detail::fail(kDecodeOp, fmt::format("{} CTAs exceed one launch", plan.ctas));

  DecodeChoice choice{};
  choice.head_dim = static_cast<int32_t>(d.head_dim);
  choice.rows = plan.rows;
  static kjit::detail::KernelTable<DecodeChoice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_decode_spec({{"head_dim", std::to_string(choice.head_dim)}, {"rows", std::to_string(choice.rows)}});
  });

  const float scale = detail::resolve_scale(kDecodeOp, args.scale, d.head_dim, true);
  const PagedKVCache& c = args.cache;
  DecodeParams p{};
  p.q = args.q.data;
  p.k = c.k.data;
  p.v = c.v.data;
  p.kv_indptr = static_cast<const int32_t*>(c.indptr.data);
  p.kv_page_indices = static_cast<const int32_t*>(c.page_indices.data);
  p.kv_last_page_len = static_cast<const int32_t*>(c.last_page_len.data);
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  if (plan.num_splits > 1) {
    p.o_part = static_cast<float*>(workspace);
    p.lse_part = reinterpret_cast<float*>(static_cast<char*>(workspace) + plan.o_part_bytes);
  }
  p.q_stride_b = args.q.strides[0];
  p.q_stride_h = args.q.strides[2];
  p.k_stride_b = p.v_stride_b = c.k.strides[0];
  p.k_stride_l = p.v_stride_l = d.cache.slot_stride;
  p.k_stride_h = p.v_stride_h = c.k.strides[2];
  p.out_stride_b = args.out.strides[0];
  p.out_stride_h = args.out.strides[2];
  if (d.has_lse) {
    p.lse_stride_b = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
  }
  p.batch = static_cast<int32_t>(d.batch);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.kv_heads = static_cast<int32_t>(d.cache.kv_heads);
  p.group = static_cast<int32_t>(d.group);
  p.max_kv_len = 0;
  p.num_splits = plan.num_splits;
  p.split_tokens = 0;
  p.m_tiles = plan.m_tiles;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.page_size = static_cast<int32_t>(d.cache.page_size);
  p.page_shift = d.cache.page_shift;
  p.page_rows = d.cache.page_rows;

  const DecodeLaunchShape shape = decode_launch_shape(static_cast<int>(d.head_dim));
  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.ctas);
  config.block[0] = static_cast<uint32_t>(shape.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  config.stream = stream;
  launch(program.kernel(0), config, p);

  if (plan.num_splits > 1) detail::decode_merge_step(program.kernel(1), p, info).launch(stream);
}

void append_paged_kv(const AppendPagedKVArgs& args, CUstream stream, Runtime& runtime) {
  const detail::AppendDims d = detail::validate_append(args);
  const CUcontext context = kjit::detail::ensure_context(d.device);
  const DeviceInfo& info = device_info(d.device);
  detail::check_arch(kAppendOp, info, d.device, kMinSm, "the attention family's floor");
  const int64_t items = d.num_new * d.cache.kv_heads * (d.cache.head_dim / 8);
  if (items == 0 || d.cache.batch == 0) return;

  AppendChoice choice{};
  choice.head_dim = static_cast<int32_t>(d.cache.head_dim);
  choice.indptr = d.indptr_mode ? 1 : 0;
  static kjit::detail::KernelTable<AppendChoice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_append_spec(
        {{"head_dim", std::to_string(choice.head_dim)}, {"index", choice.indptr ? "indptr" : "positions"}});
  });

  const PagedKVCache& c = args.cache;
  PagedAppendParams p{};
  p.k_new = args.k.data;
  p.v_new = args.v.data;
  p.k_pool = c.k.data;
  p.v_pool = c.v.data;
  p.kv_indptr = static_cast<const int32_t*>(c.indptr.data);
  p.kv_page_indices = static_cast<const int32_t*>(c.page_indices.data);
  p.kv_last_page_len = static_cast<const int32_t*>(c.last_page_len.data);
  if (d.indptr_mode) {
    p.append_indptr = static_cast<const int32_t*>(args.append_indptr.data);
  } else {
    p.batch_indices = static_cast<const int32_t*>(args.batch_indices.data);
    p.positions = static_cast<const int32_t*>(args.positions.data);
  }
  p.k_new_stride_n = args.k.strides[0];
  p.k_new_stride_h = args.k.strides[1];
  p.v_new_stride_n = args.v.strides[0];
  p.v_new_stride_h = args.v.strides[1];
  // Pool row of (page, slot) = page · page_rows + slot, at slot_stride elements per row.
  p.pool_stride_page = static_cast<int64_t>(d.cache.page_rows) * d.cache.slot_stride;
  p.pool_stride_slot = d.cache.slot_stride;
  p.pool_stride_h = c.k.strides[2];
  p.num_items = items;
  p.num_new = static_cast<int32_t>(d.num_new);
  p.batch = static_cast<int32_t>(d.cache.batch);
  p.kv_heads = static_cast<int32_t>(d.cache.kv_heads);
  p.page_size = static_cast<int32_t>(d.cache.page_size);

  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(
      std::min<int64_t>(detail::ceil_div(items, kPagedAppendThreads), int64_t{info.sm_count} * 8));
  config.block[0] = kPagedAppendThreads;
  config.stream = stream;
  launch(program.kernel(0), config, p);
}

}  // namespace kjit::attention
