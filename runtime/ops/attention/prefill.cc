// kjit::attention::prefill and kjit::attention::paged_prefill: validate → (driver) context, arch
// → tile choice / plan → kernel table → the split-Q prefill kernel.
#include "runtime/ops/attention/prefill.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "attention/prefill_params.h"
#include "attention/prefill_sm90_params.h"
#include "runtime/driver.hpp"
#include "runtime/ops/attention/entry.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

namespace kjit::attention {
namespace {

constexpr const char* kPrefillOp = "kjit::attention::prefill";
constexpr const char* kPagedOp = "kjit::attention::paged_prefill";
constexpr const char* kPlanOp = "kjit::attention::plan_paged_prefill";
constexpr int kMinSm = 80;
constexpr int64_t kMaxGridYZ = 65535;

struct PrefillChoice {
  int32_t head_dim;
  int32_t block_m;
  int32_t mask;
};

struct PagedChoice {
  int32_t head_dim;
  int32_t block_m;
};

ProgramSpec make_prefill_spec(const ParamMap& params) {
  return prefill_family().spec(prefill_family().parse(params));
}

ProgramSpec make_paged_spec(const ParamMap& params) {
  return paged_prefill_family().spec(paged_prefill_family().parse(params));
}

ProgramSpec make_prefill_sm90_spec(const ParamMap& params) {
  return prefill_sm90_family().spec(prefill_sm90_family().parse(params));
}

bool supported_head_dim(int64_t d) { return d == 64 || d == 128 || d == 256; }

/// TMA's limit on a global stride (bytes), cuTensorMapEncodeTiled: below 2^40.
constexpr int64_t kTmaMaxStrideBytes = int64_t{1} << 40;

/// Why BLHD bf16 tensor `t` cannot be a 4-D (d, token, head, batch) tensor map ("" when it can).
/// Rows are already 16-byte aligned (check_bf16_rows); TMA also wants non-negative strides below
/// 2^40 bytes. A dim of extent 1 is never stepped, so its stride does not matter.
std::string tma_reason(const char* name, const TensorRef& t) {
  for (int dim = 0; dim < 3; ++dim) {
    if (t.shape[dim] > 1 && (t.strides[dim] < 0 || t.strides[dim] * 2 >= kTmaMaxStrideBytes)) {
      return fmt::format("{} stride of dim {} must be in [0, 2^39) elements, got {}", name, dim, t.describe());
    }
  }
  return {};
}

/// Encodes the 4-D (d, token, head, batch) tensor map of BLHD bf16 tensor `t` for boxes of
/// 64 d × `box_rows` tokens with the 128-byte swizzle. Out-of-bounds tokens read as zero (and
/// are not written by stores). A dim of extent 1 gets a nominal stride (never stepped).
void encode_blhd(TmaDescriptor* out, const TensorRef& t, int box_rows) {
  static_assert(sizeof(CUtensorMap) == sizeof(TmaDescriptor), "CUtensorMap is 128 bytes");
  // TMA rejects empty dims; a K/V of no tokens (kv_len 0) is never loaded (the kernel walks no
  // tile), so its map just has to encode.
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.shape[3]), static_cast<cuuint64_t>(std::max<int64_t>(t.shape[1], 1)),
                              static_cast<cuuint64_t>(t.shape[2]), static_cast<cuuint64_t>(t.shape[0])};
  cuuint64_t strides[3];
  int64_t extent = t.shape[3] * 2;  // bytes spanned by the dims inside, for extent-1 dims
  for (int i = 0; i < 3; ++i) {
    const int dim = i == 0 ? 1 : i == 1 ? 2 : 0;
    const int64_t bytes = t.shape[dim] > 1 ? t.strides[dim] * 2 : (extent + 15) / 16 * 16;
    strides[i] = static_cast<cuuint64_t>(bytes);
    extent = std::max(extent, bytes * t.shape[dim]);
  }
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  KJIT_CU(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, t.data, dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  std::memcpy(out, &map, sizeof(map));
}

/// Row strides the kernels keep in 32 bits (ContigKV/PagedKV row bytes).
void check_row_bytes(const char* op, const char* name, const TensorRef& t, int dim) {
  if (t.shape[dim] > 1 && std::abs(t.strides[dim]) * 2 >= INT32_MAX) {
    kjit::detail::fail(op, fmt::format("{} stride of dim {} must stay below 2^30 elements, got {}", name, dim,
                                       t.describe()));
  }
}

}  // namespace

