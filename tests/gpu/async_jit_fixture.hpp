#pragma once
/// \file tests/gpu/async_jit_fixture.hpp
/// What the KJIT_JIT=async GPU tests (tests/gpu/async_jit*_test.cc; the stand-in driver's
/// tests/runtime/async_jit_paged_prefill_test.cc derives from it too) share: a fixture whose
/// Runtimes use a cache directory of the test's own (fresh: nothing built) and whose device
/// tuning table is empty around each test, and the two checks every op gets:
///   - compiles_on_the_calling_thread: a call that finds nothing built of its plan and no
///     fallback (a fresh cache, or parameters no built program shares) compiles on its own
///     thread as under KJIT_JIT=on, says so with one no_fallback event, queues nothing, and
///     its results are within tolerance;
///   - fallback_then_tuned: with the op's built-in plan built (a warm-up under KJIT_JIT=on) and
///     a pushed tuning table naming a plan nobody compiled, the call runs a fallback within
///     tolerance, and once the background compile ended the tuned plan, within tolerance.
/// A run is `run(seed, runtime) → Outcome`: one op call on fresh random inputs (from `seed`, a
/// fresh one each run) into poisoned outputs, checked against the float64 reference. The case
/// runners (tools/testing/reference_*.hpp) query each call's workspace right before it, under
/// the table in force, so it is sized for the plan the call makes (the tuned one once a table
/// is pushed); a fallback needing more than that plan is passed over (runtime/ops/fallback.hpp).
#include <kjit/device.hpp>
#include <kjit/events.hpp>
#include <kjit/runtime.hpp>

#include "runtime/ops/call_memo.hpp"
#include "runtime/ops/tuned.hpp"
#include "tools/testing/gpu.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <utility>

