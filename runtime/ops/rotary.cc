// kjit::rotary: validate → plan → (driver) context, arch check → kernel table → launch.
#include "runtime/ops/rotary.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "runtime/driver.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <cstdint>
#include <string>

namespace kjit {
namespace {

constexpr const char* kOp = "kjit::rotary";
constexpr int kMinSm = 80;

/// The POD specialization key of the op's kernel table (zero-initialized before it is filled).
struct Choice {
  int32_t head_dim;
  int32_t style;  // rope::kStyleNeoX / kStyleGPTJ
  int32_t positions_i64;
};

const char* style_param(int style) { return style == rope::kStyleGPTJ ? "gptj" : "neox"; }

ParamMap params_of(const Choice& c) {
  return {{"style", style_param(c.style)},
          {"head_dim", std::to_string(c.head_dim)},
          {"pos", c.positions_i64 ? "i64" : "i32"}};
}

ProgramSpec make_spec(const ParamMap& params) {
  check_params(rotary_family(), params);
  const std::string& head_dim = params.at("head_dim");
  const int style = params.at("style") == "gptj" ? rope::kStyleGPTJ : rope::kStyleNeoX;
  const char* pos_type = params.at("pos") == "i64" ? "long long" : "int";
  const std::string targs = fmt::format("{}, {}, {}", head_dim, style, pos_type);
  ProgramSpec spec;
  spec.family = "rotary";
  spec.template_args = fmt::format("style={} head_dim={} pos={}", params.at("style"), head_dim,
                                   params.at("pos"));
  spec.source_name = "rotary/rotary.cu";
  // Order matters: the op launches kernel(0) on the vector path and kernel(1) otherwise.
  spec.name_expressions = {fmt::format("kjit::rope::rotary_kernel<{}>", targs),
                           fmt::format("kjit::rope::rotary_scalar_kernel<{}>", targs)};
  return spec;
}

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
  detail::check_rank(kOp, name, t, 3);
  detail::check_sizes(kOp, name, t);
  detail::check_dtype(kOp, name, t, DType::kBF16);
  detail::check_last_dim_contiguous(kOp, name, t);
  detail::check_rows_aligned(kOp, name, t, 2);
  detail::check_device(kOp, name, t, device);
  detail::check_not_null(kOp, name, t);
}

/// `out` has exactly `in`'s shape.
void check_same_shape(const char* name, const TensorRef& out, const char* in_name,
                      const TensorRef& in) {
  for (int i = 0; i < 3; ++i) {
    if (out.shape[i] != in.shape[i]) {
      detail::fail(kOp, fmt::format("{} must have the shape of {} {}, got {}", name, in_name,
                                    in.describe(), out.describe()));
    }
  }
}

bool same_view(const TensorRef& a, const TensorRef& b) {
  return a.data == b.data && a.strides[0] == b.strides[0] && a.strides[1] == b.strides[1];
}

bool head_dim_supported(int64_t d) {
  for (int v : detail::kRotaryHeadDims) {
    if (v == d) return true;
  }
  return false;
}

}  // namespace

namespace detail {

RotaryPlan validate_rotary(const RotaryArgs& args) {
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
    detail::check_sizes(kOp, name, t);
    check_dtype(kOp, name, t, DType::kF32);
    check_dim(kOp, name, t, 1, rotary_dim / 2, "rotary_dim / 2");
    if (t.shape[0] < 1) {
      fail(kOp, fmt::format("{} must have at least one row (max_position >= 1), got {}", name, t.describe()));
    }
    check_contiguous(kOp, name, t);
    check_rows_aligned(kOp, name, t, 4);
    check_device(kOp, name, t, device);
    detail::check_not_null(kOp, name, t);
  };
  check_table("cos", args.cos);
  check_table("sin", args.sin);
  check_dim(kOp, "sin", args.sin, 0, args.cos.shape[0], "max_position (cos dim 0)");

  const TensorRef& pos = args.positions;
  check_rank(kOp, "positions", pos, 1);
  detail::check_sizes(kOp, "positions", pos);
  check_dtype(kOp, "positions", pos, {DType::kI32, DType::kI64});
  check_dim(kOp, "positions", pos, 0, tokens, "tokens (q dim 0)");
  check_contiguous(kOp, "positions", pos);
  check_rows_aligned(kOp, "positions", pos, dtype_size(pos.dtype));
  check_device(kOp, "positions", pos, device);
  detail::check_not_null(kOp, "positions", pos);

  if (tokens > INT32_MAX || q_heads + kv_heads > INT32_MAX) {
    fail(kOp, fmt::format("at most {} tokens and {} heads (q + k) per call, got q {} and {} k heads",
                          INT32_MAX, INT32_MAX, q.describe(), kv_heads));
  }

  RotaryPlan plan;
  plan.device = device;
  plan.head_dim = static_cast<int>(head_dim);
  plan.style = args.style;
  plan.positions_i64 = pos.dtype == DType::kI64;
  const TensorRef& q_out = has_q_out ? args.q_out : q;
  const TensorRef& k_out = has_k_out ? args.k_out : k;
  plan.in_place = !has_q_out || (same_view(q_out, q) && (!has_k || same_view(k_out, k)));

