// The Hopper ops' host path end to end on the stand-in driver (tests/support/simulated_driver.cc
// with KJIT_SIM_HOST_PATH=1 and KJIT_SIM_CC=9.0, set by tests/CMakeLists.txt): the kernels are
// compiled by NVRTC for sm_90a and loaded, each op call reaches cuLaunchKernelEx once per
// kernel, and the launched Params carry the maps a fresh cuTensorMapEncodeTiled gives for the
// call's own tensors (the stand-in's encode packs its arguments: another address, size or
// stride is another map). Checks the TMA call memo and the FP8 GEMM's plan memo on the path the
// ops take: a repeat call probes the call memo once; a changed stride or address misses and gets
// its own maps; a memoized GEMM plan is the one the planner gives afresh, also after the
// device's tuning table changes. No kernel runs here
// (the stand-in computes nothing), so outputs are not checked: tests/gpu covers them. Skips when
// the stand-in's host path is not the loaded driver.
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/internal.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/tma_map.hpp"
#include "runtime/ops/tuned.hpp"
#include "tools/testing/gpu.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

namespace {

namespace ad = kjit::attention::detail;
namespace fd = kjit::fp8::detail;
namespace kd = kjit::detail;
using kjit::DType;
using kjit::TensorRef;
using kjit::fp8::TmaDescriptor;
using kjit::testing::DeviceBuffer;

using LaunchCount = uint64_t (*)();

/// The stand-in's launch counter, or null when the loaded libcuda.so.1 is not the stand-in.
LaunchCount launch_count() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<LaunchCount>(dlsym(lib, "kjitSimLaunches")) : nullptr;
}

class HostPath : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* host_path = std::getenv("KJIT_SIM_HOST_PATH");
    if (host_path == nullptr || std::string(host_path) != "1" || !kjit::testing::has_gpu() || !launch_count()) {
      GTEST_SKIP() << "needs the stand-in driver's host path (KJIT_SIM_HOST_PATH=1, its folder on LD_LIBRARY_PATH)";
    }
    ASSERT_TRUE(kjit::device_info(0).target().has_wgmma()) << "KJIT_SIM_CC must be 9.0";
    launches_ = launch_count();
  }
  uint64_t launches() const { return launches_(); }
  LaunchCount launches_ = nullptr;
};

TmaDescriptor fresh(const kd::TmaMapKey& key) {
  TmaDescriptor d;
  kd::encode_tma_map(key, &d);
  return d;
}