namespace kjit::testing {

/// Attention outputs are bf16 (1e-2 relative L2), lse f32 (1e-4), as the ops' own GPU tests.
constexpr double kAsyncOutTol = 1e-2;
constexpr double kAsyncLseTol = 1e-4;

/// One checked run: whether it passed and what the comparison found (with its seed).
struct Outcome {
  bool ok = false;
  std::string what;
};

/// An attention case result (DecodeCaseResult, SwaCaseResult) as an Outcome.
template <class Result>
Outcome attention_outcome(const Result& r, double out_tol = kAsyncOutTol, double lse_tol = kAsyncLseTol) {
  return {r.ok(out_tol, lse_tol), r.describe()};
}

class AsyncJitGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
    dir_ = std::filesystem::temp_directory_path() /
           ("kjit-async-gpu-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    kjit::detail::install_tuned_table(current_device(), {});
    kjit::detail::forget_op_calls();
  }
  void TearDown() override {
    if (dir_.empty()) return;  // skipped before SetUp
    kjit::detail::install_tuned_table(current_device(), {});
    kjit::detail::forget_op_calls();
    std::filesystem::remove_all(dir_);
  }
  /// A Runtime configuration on the test's own cache, with no kernel folder, record or fleet tier.
  RuntimeConfig config(JitMode jit) const {
    RuntimeConfig c = RuntimeConfig::from_env();
    c.cache_dir = (dir_ / "cache").string();
    c.kernel_dir.clear();
    c.record_path.clear();
    c.remote = {};
    c.jit = jit;
    return c;
  }
  static uint64_t fresh_seed() {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) | device();
  }
  /// A warm-up under KJIT_JIT=on on the test's cache, as a deployment's precompile: `run` builds
  /// its plan's programs, within tolerance.
  template <class Run>
  void warm_up(Run&& run) const {
    Runtime on(config(JitMode::kOn));
    const Outcome warm = run(fresh_seed(), on);
    EXPECT_TRUE(warm.ok) << "the warm-up under KJIT_JIT=on: " << warm.what;
  }
  /// Whether the current device runs the sm_90a kernels (wgmma).
  static bool has_wgmma() { return device_info(current_device()).target().has_wgmma(); }

  /// The events of one Runtime the checks count.
  struct Counts {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> fallback{0}, done{0}, failed{0}, no_fallback{0}, compiles_here{0}, compiles_elsewhere{0};
  };
  static void listen(Runtime& rt, Counts& n) {
    rt.add_listener([&n](const Event& e) {
      switch (e.kind) {
        case EventKind::kFallbackLaunch: n.fallback.fetch_add(1); break;
        case EventKind::kNoFallback: n.no_fallback.fetch_add(1); break;
        case EventKind::kCompile:
          (std::this_thread::get_id() == n.caller ? n.compiles_here : n.compiles_elsewhere).fetch_add(1);
          break;
        case EventKind::kBackgroundCompileDone:
          n.done.fetch_add(1);
          if (e.detail.substr(0, 7) == "failed:") n.failed.fetch_add(1);
          break;
        default: break;
      }
    });
  }
  /// Waits until `n` counted `expected_done` ended background compiles (at most 120 s).
  static void wait_background(const Counts& n, int expected_done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (n.done.load() < expected_done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GE(n.done.load(), expected_done) << "the background compiles did not end";
    EXPECT_EQ(n.failed.load(), 0);
  }

  /// Under KJIT_JIT=async on `rt` (fresh, listened to by nothing else) with nothing of the call's
  /// plan built and no fallback at hand: the first `run` compiles on this thread and reports one
  /// no_fallback event, queues nothing and is within tolerance; a second run compiles nothing.
  template <class Run>
  static void compiles_on_the_calling_thread(Runtime& rt, Run&& run) {
    Counts n;
    listen(rt, n);
    const Outcome first = run(fresh_seed(), rt);
    EXPECT_TRUE(first.ok) << "compiled on the calling thread: " << first.what;
    EXPECT_EQ(n.no_fallback.load(), 1) << "the miss says it has no fallback";
    EXPECT_GE(n.compiles_here.load(), 1) << "the call compiled its programs";
    EXPECT_EQ(n.compiles_elsewhere.load(), 0) << "a compile ran on another thread";
    EXPECT_EQ(n.fallback.load(), 0);
    const RuntimeStats s = rt.stats();
    EXPECT_EQ(s.no_fallback, 1u);
    EXPECT_EQ(s.fallback_launches, 0u);
    EXPECT_EQ(s.compiles, static_cast<uint64_t>(n.compiles_here.load()));
    EXPECT_EQ(s.background_compiles + s.background_failures + s.background_queue_full, 0u) << "queued a compile";
    const Outcome second = run(fresh_seed(), rt);
    EXPECT_TRUE(second.ok) << "the second call: " << second.what;
    EXPECT_EQ(rt.stats().compiles, s.compiles) << "the second call compiled";
    EXPECT_EQ(n.no_fallback.load(), 1) << "the second call missed";
    EXPECT_EQ(n.done.load(), 0);
  }

  /// Under KJIT_JIT=async on `rt` (fresh, listened to by nothing else), with a pushed table naming
  /// a plan whose one missing program is not built while a fallback is: `run` first runs the
  /// fallback (one fallback event, from the background compile), then, once the background
  /// compile has ended, the tuned plan (`tuned`: what to call it), launching no fallback; both
  /// within tolerance.
  template <class Run>
  static void fallback_then_tuned(Runtime& rt, Run&& run, const char* tuned) {
    Counts n;
    listen(rt, n);
    const Outcome fallback = run(fresh_seed(), rt);
    EXPECT_TRUE(fallback.ok) << "the fallback: " << fallback.what;
    EXPECT_GE(rt.stats().fallback_launches, 1u) << "the call ran a fallback";
    EXPECT_EQ(n.no_fallback.load(), 0);
    EXPECT_EQ(n.compiles_here.load(), 0) << "the call compiled on its own thread";
    ASSERT_NO_FATAL_FAILURE(wait_background(n, 1));
    EXPECT_EQ(n.fallback.load(), 1) << "reported by the background compile, before it ended";
    const uint64_t launches = rt.stats().fallback_launches;
    const Outcome exact = run(fresh_seed(), rt);
    EXPECT_TRUE(exact.ok) << tuned << exact.what;
    EXPECT_EQ(rt.stats().fallback_launches, launches) << "the call after the compile ran a fallback";
    EXPECT_EQ(n.fallback.load(), 1) << "the tuned plan's programs are built now";
    EXPECT_EQ(n.compiles_here.load(), 0);
    EXPECT_EQ(rt.stats().no_fallback, 0u);
  }

  std::filesystem::path dir_;
};

}  // namespace kjit::testing
