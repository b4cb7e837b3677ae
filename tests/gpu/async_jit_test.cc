// KJIT_JIT=async on the GPU: a tuning table pushed into a process names a plan no one compiled;
// the op's calls run a fallback (its built-in plan, built by a warm-up under KJIT_JIT=on) whose
// results agree with the float64 reference within the op's tolerance, and once the background
// compile ends the calls run the tuned plan, again within tolerance. Decode (rows and split count
// tuned), dense prefill (the kernel tuned) and the FP8 GEMM (tile and stages tuned). The same flow on the stand-in driver, where the
// kernel launched is checked by name, is tests/runtime/async_jit_test.cc. Skips without a GPU.
//
// Tolerances as the ops' own GPU tests: out is bf16 (1e-2 relative L2), lse f32 (1e-4).
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/driver.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/tuned.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace kd = kjit::detail;
namespace fs = std::filesystem;

constexpr double kOutTol = 1e-2;
constexpr double kLseTol = 1e-4;

class AsyncJitGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kjit::testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
    dir_ = fs::temp_directory_path() / ("kjit-async-gpu-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    kd::install_tuned_table(kjit::testing::current_device(), {});
    kd::forget_op_calls();
  }
  void TearDown() override {
    if (!kjit::testing::has_gpu()) return;
    kd::install_tuned_table(kjit::testing::current_device(), {});
    kd::forget_op_calls();
    fs::remove_all(dir_);
  }
  kjit::RuntimeConfig config(kjit::JitMode jit) const {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.cache_dir = (dir_ / "cache").string();
    c.kernel_dir.clear();
    c.record_path.clear();
    c.remote = {};
    c.jit = jit;
    return c;
  }
  /// Counts the async events of `rt`.
  struct Counts {
    std::atomic<int> fallback{0}, done{0}, failed{0};
  };
  static void listen(kjit::Runtime& rt, Counts& n) {
    rt.add_listener([&n](const kjit::Event& e) {
      if (e.kind == kjit::EventKind::kFallbackLaunch) n.fallback.fetch_add(1);
      if (e.kind == kjit::EventKind::kBackgroundCompileDone) {
        n.done.fetch_add(1);
        if (e.detail.substr(0, 7) == "failed:") n.failed.fetch_add(1);
      }
    });
  }
  /// Waits until `rt` has no background compile left to end (at most 120 s).
  static void wait_background(kjit::Runtime& rt, Counts& n, int expected_done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (n.done.load() < expected_done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GE(n.done.load(), expected_done) << "the background compiles did not end";
    EXPECT_EQ(n.failed.load(), 0);
    (void)rt;
  }
  /// Under KJIT_JIT=async on `rt`, with a pushed table naming an unbuilt plan: `run(seed, rt)`
  /// first runs a fallback (one fallback launch), then, once the background compile has ended,
  /// the tuned plan (`tuned`: what to call it); both within the op's tolerances.
  template <class Run>
  static void fallback_then_tuned(kjit::Runtime& rt, Run&& run, const char* tuned) {
    Counts n;
    listen(rt, n);
    const auto fallback = run(2, rt);
    EXPECT_TRUE(fallback.ok(kOutTol, kLseTol)) << "the fallback: " << fallback.describe();
    EXPECT_GE(rt.stats().fallback_launches, 1u) << "the call ran a fallback";
    ASSERT_NO_FATAL_FAILURE(wait_background(rt, n, 1));
    EXPECT_EQ(n.fallback.load(), 1) << "reported by the background compile, before it ended";
    const auto exact = run(3, rt);
    EXPECT_TRUE(exact.ok(kOutTol, kLseTol)) << tuned << exact.describe();
    EXPECT_EQ(n.fallback.load(), 1) << "the tuned plan's programs are built now";
  }
  fs::path dir_;
};

TEST_F(AsyncJitGpu, DecodeRunsItsBuiltInPlanUntilTheTunedOneIsBuilt) {
  kjit::testing::DecodeCase c;
  c.batch = 2;
  c.max_kv_len = 3000;
  c.q_heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.lse = true;
  {
    kjit::Runtime on(config(kjit::JitMode::kOn));  // warm-up: the built-in plan (rows=8) and its merge
    EXPECT_TRUE(kjit::testing::run_decode_case(c, 1, on).ok(kOutTol, kLseTol));
  }
  // The pushed table: rows=16 (not built) and 3 splits for this call's bucket.
  ad::DecodeDims d;
  d.device = kjit::testing::current_device();
  d.batch = c.batch;
  d.max_kv_len = c.max_kv_len;
  d.q_heads = c.q_heads;
  d.kv_heads = c.kv_heads;
  d.head_dim = c.head_dim;
  d.group = c.q_heads / c.kv_heads;
  kd::TunedKey key{};
  ASSERT_TRUE(ad::DecodeOp::tune_key(d, &key));
  kd::TunedChoice choice;
  choice.family = &kjit::attention::decode_family();
  choice.point = choice.family->point({128, 16});
  choice.knobs[0] = 3;
  kd::TunedTable table;
  table.set(key, choice);
  kd::install_tuned_table(d.device, table);

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(
      rt, [&c](uint64_t seed, kjit::Runtime& r) { return kjit::testing::run_decode_case(c, seed, r); },
      "the tuned plan: ");
  EXPECT_EQ(rt.stats().no_fallback, 0u);
}

