// kjit::fp8::Linear: quantize, gemm and the delayed-scaling update strung together over device
// buffers allocated once, at construction.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>

#include "fp8/quantize_params.h"
#include "runtime/driver.hpp"
#include "runtime/families/fp8.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <utility>

namespace kjit::fp8 {
namespace {

constexpr const char* kLinear = "kjit::fp8::Linear";

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

int fmt_of(DType t) { return t == DType::kE4M3 ? kFormatE4M3 : kFormatE5M2; }

int in_code(DType t) { return t == DType::kBF16 ? kInBF16 : t == DType::kF16 ? kInF16 : kInF32; }

void check_config(const LinearConfig& c) {
  using kjit::detail::fail;
  if (c.in_features <= 0 || c.in_features % 16 != 0) {
    fail(kLinear, fmt::format("in_features must be a positive multiple of 16, got {}", c.in_features));
  }
  if (c.out_features <= 0) fail(kLinear, fmt::format("out_features must be positive, got {}", c.out_features));
  if (c.max_tokens <= 0) fail(kLinear, fmt::format("max_tokens must be positive, got {}", c.max_tokens));
  if (c.in_features > INT32_MAX / 2 || c.out_features > INT32_MAX / 2 || c.max_tokens > INT32_MAX / 2) {
    fail(kLinear, "in_features, out_features and max_tokens must stay below 2^30");
  }
  for (DType t : {c.activation_format, c.weight_format}) {
    if (t != DType::kE4M3 && t != DType::kE5M2) {
      fail(kLinear, fmt::format("activation_format and weight_format must be e4m3 or e5m2, got {}", dtype_name(t)));
    }
  }
  const bool block_w = c.weight_granularity == Granularity::kBlock128x128;
  if (c.weight_granularity != Granularity::kTensor && c.weight_granularity != Granularity::kRow && !block_w) {
    fail(kLinear, "weight_granularity must be kTensor, kRow or kBlock128x128");
  }
  const bool block_x = c.recipe == Recipe::kDynamicBlock;
  if (block_x != block_w) {
    fail(kLinear, "Recipe::kDynamicBlock and weight_granularity kBlock128x128 go together (the block-scaled GEMM "
                  "needs 1x128 activation and 128x128 weight scales)");
  }
  if (block_x && c.in_features % kScaleBlock != 0) {
    fail(kLinear, fmt::format("in_features must be a multiple of 128 with block scaling, got {}", c.in_features));
  }
  if (c.recipe != Recipe::kDynamicTensor && c.recipe != Recipe::kDynamicRow && c.recipe != Recipe::kDynamicBlock &&
      c.recipe != Recipe::kDelayed) {
    fail(kLinear, "recipe is not a Recipe value");
  }
  if (c.recipe == Recipe::kDelayed) {
    if (c.history_len < 1 || c.history_len > 65536) {
      fail(kLinear, fmt::format("history_len must be in [1, 65536], got {}", c.history_len));
    }
    if (c.margin < 0 || c.margin > 64) fail(kLinear, fmt::format("margin must be in [0, 64], got {}", c.margin));
  }
}

}  // namespace

Linear::DeviceMemory::DeviceMemory(size_t bytes) { KJIT_CU(cuMemAlloc(&base_, bytes)); }

Linear::DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept : base_(std::exchange(other.base_, 0)) {}

Linear::DeviceMemory& Linear::DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    DeviceMemory old(std::move(*this));
    base_ = std::exchange(other.base_, 0);
  }
  return *this;
}

Linear::DeviceMemory::~DeviceMemory() {
  if (base_ == 0) return;
  if (const kjit::detail::Driver* d = kjit::detail::try_driver()) d->cuMemFree(base_);
}

void* Linear::DeviceMemory::at(size_t offset) const noexcept {
  return base_ == 0 ? nullptr : reinterpret_cast<char*>(base_) + offset;
}

