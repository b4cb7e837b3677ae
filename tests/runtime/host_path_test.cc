// The Hopper ops' host path end to end on the stand-in driver (tests/support/simulated_driver.cc
// with KJIT_SIM_HOST_PATH=1 and KJIT_SIM_CC=9.0, set by tests/CMakeLists.txt): the kernels are
// compiled by NVRTC for sm_90a and loaded, each op call reaches cuLaunchKernelEx once per
// kernel, and the launched Params carry the maps a fresh cuTensorMapEncodeTiled gives for the
// call's own tensors (the stand-in's encode packs its arguments: another address, size or
// stride is another map). Checks the TMA call memo and the FP8 GEMM's plan memo on the path the
// ops take: a repeat call probes the call memo once; a changed stride or address misses and gets
// its own maps; a memoized GEMM or prefill plan is the one the planner gives afresh, also after
// the device's tuning table changes or another input of the plan does; a hd64 ragged paged
// prefill plans 192-row tiles and launches the three-consumer kernel; a split decode merges in
// clusters (or, where the device cannot hold them, through the merge kernel). No kernel runs here
// (the stand-in computes nothing), so outputs are not checked: tests/gpu covers them. Skips when
// the stand-in's host path is not the loaded driver.
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/internal/driver.hpp"
#include "runtime/internal/ops.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/tma_map.hpp"
#include "runtime/ops/tuned.hpp"
#include "tools/testing/gpu.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

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

