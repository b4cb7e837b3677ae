// KJIT_JIT=async on the GPU for the paged attention ops (the fixture and its two checks:
// tests/gpu/async_jit_fixture.hpp):
//   - paged decode (rows and split count performance-only): with nothing built the call
//     compiles on its own thread and says so; with the built-in plan built and a pushed table
//     naming rows=16 and 3 splits, a fallback serves (the family default rows=8 at the table's
//     3 splits: the workspace is sized for the tuned plan, and the built-in plan's split count
//     needs more), then the tuned plan;
//   - the ragged paged prefill (the kernel and the pack_gqa knob tuned at the plan step; the
//     run step's work map fixes the tile and the packing, and its kernel variant is
//     performance-only): with nothing built the call compiles on its own thread and says so; on
//     sm_90a, with the built-in plan built (the wgmma kernel, the group's q heads packed) and a
//     pushed table naming the mma.sync kernel unpacked (pack_gqa 0; the case and the table:
//     tests/runtime/paged_prefill_tuning.hpp), the unpacked work map runs on the built wgmma
//     kernel, then on the tuned mma.sync kernel.
// Every result against the float64 reference. Skips without a GPU.
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "tests/gpu/async_jit_fixture.hpp"
#include "tests/runtime/paged_prefill_tuning.hpp"
#include "tests/runtime/tuned_table.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

namespace {

namespace ad = kjit::attention::detail;
namespace kd = kjit::detail;
namespace kt = kjit::testing;
using kt::AsyncJitGpu;
using kt::Outcome;

/// Paged decode of two requests (1500 and 2900 tokens, planned for kv_len_hint 3000), Hq16/Hkv2
/// (group 8), D128, pages of 16, with lse: 4 CTAs per split, so the built-in plan splits.
kt::PagedDecodeCase paged_decode_case() {
  kt::PagedDecodeCase c;
  c.kv_lens = {1500, 2900};
  c.q_heads = 16;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.layout.page_size = 16;
  c.lse = true;
  c.kv_len_hint = 3000;
  return c;
}

Outcome run_paged_decode(const kt::PagedDecodeCase& c, uint64_t seed, kjit::Runtime& rt) {
  return kt::attention_outcome(kt::run_paged_decode_case(c, seed, rt));
}

TEST_F(AsyncJitGpu, PagedDecodeWithNothingBuiltCompilesOnTheCallingThread) {
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kt::PagedDecodeCase c = paged_decode_case();
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_paged_decode(c, seed, r); });
}

TEST_F(AsyncJitGpu, PagedDecodeRunsAFallbackUntilTheTunedPlanIsBuilt) {
  const kt::PagedDecodeCase c = paged_decode_case();
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_paged_decode(c, seed, r); };
  warm_up(run);  // the built-in plan (rows=8) and its merge
  // What the tuning key and the planner read of the case's arguments.
  ad::PagedDecodeDims d;
  d.device = kt::current_device();
  d.batch = static_cast<int64_t>(c.kv_lens.size());
  d.q_heads = c.q_heads;
  d.head_dim = c.head_dim;
  d.group = c.q_heads / c.kv_heads;
  d.cache.kv_heads = c.kv_heads;
  d.cache.page_size = c.layout.page_size;
  d.kv_len_hint = c.kv_len_hint;
  const ad::DecodePlan builtin = ad::PagedDecodeOp::plan(d, kjit::device_info(d.device));
  ASSERT_GT(builtin.num_splits, 1) << "the warm-up built the merge the tuned plan needs";
  // The pushed table: rows=16 (not built; the built-in plan's merge) and 3 splits for this
  // call's bucket.
  const kd::TunedChoice choice =
      varied_choice(kjit::attention::paged_decode_family(), builtin.choice.point, {{"rows", "16"}}, {3});
  ASSERT_NO_FATAL_FAILURE(push_tuned_choice<ad::PagedDecodeOp>(d.device, d, choice));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(rt, run, "the tuned plan: ");
}

Outcome run_paged_prefill(const kt::PagedPrefillCase& c, uint64_t seed, kjit::Runtime& rt) {
  return kt::attention_outcome(kt::run_paged_prefill_case(c, seed, rt));
}

TEST_F(AsyncJitGpu, PagedPrefillWithNothingBuiltCompilesOnTheCallingThread) {
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kt::PagedPrefillCase c = async_paged_prefill_case();
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_paged_prefill(c, seed, r); });
}

TEST_F(AsyncJitGpu, PagedPrefillRunsTheBuiltKernelUntilTheTunedOneIsBuilt) {
  if (!has_wgmma()) GTEST_SKIP() << "the fallback is the sm_90a wgmma kernel: elsewhere one kernel runs each tile";
  const kt::PagedPrefillCase c = async_paged_prefill_case();
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_paged_prefill(c, seed, r); };
  warm_up(run);  // the built-in plan's kernel
  ASSERT_NO_FATAL_FAILURE(push_paged_prefill_mma(c, kt::current_device()));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(rt, run, "the tuned kernel: ");
}

}  // namespace
