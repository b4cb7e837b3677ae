// KJIT_JIT=async on the GPU for decode, dense prefill and the FP8 GEMM (the fixture and its two
// checks: tests/gpu/async_jit_fixture.hpp). For each op:
//   - with an empty tuning table on a fresh cache nothing is built, so there is no fallback: the
//     call compiles on its own thread as under KJIT_JIT=on, says so (no_fallback), and its
//     results agree with the float64 reference;
//   - a tuning table pushed into the process names a plan no one compiled; the op's calls run a
//     fallback (the built-in plan's program, built by a warm-up under KJIT_JIT=on) whose results
//     agree with the reference within the op's tolerance, and once the background compile ends
//     the calls run the tuned plan, again within tolerance. Decode: rows=16 and 3 splits tuned
//     (the built-in plan, rows=8, takes 8 splits on an H100: more workspace than the tuned plan's,
//     for which the call's workspace is sized, so rows=8 serves at the table's 3 splits); dense
//     prefill: the kernel; the FP8 GEMM: tile and stages.
// The paged attention ops: async_jit_paged_test.cc; the fp8 SWA MLA decode: async_jit_swa_test.cc;
// rotary and quantize, which have no performance-only parameter: async_jit_untunable_test.cc. The
// same flow on the stand-in driver, where the kernel launched is checked by name, is
// tests/runtime/async_jit_test.cc. Skips without a GPU.
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/families/fp8.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/tuned.hpp"
#include "tests/gpu/async_jit_fixture.hpp"
#include "tests/runtime/decode_dims.hpp"
#include "tests/runtime/tuned_table.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace kd = kjit::detail;

using kjit::testing::AsyncJitGpu;
using kjit::testing::Outcome;
using kjit::testing::attention_outcome;

/// The decode case of both tests: B2 L3000 Hq32/Hkv8 D128 with lse.
kjit::testing::DecodeCase decode_case() {
  kjit::testing::DecodeCase c;
  c.batch = 2;
  c.max_kv_len = 3000;
  c.q_heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.lse = true;
  return c;
}

Outcome run_decode(const kjit::testing::DecodeCase& c, uint64_t seed, kjit::Runtime& rt) {
  return attention_outcome(kjit::testing::run_decode_case(c, seed, rt));
}

TEST_F(AsyncJitGpu, DecodeWithNothingBuiltCompilesOnTheCallingThread) {
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kjit::testing::DecodeCase c = decode_case();
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_decode(c, seed, r); });
}

TEST_F(AsyncJitGpu, DecodeRunsItsBuiltInPlanUntilTheTunedOneIsBuilt) {
  const kjit::testing::DecodeCase c = decode_case();
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_decode(c, seed, r); };
  warm_up(run);  // the built-in plan (rows=8) and its merge
  ad::DecodeDims d = decode_dims(c.batch, c.max_kv_len, c.q_heads, c.kv_heads, c.head_dim);
  d.device = kjit::testing::current_device();
  // The built-in plan splits (so the warm-up built the merge the tuned plan needs too).
  const ad::DecodePlan builtin = ad::DecodeOp::plan(d, kjit::device_info(d.device));
  ASSERT_GT(builtin.num_splits, 1);
  // The pushed table: rows=16 (not built; the built-in plan's merge) and 3 splits for this call's
  // bucket.
  const kd::TunedChoice choice =
      varied_choice(kjit::attention::decode_family(), builtin.choice.point, {{"rows", "16"}}, {3});
  ASSERT_NO_FATAL_FAILURE(push_tuned_choice<ad::DecodeOp>(d.device, d, choice));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(rt, run, "the tuned plan: ");
}

/// The dense prefill case of both tests: B2 q/kv 300 Hq8/Hkv2 D128, causal, with lse.
kjit::testing::PrefillCase prefill_case() {
  kjit::testing::PrefillCase c;
  c.batch = 2;
  c.q_len = 300;
  c.kv_len = 300;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.causal = true;
  c.lse = true;
  return c;
}

Outcome run_prefill(const kjit::testing::PrefillCase& c, uint64_t seed, kjit::Runtime& rt) {
  return attention_outcome(kjit::testing::run_prefill_case(c, seed, rt));
}

TEST_F(AsyncJitGpu, PrefillWithNothingBuiltCompilesOnTheCallingThread) {
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  const kjit::testing::PrefillCase c = prefill_case();
  compiles_on_the_calling_thread(rt, [&c](uint64_t seed, kjit::Runtime& r) { return run_prefill(c, seed, r); });
}

TEST_F(AsyncJitGpu, PrefillRunsItsBuiltInKernelUntilTheTunedOneIsBuilt) {
  const kjit::testing::PrefillCase c = prefill_case();
  const auto run = [&c](uint64_t seed, kjit::Runtime& r) { return run_prefill(c, seed, r); };
  warm_up(run);  // the built-in kernel
  // The pushed table names an mma.sync kernel the warm-up did not build: block_m 64 where the
  // built-in plan is the wgmma kernel (sm_90a), else the other block_m.
  ad::PrefillDims d;
  d.device = kjit::testing::current_device();
  d.batch = c.batch;
  d.q_len = c.q_len;
  d.max_kv_len = c.kv_len;
  d.q_heads = c.q_heads;
  d.kv_heads = c.kv_heads;
  d.head_dim = c.head_dim;
  d.group = c.q_heads / c.kv_heads;
  d.causal = c.causal;
  d.has_lse = c.lse;
  const ad::PrefillPlan builtin = ad::PrefillOp::plan(d, kjit::device_info(d.device));
  const bool builtin_mma = builtin.choice.family == &kjit::attention::prefill_family();
  kd::TunedChoice choice;
  choice.family = &kjit::attention::prefill_family();
  choice.point = choice.family->point({128, builtin_mma && builtin.block_m == 64 ? 128 : 64, 0});
  ASSERT_NO_FATAL_FAILURE(push_tuned_choice<ad::PrefillOp>(d.device, d, choice));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(rt, run, "the tuned kernel: ");
}