TEST_F(HostPath, PrefillRepeatsAreServedByTheOpCallMemoAndLaunchOnce) {
  Prefill a;
  kjit::attention::prefill(a.args, nullptr);  // compile and load
  // Forgotten calls take the full path: one TMA call-memo probe, four maps encoded.
  kd::forget_op_calls();
  kd::tma_call_memo().clear();
  kd::tma_map_memo().clear();
  const uint64_t call_misses = kd::tma_call_memo().misses(), map_misses = kd::tma_map_memo().misses();
  const uint64_t before = launches();
  kjit::attention::prefill(a.args, nullptr);
  EXPECT_EQ(kd::tma_call_memo().misses(), call_misses + 1);
  EXPECT_EQ(kd::tma_map_memo().misses(), map_misses + 4) << "q, k, v and out encoded once each";
  // Repeats: the op call memo launches the stored value without reaching either TMA memo.
  const uint64_t call_probes = kd::tma_call_memo().hits() + kd::tma_call_memo().misses();
  const uint64_t map_probes = kd::tma_map_memo().hits() + kd::tma_map_memo().misses();
  for (int i = 0; i < 10; ++i) kjit::attention::prefill(a.args, nullptr);
  EXPECT_EQ(launches(), before + 11) << "one kernel launch per call";
  EXPECT_EQ(kd::tma_call_memo().hits() + kd::tma_call_memo().misses(), call_probes);
  EXPECT_EQ(kd::tma_map_memo().hits() + kd::tma_map_memo().misses(), map_probes);
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

/// A contiguous decode B4 L2048 Hq32 Hkv8 D128 over its own buffers (nothing is read on the
/// stand-in), with its workspace as the op's query sizes it.
struct Decode {
  static constexpr int64_t kB = 4, kL = 2048, kHq = 32, kHkv = 8, kD = 128;
  DeviceBuffer q{kB * kHq * kD * 2}, k{kB * kL * kHkv * kD * 2}, v{kB * kL * kHkv * kD * 2}, out{kB * kHq * kD * 2};
  kjit::attention::DecodeArgs args;
  Decode(int splits, kjit::attention::DecodeMerge merge) {
    args.q = TensorRef(q.get(), DType::kBF16, {kB, 1, kHq, kD});
    args.k = TensorRef(k.get(), DType::kBF16, {kB, kL, kHkv, kD});
    args.v = TensorRef(v.get(), DType::kBF16, {kB, kL, kHkv, kD});
    args.out = TensorRef(out.get(), DType::kBF16, {kB, 1, kHq, kD});
    args.num_splits = splits;
    args.merge = merge;
  }
};

/// Expects the decode step of `l` to launch `kernel` in clusters of `cluster` CTAs (1: none) and
/// the merge step to launch the merge kernel exactly when `merge_kernel`.
template <class Launch>
void expect_decode_launch(const Launch& l, const std::string& kernel, uint32_t cluster, bool merge_kernel) {
  ASSERT_NE(l.template step<0>().kernel, nullptr);
  EXPECT_EQ(l.template step<0>().kernel->info().name_expression, kernel);
  EXPECT_EQ(l.template step<0>().config.cluster[0], cluster);
  EXPECT_EQ(l.template step<1>().kernel != nullptr, merge_kernel);
}

// On sm_90 a plan of 2..8 splits merges them in the decode kernel's clusters: one launch with
// the cluster dimension, no merge program, no partials in the workspace (whose size does not
// depend on the merge). A forced merge kernel launches twice.
TEST_F(HostPath, SplitDecodesMergeInClustersOnSm90) {
  using kjit::attention::DecodeMerge;
  Decode a(4, DecodeMerge::kAuto);
  const size_t need = kjit::attention::decode_workspace_bytes(a.args);
  ASSERT_GT(need, 0u);
  Decode forced(4, DecodeMerge::kKernel);
  EXPECT_EQ(kjit::attention::decode_workspace_bytes(forced.args), need);
  DeviceBuffer ws(need);
  const auto l = kd::launch_value<ad::DecodeOp>(a.args, {ws.get(), need}, kjit::Runtime::global());
  expect_decode_launch(l, "kjit::attention::decode_kernel<128, 8, kjit::attention::ContigKV, true>", 4, false);
  EXPECT_EQ(l.step<0>().config.grid[0], 4u * 8 * 4);
  EXPECT_EQ(l.step<0>().params.o_part, nullptr);
  uint64_t before = launches();
  kjit::attention::decode(a.args, ws.get(), need, nullptr);
  EXPECT_EQ(launches(), before + 1) << "the decode kernel alone";
  const auto lk = kd::launch_value<ad::DecodeOp>(forced.args, {ws.get(), need}, kjit::Runtime::global());
  expect_decode_launch(lk, "kjit::attention::decode_kernel<128, 8, kjit::attention::ContigKV, false>", 1, true);
  EXPECT_EQ(lk.step<1>().kernel->info().name_expression, "kjit::attention::decode_merge_kernel<128>");
  before = launches();
  kjit::attention::decode(forced.args, ws.get(), need, nullptr);
  EXPECT_EQ(launches(), before + 2) << "decode, then merge";

  // The paged decode the cluster merge is for: B16 Hq32 Hkv8 D128 L4096 at page 16 plans two
  // splits, which merge in clusters of 2.
  constexpr int64_t kB = 16, kPs = 16, kPages = kB * 4096 / kPs;
  DeviceBuffer pool(kPages * kPs * 8 * 128 * 2), table(4 * (kB + 1 + kPages + kB)), out(kB * 32 * 128 * 2);
  kjit::attention::PagedDecodeArgs p;
  p.q = TensorRef(out.get(), DType::kBF16, {kB, 1, 32, 128});  // nothing reads it on the stand-in
  p.out = p.q;
  p.cache.k = TensorRef(pool.get(), DType::kBF16, {kPages, kPs, 8, 128});
  p.cache.v = p.cache.k;
  auto* t = static_cast<int32_t*>(table.get());
  p.cache.indptr = TensorRef(t, DType::kI32, {kB + 1});
  p.cache.page_indices = TensorRef(t + kB + 1, DType::kI32, {kPages});
  p.cache.last_page_len = TensorRef(t + kB + 1 + kPages, DType::kI32, {kB});
  const size_t paged_need = kjit::attention::paged_decode_workspace_bytes(p);
  DeviceBuffer pws(std::max<size_t>(paged_need, 16));
  const auto pl = kd::launch_value<ad::PagedDecodeOp>(p, {pws.get(), paged_need}, kjit::Runtime::global());
  expect_decode_launch(pl, "kjit::attention::decode_kernel<128, 8, kjit::attention::PagedKV, true>", 2, false);
  EXPECT_EQ(pl.step<0>().config.grid[0], 256u);
  before = launches();
  kjit::attention::paged_decode(p, pws.get(), paged_need, nullptr);
  EXPECT_EQ(launches(), before + 1);
}

// Where cuOccupancyMaxActiveClusters says the device cannot hold the plan's clusters at all
// (the stand-in's KJIT_SIM_MAX_CLUSTER), an automatic cluster merge falls back to the merge
// kernel over the same splits and the workspace the query sized; a forced one is Unsupported.
TEST_F(HostPath, AClusterTheDeviceCannotHoldFallsBackToTheMergeKernel) {
  using kjit::attention::DecodeMerge;
  ASSERT_EQ(setenv("KJIT_SIM_MAX_CLUSTER", "4", 1), 0);
  Decode a(6, DecodeMerge::kAuto);  // clusters of 6: not asked about before in this process
  const size_t need = kjit::attention::decode_workspace_bytes(a.args);
  DeviceBuffer ws(need);
  const auto l = kd::launch_value<ad::DecodeOp>(a.args, {ws.get(), need}, kjit::Runtime::global());
  expect_decode_launch(l, "kjit::attention::decode_kernel<128, 8, kjit::attention::ContigKV, false>", 1, true);
  EXPECT_EQ(l.step<0>().params.num_splits, 6);
  EXPECT_EQ(l.step<0>().params.o_part, static_cast<float*>(ws.get()));
  const uint64_t before = launches();
  kjit::attention::decode(a.args, ws.get(), need, nullptr);
  EXPECT_EQ(launches(), before + 2);
  Decode forced(7, DecodeMerge::kCluster);
  try {
    kjit::attention::decode(forced.args, ws.get(), kjit::attention::decode_workspace_bytes(forced.args), nullptr);
    ADD_FAILURE() << "no error for a forced cluster merge the device cannot hold";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("merge 'cluster': device 0 cannot hold a thread-block cluster of 7 decode CTAs"),
              std::string::npos)
        << e.what();
  }
  ASSERT_EQ(unsetenv("KJIT_SIM_MAX_CLUSTER"), 0);
}