namespace detail {

PrefillDims validate_prefill(const PrefillArgs& args) {
  using kjit::detail::check_dim;
  using kjit::detail::check_rank;
  using kjit::detail::fail;
  const TensorRef& q = args.q;
  check_rank(kPrefillOp, "q", q, 4);
  if (q.device < 0) fail(kPrefillOp, fmt::format("q must be on a CUDA device, got host memory {}", q.describe()));
  PrefillDims d;
  d.device = q.device;
  check_bf16_rows(kPrefillOp, "q", q, 4, d.device);
  d.batch = q.shape[0];
  d.q_len = q.shape[1];
  d.q_heads = q.shape[2];
  d.head_dim = q.shape[3];
  if (!supported_head_dim(d.head_dim)) {
    fail(kPrefillOp, fmt::format("q head_dim (dim 3) must be 64, 128 or 256, got {}", q.describe()));
  }
  if (d.q_heads < 1) fail(kPrefillOp, fmt::format("q must have at least one head, got {}", q.describe()));

  check_bf16_rows(kPrefillOp, "k", args.k, 4, d.device);
  check_dim(kPrefillOp, "k", args.k, 0, d.batch, "batch (q dim 0)");
  check_dim(kPrefillOp, "k", args.k, 3, d.head_dim, "head_dim (q dim 3)");
  d.max_kv_len = args.k.shape[1];
  d.kv_heads = args.k.shape[2];
  if (d.kv_heads < 1) fail(kPrefillOp, fmt::format("k must have at least one kv head, got {}", args.k.describe()));
  if (d.q_heads % d.kv_heads != 0) {
    fail(kPrefillOp, fmt::format("q_heads ({}, q dim 2) must be a multiple of kv_heads ({}, k dim 2), got q {} and k {}",
                                 d.q_heads, d.kv_heads, q.describe(), args.k.describe()));
  }
  d.group = d.q_heads / d.kv_heads;
  check_bf16_rows(kPrefillOp, "v", args.v, 4, d.device);
  check_dim(kPrefillOp, "v", args.v, 0, d.batch, "batch (q dim 0)");
  check_dim(kPrefillOp, "v", args.v, 1, d.max_kv_len, "max_kv_len (k dim 1)");
  check_dim(kPrefillOp, "v", args.v, 2, d.kv_heads, "kv_heads (k dim 2)");
  check_dim(kPrefillOp, "v", args.v, 3, d.head_dim, "head_dim (q dim 3)");
  check_row_bytes(kPrefillOp, "k", args.k, 1);
  check_row_bytes(kPrefillOp, "v", args.v, 1);

  check_bf16_rows(kPrefillOp, "out", args.out, 4, d.device);
  check_dim(kPrefillOp, "out", args.out, 0, d.batch, "batch (q dim 0)");
  check_dim(kPrefillOp, "out", args.out, 1, d.q_len, "q_len (q dim 1)");
  check_dim(kPrefillOp, "out", args.out, 2, d.q_heads, "q_heads (q dim 2)");
  check_dim(kPrefillOp, "out", args.out, 3, d.head_dim, "head_dim (q dim 3)");

  d.has_kv_lens = args.kv_lens.ndim != 0;
  if (d.has_kv_lens) check_i32_vector(kPrefillOp, "kv_lens", args.kv_lens, d.batch, d.device);

  if (args.mask.ndim != 0) {
    const TensorRef& m = args.mask;
    if (m.ndim != 2 && m.ndim != 3) {
      fail(kPrefillOp, fmt::format("mask must be 2-d [batch, max_kv_len] or 3-d [batch, q_len, max_kv_len], got {}",
                                   m.describe()));
    }
    d.mask_rank = m.ndim;
    check_sizes(kPrefillOp, "mask", m);
    kjit::detail::check_dtype(kPrefillOp, "mask", m, {DType::kBool, DType::kU8});
    kjit::detail::check_device(kPrefillOp, "mask", m, d.device);
    check_dim(kPrefillOp, "mask", m, 0, d.batch, "batch (q dim 0)");
    if (m.ndim == 3) check_dim(kPrefillOp, "mask", m, 1, d.q_len, "q_len (q dim 1)");
    check_dim(kPrefillOp, "mask", m, m.ndim - 1, d.max_kv_len, "max_kv_len (k dim 1)");
    check_not_null(kPrefillOp, "mask", m);
  }

  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    check_f32(kPrefillOp, "lse", args.lse, 3, d.device);
    check_dim(kPrefillOp, "lse", args.lse, 0, d.batch, "batch (q dim 0)");
    check_dim(kPrefillOp, "lse", args.lse, 1, d.q_heads, "q_heads (q dim 2)");
    check_dim(kPrefillOp, "lse", args.lse, 2, d.q_len, "q_len (q dim 1)");
  }
  resolve_scale(kPrefillOp, args.scale, d.head_dim, false);
  if (args.block_m != 0 && args.block_m != 64 && args.block_m != 128) {
    fail(kPrefillOp, fmt::format("block_m must be 0 (choose), 64 or 128, got {}", args.block_m));
  }

  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.q_len > kMax || d.max_kv_len > kMax || d.q_heads > kMaxGridYZ || d.batch > kMaxGridYZ ||
      ceil_div(d.q_len, 64) * d.q_heads > kMax) {
    fail(kPrefillOp, fmt::format("sizes out of range (q_len, max_kv_len < 2^30; q_heads, batch <= {}), got q {} and k {}",
                                 kMaxGridYZ, q.describe(), args.k.describe()));
  }
  return d;
}

