// kjit::fp8::quantize, the pure steps: validation (which also fills the kernels' Params) and the
// launch planner.
#include "runtime/ops/fp8/quantize.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <string>

namespace kjit::fp8::detail {
namespace {

constexpr const char* kOp = QuantizeOp::kInfo.name;

const char* gran_name(int g) { return granularity_name(static_cast<Granularity>(g)); }

/// A rank-2 tensor on `device` whose rows start 16-byte aligned and are contiguous.
void check_rows16(const char* name, const TensorRef& t, int device) {
  kjit::detail::check_rank(kOp, name, t, 2);
  kjit::detail::check_sizes(kOp, name, t);
  kjit::detail::check_device(kOp, name, t, device);
  kjit::detail::check_last_dim_contiguous(kOp, name, t);
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  if (address % 16 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} data pointer {:#x} must be 16-byte aligned, got {}", name, address,
                                        t.describe()));
  }
  const int64_t row_bytes = t.strides[0] * dtype_size(t.dtype);
  if (t.shape[0] > 1 && row_bytes % 16 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} row stride ({} elements = {} bytes) must be a multiple of 16 bytes, "
                                        "got {}",
                                        name, t.strides[0], row_bytes, t.describe()));
  }
  kjit::detail::check_not_null(kOp, name, t);
}

/// An f32 scale-group tensor on `device`, 4-byte aligned, of shape [d0] (rank 1) or [d0, d1]:
/// `what` it holds, or (null `what`) one f32 per group of `granularity`.
void check_groups(const char* name, const TensorRef& t, int device, int rank, int64_t d0, int64_t d1,
                  const char* what, const char* granularity = nullptr) {
  kjit::detail::check_rank(kOp, name, t, rank);
  kjit::detail::check_sizes(kOp, name, t);
  kjit::detail::check_dtype(kOp, name, t, DType::kF32);
  kjit::detail::check_device(kOp, name, t, device);
  if (t.shape[0] != d0 || (rank == 2 && t.shape[1] != d1)) {
    const std::string shape = rank == 1 ? fmt::format("[{}]", d0) : fmt::format("[{}, {}]", d0, d1);
    const std::string held = what ? std::string(what) : fmt::format("(one f32 per {} group)", granularity);
    kjit::detail::fail(kOp, fmt::format("{} must be {} {}, got {}", name, shape, held, t.describe()));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
    kjit::detail::fail(kOp, fmt::format("{} data pointer must be 4-byte aligned, got {}", name, t.describe()));
  }
  kjit::detail::check_not_null(kOp, name, t);
}

}  // namespace