  rope::RotaryParams& p = plan.params;
  p.q = q.data;
  p.q_out = q_out.data;
  p.q_token_stride = q.strides[0];
  p.q_head_stride = q.strides[1];
  p.q_out_token_stride = q_out.strides[0];
  p.q_out_head_stride = q_out.strides[1];
  if (has_k) {
    p.k = k.data;
    p.k_out = k_out.data;
    p.k_token_stride = k.strides[0];
    p.k_head_stride = k.strides[1];
    p.k_out_token_stride = k_out.strides[0];
    p.k_out_head_stride = k_out.strides[1];
  }
  p.cos = static_cast<const float*>(args.cos.data);
  p.sin = static_cast<const float*>(args.sin.data);
  p.positions = pos.data;
  p.tokens = static_cast<int32_t>(tokens);
  p.q_heads = static_cast<int32_t>(q_heads);
  p.kv_heads = static_cast<int32_t>(kv_heads);
  p.rotary_dim = static_cast<int32_t>(rotary_dim);
  p.copy_tail = plan.in_place ? 0 : 1;

  plan.vector = rotary_dim % 16 == 0 && rows_aligned16(q) && rows_aligned16(q_out) &&
                (!has_k || (rows_aligned16(k) && rows_aligned16(k_out))) &&
                aligned16(args.cos.data) && aligned16(args.sin.data);

  const int64_t heads = q_heads + kv_heads;
  int64_t ctas = 0;
  if (plan.vector) {
    const int items = plan.head_dim / 16;
    const int units_per_cta = rope::kVectorThreads / items;
    p.q_head_groups = static_cast<int32_t>((q_heads + rope::kHeadsPerThread - 1) / rope::kHeadsPerThread);
    p.k_head_groups = static_cast<int32_t>((kv_heads + rope::kHeadsPerThread - 1) / rope::kHeadsPerThread);
    const int64_t units = tokens * (p.q_head_groups + p.k_head_groups);
    ctas = (units + units_per_cta - 1) / units_per_cta;
    plan.block = static_cast<uint32_t>(units_per_cta * items);
  } else {
    const int64_t threads = tokens * heads * (head_dim / 2);
    ctas = (threads + rope::kScalarThreads - 1) / rope::kScalarThreads;
    plan.block = rope::kScalarThreads;
  }
  if (ctas > INT32_MAX) {
    fail(kOp, fmt::format("{} tokens x {} heads need {} CTAs, more than one launch takes; split the call",
                          tokens, heads, ctas));
  }
  plan.grid = static_cast<uint32_t>(ctas);
  return plan;
}

}  // namespace detail

const Family& rotary_family() {
  static const Family family = [] {
    Family f;
    f.name = "rotary";
    f.doc = "Rotary position embedding (RoPE) of bf16 q/k with f32 cos/sin tables; NeoX or GPT-J "
            "pairing, partial rotary_dim, in or out of place (kernel_sources/rotary/rotary.cu)";
    FamilyParam head_dim{"head_dim", {}, "head dimension (elements)"};
    for (int d : detail::kRotaryHeadDims) head_dim.values.push_back(std::to_string(d));
    f.params = {
        {"style", {"neox", "gptj"}, "pairing: neox = (i, i + rotary_dim/2), gptj = (2i, 2i + 1)"},
        head_dim,
        {"pos", {"i32", "i64"}, "dtype of the positions tensor"},
    };
    f.min_sm = kMinSm;
    f.make = make_spec;
    // What common models use: Llama/Mistral/Qwen (neox 128), Gemma (neox 256), small models
    // (neox 64), Phi-2 (neox 80, partial), GPT-J (gptj 256, partial); torch positions are i64.
    f.defaults = {
        {{"style", "neox"}, {"head_dim", "128"}, {"pos", "i64"}},
        {{"style", "neox"}, {"head_dim", "128"}, {"pos", "i32"}},
        {{"style", "neox"}, {"head_dim", "64"}, {"pos", "i64"}},
        {{"style", "neox"}, {"head_dim", "256"}, {"pos", "i64"}},
        {{"style", "neox"}, {"head_dim", "80"}, {"pos", "i64"}},
        {{"style", "gptj"}, {"head_dim", "128"}, {"pos", "i64"}},
        {{"style", "gptj"}, {"head_dim", "256"}, {"pos", "i64"}},
    };
    return f;
  }();
  return family;
}

namespace detail {

RotaryLaunch plan_rotary(const RotaryArgs& args, Runtime& runtime) {
  // All argument checks come before the first driver call.
  const RotaryPlan plan = validate_rotary(args);
  const CUcontext context = ensure_context(plan.device);
  const DeviceInfo& info = device_info(plan.device);
  check_arch(kOp, info, plan.device, kMinSm, "bf16 arithmetic");
  RotaryLaunch launch;
  launch.params = plan.params;
  if (plan.grid == 0) return launch;

  Choice choice{};
  choice.head_dim = plan.head_dim;
  choice.style = plan.style == RotaryStyle::kGPTJ ? rope::kStyleGPTJ : rope::kStyleNeoX;
  choice.positions_i64 = plan.positions_i64 ? 1 : 0;
  static KernelTable<Choice> table;
  const LoadedProgram& program =
      table.get(runtime, context, choice, [&choice] { return make_spec(params_of(choice)); });
  launch.kernel = &program.kernel(plan.vector ? 0 : 1);
  launch.config.grid[0] = plan.grid;
  launch.config.block[0] = plan.block;
  return launch;
}

}  // namespace detail

void rotary(const RotaryArgs& args, CUstream stream, Runtime& runtime) {
  detail::RotaryLaunch l = detail::plan_rotary(args, runtime);
  if (l.kernel == nullptr) return;
  l.config.stream = stream;
  launch(*l.kernel, l.config, l.params);
}

}  // namespace kjit
