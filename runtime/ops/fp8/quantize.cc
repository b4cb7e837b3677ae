// kjit::fp8::quantize through the op pipeline: the launch value (amax reset, then one or two
// kernels), the delayed-scaling step and the public entry.
#include "runtime/ops/fp8/quantize.hpp"

#include "runtime/driver.hpp"

namespace kjit::fp8::detail {

void QuantizeLaunch::launch(CUstream stream) const {
  if (zero_amax != nullptr) {
    KJIT_CU(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(zero_amax), 0, sizeof(float), stream));
  }
  kernels.launch(stream);
}

QuantizeOp::Launch QuantizeOp::build(const QuantizeArgs& /*args*/, const QuantizeDims& q, const QuantizePlan& plan,
                                     const LoadedProgram* program, kjit::detail::Workspace /*workspace*/,
                                     const DeviceInfo& /*info*/) {
  Launch l;
  if (plan.zero_amax) l.zero_amax = q.params.amax;
  if (program == nullptr) return l;
  auto fill = [&](auto& step, const QuantizeStep& s) {
    step.kernel = &program->kernel(static_cast<size_t>(s.kernel));
    step.config.grid[0] = s.grid[0];
    step.config.grid[1] = s.grid[1];
    step.config.block[0] = s.block;
    step.params = q.params;
  };
  if (plan.steps > 0) fill(l.kernels.step<0>(), plan.step[0]);
  if (plan.steps > 1) fill(l.kernels.step<1>(), plan.step[1]);
  return l;
}

kjit::detail::Step<DelayedScalingParams> delayed_scaling_step(const DelayedScalingParams& params, int in, int fmt,
                                                              CUcontext context, Runtime& runtime,
                                                              const CUstream* stream) {
  kjit::detail::Choice choice;
  choice.family = &quantize_family();
  choice.point = quantize_family().point({in, fmt, kGranTensor, 0});
  kjit::detail::Step<DelayedScalingParams> step;
  step.kernel = &kjit::detail::load<QuantizeOp>(choice, runtime, context, stream).kernel(3);
  step.config.block[0] = 32;
  step.params = params;
  return step;
}

}  // namespace kjit::fp8::detail

namespace kjit::fp8 {

void quantize(const QuantizeArgs& args, CUstream stream, Runtime& runtime) {
  kjit::detail::run<detail::QuantizeOp>(args, {}, stream, runtime);
}

}  // namespace kjit::fp8