std::string prefill_tma_layout_reason(const PrefillArgs& args) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef&>{"q", args.q}, {"k", args.k}, {"v", args.v},
                                {"out", args.out}}) {
    if (t.ndim != 4) return fmt::format("{} must be 4-d", name);
    std::string why = tma_reason(name, t);
    if (!why.empty()) return why;
  }
  return {};
}

int prefill_ctas_per_sm(int64_t head_dim, int block_m, int max_smem_per_sm) {
  const int smem = prefill_launch_shape(static_cast<int>(head_dim), block_m).smem_bytes;
  const int fit = smem > 0 ? max_smem_per_sm / (smem + 1024) : 1;
  return std::clamp(fit, 1, 2);
}

int choose_prefill_block_m(const PrefillDims& d, int sm_count, int ctas_per_sm) {
  if (d.q_len <= 64) return 64;
  const int64_t ctas = ceil_div(d.q_len, 128) * d.q_heads * d.batch;
  return ctas < int64_t{sm_count} * std::max(ctas_per_sm, 1) ? 64 : 128;
}

PagedPrefillDims validate_paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan) {
  using kjit::detail::check_dim;
  using kjit::detail::check_rank;
  using kjit::detail::fail;
  const TensorRef& q = args.q;
  check_rank(kPagedOp, "q", q, 3);
  if (q.device < 0) fail(kPagedOp, fmt::format("q must be on a CUDA device, got host memory {}", q.describe()));
  PagedPrefillDims d;
  d.device = q.device;
  check_bf16_rows(kPagedOp, "q", q, 3, d.device);
  d.total_q = q.shape[0];
  d.q_heads = q.shape[1];
  d.head_dim = q.shape[2];
  if (!supported_head_dim(d.head_dim)) {
    fail(kPagedOp, fmt::format("q head_dim (dim 2) must be 64, 128 or 256, got {}", q.describe()));
  }
  if (d.q_heads < 1) fail(kPagedOp, fmt::format("q must have at least one head, got {}", q.describe()));
  if (plan.tile_rows != 64 && plan.tile_rows != 128) {
    fail(kPagedOp, fmt::format("plan has tile_rows {} (not from plan_paged_prefill?)", plan.tile_rows));
  }
  if (plan.head_dim != d.head_dim) {
    fail(kPagedOp, fmt::format("plan was built for head_dim {}, q has {}", plan.head_dim, q.describe()));
  }
  if (plan.total_q != d.total_q) {
    fail(kPagedOp, fmt::format("q dim 0 must be the plan's total_q = qo_indptr[batch] = {}, got {}", plan.total_q,
                               q.describe()));
  }
  if (plan.q_tile_to_index.size() != plan.q_tile_to_batch.size()) fail(kPagedOp, "plan's work map is inconsistent");
  check_i32_vector(kPagedOp, "qo_indptr", args.qo_indptr, plan.batch + 1, d.device);
  d.cache = validate_paged_cache(kPagedOp, args.cache, d.device, plan.batch, d.head_dim);
  if (d.q_heads % d.cache.kv_heads != 0) {
    fail(kPagedOp, fmt::format("q_heads ({}, q dim 1) must be a multiple of kv_heads ({}, cache.k dim 2), got q {} "
                               "and cache.k {}",
                               d.q_heads, d.cache.kv_heads, q.describe(), args.cache.k.describe()));
  }
  d.group = d.q_heads / d.cache.kv_heads;
  check_bf16_rows(kPagedOp, "out", args.out, 3, d.device);
  check_dim(kPagedOp, "out", args.out, 0, d.total_q, "total_q (q dim 0)");
  check_dim(kPagedOp, "out", args.out, 1, d.q_heads, "q_heads (q dim 1)");
  check_dim(kPagedOp, "out", args.out, 2, d.head_dim, "head_dim (q dim 2)");
  d.has_lse = args.lse.ndim != 0;
  if (d.has_lse) {
    check_f32(kPagedOp, "lse", args.lse, 2, d.device);
    check_dim(kPagedOp, "lse", args.lse, 0, d.q_heads, "q_heads (q dim 1)");
    check_dim(kPagedOp, "lse", args.lse, 1, d.total_q, "total_q (q dim 0)");
  }
  resolve_scale(kPagedOp, args.scale, d.head_dim, false);
  constexpr int64_t kMax = INT32_MAX / 2;
  if (d.total_q > kMax || d.q_heads > kMaxGridYZ || plan.num_work() * d.q_heads > kMax) {
    fail(kPagedOp, fmt::format("sizes out of range (total_q < 2^30, q_heads <= {}), got q {}", kMaxGridYZ,
                               q.describe()));
  }
  return d;
}

}  // namespace detail

