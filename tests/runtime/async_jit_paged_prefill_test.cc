// KJIT_JIT=async for the ragged paged prefill's run step on the stand-in driver (an sm_90a
// device: tests/support/simulated_driver.cc with KJIT_SIM_HOST_PATH=1 and KJIT_SIM_CC=9.0, set by
// tests/CMakeLists.txt; NVRTC compiles for real, nothing computes, kjitSimLastKernel() names the
// kernel a launch ran). The host plan fixes the work map (tile and packing) and may force a kernel
// (a tuning table's choice, or the caller's variant); the kernel is performance-only, so while the
// forced kernel compiles the work map runs on the other one where that is built
// (PagedPrefillOp::fallback_plans). The case and the table (the mma.sync kernel unpacked where the
// built-in plan packs onto the wgmma kernel): tests/runtime/paged_prefill_tuning.hpp; the same
// flow checked against the float64 reference on a GPU: tests/gpu/async_jit_paged_test.cc.
#include <kjit/device.hpp>
#include <kjit/events.hpp>
#include <kjit/runtime.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/ops/call_memo.hpp"
#include "runtime/ops/tuned.hpp"
#include "tests/runtime/paged_prefill_tuning.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
namespace kd = kjit::detail;
namespace kt = kjit::testing;

using LastKernel = const char* (*)();

/// The stand-in's last-launched-kernel query, or null when the loaded libcuda.so.1 is not it.
LastKernel last_kernel_fn() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<LastKernel>(dlsym(lib, "kjitSimLastKernel")) : nullptr;
}

class AsyncJitPagedPrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* host_path = std::getenv("KJIT_SIM_HOST_PATH");
    if (host_path == nullptr || std::string(host_path) != "1" || !kt::has_gpu() || !last_kernel_fn()) {
      GTEST_SKIP() << "needs the stand-in driver's host path (KJIT_SIM_HOST_PATH=1, its folder on LD_LIBRARY_PATH)";
    }
    ASSERT_TRUE(kjit::device_info(0).target().has_wgmma()) << "KJIT_SIM_CC must be 9.0";
    dir_ = fs::temp_directory_path() / ("kjit-async-paged-prefill-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    kd::install_tuned_table(0, {});
    kd::forget_op_calls();
  }
  void TearDown() override {
    if (dir_.empty()) return;
    kd::install_tuned_table(0, {});
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
  /// Runs `c` on `rt` (its numbers are the stand-in's: not checked) and returns the kernel launched.
  static std::string run(const kt::PagedPrefillCase& c, kjit::Runtime& rt) {
    kt::run_paged_prefill_case(c, 1, rt);
    const char* name = last_kernel_fn()();
    return name ? name : "";
  }
  /// Waits until `n` reaches `value` (at most 120 s); whether it did.
  static bool wait_for(const std::atomic<int>& n, int value) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (n.load() < value && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return n.load() >= value;
  }
  /// The lowered name of the paged prefill kernel of `family` at head_dim 128 and 128 rows, from
  /// `rt`'s memory or its disk cache: call it only for a program built already.
  static std::string kernel_name(kjit::Runtime& rt, const kjit::Family& family) {
    return rt.load(family.spec(family.point({128, 128}))).kernel(0).info().lowered_name;
  }
  fs::path dir_;
};

TEST_F(AsyncJitPagedPrefill, ATunedKernelNotBuiltRunsTheWorkMapOnTheBuiltOneUntilItIs) {
  const kt::PagedPrefillCase c = async_paged_prefill_case();
  std::string wgmma;
  {
    kjit::Runtime on(config(kjit::JitMode::kOn));  // warm-up: the built-in plan's kernel (wgmma, packed)
    wgmma = run(c, on);
    EXPECT_EQ(wgmma, kernel_name(on, kjit::attention::paged_prefill_sm90_family()));
  }
  ASSERT_NO_FATAL_FAILURE(push_paged_prefill_mma(c, 0));

  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  std::atomic<int> done{0}, fallbacks{0}, compiles_here{0};
  const std::thread::id caller = std::this_thread::get_id();
  rt.add_listener([&](const kjit::Event& e) {
    if (e.kind == kjit::EventKind::kBackgroundCompileDone) done.fetch_add(1);
    if (e.kind == kjit::EventKind::kFallbackLaunch) fallbacks.fetch_add(1);
    if (e.kind == kjit::EventKind::kCompile && std::this_thread::get_id() == caller) compiles_here.fetch_add(1);
  });
  EXPECT_EQ(run(c, rt), wgmma) << "the unpacked work map ran on the built wgmma kernel";
  EXPECT_EQ(rt.stats().fallback_launches, 1u);
  EXPECT_EQ(rt.stats().no_fallback, 0u);
  ASSERT_TRUE(wait_for(done, 1)) << "the background compile did not end";
  EXPECT_EQ(rt.stats().background_failures, 0u);
  EXPECT_EQ(fallbacks.load(), 1);
  const std::string mma = run(c, rt);
  EXPECT_EQ(mma, kernel_name(rt, kjit::attention::paged_prefill_family()));
  EXPECT_NE(mma, wgmma) << "the call after the compile ran the tuned mma.sync kernel";
  EXPECT_EQ(rt.stats().fallback_launches, 1u);
  EXPECT_EQ(compiles_here.load(), 0) << "a call compiled on its own thread";
}

TEST_F(AsyncJitPagedPrefill, AForcedKernelNotBuiltRunsOnTheBuiltOne) {
  // The caller's own request of the kernel, no table: the same fallback.
  kt::PagedPrefillCase c = async_paged_prefill_case();
  c.pack_gqa = kjit::attention::PackGqa::kOff;  // the mma.sync kernel does not pack
  std::string wgmma;
  {
    kjit::Runtime on(config(kjit::JitMode::kOn));
    wgmma = run(c, on);
    EXPECT_EQ(wgmma, kernel_name(on, kjit::attention::paged_prefill_sm90_family()));
  }
  c.variant = kjit::attention::AttentionVariant::kMma;
  kjit::Runtime rt(config(kjit::JitMode::kAsync));
  std::atomic<int> done{0};
  rt.add_listener([&](const kjit::Event& e) { done.fetch_add(e.kind == kjit::EventKind::kBackgroundCompileDone); });
  EXPECT_EQ(run(c, rt), wgmma);
  EXPECT_EQ(rt.stats().fallback_launches, 1u);
  ASSERT_TRUE(wait_for(done, 1)) << "the background compile did not end";
  EXPECT_EQ(rt.stats().background_compiles, 1u);
  EXPECT_EQ(run(c, rt), kernel_name(rt, kjit::attention::paged_prefill_family()));
  EXPECT_EQ(rt.stats().fallback_launches, 1u);
}

}  // namespace