/// Field by field: a LaunchConfig has padding, which a copy need not carry.
bool same_config(const kjit::LaunchConfig& a, const kjit::LaunchConfig& b) {
  return std::equal(a.grid, a.grid + 3, b.grid) && std::equal(a.block, a.block + 3, b.block) &&
         a.dynamic_smem_bytes == b.dynamic_smem_bytes && a.stream == b.stream &&
         std::equal(a.cluster, a.cluster + 3, b.cluster) && a.overlap_previous == b.overlap_previous;
}

void expect_same_launch(const fd::GemmOp::Launch& got, const fd::GemmOp::Launch& want, const std::string& what) {
  const auto& g = got.step<1>();
  const auto& w = want.step<1>();
  ASSERT_NE(g.kernel, nullptr) << what;
  EXPECT_EQ(g.kernel, w.kernel) << what;
  EXPECT_TRUE(same_config(g.config, w.config)) << what;
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

/// Installs, as device 0's tuning table, one entry: `choice` for the bucket of `dims`.
template <class Op>
void install_choice(const typename Op::Dims& dims, const kd::TunedChoice& choice) {
  kd::TunedKey key{};
  ASSERT_TRUE(Op::tune_key(dims, &key));
  kd::TunedTable table;
  table.set(key, choice);
  kd::install_tuned_table(0, table);
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
  ASSERT_NO_FATAL_FAILURE(install_choice<fd::GemmOp>(dims, pick));
  kjit::fp8::gemm(g.args, nullptr);  // loads the tuned choice's program
  const fd::GemmOp::Launch tuned = g.launch_value();
  expect_same_launch(tuned, g.fresh_launch_value(), "tuned");
  EXPECT_EQ(tuned.step<1>().config.grid[0], static_cast<uint32_t>(expected.grid));
  EXPECT_NE(same_config(tuned.step<1>().config, def.step<1>().config) && tuned.step<1>().kernel == def.step<1>().kernel,
            true)
      << "the warm memo served the plan made before the table";
  // The table gone, the warm memo plans as before.
  kd::install_tuned_table(0, {});
  expect_same_launch(g.launch_value(), def, "table removed");
}

TEST_F(HostPath, TheOpCallMemoPlansAgainAfterATableChangeAndStoresNoFailure) {
  Gemm g(128, 4096, 7168, 7168);
  g.args.kernel = kjit::fp8::GemmKernel::kAuto;
  kd::install_tuned_table(0, {});
  kjit::fp8::gemm(g.args, nullptr);
  // The full path probes the TMA call memo once; a call served by the op call memo does not.
  auto full_paths = [] { return kd::tma_call_memo().hits() + kd::tma_call_memo().misses(); };
  uint64_t before = full_paths();
  kjit::fp8::gemm(g.args, nullptr);
  EXPECT_EQ(full_paths(), before) << "a repeat is the stored call";
  // A table (the default plan's own choice, so the plan is the same) is another table: planned again.
  const fd::GemmDims dims = fd::validate_gemm(g.args);
  const fd::GemmPlan plan = kd::choose_plan<fd::GemmOp>(dims, kjit::device_info(0));
  ASSERT_NO_FATAL_FAILURE(install_choice<fd::GemmOp>(dims, fd::GemmOp::tuned_choice(dims, plan)));
  before = full_paths();
  kjit::fp8::gemm(g.args, nullptr);
  EXPECT_EQ(full_paths(), before + 1) << "a new table must be read";
  kjit::fp8::gemm(g.args, nullptr);
  EXPECT_EQ(full_paths(), before + 1) << "then the call is stored again";
  kd::install_tuned_table(0, {});
  kjit::fp8::gemm(g.args, nullptr);
  EXPECT_EQ(full_paths(), before + 2) << "the table removed";
  // A call that fails validation throws every time: nothing is stored for it.
  Gemm bad(128, 4096, 7168, 7168);
  bad.args.d.dtype = kjit::DType::kE4M3;
  const uint64_t launched = launches();
  EXPECT_THROW(kjit::fp8::gemm(bad.args, nullptr), kjit::InvalidArgument);
  EXPECT_THROW(kjit::fp8::gemm(bad.args, nullptr), kjit::InvalidArgument);
  EXPECT_EQ(launches(), launched);
  // forget_op_calls: the next call takes the full path.
  kd::forget_op_calls();
  before = full_paths();
  kjit::fp8::gemm(g.args, nullptr);
  EXPECT_EQ(full_paths(), before + 1);
}

void expect_same_plan(const ad::PrefillPlan& got, const ad::PrefillPlan& want, const std::string& what) {
  EXPECT_EQ(got.choice.family, want.choice.family) << what;
  EXPECT_TRUE(got.choice.point == want.choice.point) << what;
  EXPECT_EQ(got.variant, want.variant) << what;
  EXPECT_EQ(got.block_m, want.block_m) << what;
  EXPECT_EQ(got.q_tiles, want.q_tiles) << what;
  EXPECT_EQ(got.workspace_bytes, want.workspace_bytes) << what;
}

/// Dims of a prefill B`batch` L`q_len` (kv as long) H8 D`head_dim`, filled by hand: the plan reads
/// only these fields.
ad::PrefillDims prefill_dims(int64_t batch, int64_t q_len, int64_t head_dim, kjit::attention::AttentionVariant variant) {
  ad::PrefillDims d;
  d.batch = batch;
  d.q_len = d.max_kv_len = q_len;
  d.q_heads = d.kv_heads = 8;
  d.group = 1;
  d.head_dim = head_dim;
  d.variant = variant;
  return d;
}

TEST_F(HostPath, PrefillPlansMemoizedAreThePlansMadeAfresh) {
  using kjit::attention::AttentionVariant;
  const kjit::DeviceInfo& h200 = kjit::device_info(0);
  kjit::DeviceInfo few = h200;  // another SM count: the mma.sync tile depends on it
  few.sm_count = 8;
  kjit::DeviceInfo ampere = h200;  // another target: no wgmma
  ampere.compile_target = kjit::Target::parse("sm_80");
  std::vector<std::pair<std::string, ad::PrefillDims>> calls;
  for (AttentionVariant v : {AttentionVariant::kAuto, AttentionVariant::kMma}) {
    for (int64_t hd : {64, 128}) {
      for (int64_t len : {0, 64, 128, 1024}) {
        calls.emplace_back("v" + std::to_string(static_cast<int>(v)) + " hd" + std::to_string(hd) + " L" +
                               std::to_string(len),
                           prefill_dims(1, len, hd, v));
      }
    }
  }
  ad::PrefillDims masked = prefill_dims(1, 1024, 128, AttentionVariant::kAuto);
  masked.mask_rank = 2;
  calls.emplace_back("mask", masked);
  ad::PrefillDims lens = prefill_dims(1, 1024, 128, AttentionVariant::kAuto);
  lens.has_kv_lens = true;
  calls.emplace_back("kv_lens", lens);
  ad::PrefillDims strided = prefill_dims(1, 1024, 128, AttentionVariant::kAuto);
  strided.tma_layout = "k stride of dim 1 must be in [0, 2^39) elements";
  calls.emplace_back("layout TMA cannot address", strided);
  ad::PrefillDims block = prefill_dims(1, 1024, 128, AttentionVariant::kMma);
  block.block_m = 128;
  calls.emplace_back("block_m 128", block);
  // Twice round, each call between others (so the second round is served by the memo), on each
  // device: every plan equals the fresh one.
  for (int round = 0; round < 2; ++round) {
    for (const auto& [name, d] : calls) {
      for (const kjit::DeviceInfo* info : std::initializer_list<const kjit::DeviceInfo*>{&h200, &few, &ampere}) {
        const std::string what = name + " on sm_" + std::to_string(info->target().sm()) + " with " +
                                 std::to_string(info->sm_count) + " SMs, round " + std::to_string(round);
        expect_same_plan(ad::PrefillOp::plan(d, *info), ad::plan_prefill(d, *info), what);
      }
    }
  }
  // What the memo must tell apart, checked on the plans themselves.
  const ad::PrefillDims plain = prefill_dims(1, 1024, 128, AttentionVariant::kAuto);
  EXPECT_EQ(ad::PrefillOp::plan(plain, h200).variant, AttentionVariant::kWgmma);
  EXPECT_EQ(ad::PrefillOp::plan(masked, h200).variant, AttentionVariant::kMma);
  EXPECT_EQ(ad::PrefillOp::plan(lens, h200).variant, AttentionVariant::kMma);
  EXPECT_EQ(ad::PrefillOp::plan(strided, h200).variant, AttentionVariant::kMma);
  EXPECT_EQ(ad::PrefillOp::plan(plain, ampere).variant, AttentionVariant::kMma);
  const ad::PrefillDims mma = prefill_dims(1, 1024, 128, AttentionVariant::kMma);
  EXPECT_NE(ad::PrefillOp::plan(mma, h200).block_m, ad::PrefillOp::plan(mma, few).block_m)
      << "B1 L1024 H8: 64 CTAs of 128 rows fill 8 SMs, not 132";
}

TEST_F(HostPath, AFailedPrefillPlanIsNotStored) {
  ad::PrefillDims d = prefill_dims(1, 128, 128, kjit::attention::AttentionVariant::kWgmma);
  d.mask_rank = 2;
  std::string first;
  for (int i = 0; i < 2; ++i) {
    try {
      ad::PrefillOp::plan(d, kjit::device_info(0));
      ADD_FAILURE() << "a strict wgmma request with a mask must be refused, call " << i;
    } catch (const kjit::Unsupported& e) {
      if (i == 0) first = e.what();
      EXPECT_EQ(first, e.what()) << "the second refusal is the first's";
    }
  }
  EXPECT_NE(first.find("the requested variant wgmma cannot run this prefill call"), std::string::npos) << first;
}

TEST_F(HostPath, PagedPrefillPlansMemoizedAreThePlansMadeAfresh) {
  using kjit::attention::AttentionVariant;
  const kjit::DeviceInfo& h200 = kjit::device_info(0);
  kjit::DeviceInfo ampere = h200;
  ampere.compile_target = kjit::Target::parse("sm_80");
  for (int round = 0; round < 2; ++round) {
    for (AttentionVariant v : {AttentionVariant::kAuto, AttentionVariant::kMma}) {
      for (int64_t hd : {64, 128}) {
        for (int tile : {64, 128, 192}) {
          if (tile == 192 && hd != 64) continue;  // no plan has it
          for (int64_t work : {0, 3}) {
            ad::PagedPrefillDims d;
            d.head_dim = hd;
            d.tile_rows = tile;
            d.num_work = work;
            d.variant = v;
            for (const kjit::DeviceInfo* info : std::initializer_list<const kjit::DeviceInfo*>{&h200, &ampere}) {
              const std::string what = "v" + std::to_string(static_cast<int>(v)) + " hd" + std::to_string(hd) +
                                       " tile " + std::to_string(tile) + " work " + std::to_string(work) + " sm_" +
                                       std::to_string(info->target().sm()) + " round " + std::to_string(round);
              if (tile == 192 && (v == AttentionVariant::kMma || info == &ampere)) {
                // Only the sm_90a wgmma kernel runs 192-row tiles: both the memo and a fresh plan
                // refuse, and the failure is not stored.
                EXPECT_THROW(ad::PagedPrefillOp::plan(d, *info), kjit::Unsupported) << what;
                EXPECT_THROW(ad::plan_paged_prefill_run(d, *info), kjit::Unsupported) << what;
                continue;
              }
              const ad::PagedPrefillOpPlan got = ad::PagedPrefillOp::plan(d, *info);
              const ad::PagedPrefillOpPlan want = ad::plan_paged_prefill_run(d, *info);
              EXPECT_EQ(got.choice.family, want.choice.family) << what;
              EXPECT_TRUE(got.choice.point == want.choice.point) << what;
              EXPECT_EQ(got.variant, want.variant) << what;
              EXPECT_EQ(got.tile_rows, want.tile_rows) << what;
              const bool wgmma = v == AttentionVariant::kAuto && tile != 64 && info == &h200;
              EXPECT_EQ(got.variant, wgmma ? AttentionVariant::kWgmma : AttentionVariant::kMma) << what;
            }
          }
        }
      }
    }
  }
}

/// A causal paged prefill of three requests (500 query rows, the second request empty) on the
/// stand-in: pools of `pages` pages of `page` slots, the page ids reversed when `reversed`, its
/// plan from PagedPrefillPlanArgs `pa` (the host arrays and shape filled in here) uploaded, and
/// the call's arguments.
struct StandInPagedPrefill {
  static constexpr int64_t kRows = 500;
  std::vector<int32_t> qo = {0, 300, 300, 500};
  kjit::attention::PagedPrefillPlan plan;
  DeviceBuffer q, out, pool, d_qo, d_kv, d_ids, d_last, ws;
  kjit::attention::PagedPrefillArgs a;

  StandInPagedPrefill(kjit::attention::PagedPrefillPlanArgs pa, const std::vector<int32_t>& kv,
                      const std::vector<int32_t>& last, int64_t kv_heads, int64_t pages, bool reversed) {
    const int64_t hq = pa.q_heads, d = pa.head_dim, page = pa.page_size;
    pa.qo_indptr_host = qo.data();
    pa.kv_indptr_host = kv.data();
    pa.last_page_len_host = last.data();
    pa.batch = 3;
    pa.causal = true;
    pa.device = 0;
    plan = kjit::attention::plan_paged_prefill(pa);
    std::vector<int32_t> ids(static_cast<size_t>(pages));
    for (int64_t i = 0; i < pages; ++i) ids[i] = static_cast<int32_t>(reversed ? pages - 1 - i : i);
    const int64_t pool_bytes = pages * page * kv_heads * d * 2;
    q = DeviceBuffer(kRows * hq * d * 2);
    out = DeviceBuffer(kRows * hq * d * 2);
    pool = DeviceBuffer(2 * pool_bytes);
    d_qo = kjit::testing::to_device(qo);
    d_kv = kjit::testing::to_device(kv);
    d_ids = kjit::testing::to_device(ids);
    d_last = kjit::testing::to_device(last);
    ws = DeviceBuffer(std::max<size_t>(plan.workspace_bytes, 16));
    kjit::attention::upload_paged_prefill_plan(plan, ws.get(), ws.bytes(), 0);
    a.q = TensorRef(q.get(), DType::kBF16, {kRows, hq, d});
    a.out = TensorRef(out.get(), DType::kBF16, {kRows, hq, d});
    a.qo_indptr = TensorRef(d_qo.get(), DType::kI32, {4});
    a.cache.k = TensorRef(pool.get(), DType::kBF16, {pages, page, kv_heads, d});
    a.cache.v = TensorRef(static_cast<char*>(pool.get()) + pool_bytes, DType::kBF16, {pages, page, kv_heads, d});
    a.cache.indptr = TensorRef(d_kv.get(), DType::kI32, {4});
    a.cache.page_indices = TensorRef(d_ids.get(), DType::kI32, {pages});
    a.cache.last_page_len = TensorRef(d_last.get(), DType::kI32, {3});
    a.causal = true;
  }
  ad::PagedPrefillOp::Args call() const { return {a, plan, ws.get(), ws.bytes()}; }
};

TEST_F(HostPath, PagedPrefillAtHd64PlansAndLaunchesThe192RowKernel) {
  // Requests of 300 and 200 rows (and an empty one) at hd64: the tuned plan step, knowing the
  // sm_90a device, takes 192-row tiles; the run step launches the three-consumer kernel.
  constexpr int64_t kHq = 8;
  kjit::attention::PagedPrefillPlanArgs pa;
  pa.q_heads = kHq;
  pa.head_dim = 64;
  pa.page_size = 16;
  StandInPagedPrefill call({pa}, {0, 20, 20, 40}, {16, 16, 16}, 2, 40, false);
  const kjit::attention::PagedPrefillPlan& plan = call.plan;
  const kjit::attention::PagedPrefillArgs& a = call.a;
  const DeviceBuffer& ws = call.ws;
  ASSERT_EQ(plan.tile_rows, 192);
  EXPECT_EQ(plan.q_tile_to_batch, (std::vector<int32_t>{0, 0, 2, 2}));
  EXPECT_EQ(plan.q_tile_to_index, (std::vector<int32_t>{0, 1, 0, 1}));

  const ad::PagedPrefillDims d = ad::PagedPrefillOp::validate({a, plan, ws.get(), ws.bytes()});
  const ad::PagedPrefillOpPlan op = ad::PagedPrefillOp::plan(d, kjit::device_info(0));
  EXPECT_EQ(op.variant, kjit::attention::AttentionVariant::kWgmma);
  ASSERT_EQ(op.choice.family, &kjit::attention::paged_prefill_sm90_family());
  // Pages of 16: the 192-row tile loads them with TMA too.
  EXPECT_EQ(op.choice.family->describe(op.choice.point), "head_dim=64 block_m=192 page_load=tma");
  EXPECT_TRUE(op.kv_tma);
  const ad::PagedPrefillOp::Launch l =
      kd::launch_value<ad::PagedPrefillOp>({a, plan, ws.get(), ws.bytes()}, {}, kjit::Runtime::global());
  const kjit::attention::PrefillSm90LaunchShape shape = kjit::attention::prefill_sm90_launch_shape(64, true, 192);
  EXPECT_EQ(l.step<0>().config.block[0], 512u);
  EXPECT_EQ(l.step<0>().config.block[0], static_cast<uint32_t>(shape.threads));
  EXPECT_EQ(l.step<0>().config.dynamic_smem_bytes, static_cast<uint32_t>(shape.smem_bytes));
  // The persistent schedule: min(SMs, 4 work items × 8 q heads) CTAs, read from the workspace.
  ASSERT_EQ(plan.schedule_heads, kHq);
  ASSERT_EQ(plan.ctas(), std::min<int64_t>(kjit::device_info(0).sm_count, 4 * kHq));
  EXPECT_EQ(l.step<0>().config.grid[0], static_cast<uint32_t>(plan.ctas()));
  EXPECT_EQ(l.step<0>().config.grid[1], 1u);
  EXPECT_EQ(l.step<0>().params.q_tiles, 4);
  const char* base = static_cast<const char*>(ws.get());
  EXPECT_EQ(static_cast<const void*>(l.step<0>().params.cta_work_indptr), base + plan.schedule_indptr_offset);
  EXPECT_EQ(static_cast<const void*>(l.step<0>().params.cta_work), base + plan.schedule_work_offset);
  // Through the public call: one launch on the stand-in (checked there against the kernel).
  const uint64_t before = launches();
  kjit::attention::paged_prefill(a, plan, ws.get(), ws.bytes(), nullptr);
  EXPECT_EQ(launches(), before + 1);

  // Without the schedule: a CTA per work item and q head.
  pa.persistent = false;
  const StandInPagedPrefill grid({pa}, {0, 20, 20, 40}, {16, 16, 16}, 2, 40, false);
  EXPECT_EQ(grid.plan.ctas(), 0);
  EXPECT_EQ(grid.plan.q_tile_to_batch, plan.q_tile_to_batch);
  const ad::PagedPrefillOp::Launch g = kd::launch_value<ad::PagedPrefillOp>(grid.call(), {}, kjit::Runtime::global());
  EXPECT_EQ(g.step<0>().config.grid[0], 4u);
  EXPECT_EQ(g.step<0>().config.grid[1], static_cast<uint32_t>(kHq));
  EXPECT_EQ(g.step<0>().params.cta_work_indptr, nullptr);
  EXPECT_EQ(g.step<0>().params.cta_work, nullptr);
  EXPECT_EQ(l.step<0>().kernel->info().name_expression, "kjit::attention::paged_prefill_sm90_kernel<64, 192, true>");
}

TEST_F(HostPath, PagedPrefillLoadsPagesWithTmaAtPage16) {
  // hd128, 128-row tiles, pages of 16 (and of 8): page_load auto takes TMA page loads where the
  // page size is a multiple of 16, encoding a map of each pool; gather and page 8 do not.
  for (int64_t page : {int64_t{16}, int64_t{8}}) {
    const int32_t per = static_cast<int32_t>(320 / page);  // 320 tokens a request
    kjit::attention::PagedPrefillPlanArgs pa;
    pa.q_heads = 8;
    pa.kv_heads = 2;
    pa.head_dim = 128;
    pa.page_size = page;
    StandInPagedPrefill call({pa}, {0, per, per, 2 * per}, {static_cast<int32_t>(page), 1, static_cast<int32_t>(page)},
                             2, 64, true);
    kjit::attention::PagedPrefillPlan& plan = call.plan;
    const kjit::attention::PagedPrefillArgs& a = call.a;
    const DeviceBuffer& ws = call.ws;
    ASSERT_EQ(plan.tile_rows, 128);
    for (kjit::attention::PageLoad load : {kjit::attention::PageLoad::kAuto, kjit::attention::PageLoad::kGather,
                                           kjit::attention::PageLoad::kTma}) {
      plan.page_load = load;
      const std::string what = "page " + std::to_string(page) + " page_load " + std::to_string(static_cast<int>(load));
      if (load == kjit::attention::PageLoad::kTma && page != 16) {
        EXPECT_THROW(kjit::attention::paged_prefill(a, plan, ws.get(), ws.bytes(), nullptr), kjit::InvalidArgument)
            << what;
        continue;
      }
      const ad::PagedPrefillOp::Launch l =
          kd::launch_value<ad::PagedPrefillOp>({a, plan, ws.get(), ws.bytes()}, {}, kjit::Runtime::global());
      const bool tma = page == 16 && load != kjit::attention::PageLoad::kGather;
      EXPECT_EQ(l.step<0>().kernel->info().name_expression,
                std::string("kjit::attention::paged_prefill_sm90_kernel<128, 128, ") + (tma ? "true>" : "false>"))
          << what;
      const kjit::fp8::TmaDescriptor zero{};
      EXPECT_EQ(std::memcmp(&l.step<0>().params.tma_k_pages, &zero, sizeof(zero)) != 0, tma) << what;
      EXPECT_EQ(std::memcmp(&l.step<0>().params.tma_v_pages, &zero, sizeof(zero)) != 0, tma) << what;
      // Through the public call (the call memo keys the plan's page_load): one launch each.
      const uint64_t before = launches();
      kjit::attention::paged_prefill(a, plan, ws.get(), ws.bytes(), nullptr);
      EXPECT_EQ(launches(), before + 1) << what;
    }
  }
}

/// The launch value of `args` with the plan made afresh (forced: no memo consulted).
ad::PrefillOp::Launch fresh_prefill_launch(const kjit::attention::PrefillArgs& args) {
  const ad::PrefillDims d = ad::validate_prefill(args);
  ad::PrefillPlan plan;
  if (!kd::tuned_plan<ad::PrefillOp>(d, kjit::device_info(d.device), &plan)) plan = ad::plan_prefill(d, kjit::device_info(d.device));
  return kd::launch_value<ad::PrefillOp>(args, {}, kjit::Runtime::global(), &plan);
}

void expect_same_prefill_launch(const ad::PrefillOp::Launch& got, const ad::PrefillOp::Launch& want,
                                const std::string& what) {
  EXPECT_EQ(got.step<0>().kernel, want.step<0>().kernel) << what;
  EXPECT_EQ(got.step<1>().kernel, want.step<1>().kernel) << what;
  EXPECT_EQ(std::memcmp(&got.step<0>().config, &want.step<0>().config, sizeof(got.step<0>().config)), 0) << what;
  EXPECT_EQ(std::memcmp(&got.step<1>().config, &want.step<1>().config, sizeof(got.step<1>().config)), 0) << what;
  EXPECT_EQ(std::memcmp(&got.step<0>().params, &want.step<0>().params, sizeof(got.step<0>().params)), 0) << what;
  EXPECT_EQ(std::memcmp(&got.step<1>().params, &want.step<1>().params, sizeof(got.step<1>().params)), 0) << what;
}

TEST_F(HostPath, PrefillCallsAfterAnotherStrideCausalOrMaskAreTheirOwn) {
  Prefill a;
  a.args.variant = kjit::attention::AttentionVariant::kAuto;
  DeviceBuffer mask{Prefill::kL};
  std::vector<std::pair<std::string, kjit::attention::PrefillArgs>> calls{{"plain", a.args}};
  kjit::attention::PrefillArgs c = a.args;
  c.causal = false;
  calls.emplace_back("not causal", c);
  c = a.args;
  c.mask = TensorRef(mask.get(), DType::kU8, {1, Prefill::kL});
  calls.emplace_back("2-d mask", c);
  c = a.args;
  c.k.strides[1] = -c.k.strides[1];  // the same shape read backwards: TMA cannot address it
  c.k.data = static_cast<char*>(a.k.get()) + (Prefill::kL - 1) * Prefill::kH * Prefill::kD * 2;
  calls.emplace_back("negative k stride", c);
  c = a.args;
  c.scale = 0.5f;
  calls.emplace_back("scale", c);
  for (int round = 0; round < 2; ++round) {
    for (const auto& [name, args] : calls) {
      kjit::attention::prefill(args, nullptr);  // compiles on the first round; warms the memo
      const ad::PrefillOp::Launch got = kd::launch_value<ad::PrefillOp>(args, {}, kjit::Runtime::global());
      expect_same_prefill_launch(got, fresh_prefill_launch(args), name + ", round " + std::to_string(round));
      const bool wgmma = name == "plain" || name == "not causal" || name == "scale";
      EXPECT_EQ(got.step<1>().kernel != nullptr, wgmma) << name;
      EXPECT_EQ(got.step<0>().kernel != nullptr, !wgmma) << name;
    }
  }
  const ad::PrefillOp::Launch plain = kd::launch_value<ad::PrefillOp>(calls[0].second, {}, kjit::Runtime::global());
  const ad::PrefillOp::Launch loose = kd::launch_value<ad::PrefillOp>(calls[1].second, {}, kjit::Runtime::global());
  EXPECT_EQ(plain.step<1>().params.causal, 1);
  EXPECT_EQ(loose.step<1>().params.causal, 0);
  const ad::PrefillOp::Launch scaled = kd::launch_value<ad::PrefillOp>(calls[4].second, {}, kjit::Runtime::global());
  EXPECT_FLOAT_EQ(scaled.step<1>().params.scale_log2, 0.5f * 1.4426950408889634f);
  EXPECT_FLOAT_EQ(plain.step<1>().params.scale_log2, 1.4426950408889634f / std::sqrt(128.f));
}

TEST_F(HostPath, APrefillTuningTableChangeReachesTheNextCall) {
  Prefill a;
  a.args.variant = kjit::attention::AttentionVariant::kAuto;  // a call naming a variant is never tuned
  kd::install_tuned_table(0, {});
  kjit::attention::prefill(a.args, nullptr);
  const ad::PrefillOp::Launch def = kd::launch_value<ad::PrefillOp>(a.args, {}, kjit::Runtime::global());
  ASSERT_NE(def.step<1>().kernel, nullptr) << "the default plan is the wgmma kernel";
  const ad::PrefillDims dims = ad::validate_prefill(a.args);
  const kjit::DeviceInfo& info = kjit::device_info(0);
  kd::TunedChoice pick;
  for (const kd::TunedChoice& choice : ad::PrefillOp::tune_candidates(dims, info)) {
    ad::PrefillPlan p;
    if (ad::PrefillOp::apply_tuned(dims, info, choice, &p) && p.variant == kjit::attention::AttentionVariant::kMma) {
      pick = choice;
      break;
    }
  }
  ASSERT_NE(pick.family, nullptr) << "no mma.sync candidate";
  ASSERT_NO_FATAL_FAILURE(install_choice<ad::PrefillOp>(dims, pick));
  kjit::attention::prefill(a.args, nullptr);  // loads the tuned choice's program
  const ad::PrefillOp::Launch tuned = kd::launch_value<ad::PrefillOp>(a.args, {}, kjit::Runtime::global());
  EXPECT_NE(tuned.step<0>().kernel, nullptr) << "the warm memo served the plan made before the table";
  EXPECT_EQ(tuned.step<1>().kernel, nullptr);
  expect_same_prefill_launch(tuned, fresh_prefill_launch(a.args), "tuned");
  kd::install_tuned_table(0, {});
  expect_same_prefill_launch(kd::launch_value<ad::PrefillOp>(a.args, {}, kjit::Runtime::global()), def, "table removed");
}

}  // namespace