QuantizeDims QuantizeOp::validate(const QuantizeArgs& args) {
  using kjit::detail::fail;
  const TensorRef& x = args.x;
  const TensorRef& y = args.y;
  QuantizeDims q;
  q.device = kjit::detail::check_leading(kOp, "x", x, 2);
  kjit::detail::check_dtype(kOp, "x", x, {DType::kBF16, DType::kF16, DType::kF32});
  check_rows16("x", x, q.device);
  q.in = x.dtype == DType::kBF16 ? kInBF16 : x.dtype == DType::kF16 ? kInF16 : kInF32;
  q.rows = x.shape[0];
  q.cols = x.shape[1];
  if (q.cols % 16 != 0) {
    fail(kOp, fmt::format("x cols (dim 1) must be a multiple of 16 (16-byte vectors never straddle a 128-column "
                          "block), got {}",
                          x.describe()));
  }
  kjit::detail::check_dtype(kOp, "y", y, {DType::kE4M3, DType::kE5M2});
  check_rows16("y", y, q.device);
  kjit::detail::check_dim(kOp, "y", y, 0, q.rows, "rows (x dim 0)");
  kjit::detail::check_dim(kOp, "y", y, 1, q.cols, "cols (x dim 1)");
  q.fmt = y.dtype == DType::kE4M3 ? kFormatE4M3 : kFormatE5M2;
  q.pow2 = args.pow2_scale;
  if (q.rows > INT32_MAX || q.cols > INT32_MAX / 2) {
    fail(kOp, fmt::format("rows must stay below 2^31 and cols below 2^30, got {}", x.describe()));
  }

  const bool has_amax = args.amax.ndim != 0;
  const bool has_scale_inv = args.scale_inv.ndim != 0;
  QuantizeParams& p = q.params;
  p.x = x.data;
  p.y = y.data;
  p.rows = q.rows;
  p.cols = q.cols;
  p.x_stride = x.strides[0];
  p.y_stride = y.strides[0];
  p.col_blocks = static_cast<int32_t>(kjit::detail::ceil_div(q.cols, kScaleBlock));
  p.multiplier_value = args.multiplier_value;

  switch (args.granularity) {
    case Granularity::kTensor: {
      q.granularity = kGranTensor;
      q.dynamic = args.dynamic;
      if (args.dynamic) {
        if (args.multiplier.ndim != 0) {
          fail(kOp, "multiplier must be absent (ndim 0) when dynamic = true: the multiplier is fmt_max / amax of "
                    "this call");
        }
        if (!has_amax) fail(kOp, "amax ([1] f32) is required when dynamic = true: the first pass reduces into it");
      } else if (args.multiplier.ndim != 0) {
        check_groups("multiplier", args.multiplier, q.device, 1, 1, 0, "(one f32 multiplier)");
        p.multiplier = static_cast<const float*>(args.multiplier.data);
      } else {
        const float m = args.multiplier_value;
        if (!(std::isfinite(m) && m >= FLT_MIN)) {
          fail(kOp, fmt::format("multiplier_value must be positive, finite and normal (>= {}), got {}", FLT_MIN, m));
        }
      }
      if (has_amax) check_groups("amax", args.amax, q.device, 1, 1, 0, "(one f32 per tensor)");
      if (has_scale_inv) check_groups("scale_inv", args.scale_inv, q.device, 1, 1, 0, "(one f32 per tensor)");
      // Both compact: one long row, no per-vector division in the kernel.
      q.collapse = x.strides[0] == q.cols && y.strides[0] == q.cols;
      if (q.collapse) {
        p.cols = q.rows * q.cols;
        p.rows = 1;
        p.x_stride = p.y_stride = p.cols;
      }
      // The row of a vector (kjit/fast_div.h); an empty tensor (no vectors) divides nothing.
      p.vpr_div = kjit::fast_div64_of(static_cast<uint64_t>(std::max<int64_t>(p.cols / (q.in == kInF32 ? 4 : 8), 1)));
      break;
    }
    case Granularity::kRow:
    case Granularity::kBlock1x128:
    case Granularity::kBlock128x128: {
      q.granularity = static_cast<int>(args.granularity);  // the family's code (names.cc)
      if (args.dynamic) {
        fail(kOp, fmt::format("dynamic applies to kTensor only: {} multipliers are always computed from their "
                              "group's amax",
                              gran_name(q.granularity)));
      }
      if (args.multiplier.ndim != 0) {
        fail(kOp, fmt::format("multiplier must be absent (ndim 0) for {} granularity: multipliers are computed",
                              gran_name(q.granularity)));
      }
      if (!has_scale_inv) {
        fail(kOp, fmt::format("scale_inv (f32) is required for {} granularity: it receives the dequant scales",
                              gran_name(q.granularity)));
      }
      const TensorRef* outs[2] = {&args.scale_inv, has_amax ? &args.amax : nullptr};
      const char* names[2] = {"scale_inv", "amax"};
      const ScaleShape groups = scale_shape(args.granularity, q.rows, q.cols);
      for (int i = 0; i < 2; ++i) {
        if (outs[i]) {
          check_groups(names[i], *outs[i], q.device, groups.ndim, groups.shape[0], groups.shape[1], nullptr,
                       gran_name(q.granularity));
        }
      }
      if (has_amax && (args.amax.strides[0] != args.scale_inv.strides[0] ||
                       (args.amax.ndim == 2 && args.amax.shape[1] > 1 &&
                        args.amax.strides[1] != args.scale_inv.strides[1]))) {
        fail(kOp, fmt::format("amax and scale_inv must have the same strides, got {} and {}", args.amax.describe(),
                              args.scale_inv.describe()));
      }
      p.s_stride0 = args.scale_inv.strides[0];
      p.s_stride1 = args.scale_inv.ndim == 2 ? args.scale_inv.strides[1] : 0;
      if (q.granularity == kGranBlock128x128 && kjit::detail::ceil_div(q.rows, kScaleBlock) > 65535) {
        fail(kOp, fmt::format("128x128 blocks: at most 65535 row blocks, got {}", x.describe()));
      }
      break;
    }
    default: fail(kOp, "granularity is not a Granularity value");
  }
  p.amax = has_amax ? static_cast<float*>(args.amax.data) : nullptr;
  p.scale_inv = has_scale_inv ? static_cast<float*>(args.scale_inv.data) : nullptr;
  return q;
}