Linear::Linear(const LinearConfig& config, const TensorRef& weight, CUstream stream, Runtime& runtime)
    : config_(config), runtime_(&runtime) {
  check_config(config_);
  const int64_t n = config_.out_features, k = config_.in_features, t = config_.max_tokens;
  kjit::detail::check_rank(kLinear, "weight", weight, 2);
  kjit::detail::check_dim(kLinear, "weight", weight, 0, n, "out_features");
  kjit::detail::check_dim(kLinear, "weight", weight, 1, k, "in_features");
  kjit::detail::check_device(kLinear, "weight", weight, config_.device);
  kjit::detail::check_dtype(kLinear, "weight", weight, {DType::kBF16, DType::kF16, DType::kF32});

  kjit::detail::ensure_context(config_.device);
  kjit::detail::check_arch(kLinear, device_info(config_.device), config_.device, kMinSm, kMinSmNeeds);

  const bool block = config_.recipe == Recipe::kDynamicBlock;
  switch (config_.weight_granularity) {
    case Granularity::kTensor: w_scale_ndim_ = 1, w_scale_shape_[0] = 1; break;
    case Granularity::kRow: w_scale_ndim_ = 1, w_scale_shape_[0] = n; break;
    default: w_scale_ndim_ = 2, w_scale_shape_[0] = kjit::detail::ceil_div(n, kScaleBlock), w_scale_shape_[1] = k / kScaleBlock;
  }
  const int64_t w_scales = w_scale_shape_[0] * (w_scale_ndim_ == 2 ? w_scale_shape_[1] : 1);
  const int64_t x_scales = config_.recipe == Recipe::kDynamicRow ? t : block ? t * (k / kScaleBlock) : 1;
  const bool delayed = config_.recipe == Recipe::kDelayed;
  // One allocation, carved into 256-byte aligned pieces.
  size_t bytes = 0;
  auto carve = [&](size_t size) {
    const size_t at = bytes;
    bytes += align256(size);
    return at;
  };
  layout_.w_q = carve(static_cast<size_t>(n * k));
  layout_.w_scale_inv = carve(static_cast<size_t>(w_scales) * 4);
  layout_.x_q = carve(static_cast<size_t>(t * k));
  layout_.x_scale_inv = carve(static_cast<size_t>(x_scales) * 4);
  layout_.amax = carve(4);
  if (delayed) {
    layout_.history = carve(static_cast<size_t>(config_.history_len) * 4);
    layout_.step = carve(4);
    layout_.multiplier = carve(4);
  }
  memory_ = DeviceMemory(bytes);  // freed by its own destructor if anything below throws
  KJIT_CU(cuMemsetD8(reinterpret_cast<CUdeviceptr>(memory_.at(0)), 0, bytes));
  if (delayed) {
    const float one = 1.f;
    KJIT_CU(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(buffer<float>(layout_.multiplier)), &one, sizeof(one)));
  }
  QuantizeArgs q;
  q.x = weight;
  q.y = weight_fp8();
  q.granularity = config_.weight_granularity;
  q.scale_inv = weight_scale_inv();
  if (q.granularity == Granularity::kTensor) {
    q.dynamic = true;
    q.amax = TensorRef(buffer<float>(layout_.amax), DType::kF32, {1}, {}, config_.device);  // scratch for every recipe
  }
  fp8::quantize(q, stream, *runtime_);
  KJIT_CU(cuStreamSynchronize(stream));
}

TensorRef Linear::weight_fp8() const {
  return TensorRef(buffer<void>(layout_.w_q), config_.weight_format, {config_.out_features, config_.in_features}, {}, config_.device);
}

TensorRef Linear::weight_scale_inv() const {
  if (w_scale_ndim_ == 1) return TensorRef(buffer<float>(layout_.w_scale_inv), DType::kF32, {w_scale_shape_[0]}, {}, config_.device);
  return TensorRef(buffer<float>(layout_.w_scale_inv), DType::kF32, {w_scale_shape_[0], w_scale_shape_[1]}, {}, config_.device);
}

TensorRef Linear::input_fp8() const {
  return TensorRef(buffer<void>(layout_.x_q), config_.activation_format, {config_.max_tokens, config_.in_features}, {}, config_.device);
}

TensorRef Linear::input_scale_inv() const {
  switch (config_.recipe) {
    case Recipe::kDynamicRow: return TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {config_.max_tokens}, {}, config_.device);
    case Recipe::kDynamicBlock:
      return TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {config_.max_tokens, config_.in_features / kScaleBlock}, {},
                       config_.device);
    default: return TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {1}, {}, config_.device);
  }
}

TensorRef Linear::amax_history() const {
  float* history = buffer<float>(layout_.history);
  if (!history) return TensorRef();
  return TensorRef(history, DType::kF32, {config_.history_len}, {}, config_.device);
}

