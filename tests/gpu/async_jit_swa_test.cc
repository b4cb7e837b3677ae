// KJIT_JIT=async on the GPU for the fused fp8 SWA MLA decode (the fixture and its two checks:
// tests/gpu/async_jit_fixture.hpp). Its family's group (query heads per CTA) and kv_tile are
// performance-only, and so is the split count; window and cache format are not.
//   - with nothing built the call compiles on its own thread and says so;
//   - with the built-in plan built and a pushed table naming another group at kv_tile 64 and 2
//     splits, a fallback serves (a built family default at the table's 2 splits, or the
//     built-in plan: whichever fits the workspace sized for the tuned plan), then the tuned plan.
// Every result against the float64 reference, at the op's tolerances (kSwaOutTol, kSwaLseTol).
// Skips without a GPU.
#include <kjit/device.hpp>
#include <kjit/ops/swa_decode.hpp>

#include "runtime/families/mla.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
#include "runtime/ops/tuned.hpp"
#include "tests/gpu/async_jit_fixture.hpp"
#include "tests/runtime/tuned_table.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_swa.hpp"

#include <gtest/gtest.h>

namespace {

namespace md = kjit::mla::detail;
namespace kd = kjit::detail;
namespace kt = kjit::testing;
using kt::AsyncJitGpu;
using kt::Outcome;

/// T8 NH128 W128 blocks of 256, e4m3, with lse: DeepSeek's decode shape at a small batch.
kt::SwaCase swa_case() {
  kt::SwaCase c;
  c.tokens = 8;
  c.heads = 128;
  c.window = 128;
  c.block_size = 256;
  c.format = kt::Fp8Format::kE4M3;
  c.lse = true;
  return c;
}

Outcome run_swa(const kt::SwaCase& c, uint64_t seed, kjit::Runtime& rt) {
  return kt::attention_outcome(kt::run_swa_case(c, seed, rt), kt::kSwaOutTol, kt::kSwaLseTol);
}

TEST_F(AsyncJitGpu, SwaDecodeWithNothingBuiltCompilesOnTheCallingThread) {
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kt::SwaCase c = swa_case();
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_swa(c, seed, r); });
}

TEST_F(AsyncJitGpu, SwaDecodeRunsAFallbackUntilTheTunedPlanIsBuilt) {
  const kt::SwaCase c = swa_case();
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_swa(c, seed, r); };
  warm_up(run);  // the built-in plan's program
  // What the tuning key and the planner read of the case's arguments.
  md::SwaDims d;
  d.device = kt::current_device();
  d.tokens = c.tokens;
  d.heads = c.heads;
  d.head_dim = kjit::mla::kSwaHeadDim;
  d.window = c.window;
  d.block_size = c.block_size;
  d.cache = kjit::mla::kSwaCacheE4M3;
  d.has_lse = c.lse;
  const md::SwaPlan builtin = md::SwaDecodeOp::plan(d, kjit::device_info(d.device));
  // The pushed table: another group (32 where the built-in plan takes 16, else 16) at kv_tile 64,
  // which no warm-up built, and 2 splits, without a cluster (which the built-in plan for few tokens
  // may have on sm_90+).
  const kd::TunedChoice choice = varied_choice(
      kjit::mla::swa_decode_family(), builtin.choice.point,
      {{"group", builtin.heads_per_cta == 16 ? "32" : "16"}, {"kv_tile", "64"}, {"cluster_split", "1"}}, {2});
  ASSERT_NO_FATAL_FAILURE(push_tuned_choice<md::SwaDecodeOp>(d.device, d, choice));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(rt, run, "the tuned plan: ");
}

}  // namespace