namespace {

/// The wgmma kernel (attention/prefill_sm90.cu) for a validated call it can run.
void prefill_sm90(const PrefillArgs& args, const detail::PrefillDims& d, CUcontext context, CUstream stream,
                  Runtime& runtime) {
  const PrefillSm90LaunchShape shape = prefill_sm90_launch_shape(static_cast<int>(d.head_dim));
  PrefillChoice choice{};
  choice.head_dim = static_cast<int32_t>(d.head_dim);
  static kjit::detail::KernelTable<PrefillChoice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_prefill_sm90_spec({{"head_dim", std::to_string(choice.head_dim)}});
  });

  const float scale = detail::resolve_scale(kPrefillOp, args.scale, d.head_dim, false);
  PrefillSm90Params p{};
  encode_blhd(&p.tma_q, args.q, shape.block_m);
  encode_blhd(&p.tma_k, args.k, shape.block_n);
  encode_blhd(&p.tma_v, args.v, shape.block_n);
  encode_blhd(&p.tma_out, args.out, 64);
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  if (d.has_lse) {
    p.lse_stride_b = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
    p.lse_stride_l = args.lse.strides[2];
  }
  p.q_len = static_cast<int32_t>(d.q_len);
  p.kv_len = static_cast<int32_t>(d.max_kv_len);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.group = static_cast<int32_t>(d.group);
  p.q_tiles = static_cast<int32_t>(detail::ceil_div(d.q_len, shape.block_m));
  p.causal = args.causal ? 1 : 0;
  p.scale_log2 = scale * 1.4426950408889634f;
  // Pingpong measured on the H200 (2026-11-30 10:35 UTC run): hd64 causal 300 -> 333 TFLOP/s, hd128 ±1%.
  p.pingpong = 1;

  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(p.q_tiles);
  config.grid[1] = static_cast<uint32_t>(d.q_heads);
  config.grid[2] = static_cast<uint32_t>(d.batch);
  config.block[0] = static_cast<uint32_t>(shape.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  config.stream = stream;
  launch(program.kernel(0), config, p);
}

}  // namespace

