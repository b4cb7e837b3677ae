// KJIT_JIT=async on the GPU for the ops without a performance-only parameter: rotary (style,
// head_dim and the positions' dtype) and FP8 quantize (input type, format, granularity, pow2).
// Every parameter of theirs changes what the kernel computes, so no other program can stand in
// for a missing one and a tuning table has nothing to name (they are never tuned): under async
// a miss has no fallback, and the call compiles on its own thread as under KJIT_JIT=on and says
// so with one no_fallback event (tests/gpu/async_jit_fixture.hpp's compiles_on_the_calling_thread),
// both on a fresh cache and with another specialization of the family built (a warm-up under
// KJIT_JIT=on). Every result against the reference: rotary within 1 bf16 ulp and kRotaryTol,
// quantize bit for bit. Skips without a GPU (quantize below sm_89).
#include <kjit/device.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/ops/rotary.hpp>

#include "runtime/families/fp8.hpp"
#include "tests/gpu/async_jit_fixture.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_fp8.hpp"
#include "tools/testing/reference_rotary.hpp"

#include <gtest/gtest.h>

namespace {

namespace kt = kjit::testing;
using kt::AsyncJitGpu;
using kt::Outcome;

Outcome run_rotary(const kt::RotaryCase& c, uint64_t seed, kjit::Runtime& rt) {
  const kt::RotaryCaseResult r = kt::run_rotary_case(c, seed, rt);
  return {r.ok(), c.describe() + ": " + r.describe()};
}

Outcome run_quantize(const kt::QuantizeCase& c, uint64_t seed, kjit::Runtime& rt) {
  const kt::QuantizeCaseResult r = kt::run_quantize_case(c, seed, rt);
  return {r.ok(), c.describe() + ": " + r.describe()};
}

bool has_fp8() { return kjit::device_info(kt::current_device()).target().sm() >= kjit::fp8::kMinSm; }

TEST_F(AsyncJitGpu, RotaryWithNothingBuiltCompilesOnTheCallingThread) {
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kt::RotaryCase c;
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_rotary(c, seed, r); });
}

TEST_F(AsyncJitGpu, RotaryWithAnotherStyleBuiltCompilesOnTheCallingThread) {
  kt::RotaryCase c;
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_rotary(c, seed, r); };
  warm_up(run);  // the NeoX program
  c.style = kjit::RotaryStyle::kGPTJ;  // another pairing: another result
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  compiles_on_the_calling_thread(rt, run);
}

TEST_F(AsyncJitGpu, QuantizeWithNothingBuiltCompilesOnTheCallingThread) {
  if (!has_fp8()) GTEST_SKIP() << "FP8 needs sm_89+";
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kt::QuantizeCase c;
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_quantize(c, seed, r); });
}

TEST_F(AsyncJitGpu, QuantizeWithAnotherFormatBuiltCompilesOnTheCallingThread) {
  if (!has_fp8()) GTEST_SKIP() << "FP8 needs sm_89+";
  kt::QuantizeCase c;
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_quantize(c, seed, r); };
  warm_up(run);  // the e4m3 program
  c.format = kt::Fp8Format::kE5M2;  // another format: other bytes
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  compiles_on_the_calling_thread(rt, run);
}

}  // namespace