QuantizePlan QuantizeOp::plan(const QuantizeDims& q, const DeviceInfo& info) {
  kjit::detail::check_arch(kOp, info, q.device, kInfo.min_sm, kInfo.needs);
  QuantizePlan plan;
  const int vec = q.in == kInF32 ? 4 : 8;
  const int64_t vectors = q.params.rows * (q.params.cols / vec);
  QuantizeStep s;
  switch (q.granularity) {
    case kGranTensor: {
      plan.zero_amax = q.params.amax != nullptr;
      // One CTA per kTensorThreads · kTensorUnroll vectors, not a grid-stride loop over a wave:
      // each CTA issues all its loads at once and retires, and the block scheduler balances the
      // SMs. Measured on the H200 (2026-11-30, 16384×7168 bf16 → E4M3 + amax): 3.63 TB/s against
      // 3.23 with 8 CTAs per SM looping; 8 loads per thread instead of 4 gave 3.58 (and 3.39
      // looping). The kernel keeps its grid-stride loop for tensors past the grid limit.
      const int64_t want = kjit::detail::ceil_div(std::max<int64_t>(vectors, 1), int64_t{kTensorThreads} * kTensorUnroll);
      s.grid[0] = static_cast<uint32_t>(std::clamp<int64_t>(want, 1, INT32_MAX));
      s.block = kTensorThreads;
      if (q.dynamic) {
        s.kernel = 2;  // the amax pass, then the conversion with the multiplier derived from it
        plan.step[plan.steps++] = s;
        s.kernel = 1;
      } else {
        s.kernel = 0;
      }
      plan.step[plan.steps++] = s;
      break;
    }
    case kGranRow: {
      if (q.rows == 0) break;
      const int64_t vpr = q.cols / vec;
      s.grid[0] = static_cast<uint32_t>(q.rows);
      s.block = static_cast<uint32_t>(
          std::clamp<int64_t>(kjit::detail::ceil_div(kjit::detail::ceil_div(vpr, kRowCache), 32) * 32, 32, kRowMaxThreads));
      plan.step[plan.steps++] = s;
      break;
    }
    case kGranBlock1x128: {
      const int64_t blocks = q.rows * q.params.col_blocks;
      if (blocks == 0) break;
      const int group = kScaleBlock / vec;
      const int64_t per_cta = int64_t{kBlockThreads / group} * kBlockUnroll;
      s.grid[0] = static_cast<uint32_t>(kjit::detail::ceil_div(blocks, per_cta));
      s.block = kBlockThreads;
      plan.step[plan.steps++] = s;
      break;
    }
    default: {
      if (q.rows == 0 || q.params.col_blocks == 0) break;
      s.grid[0] = static_cast<uint32_t>(q.params.col_blocks);
      s.grid[1] = static_cast<uint32_t>(kjit::detail::ceil_div(q.rows, kScaleBlock));
      s.block = kBlockThreads;
      plan.step[plan.steps++] = s;
      break;
    }
  }
  if (plan.steps > 0) {
    plan.choice.family = &quantize_family();
    plan.choice.point = quantize_family().point({q.in, q.fmt, q.granularity, q.pow2 ? 1 : 0});
  }
  return plan;
}

}  // namespace kjit::fp8::detail