TEST_F(AsyncJitGpu, PrefillRunsItsBuiltInKernelUntilTheTunedOneIsBuilt) {
  kjit::testing::PrefillCase c;
  c.batch = 2;
  c.q_len = 300;
  c.kv_len = 300;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.causal = true;
  c.lse = true;
  {
    kjit::Runtime on(config(kjit::JitMode::kOn));  // warm-up: the built-in kernel
    EXPECT_TRUE(kjit::testing::run_prefill_case(c, 1, on).ok(kOutTol, kLseTol));
  }
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
  kd::TunedKey key{};
  ASSERT_TRUE(ad::PrefillOp::tune_key(d, &key));
  const kjit::DeviceInfo& info = kjit::device_info(d.device);
  const ad::PrefillPlan builtin = ad::PrefillOp::plan(d, info);
  const bool builtin_mma = builtin.choice.family == &kjit::attention::prefill_family();
  kd::TunedChoice choice;
  choice.family = &kjit::attention::prefill_family();
  choice.point = choice.family->point({128, builtin_mma && builtin.block_m == 64 ? 128 : 64, 0});
  ad::PrefillPlan tuned;
  ASSERT_TRUE(ad::PrefillOp::apply_tuned(d, info, choice, &tuned));
  ASSERT_FALSE(kd::same_choice(tuned.choice, builtin.choice));
  kd::TunedTable table;
  table.set(key, choice);
  kd::install_tuned_table(d.device, table);

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(
      rt, [&c](uint64_t seed, kjit::Runtime& r) { return kjit::testing::run_prefill_case(c, seed, r); },
      "the tuned kernel: ");
}

/// One FP8 GEMM D = A · Bᵀ (e4m3, per-tensor scales, bf16 D) on fresh random operands, against
/// the float64 reference: what fallback_then_tuned's `run` returns for the GEMM.
struct GemmResult {
  kjit::testing::Comparison cmp;
  bool ok(double out_tol, double /*lse_tol*/) const { return cmp.ok(out_tol); }
  std::string describe() const { return cmp.describe(); }
};

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

GemmResult run_gemm(int64_t m, int64_t n, int64_t k, uint64_t seed, kjit::Runtime& rt) {
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
  return {kt::compare(out, ref)};
}

TEST_F(AsyncJitGpu, GemmRunsItsBuiltInTileUntilTheTunedOneIsBuilt) {
  if (!kjit::device_info(kjit::testing::current_device()).target().has_wgmma()) {
    GTEST_SKIP() << "the tuned tile is the sm_90a wgmma kernel's";
  }
  constexpr int64_t m = 256, n = 1024, k = 4096;
  {
    kjit::Runtime on(config(kjit::JitMode::kOn));  // warm-up: the built-in plan's program
    EXPECT_TRUE(run_gemm(m, n, k, 1, on).ok(kOutTol, kLseTol));
  }
  // The pushed table names a tile and ring the warm-up did not build: 128x96 over 6 stages,
  // persistent (or 128x112 where the built-in plan took 128x96).
  namespace fd = kjit::fp8::detail;
  kjit::testing::DeviceBuffer da(16), db(16), dd(16), ds(16);  // validation reads only the shapes
  const fd::GemmDims d = fd::validate_gemm(gemm_args(da.get(), db.get(), dd.get(), ds.get(), ds.get(), m, n, k));
  kd::TunedKey key{};
  ASSERT_TRUE(fd::GemmOp::tune_key(d, &key));
  const kjit::DeviceInfo& info = kjit::device_info(kjit::testing::current_device());
  const fd::GemmPlan builtin = fd::GemmOp::plan(d, info);
  const kjit::Family& f = kjit::fp8::gemm_family();
  kjit::ParamMap pm = f.params_of(builtin.choice.point);
  pm["tile"] = pm["tile"] == "128x96" ? "128x112" : "128x96";
  pm["stages"] = "6";
  kd::TunedChoice choice;
  choice.family = &f;
  choice.point = f.parse(pm);
  choice.knobs[0] = 1;
  choice.knobs[1] = 1;
  fd::GemmPlan tuned;
  ASSERT_TRUE(fd::GemmOp::apply_tuned(d, info, choice, &tuned)) << f.describe(choice.point);
  ASSERT_FALSE(kd::same_choice(tuned.choice, builtin.choice));
  kd::TunedTable table;
  table.set(key, choice);
  kd::install_tuned_table(kjit::testing::current_device(), table);

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  fallback_then_tuned(
      rt, [](uint64_t seed, kjit::Runtime& r) { return run_gemm(m, n, k, seed, r); }, "the tuned tile: ");
  EXPECT_EQ(rt.stats().no_fallback, 0u);
}

}  // namespace