bool same(const TmaDescriptor& a, const TmaDescriptor& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

/// A causal wgmma prefill B1 L128 H8 D128 over its own buffers (k with `k_heads_per_row` heads
/// of room per row: 8 is packed, more is a strided view of the same shape).
struct Prefill {
  static constexpr int64_t kL = 128, kH = 8, kD = 128;
  DeviceBuffer q{kL * kH * kD * 2}, k{kL * 16 * kD * 2}, v{kL * kH * kD * 2}, out{kL * kH * kD * 2};
  kjit::attention::PrefillArgs args;
  explicit Prefill(int64_t k_heads_per_row = kH) {
    args.q = TensorRef(q.get(), DType::kBF16, {1, kL, kH, kD});
    args.k = TensorRef(k.get(), DType::kBF16, {1, kL, kH, kD},
                       {kL * k_heads_per_row * kD, k_heads_per_row * kD, kD, 1});
    args.v = TensorRef(v.get(), DType::kBF16, {1, kL, kH, kD});
    args.out = TensorRef(out.get(), DType::kBF16, {1, kL, kH, kD});
    args.causal = true;
    args.variant = kjit::attention::AttentionVariant::kWgmma;
  }
  /// The four maps the launched Params must carry, encoded afresh.
  void expect_params_maps(const kjit::attention::PrefillSm90Params& p, const std::string& what) const {
    const kjit::attention::PrefillSm90LaunchShape shape = kjit::attention::prefill_sm90_launch_shape(kD);
    EXPECT_TRUE(same(p.tma_q, fresh(ad::blhd_tma_map_key(args.q, shape.block_m)))) << what;
    EXPECT_TRUE(same(p.tma_k, fresh(ad::blhd_tma_map_key(args.k, shape.block_n)))) << what;
    EXPECT_TRUE(same(p.tma_v, fresh(ad::blhd_tma_map_key(args.v, shape.block_n)))) << what;
    EXPECT_TRUE(same(p.tma_out, fresh(ad::blhd_tma_map_key(args.out, 64)))) << what;
  }
  kjit::attention::PrefillSm90Params launched_params() const {
    return kd::launch_value<ad::PrefillOp>(args, {}, kjit::Runtime::global()).step<1>().params;
  }
};

TEST_F(HostPath, PrefillRepeatsProbeTheCallMemoOnceAndLaunchOnce) {
  Prefill a;
  kjit::attention::prefill(a.args, nullptr);  // compile and load
  kd::tma_call_memo().clear();
  kd::tma_map_memo().clear();
  const uint64_t call_misses = kd::tma_call_memo().misses(), map_misses = kd::tma_map_memo().misses();
  const uint64_t before = launches();
  kjit::attention::prefill(a.args, nullptr);
  EXPECT_EQ(kd::tma_call_memo().misses(), call_misses + 1);
  EXPECT_EQ(kd::tma_map_memo().misses(), map_misses + 4) << "q, k, v and out encoded once each";
  const uint64_t call_hits = kd::tma_call_memo().hits(), map_hits = kd::tma_map_memo().hits();
  for (int i = 0; i < 10; ++i) kjit::attention::prefill(a.args, nullptr);
  EXPECT_EQ(launches(), before + 11) << "one kernel launch per call";
  EXPECT_EQ(kd::tma_call_memo().hits(), call_hits + 10);
  EXPECT_EQ(kd::tma_call_memo().misses(), call_misses + 1);
  EXPECT_EQ(kd::tma_map_memo().hits() + kd::tma_map_memo().misses(), map_hits + map_misses + 4)
      << "a call-memo hit must not reach the map memo";
  a.expect_params_maps(a.launched_params(), "repeat");
}

TEST_F(HostPath, PrefillWithAnotherStrideOrBufferGetsItsOwnMaps) {
  Prefill a, strided(16);
  // The same q, v and out, and k at the same address with another row stride (a's k buffer has
  // room for 16 heads a row): only the stride tells the two calls apart.
  strided.args.q = a.args.q;
  strided.args.v = a.args.v;
  strided.args.out = a.args.out;
  strided.args.k.data = a.args.k.data;
  kjit::attention::prefill(a.args, nullptr);
  const kjit::attention::PrefillSm90Params pa = a.launched_params();
  const uint64_t call_misses = kd::tma_call_memo().misses(), map_misses = kd::tma_map_memo().misses();
  kjit::attention::prefill(strided.args, nullptr);
  EXPECT_EQ(kd::tma_call_memo().misses(), call_misses + 1) << "another k stride is another call";
  EXPECT_EQ(kd::tma_map_memo().misses(), map_misses + 1) << "only k's map is new";
  const kjit::attention::PrefillSm90Params ps = strided.launched_params();
  strided.expect_params_maps(ps, "strided k");
  EXPECT_FALSE(same(ps.tma_k, pa.tma_k));
  EXPECT_TRUE(same(ps.tma_q, pa.tma_q));
  // In turn, each call keeps getting its own maps.
  for (int i = 0; i < 3; ++i) {
    a.expect_params_maps(a.launched_params(), "a, round " + std::to_string(i));
    strided.expect_params_maps(strided.launched_params(), "strided, round " + std::to_string(i));
  }
  Prefill moved;  // the same geometry in other buffers
  moved.expect_params_maps(moved.launched_params(), "moved");
  EXPECT_FALSE(same(moved.launched_params().tma_out, pa.tma_out));
}

/// An e4m3 GEMM D[M, N] = A[M, K] · B[N, K]ᵀ, bf16 out, B rows `ldb` apart (its buffer has
/// room for rows K + 128 apart).
struct Gemm {
  DeviceBuffer a, b, d, sa{16}, sb{16};
  kjit::fp8::GemmArgs args;
  Gemm(int64_t m, int64_t n, int64_t k, int64_t ldb) : a(m * k), b(n * std::max(ldb, k + 128)), d(m * n * 2) {
    args.a = TensorRef(a.get(), DType::kE4M3, {m, k});
    args.b = TensorRef(b.get(), DType::kE4M3, {n, k}, {ldb, 1});
    args.d = TensorRef(d.get(), DType::kBF16, {m, n});
    args.scale_a = TensorRef(sa.get(), DType::kF32, {1});
    args.scale_b = TensorRef(sb.get(), DType::kF32, {1});
    args.kernel = kjit::fp8::GemmKernel::kWgmma;
  }
  fd::GemmOp::Launch launch_value() const { return fd::GemmOp::launch_value(args, kjit::Runtime::global()); }
  /// The launch value of the plan made afresh (both phases), forced so no memo is consulted.
  fd::GemmOp::Launch fresh_launch_value() const {
    const kd::Planned<fd::GemmOp> p = kd::plan<fd::GemmOp>(args);
    const kjit::LoadedProgram& program = kd::load<fd::GemmOp>(p.plan.choice, kjit::Runtime::global(), p.device.context);
    const fd::GemmPlan refined = fd::GemmOp::refine(p.dims, p.plan, program, *p.device.info);
    return fd::GemmOp::launch_value(args, kjit::Runtime::global(), &refined);
  }
};

void expect_same_launch(const fd::GemmOp::Launch& got, const fd::GemmOp::Launch& want, const std::string& what) {
  const auto& g = got.step<1>();
  const auto& w = want.step<1>();
  ASSERT_NE(g.kernel, nullptr) << what;
  EXPECT_EQ(g.kernel, w.kernel) << what;
  EXPECT_EQ(std::memcmp(&g.config, &w.config, sizeof(g.config)), 0) << what;
  EXPECT_EQ(std::memcmp(&g.params, &w.params, sizeof(g.params)), 0) << what << ": Params (maps included) differ";
}

TEST_F(HostPath, GemmRepeatsAreThePlanAndMapsMadeAfresh) {
  // Small M (swapped operands), a split-K shape (clusters: the refinement reads capacities),
  // a large one.
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 1024}, {128, 4096, 7168},
                                {256, 1024, 2048}}) {
    const std::string what = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    Gemm g(m, n, k, k);
    kjit::fp8::gemm(g.args, nullptr);
    const uint64_t before = launches();
    kjit::fp8::gemm(g.args, nullptr);
    EXPECT_EQ(launches(), before + 1) << what;
    const uint64_t hits = kd::tma_call_memo().hits();
    const fd::GemmOp::Launch memo = g.launch_value();
    EXPECT_EQ(kd::tma_call_memo().hits(), hits + 1) << what;
    expect_same_launch(memo, g.fresh_launch_value(), what);
  }
}