void prefill(const PrefillArgs& args, CUstream stream, Runtime& runtime) {
  const detail::PrefillDims d = detail::validate_prefill(args);
  const CUcontext context = kjit::detail::ensure_context(d.device);
  const DeviceInfo& info = device_info(d.device);
  detail::check_arch(kPrefillOp, info, d.device, kMinSm, "mma.sync bf16, ldmatrix, cp.async");
  detail::VariantCall call;
  call.kind = AttentionKind::kPrefill;
  call.sm = info.cc_major * 10 + info.cc_minor;
  call.head_dim = d.head_dim;
  call.has_mask = d.mask_rank != 0;
  call.has_kv_lens = d.has_kv_lens;
  call.tma_layout = detail::prefill_tma_layout_reason(args);
  bool wgmma = false;
  if (args.variant == AttentionVariant::kAuto) {
    wgmma = detail::variant_rejects(AttentionVariant::kWgmma, call).empty();
  } else {
    wgmma = detail::resolve_variant(args.variant, AttentionVariant::kAuto, call) == AttentionVariant::kWgmma;
  }
  if (d.batch == 0 || d.q_len == 0) return;
  if (wgmma) {
    prefill_sm90(args, d, context, stream, runtime);
    return;
  }
  const int block_m =
      args.block_m != 0
          ? args.block_m
          : detail::choose_prefill_block_m(d, info.sm_count,
                                           detail::prefill_ctas_per_sm(d.head_dim, 128, info.max_smem_per_sm));

  PrefillChoice choice{};
  choice.head_dim = static_cast<int32_t>(d.head_dim);
  choice.block_m = block_m;
  choice.mask = d.mask_rank != 0 ? 1 : 0;
  static kjit::detail::KernelTable<PrefillChoice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_prefill_spec({{"head_dim", std::to_string(choice.head_dim)},
                              {"block_m", std::to_string(choice.block_m)},
                              {"mask", choice.mask ? "bool" : "none"}});
  });

  const float scale = detail::resolve_scale(kPrefillOp, args.scale, d.head_dim, false);
  PrefillParams p{};
  p.q = args.q.data;
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  p.mask = d.mask_rank != 0 ? static_cast<const uint8_t*>(args.mask.data) : nullptr;
  p.k = args.k.data;
  p.v = args.v.data;
  p.kv_lens = d.has_kv_lens ? static_cast<const int32_t*>(args.kv_lens.data) : nullptr;
  p.q_stride_b = args.q.strides[0];
  p.q_stride_l = args.q.strides[1];
  p.q_stride_h = args.q.strides[2];
  p.k_stride_b = args.k.strides[0];
  p.k_stride_l = args.k.strides[1];
  p.k_stride_h = args.k.strides[2];
  p.v_stride_b = args.v.strides[0];
  p.v_stride_l = args.v.strides[1];
  p.v_stride_h = args.v.strides[2];
  p.out_stride_b = args.out.strides[0];
  p.out_stride_l = args.out.strides[1];
  p.out_stride_h = args.out.strides[2];
  if (d.has_lse) {
    p.lse_stride_b = args.lse.strides[0];
    p.lse_stride_h = args.lse.strides[1];
    p.lse_stride_l = args.lse.strides[2];
  }
  if (d.mask_rank == 2) {
    p.mask_stride_b = args.mask.strides[0];
    p.mask_stride_q = 0;
    p.mask_stride_k = args.mask.strides[1];
  } else if (d.mask_rank == 3) {
    p.mask_stride_b = args.mask.strides[0];
    p.mask_stride_q = args.mask.strides[1];
    p.mask_stride_k = args.mask.strides[2];
  }
  p.batch = static_cast<int32_t>(d.batch);
  p.q_len = static_cast<int32_t>(d.q_len);
  p.max_kv_len = static_cast<int32_t>(d.max_kv_len);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.kv_heads = static_cast<int32_t>(d.kv_heads);
  p.group = static_cast<int32_t>(d.group);
  p.q_tiles = static_cast<int32_t>(detail::ceil_div(d.q_len, block_m));
  p.causal = args.causal ? 1 : 0;
  p.scale_log2 = scale * 1.4426950408889634f;

  const PrefillLaunchShape shape = prefill_launch_shape(static_cast<int>(d.head_dim), block_m);
  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(p.q_tiles);
  config.grid[1] = static_cast<uint32_t>(d.q_heads);
  config.grid[2] = static_cast<uint32_t>(d.batch);
  config.block[0] = static_cast<uint32_t>(shape.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  config.stream = stream;
  launch(program.kernel(0), config, p);
}

