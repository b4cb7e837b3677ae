// KJIT_JIT=async for the ragged paged prefill's run step on the stand-in driver (an sm_90a
// device: tests/support/simulated_driver.cc with KJIT_SIM_HOST_PATH=1 and KJIT_SIM_CC=9.0, set by
// tests/CMakeLists.txt; NVRTC compiles for real, nothing computes, kjitSimLastKernel() names the
// kernel a launch ran). The host plan fixes the work map (tile and packing) and may force a kernel
// (a tuning table's choice, or the caller's variant); the kernel is performance-only, so while the
// forced kernel compiles the work map runs on the other one where that is built
// (PagedPrefillOp::fallback_plans, whose candidates are checked first on hand-built devices,
// without a driver). The case and the table (the mma.sync kernel unpacked where the
// built-in plan packs onto the wgmma kernel): tests/runtime/paged_prefill_tuning.hpp; the same
// flow checked against the float64 reference on a GPU: tests/gpu/async_jit_paged_test.cc.
#include <kjit/device.hpp>
#include <kjit/events.hpp>
#include <kjit/runtime.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "tests/gpu/async_jit_fixture.hpp"
#include "tests/runtime/paged_prefill_tuning.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

namespace kt = kjit::testing;

using LastKernel = const char* (*)();

/// The stand-in's last-launched-kernel query, or null when the loaded libcuda.so.1 is not it.
LastKernel last_kernel_fn() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<LastKernel>(dlsym(lib, "kjitSimLastKernel")) : nullptr;
}

/// The GPU tests' fixture (a cache of the test's own, an empty table around it) on the stand-in.
class AsyncJitPagedPrefill : public kt::AsyncJitGpu {
 protected:
  void SetUp() override {
    const char* host_path = std::getenv("KJIT_SIM_HOST_PATH");
    if (host_path == nullptr || std::string(host_path) != "1" || !kt::has_gpu() || !last_kernel_fn()) {
      GTEST_SKIP() << "needs the stand-in driver's host path (KJIT_SIM_HOST_PATH=1, its folder on LD_LIBRARY_PATH)";
    }
    AsyncJitGpu::SetUp();
    ASSERT_TRUE(has_wgmma()) << "KJIT_SIM_CC must be 9.0";
  }
  /// Runs `c` on `rt` (its numbers are the stand-in's: not checked) and returns the kernel launched.
  static std::string run(const kt::PagedPrefillCase& c, kjit::Runtime& rt) {
    kt::run_paged_prefill_case(c, fresh_seed(), rt);
    const char* name = last_kernel_fn()();
    return name ? name : "";
  }
  /// The lowered name of the paged prefill kernel of `family` at head_dim 128 and 128 rows (the
  /// wgmma kernel's with TMA page loads: the case's pages hold 16), from `rt`'s memory or its disk
  /// cache: call it only for a program built already.
  static std::string kernel_name(kjit::Runtime& rt, const kjit::Family& family) {
    const kjit::Point point = &family == &kjit::attention::paged_prefill_sm90_family() ? family.point({128, 128, 1})
                                                                                       : family.point({128, 128});
    return rt.load(family.spec(point)).kernel(0).info().lowered_name;
  }
  /// Under KJIT_JIT=async with the packed wgmma kernel built (a warm-up of `built` under
  /// KJIT_JIT=on) and `c` asking for the mma.sync kernel: the first call runs the wgmma kernel,
  /// the call after the background compile the mma.sync kernel; nothing compiles on this thread.
  void wgmma_until_mma_is_built(const kt::PagedPrefillCase& built, const kt::PagedPrefillCase& c,
                                void (*push)(const kt::PagedPrefillCase&)) {
    std::string wgmma;
    {
      kjit::Runtime on(config(kjit::JitMode::kOn));
      wgmma = run(built, on);
      EXPECT_EQ(wgmma, kernel_name(on, kjit::attention::paged_prefill_sm90_family()));
    }
    if (push != nullptr) ASSERT_NO_FATAL_FAILURE(push(c));
    kjit::Runtime rt(config(kjit::JitMode::kAsync));
    Counts n;
    listen(rt, n);
    EXPECT_EQ(run(c, rt), wgmma) << "the work map ran on the built wgmma kernel";
    EXPECT_EQ(rt.stats().fallback_launches, 1u);
    EXPECT_EQ(n.no_fallback.load(), 0);
    ASSERT_NO_FATAL_FAILURE(wait_background(n, 1));
    EXPECT_EQ(n.fallback.load(), 1);
    const std::string mma = run(c, rt);
    EXPECT_EQ(mma, kernel_name(rt, kjit::attention::paged_prefill_family()));
    EXPECT_NE(mma, wgmma) << "the call after the compile ran the mma.sync kernel";
    EXPECT_EQ(rt.stats().fallback_launches, 1u);
    EXPECT_EQ(n.compiles_here.load(), 0) << "a call compiled on its own thread";
  }
};