/// D [m, n] bf16 = A [m, k] · B [n, k]ᵀ, e4m3, K-major, per-tensor scales (one f32 each).
kjit::fp8::GemmArgs gemm_args(void* a, void* b, void* d, void* scale_a, void* scale_b, int64_t m, int64_t n, int64_t k) {
  kjit::fp8::GemmArgs g;
  g.a = kjit::TensorRef(a, kjit::DType::kE4M3, {m, k}, {k, 1}, 0);
  g.b = kjit::TensorRef(b, kjit::DType::kE4M3, {n, k}, {k, 1}, 0);
  g.d = kjit::TensorRef(d, kjit::DType::kBF16, {m, n}, {n, 1}, 0);
  g.scale_a = kjit::TensorRef(scale_a, kjit::DType::kF32, {1}, {}, 0);
  g.scale_b = kjit::TensorRef(scale_b, kjit::DType::kF32, {1}, {}, 0);
  return g;
}

/// One FP8 GEMM D = A · Bᵀ (e4m3, per-tensor scales, bf16 D) on random operands from `seed`,
/// into a poisoned D, against the float64 reference (the attention tolerance: bf16 D).
Outcome run_gemm(int64_t m, int64_t n, int64_t k, uint64_t seed, kjit::Runtime& rt) {
  namespace kt = kjit::testing;
  std::mt19937_64 rng(seed);
  kt::Fp8GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a.resize(static_cast<size_t>(m * k));
  p.b.resize(static_cast<size_t>(n * k));
  auto finite_e4m3 = [&rng] {
    for (;;) {
      const uint8_t v = static_cast<uint8_t>(rng());
      if ((v & 0x7f) != 0x7f) return v;  // 0x7f / 0xff are e4m3's NaNs
    }
  };
  for (auto& v : p.a) v = finite_e4m3();
  for (auto& v : p.b) v = finite_e4m3();
  p.scale_a = {0.0123f};
  p.scale_b = {0.0071f};
  const std::vector<double> ref = kt::fp8_gemm_reference(p);
  kt::DeviceBuffer da = kt::to_device(p.a), db = kt::to_device(p.b);
  kt::DeviceBuffer dsa = kt::to_device(p.scale_a), dsb = kt::to_device(p.scale_b);
  kt::DeviceBuffer dd(static_cast<size_t>(m * n * 2));
  dd.fill(0xFF);  // poisoned: NaN bf16
  kjit::fp8::gemm(gemm_args(da.get(), db.get(), dd.get(), dsa.get(), dsb.get(), m, n, k), nullptr, rt);
  kjit::testing::synchronize();
  const std::vector<uint16_t> bits = dd.download<uint16_t>(static_cast<size_t>(m * n));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = kt::bf16_to_float(bits[i]);
  const kt::Comparison cmp = kt::compare(out, ref);
  return {cmp.ok(kt::kAsyncOutTol), cmp.describe() + "; seed " + std::to_string(seed)};
}

TEST_F(AsyncJitGpu, GemmWithNothingBuiltCompilesOnTheCallingThread) {
  if (kjit::device_info(kjit::testing::current_device()).target().sm() < kjit::fp8::kMinSm) {
    GTEST_SKIP() << "FP8 needs sm_89+";
  }
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  compiles_on_the_calling_thread(rt, [](uint64_t seed, kjit::Runtime& r) { return run_gemm(256, 1024, 4096, seed, r); });
}

TEST_F(AsyncJitGpu, GemmRunsItsBuiltInTileUntilTheTunedOneIsBuilt) {
  if (!has_wgmma()) GTEST_SKIP() << "the tuned tile is the sm_90a wgmma kernel's";
  constexpr int64_t m = 256, n = 1024, k = 4096;
  const auto run = [](uint64_t seed, kjit::Runtime& r) { return run_gemm(m, n, k, seed, r); };
  warm_up(run);  // the built-in plan's program
  // The pushed table names a tile and ring the warm-up did not build: 128x96 over 6 stages,
  // persistent (or 128x112 where the built-in plan took 128x96).
  namespace fd = kjit::fp8::detail;
  kjit::testing::DeviceBuffer da(16), db(16), dd(16), ds(16);  // validation reads only the shapes
  const fd::GemmDims d = fd::validate_gemm(gemm_args(da.get(), db.get(), dd.get(), ds.get(), ds.get(), m, n, k));
  const fd::GemmPlan builtin = fd::GemmOp::plan(d, kjit::device_info(kjit::testing::current_device()));
  const kjit::Family& f = kjit::fp8::gemm_family();
  const bool was_96 = f.value(builtin.choice.point, "tile").text == "128x96";
  const kd::TunedChoice choice =
      varied_choice(f, builtin.choice.point, {{"tile", was_96 ? "128x112" : "128x96"}, {"stages", "6"}}, {1, 1});
  ASSERT_NO_FATAL_FAILURE(push_tuned_choice<fd::GemmOp>(kjit::testing::current_device(), d, choice));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(rt, run, "the tuned tile: ");
}

}  // namespace
