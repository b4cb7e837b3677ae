// kjit::rotary through the op pipeline: validate → plan → params → kernel table → launch.
#include "runtime/ops/rotary/rotary.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <cstdint>

namespace kjit::detail {
namespace {

constexpr const char* kOp = RotaryOp::kInfo.name;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// The vector kernel moves 16-byte chunks: the row start of every (token, head) must be 16-byte
/// aligned, i.e. the pointer and every stride of a dim longer than 1 a multiple of 8 elements.
bool rows_aligned16(const TensorRef& t) {
  if (!aligned16(t.data)) return false;
  for (int i = 0; i < 2; ++i) {
    if (t.shape[i] > 1 && t.strides[i] % 8 != 0) return false;
  }
  return true;
}

/// A bf16 [tokens, heads, head_dim] tensor whose last dim is contiguous, on `device`.
void check_heads_tensor(const char* name, const TensorRef& t, int device) {
  check_rank(kOp, name, t, 3);
  check_sizes(kOp, name, t);
  check_dtype(kOp, name, t, DType::kBF16);
  check_last_dim_contiguous(kOp, name, t);
  check_rows_aligned(kOp, name, t, 2);
  check_device(kOp, name, t, device);
  check_not_null(kOp, name, t);
}

/// `out` has exactly `in`'s shape.
void check_same_shape(const char* name, const TensorRef& out, const char* in_name, const TensorRef& in) {
  for (int i = 0; i < 3; ++i) {
    if (out.shape[i] != in.shape[i]) {
      fail(kOp, fmt::format("{} must have the shape of {} {}, got {}", name, in_name, in.describe(), out.describe()));
    }
  }
}

bool same_view(const TensorRef& a, const TensorRef& b) {
  return a.data == b.data && a.strides[0] == b.strides[0] && a.strides[1] == b.strides[1];
}

bool head_dim_supported(int64_t d) {
  for (int v : kRotaryHeadDims) {
    if (v == d) return true;
  }
  return false;
}

const TensorRef& q_out_of(const RotaryArgs& a) { return a.q_out.ndim != 0 ? a.q_out : a.q; }
const TensorRef& k_out_of(const RotaryArgs& a) { return a.k_out.ndim != 0 ? a.k_out : a.k; }

}  // namespace

RotaryDims RotaryOp::validate(const RotaryArgs& args) {
  const TensorRef& q = args.q;
  const TensorRef& k = args.k;
  const bool has_k = k.ndim != 0;
  const bool has_q_out = args.q_out.ndim != 0;
  const bool has_k_out = args.k_out.ndim != 0;

  check_rank(kOp, "q", q, 3);
  if (q.device < 0) fail(kOp, fmt::format("q must be on a CUDA device, got host memory {}", q.describe()));
  const int device = q.device;
  check_heads_tensor("q", q, device);
  const int64_t tokens = q.shape[0];
  const int64_t q_heads = q.shape[1];
  const int64_t head_dim = q.shape[2];
  if (!head_dim_supported(head_dim)) {
    fail(kOp, fmt::format("q head_dim {} is not supported (one of {}), got {}", head_dim,
                          fmt::join(kRotaryHeadDims, ", "), q.describe()));
  }
  const int64_t rotary_dim = args.rotary_dim == 0 ? head_dim : args.rotary_dim;
  if (rotary_dim < 2 || rotary_dim > head_dim || rotary_dim % 2 != 0) {
    fail(kOp, fmt::format("rotary_dim must be even and in [2, head_dim = {}] (0 = head_dim), got {}",
                          head_dim, args.rotary_dim));
  }
  if (args.style != RotaryStyle::kNeoX && args.style != RotaryStyle::kGPTJ) {
    fail(kOp, fmt::format("style must be kNeoX or kGPTJ, got {}", static_cast<int>(args.style)));
  }

  int64_t kv_heads = 0;
  if (has_k) {
    check_heads_tensor("k", k, device);
    check_dim(kOp, "k", k, 0, tokens, "tokens (q dim 0)");
    check_dim(kOp, "k", k, 2, head_dim, "head_dim (q dim 2)");
    kv_heads = k.shape[1];
  }

  // Outputs: none (in place) or all of them.
  if (has_k_out && !has_k) fail(kOp, "k_out is given but k is not");
  if (has_k_out && !has_q_out) {
    fail(kOp, "k_out is given but q_out is not: pass both outputs (out of place) or neither (in place)");
  }
  if (has_q_out && has_k && !has_k_out) {
    fail(kOp, "q_out is given but k_out is not: pass both outputs (out of place) or neither (in place)");
  }
  if (has_q_out) {
    check_heads_tensor("q_out", args.q_out, device);
    check_same_shape("q_out", args.q_out, "q", q);
  }
  if (has_k_out) {
    check_heads_tensor("k_out", args.k_out, device);
    check_same_shape("k_out", args.k_out, "k", k);
  }

  // Tables: [max_position, rotary_dim / 2] f32, compact, same shape.
  const auto check_table = [&](const char* name, const TensorRef& t) {
    check_rank(kOp, name, t, 2);
    check_sizes(kOp, name, t);
    check_dtype(kOp, name, t, DType::kF32);
    check_dim(kOp, name, t, 1, rotary_dim / 2, "rotary_dim / 2");
    if (t.shape[0] < 1) {
      fail(kOp, fmt::format("{} must have at least one row (max_position >= 1), got {}", name, t.describe()));
    }
    check_contiguous(kOp, name, t);
    check_rows_aligned(kOp, name, t, 4);
    check_device(kOp, name, t, device);
    check_not_null(kOp, name, t);
  };
  check_table("cos", args.cos);
  check_table("sin", args.sin);
  check_dim(kOp, "sin", args.sin, 0, args.cos.shape[0], "max_position (cos dim 0)");

  const TensorRef& pos = args.positions;
  check_rank(kOp, "positions", pos, 1);
  check_sizes(kOp, "positions", pos);
  check_dtype(kOp, "positions", pos, {DType::kI32, DType::kI64});
  check_dim(kOp, "positions", pos, 0, tokens, "tokens (q dim 0)");
  check_contiguous(kOp, "positions", pos);
  check_rows_aligned(kOp, "positions", pos, dtype_size(pos.dtype));
  check_device(kOp, "positions", pos, device);
  check_not_null(kOp, "positions", pos);

  if (tokens > INT32_MAX || q_heads + kv_heads > INT32_MAX) {
    fail(kOp, fmt::format("at most {} tokens and {} heads (q + k) per call, got q {} and {} k heads",
                          INT32_MAX, INT32_MAX, q.describe(), kv_heads));
  }

  RotaryDims d;
  d.device = device;
  d.tokens = tokens;
  d.q_heads = q_heads;
  d.kv_heads = kv_heads;
  d.head_dim = static_cast<int>(head_dim);
  d.rotary_dim = static_cast<int>(rotary_dim);
  d.style = args.style;
  d.positions_i64 = pos.dtype == DType::kI64;
  const TensorRef& q_out = q_out_of(args);
  const TensorRef& k_out = k_out_of(args);
  d.in_place = !has_q_out || (same_view(q_out, q) && (!has_k || same_view(k_out, k)));
  d.vector_ok = rotary_dim % 16 == 0 && rows_aligned16(q) && rows_aligned16(q_out) &&
                (!has_k || (rows_aligned16(k) && rows_aligned16(k_out))) && aligned16(args.cos.data) &&
                aligned16(args.sin.data);
  return d;
}

RotaryPlan RotaryOp::plan(const RotaryDims& d, const DeviceInfo& /*info*/) {
  RotaryPlan plan;
  plan.vector = d.vector_ok;
  const int64_t heads = d.q_heads + d.kv_heads;
  int64_t ctas = 0;
  if (plan.vector) {
    const int items = d.head_dim / 16;
    const int units_per_cta = rope::kVectorThreads / items;
    const int64_t units = d.tokens * (ceil_div(d.q_heads, rope::kHeadsPerThread) +
                                      ceil_div(d.kv_heads, rope::kHeadsPerThread));
    ctas = ceil_div(units, units_per_cta);
    plan.block = static_cast<uint32_t>(units_per_cta * items);
  } else {
    ctas = ceil_div(d.tokens * heads * (d.head_dim / 2), rope::kScalarThreads);
    plan.block = rope::kScalarThreads;
  }
  if (ctas > INT32_MAX) {
    fail(kOp, fmt::format("{} tokens x {} heads need {} CTAs, more than one launch takes; split the call", d.tokens,
                          heads, ctas));
  }
  plan.grid = static_cast<uint32_t>(ctas);
  if (plan.grid > 0) {
    plan.choice.family = &rotary_family();
    plan.choice.point = rotary_family().point({d.style == RotaryStyle::kGPTJ ? rope::kStyleGPTJ : rope::kStyleNeoX,
                                               d.head_dim, d.positions_i64 ? 1 : 0});
  }
  return plan;
}

rope::RotaryParams RotaryOp::params(const RotaryArgs& args, const RotaryDims& d, const RotaryPlan& plan) {
  const TensorRef& q = args.q;
  const TensorRef& k = args.k;
  const TensorRef& q_out = q_out_of(args);
  const TensorRef& k_out = k_out_of(args);
  rope::RotaryParams p{};
  p.q = q.data;
  p.q_out = q_out.data;
  p.q_token_stride = q.strides[0];
  p.q_head_stride = q.strides[1];
  p.q_out_token_stride = q_out.strides[0];
  p.q_out_head_stride = q_out.strides[1];
  if (k.ndim != 0) {
    p.k = k.data;
    p.k_out = k_out.data;
    p.k_token_stride = k.strides[0];
    p.k_head_stride = k.strides[1];
    p.k_out_token_stride = k_out.strides[0];
    p.k_out_head_stride = k_out.strides[1];
  }
  p.cos = static_cast<const float*>(args.cos.data);
  p.sin = static_cast<const float*>(args.sin.data);
  p.positions = args.positions.data;
  p.tokens = static_cast<int32_t>(d.tokens);
  p.q_heads = static_cast<int32_t>(d.q_heads);
  p.kv_heads = static_cast<int32_t>(d.kv_heads);
  p.rotary_dim = d.rotary_dim;
  p.copy_tail = d.in_place ? 0 : 1;
  if (plan.vector) {
    p.q_head_groups = static_cast<int32_t>(ceil_div(d.q_heads, rope::kHeadsPerThread));
    p.k_head_groups = static_cast<int32_t>(ceil_div(d.kv_heads, rope::kHeadsPerThread));
  }
  return p;
}

RotaryOp::Launch RotaryOp::build(const RotaryArgs& args, const RotaryDims& d, const RotaryPlan& plan,
                                 const LoadedProgram* program, Workspace /*workspace*/, const DeviceInfo& /*info*/) {
  Launch l;
  auto& step = l.step<0>();
  step.params = params(args, d, plan);
  if (program == nullptr) return l;
  step.kernel = &program->kernel(plan.vector ? 0 : 1);
  step.config.grid[0] = plan.grid;
  step.config.block[0] = plan.block;
  return l;
}

}  // namespace kjit::detail

namespace kjit {

void rotary(const RotaryArgs& args, CUstream stream, Runtime& runtime) {
  detail::run<detail::RotaryOp>(args, {}, stream, runtime);
}

}  // namespace kjit