TEST_F(HostPath, GemmWithAnotherStrideOrBufferGetsItsOwnMaps) {
  Gemm packed(64, 512, 1024, 1024), padded(64, 512, 1024, 1152), moved(64, 512, 1024, 1024);
  // padded: packed's A, B and D, B's rows further apart (only the stride differs); moved: the
  // same geometry in other buffers.
  padded.args.a.data = packed.args.a.data;
  padded.args.b.data = packed.args.b.data;
  padded.args.d.data = packed.args.d.data;
  kjit::fp8::gemm(packed.args, nullptr);
  const fd::GemmOp::Launch first = packed.launch_value();
  for (Gemm* other : {&padded, &moved}) {
    const uint64_t misses = kd::tma_call_memo().misses();
    kjit::fp8::gemm(other->args, nullptr);
    EXPECT_EQ(kd::tma_call_memo().misses(), misses + 1);
    const fd::GemmOp::Launch l = other->launch_value();
    expect_same_launch(l, other->fresh_launch_value(), other == &padded ? "padded B" : "moved");
    // The map over the call's B (the kernel's A when the small M swaps the operands) is new.
    const auto& p = l.step<1>().params;
    const auto& f = first.step<1>().params;
    EXPECT_FALSE(same(p.tma_a, f.tma_a) && same(p.tma_b, f.tma_b));
  }
  expect_same_launch(packed.launch_value(), first, "packed again");
}

TEST_F(HostPath, AGemmTuningTableChangeReachesTheWarmPlanMemo) {
  Gemm g(128, 4096, 7168, 7168);
  g.args.kernel = kjit::fp8::GemmKernel::kAuto;  // a call with an override is never tuned (wgmma anyway here)
  kd::install_tuned_table(0, {});
  kjit::fp8::gemm(g.args, nullptr);
  const fd::GemmOp::Launch def = g.launch_value();  // warm
  const fd::GemmDims dims = fd::validate_gemm(g.args);
  const kjit::DeviceInfo& info = kjit::device_info(0);
  const fd::GemmPlan def_plan = kd::choose_plan<fd::GemmOp>(dims, info);
  // A stored wgmma choice the planner would not make: another point, or other splits.
  kd::TunedChoice pick;
  fd::GemmPlan expected;
  for (const kd::TunedChoice& c : fd::GemmOp::tune_candidates(dims, info)) {
    fd::GemmPlan p;
    if (!fd::GemmOp::apply_tuned(dims, info, c, &p)) continue;
    if (p.wgmma && (p.choice.point != def_plan.choice.point || p.splits != def_plan.splits)) {
      pick = c;
      expected = p;
      break;
    }
  }
  ASSERT_NE(pick.family, nullptr) << "no candidate differs from the default plan";
  kd::TunedKey key{};
  ASSERT_TRUE(fd::GemmOp::tune_key(dims, &key));
  kd::TunedTable table;
  table.set(key, pick);
  kd::install_tuned_table(0, table);
  kjit::fp8::gemm(g.args, nullptr);  // loads the tuned choice's program
  const fd::GemmOp::Launch tuned = g.launch_value();
  expect_same_launch(tuned, g.fresh_launch_value(), "tuned");
  EXPECT_EQ(tuned.step<1>().config.grid[0], static_cast<uint32_t>(expected.grid));
  EXPECT_NE(std::memcmp(&tuned.step<1>().config, &def.step<1>().config, sizeof(def.step<1>().config)) == 0 &&
                tuned.step<1>().kernel == def.step<1>().kernel,
            true)
      << "the warm memo served the plan made before the table";
  // The table gone, the warm memo plans as before.
  kd::install_tuned_table(0, {});
  expect_same_launch(g.launch_value(), def, "table removed");
}

}  // namespace