PagedPrefillPlan plan_paged_prefill(const int32_t* qo_indptr_host, int64_t batch, int64_t head_dim, int tile_rows) {
  using kjit::detail::fail;
  if (batch < 0) fail(kPlanOp, fmt::format("batch must be >= 0, got {}", batch));
  if (!supported_head_dim(head_dim)) fail(kPlanOp, fmt::format("head_dim must be 64, 128 or 256, got {}", head_dim));
  if (tile_rows != 0 && tile_rows != 64 && tile_rows != 128) {
    fail(kPlanOp, fmt::format("tile_rows must be 0 (choose), 64 or 128, got {}", tile_rows));
  }
  if (qo_indptr_host == nullptr) fail(kPlanOp, "qo_indptr_host is null (the plan needs the host copy)");
  if (qo_indptr_host[0] != 0) fail(kPlanOp, fmt::format("qo_indptr[0] must be 0, got {}", qo_indptr_host[0]));
  int64_t nonempty = 0;
  for (int64_t b = 0; b < batch; ++b) {
    if (qo_indptr_host[b + 1] < qo_indptr_host[b]) {
      fail(kPlanOp, fmt::format("qo_indptr must be non-decreasing, got qo_indptr[{}] = {} > qo_indptr[{}] = {}", b,
                                qo_indptr_host[b], b + 1, qo_indptr_host[b + 1]));
    }
    nonempty += qo_indptr_host[b + 1] > qo_indptr_host[b];
  }
  PagedPrefillPlan plan;
  plan.batch = batch;
  plan.head_dim = head_dim;
  plan.total_q = qo_indptr_host[batch];
  if (plan.total_q > INT32_MAX / 2) fail(kPlanOp, fmt::format("total_q must stay below 2^30, got {}", plan.total_q));
  // Short requests (decode-like or small chunks) waste most of a 128-row tile.
  plan.tile_rows = tile_rows != 0 ? tile_rows : (nonempty > 0 && plan.total_q / nonempty <= 64 ? 64 : 128);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t len = qo_indptr_host[b + 1] - qo_indptr_host[b];
    for (int32_t t = 0; int64_t{t} * plan.tile_rows < len; ++t) {
      plan.q_tile_to_batch.push_back(static_cast<int32_t>(b));
      plan.q_tile_to_index.push_back(t);
    }
  }
  const size_t map_bytes = (plan.q_tile_to_batch.size() * sizeof(int32_t) + 255) / 256 * 256;
  plan.map_index_offset = map_bytes;
  plan.workspace_bytes = 2 * map_bytes;
  return plan;
}