TensorRef Linear::step() const {
  int32_t* step = buffer<int32_t>(layout_.step);
  if (!step) return TensorRef();
  return TensorRef(step, DType::kI32, {1}, {}, config_.device);
}

TensorRef Linear::multiplier() const {
  float* multiplier = buffer<float>(layout_.multiplier);
  if (!multiplier) return TensorRef();
  return TensorRef(multiplier, DType::kF32, {1}, {}, config_.device);
}

TensorRef Linear::amax() const {
  if (config_.recipe != Recipe::kDynamicTensor && config_.recipe != Recipe::kDelayed) return TensorRef();
  return TensorRef(buffer<float>(layout_.amax), DType::kF32, {1}, {}, config_.device);
}

void Linear::forward(const TensorRef& x, const TensorRef& y, CUstream stream, const TensorRef& bias) {
  using kjit::detail::fail;
  if (memory_.at(0) == nullptr) fail(kLinear, "forward() on a moved-from Linear");
  kjit::detail::check_rank(kLinear, "x", x, 2);
  kjit::detail::check_dim(kLinear, "x", x, 1, config_.in_features, "in_features");
  kjit::detail::check_dtype(kLinear, "x", x, {DType::kBF16, DType::kF16, DType::kF32});
  kjit::detail::check_device(kLinear, "x", x, config_.device);
  const int64_t m = x.shape[0];
  if (m < 0 || m > config_.max_tokens) {
    fail(kLinear, fmt::format("x has {} rows; at most max_tokens = {} (the activation buffers' size), got {}", m,
                              config_.max_tokens, x.describe()));
  }
  kjit::detail::check_rank(kLinear, "y", y, 2);
  kjit::detail::check_dim(kLinear, "y", y, 0, m, "tokens (x dim 0)");
  kjit::detail::check_dim(kLinear, "y", y, 1, config_.out_features, "out_features");
  if (m == 0) return;
  const int64_t k = config_.in_features;

  QuantizeArgs q;
  q.x = x;
  q.y = TensorRef(buffer<void>(layout_.x_q), config_.activation_format, {m, k}, {}, config_.device);
  switch (config_.recipe) {
    case Recipe::kDynamicTensor:
      q.granularity = Granularity::kTensor;
      q.dynamic = true;
      q.amax = amax();
      q.scale_inv = TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {1}, {}, config_.device);
      break;
    case Recipe::kDynamicRow:
      q.granularity = Granularity::kRow;
      q.scale_inv = TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {m}, {}, config_.device);
      break;
    case Recipe::kDynamicBlock:
      q.granularity = Granularity::kBlock1x128;
      q.scale_inv = TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {m, k / kScaleBlock}, {}, config_.device);
      break;
    case Recipe::kDelayed:
      q.granularity = Granularity::kTensor;
      q.multiplier = multiplier();
      q.amax = amax();
      q.scale_inv = TensorRef(buffer<float>(layout_.x_scale_inv), DType::kF32, {1}, {}, config_.device);
      break;
  }
  fp8::quantize(q, stream, *runtime_);

  GemmArgs g;
  g.a = q.y;
  g.b = weight_fp8();
  g.d = y;
  g.scale_a = q.scale_inv;
  g.scale_b = weight_scale_inv();
  g.scale_mode = config_.recipe == Recipe::kDynamicBlock ? ScaleMode::kBlockwise : ScaleMode::kTensorwise;
  g.bias = bias;
  // The weight is written only by the constructor, and the quantize launched just above (a plain
  // launch, not an overlapping one) starts after all of that: the GEMM may load it before its wait.
  g.b_constant = true;
  fp8::gemm(g, stream, *runtime_);

  if (config_.recipe == Recipe::kDelayed) {
    DelayedScalingParams d{};
    d.amax = buffer<float>(layout_.amax);
    d.history = buffer<float>(layout_.history);
    d.step = buffer<int32_t>(layout_.step);
    d.multiplier = buffer<float>(layout_.multiplier);
    d.margin_scale = std::ldexp(1.f, config_.margin);
    d.history_len = config_.history_len;
    const CUcontext context = kjit::detail::ensure_context(config_.device);
    detail::delayed_scaling_step(d, in_code(x.dtype), fmt_of(config_.activation_format), context, *runtime_, &stream)
        .launch(stream);
  }
}

}  // namespace kjit::fp8