TEST(PagedPrefillFallbackPlans, AreTheKernelsThatRunTheWorkMap) {
  // Pure: a hand-built sm_90a device, no driver.
  namespace ad = kjit::attention::detail;
  kjit::DeviceInfo info;
  info.cc_major = 9;
  info.sm_count = 132;
  info.max_smem_per_block_optin = 232448;
  ASSERT_TRUE(info.target().has_wgmma());
  const auto variants = [&](int64_t head_dim, int tile_rows, int pack_group, int64_t num_work) {
    ad::PagedPrefillDims d;
    d.head_dim = head_dim;
    d.tile_rows = tile_rows;
    d.pack_group = pack_group;
    d.num_work = num_work;
    d.variant = kjit::attention::AttentionVariant::kMma;  // what the host plan forces does not matter
    ad::PagedPrefillOpPlan plans[kjit::detail::kMaxOpFallbackPlans];
    const int n = ad::PagedPrefillOp::fallback_plans(d, info, plans);
    std::string out;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(plans[i].tile_rows, tile_rows);
      EXPECT_EQ(plans[i].pack_group, pack_group);
      out += plans[i].choice.family->name + " " + plans[i].choice.family->describe(plans[i].choice.point) + "; ";
    }
    return out;
  };
  // (No cache in these dims: page size 0, so the wgmma kernel gathers.)
  EXPECT_EQ(variants(128, 128, 1, 4),
            "attention.paged_prefill_sm90 head_dim=128 block_m=128 page_load=gather; attention.paged_prefill "
            "head_dim=128 block_m=128; ");
  EXPECT_EQ(variants(128, 128, 4, 4), "attention.paged_prefill_sm90 head_dim=128 block_m=128 page_load=gather; ")
      << "mma does not pack";
  EXPECT_EQ(variants(128, 64, 1, 4), "attention.paged_prefill head_dim=128 block_m=64; ") << "wgmma takes 128+ rows";
  EXPECT_EQ(variants(64, 192, 1, 4), "attention.paged_prefill_sm90 head_dim=64 block_m=192 page_load=gather; ");
  EXPECT_EQ(variants(256, 128, 1, 4), "attention.paged_prefill head_dim=256 block_m=128; ") << "no wgmma at 256";
  EXPECT_EQ(variants(128, 128, 1, 0), "") << "nothing to run";
  info.cc_major = 8;  // sm_80: mma.sync alone
  EXPECT_EQ(variants(128, 128, 1, 4), "attention.paged_prefill head_dim=128 block_m=128; ");
}

TEST_F(AsyncJitPagedPrefill, ATunedKernelNotBuiltRunsTheWorkMapOnTheBuiltOneUntilItIs) {
  const kt::PagedPrefillCase c = async_paged_prefill_case();
  wgmma_until_mma_is_built(c, c, [](const kt::PagedPrefillCase& pushed) { push_paged_prefill_mma(pushed, 0); });
}

TEST_F(AsyncJitPagedPrefill, AForcedKernelNotBuiltRunsOnTheBuiltOne) {
  // The caller's own request of the kernel, no table: the same fallback.
  kt::PagedPrefillCase c = async_paged_prefill_case();
  c.pack_gqa = kjit::attention::PackGqa::kOff;  // the mma.sync kernel does not pack
  kt::PagedPrefillCase forced = c;
  forced.variant = kjit::attention::AttentionVariant::kMma;
  wgmma_until_mma_is_built(c, forced, nullptr);
}

}  // namespace