void upload_paged_prefill_plan(const PagedPrefillPlan& plan, void* workspace, size_t workspace_bytes, int device) {
  detail::check_workspace("kjit::attention::upload_paged_prefill_plan", plan.workspace_bytes, workspace,
                          workspace_bytes, "the plan's work map");
  if (plan.q_tile_to_batch.empty()) return;
  kjit::detail::ensure_context(device);
  const size_t bytes = plan.q_tile_to_batch.size() * sizeof(int32_t);
  const auto base = reinterpret_cast<CUdeviceptr>(workspace);
  KJIT_CU(cuMemcpyHtoD(base, plan.q_tile_to_batch.data(), bytes));
  KJIT_CU(cuMemcpyHtoD(base + plan.map_index_offset, plan.q_tile_to_index.data(), bytes));
}

void paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan, const void* workspace,
                   size_t workspace_bytes, CUstream stream, Runtime& runtime) {
  const detail::PagedPrefillDims d = detail::validate_paged_prefill(args, plan);
  detail::check_workspace(kPagedOp, plan.workspace_bytes, workspace, workspace_bytes,
                          "the plan's work map (upload_paged_prefill_plan)");
  const CUcontext context = kjit::detail::ensure_context(d.device);
  const DeviceInfo& info = device_info(d.device);
  detail::check_arch(kPagedOp, info, d.device, kMinSm, "mma.sync bf16, ldmatrix, cp.async");
  if (plan.num_work() == 0) return;

  PagedChoice choice{};
  choice.head_dim = static_cast<int32_t>(d.head_dim);
  choice.block_m = plan.tile_rows;
  static kjit::detail::KernelTable<PagedChoice> table;
  const LoadedProgram& program = table.get(runtime, context, choice, [&choice] {
    return make_paged_spec({{"head_dim", std::to_string(choice.head_dim)}, {"block_m", std::to_string(choice.block_m)}});
  });

  const float scale = detail::resolve_scale(kPagedOp, args.scale, d.head_dim, false);
  const PagedKVCache& c = args.cache;
  PrefillParams p{};
  p.q = args.q.data;
  p.out = args.out.data;
  p.lse = d.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  p.k = c.k.data;
  p.v = c.v.data;
  p.kv_indptr = static_cast<const int32_t*>(c.indptr.data);
  p.kv_page_indices = static_cast<const int32_t*>(c.page_indices.data);
  p.kv_last_page_len = static_cast<const int32_t*>(c.last_page_len.data);
  p.qo_indptr = static_cast<const int32_t*>(args.qo_indptr.data);
  p.q_tile_to_batch = static_cast<const int32_t*>(workspace);
  p.q_tile_to_index = reinterpret_cast<const int32_t*>(static_cast<const char*>(workspace) + plan.map_index_offset);
  p.q_stride_l = args.q.strides[0];
  p.q_stride_h = args.q.strides[1];
  p.k_stride_b = p.v_stride_b = c.k.strides[0];
  p.k_stride_l = p.v_stride_l = d.cache.slot_stride;
  p.k_stride_h = p.v_stride_h = c.k.strides[2];
  p.out_stride_l = args.out.strides[0];
  p.out_stride_h = args.out.strides[1];
  if (d.has_lse) {
    p.lse_stride_h = args.lse.strides[0];
    p.lse_stride_l = args.lse.strides[1];
  }
  p.batch = static_cast<int32_t>(plan.batch);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.kv_heads = static_cast<int32_t>(d.cache.kv_heads);
  p.group = static_cast<int32_t>(d.group);
  p.q_tiles = static_cast<int32_t>(plan.num_work());
  p.causal = args.causal ? 1 : 0;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.page_size = static_cast<int32_t>(d.cache.page_size);
  p.page_shift = d.cache.page_shift;
  p.page_rows = d.cache.page_rows;

  const PrefillLaunchShape shape = prefill_launch_shape(static_cast<int>(d.head_dim), plan.tile_rows);
  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.num_work());
  config.grid[1] = static_cast<uint32_t>(d.q_heads);
  config.block[0] = static_cast<uint32_t>(shape.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(shape.smem_bytes);
  config.stream = stream;
  launch(program.kernel(0), config, p);
}

}  // namespace kjit::attention
