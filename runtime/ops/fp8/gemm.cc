// kjit::fp8::gemm through the op pipeline: the cluster capacities of the second planning phase,
// the launch value (Params, TMA descriptors, clusters) and the public entry.
#include "runtime/ops/fp8/gemm.hpp"

#include "runtime/ops/cluster_occupancy.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/tma_map.hpp"

#include <algorithm>
#include <cstring>

namespace kjit::fp8::detail {
namespace {

/// How many clusters of `size` CTAs of `kernel` (`threads` threads, `smem` bytes of dynamic
/// shared memory, the fp8.gemm point `point`) device `device` holds at once (at least 1: the
/// planner takes a cluster that cannot be scheduled as one at a time).
int cluster_capacity(const Kernel& kernel, int device, const Point& point, int size, int threads, int smem) {
  return std::max(kjit::detail::max_active_clusters(kernel, device, gemm_family(), point, size, threads, smem), 1);
}

}  // namespace

kjit::detail::TmaMapKey operand_tma_map_key(const void* base, int64_t k, int64_t rows, int64_t ld, int box_rows) {
  kjit::detail::TmaMapKey key = kjit::detail::swizzled_tma_map_key(base, 2, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  key.dims[0] = static_cast<uint64_t>(k);
  key.dims[1] = static_cast<uint64_t>(rows);
  // A single-row operand may have a nominal stride below K; TMA wants strides ≥ the row bytes.
  key.strides[0] = static_cast<uint64_t>(std::max<int64_t>(ld, (k + 15) / 16 * 16));
  key.box[0] = 128;
  key.box[1] = static_cast<uint32_t>(box_rows);
  return key;
}

kjit::detail::TmaMapKey output_tma_map_key(const void* base, bool f32, int64_t cols, int64_t rows, int64_t ld) {
  const int elem = f32 ? 4 : 2;
  kjit::detail::TmaMapKey key = kjit::detail::swizzled_tma_map_key(
      base, 2, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  key.dims[0] = static_cast<uint64_t>(cols);
  key.dims[1] = static_cast<uint64_t>(rows);
  key.strides[0] = static_cast<uint64_t>(std::max<int64_t>(ld, cols) * elem);
  key.box[0] = static_cast<uint32_t>(128 / elem);
  key.box[1] = 64;
  key.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  return key;
}

GemmParams mma_params(const GemmDims& g, const GemmPlan& plan) {
  GemmParams p = g.params;
  p.tiles_m = static_cast<int32_t>(plan.tiles_m);
  p.tiles_n = static_cast<int32_t>(plan.tiles_n);
  return p;
}

GemmSm90Params sm90_params(const GemmDims& g, const GemmPlan& plan) {
  GemmSm90Params p{};
  fill_sm90_params(g, plan, &p);
  return p;
}

void fill_sm90_params(const GemmDims& g, const GemmPlan& plan, GemmSm90Params* out) {
  GemmSm90Params& p = *out;
  const bool swap = plan.swap_ab;
  p.d = g.params.d;
  p.scale_a = swap ? g.params.scale_b : g.params.scale_a;
  p.scale_b = swap ? g.params.scale_a : g.params.scale_b;
  p.bias = g.params.bias;
  p.ldd = g.params.ldd;
  p.sa_stride_m = swap ? g.params.sb_stride_n : g.params.sa_stride_m;
  p.sb_stride_n = swap ? g.params.sa_stride_m : g.params.sb_stride_n;
  p.m = swap ? g.params.n : g.params.m;
  p.n = swap ? g.params.m : g.params.n;
  p.k = g.params.k;
  p.tiles_m = static_cast<int32_t>(plan.tiles_m);
  p.tiles_n = static_cast<int32_t>(plan.tiles_n);
  p.bias_bf16 = g.params.bias_bf16;
  p.bias_rows = swap ? 1 - g.params.bias_rows : g.params.bias_rows;
  p.d_trans = swap ? 1 : 0;
  p.d_vec16 = reinterpret_cast<uintptr_t>(g.params.d) % 16 == 0 && (g.params.ldd * (g.out_f32 ? 4 : 2)) % 16 == 0 ? 1 : 0;
  const int elem = g.out_f32 ? 4 : 2;
  p.pair_store = !swap && reinterpret_cast<uintptr_t>(g.params.d) % (2 * elem) == 0 && g.params.ldd % 2 == 0 ? 1 : 0;
  // TMA stores: the large tiles' persistent epilogue, with a 16-byte aligned base and row stride.
  const bool aligned = reinterpret_cast<uintptr_t>(g.params.d) % 16 == 0 && (g.params.ldd * elem) % 16 == 0;
  p.tma_store = sm90_staged_tile(plan.bn) && aligned && plan.splits == 1 && (g.m == 1 || g.params.ldd >= g.n) ? 1 : 0;
  p.splits = plan.splits;
  p.cluster_m = plan.cluster_m;
  p.cluster_n = plan.cluster_n;
  p.const_a = (swap ? g.b_const : g.a_const) ? 1 : 0;
  p.const_b = (swap ? g.a_const : g.b_const) ? 1 : 0;
}

LaunchConfig gemm_launch_config(const GemmPlan& plan, const DeviceInfo& info) {
  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.grid);
  config.block[0] = static_cast<uint32_t>(plan.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(plan.smem_bytes);
  if (!plan.wgmma) return config;
  // Split-K: the CTAs of a tile (consecutive blockIdx.x) form one cluster; so do the CTA pairs
  // (sharing B or A: a 1-D cluster of 2 either way, the kernel maps its ranks to tiles).
  if (plan.splits > 1) config.cluster[0] = static_cast<uint32_t>(plan.splits);
  if (plan.cluster_m * plan.cluster_n > 1) config.cluster[0] = static_cast<uint32_t>(plan.cluster_m * plan.cluster_n);
  // In a decode step (a graph of back-to-back small GEMMs) the CTA prologue and the first weight
  // loads overlap the previous kernel's tail instead of following it.
  config.overlap_previous = info.target().has_pdl();
  return config;
}

GemmPlan GemmOp::refine(const GemmDims& g, const GemmPlan& plan, const LoadedProgram& program,
                        const DeviceInfo& info) {
  const int largest = gemm_assumed_cluster_size(plan, plan.force);
  if (largest == 0) return plan;
  GemmClusterCapacity capacity;
  for (int s = 2; s <= largest; ++s) {
    capacity.clusters[s] =
        cluster_capacity(program.kernel(0), g.device, plan.choice.point, s, plan.threads, plan.smem_bytes);
  }
  GemmDims under = g;
  under.force = plan.force;  // a tuned plan's overrides are not the caller's
  return plan_gemm(under, info, capacity);
}

GemmOp::Launch GemmOp::build(const GemmArgs& /*args*/, const GemmDims& g, const GemmPlan& plan,
                             const LoadedProgram* program, kjit::detail::Workspace /*workspace*/,
                             const DeviceInfo& info) {
  Launch l;
  if (program == nullptr) return l;
  const LaunchConfig config = gemm_launch_config(plan, info);
  if (!plan.wgmma) {
    auto& step = l.step<0>();
    step.kernel = &program->kernel(0);
    step.config = config;
    step.params = mma_params(g, plan);
    return l;
  }
  auto& step = l.step<1>();
  step.kernel = &program->kernel(0);
  step.config = config;
  GemmSm90Params& p = step.params;
  fill_sm90_params(g, plan, &p);
  // The kernel's A (BM-row boxes) and B (BN-row boxes): B and A of the call when swapped. A CTA
  // pair loads half of its shared operand's box (B-pairs BN / 2 rows of B, A-pairs BM / 2 rows of
  // A), so the box rows, not the tile, key the maps. All the maps of a repeat call come from the
  // thread's call memo in one probe; its key holds every input of the three map keys below.
  const int a_box_rows = plan.bm / plan.cluster_n, b_box_rows = plan.bn / plan.cluster_m;
  const void* a = plan.swap_ab ? g.params.b : g.params.a;
  const void* b = plan.swap_ab ? g.params.a : g.params.b;
  const int64_t lda = plan.swap_ab ? g.params.ldb : g.params.lda;
  const int64_t ldb = plan.swap_ab ? g.params.lda : g.params.ldb;
  static const char kOp = 0;
  kjit::detail::TmaCallKey key{};
  key.op = &kOp;
  const uint64_t words[] = {reinterpret_cast<uintptr_t>(a), reinterpret_cast<uintptr_t>(b),
                            reinterpret_cast<uintptr_t>(g.params.d), static_cast<uint64_t>(g.k),
                            static_cast<uint64_t>(p.m), static_cast<uint64_t>(p.n),
                            static_cast<uint64_t>(g.m), static_cast<uint64_t>(g.n),
                            static_cast<uint64_t>(lda), static_cast<uint64_t>(ldb),
                            static_cast<uint64_t>(g.params.ldd), static_cast<uint64_t>(a_box_rows),
                            static_cast<uint64_t>(b_box_rows),
                            uint64_t{g.out_f32} | uint64_t{p.tma_store != 0} << 1};
  static_assert(sizeof(words) / sizeof(words[0]) <= kjit::detail::TmaCallKey::kWords, "fits the call key");
  std::memcpy(key.words, words, sizeof(words));
  const kjit::detail::TmaCallMaps& maps =
      kjit::detail::tma_call_maps(key, p.tma_store ? 3 : 2, [&](kjit::detail::TmaMapKey(&keys)[4]) {
        keys[0] = operand_tma_map_key(a, g.k, p.m, lda, a_box_rows);
        keys[1] = operand_tma_map_key(b, g.k, p.n, ldb, b_box_rows);
        keys[2] = output_tma_map_key(g.params.d, g.out_f32, g.n, g.m, g.params.ldd);
      });
  p.tma_a = maps.map[0];
  p.tma_b = maps.map[1];
  if (p.tma_store) p.tma_d = maps.map[2];
  return l;
}

namespace {

/// Everything the two planning phases of an unforced call read: the GemmDims fields plan_gemm,
/// the tuned choice (tune_key, apply_tuned) and refine look at (not its Params: addresses and
/// strides do not plan), the device (its DeviceInfo and cluster capacities) and the device's
/// tuning table (a replaced table is another pointer: tables handed out stay alive).
struct GemmPlanKey {
  const void* table;
  int64_t m, n, k;
  int32_t device, fmt_a, fmt_b, flags;
  int32_t kernel, tile, stages, splits, multicast, zero;
};

GemmPlanKey plan_key(const GemmDims& g, const void* table) {
  GemmPlanKey key{};
  key.table = table;
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.device = g.device;
  key.fmt_a = g.fmt_a;
  key.fmt_b = g.fmt_b;
  key.flags = (g.a_trans ? 1 : 0) | (g.b_trans ? 2 : 0) | (g.out_f32 ? 4 : 0) | (g.block ? 8 : 0) | (g.swapped ? 16 : 0);
  key.kernel = static_cast<int32_t>(g.force.kernel);
  key.tile = static_cast<int32_t>(g.force.tile);
  key.stages = g.force.stages;
  key.splits = g.force.splits;
  key.multicast = g.force.multicast;
  return key;
}

}  // namespace

kjit::detail::CallEntry<GemmOp::Launch> GemmOp::call(const GemmArgs& args, Runtime& runtime, const CUstream* stream) {
  const GemmDims g = GemmOp::validate(args);
  const kjit::detail::OpDevice device = kjit::detail::open_device(GemmOp::kInfo, g.device);
  const DeviceInfo& info = *device.info;
  const void* table = kjit::detail::tuned_table(info);
  // KJIT_JIT=async: the first plan's program not built, a fallback's refined plan, never memoized.
  if (kjit::detail::RuntimeAccess::async(runtime)) {
    const kjit::detail::Served<GemmOp> served = kjit::detail::serve_async<GemmOp>(
        g, device, kjit::detail::choose_plan<GemmOp>(g, info), runtime, stream,
        [&](GemmPlan& candidate, const LoadedProgram& program) {
          const GemmPlan refined = GemmOp::refine(g, candidate, program, info);
          if (!kjit::detail::same_choice(refined.choice, candidate.choice)) return false;
          candidate = refined;
          return true;
        });
    if (!served.exact) {
      return {build(args, g, served.plan, served.program, {}, info), table, g.device, served.mark};
    }
  }
  // The refined plan, per thread: a repeat shape plans nothing (both phases are pure functions
  // of the key; the capacities are fixed per device and point).
  using PlanMemo = kjit::detail::PodMemo<GemmPlanKey, GemmPlan, 16>;
  const GemmPlan plan = kjit::detail::thread_memo<PlanMemo>().get(plan_key(g, table), [&](const GemmPlanKey&) {
    const GemmPlan first = kjit::detail::choose_plan<GemmOp>(g, info);
    if (first.choice.family == nullptr) return first;
    const LoadedProgram& program = kjit::detail::load<GemmOp>(first.choice, runtime, device.context, stream);
    // Capacities move only splits and the grid (plan_gemm); were that ever to change the
    // kernel, launching the first plan's program with the second plan's shape would be wrong:
    // the program is looked up again below for the refined plan's point.
    return GemmOp::refine(g, first, program, info);
  });
  if (plan.choice.family == nullptr) return {Launch{}, table, g.device, {}};
  return {build(args, g, plan, &kjit::detail::load<GemmOp>(plan.choice, runtime, device.context, stream), {}, info), table,
          g.device, {}};
}

GemmOp::Launch GemmOp::launch_value(const GemmArgs& args, Runtime& runtime, const GemmPlan* forced,
                                    const CUstream* stream) {
  if (forced == nullptr) return call(args, runtime, stream).launch;
  const kjit::detail::Planned<GemmOp> p = kjit::detail::plan<GemmOp>(args, forced);
  if (p.plan.choice.family == nullptr) return Launch{};
  return build(args, p.dims, p.plan, &kjit::detail::load<GemmOp>(p.plan.choice, runtime, p.device.context, stream), {},
               *p.device.info);
}

}  // namespace kjit::fp8::detail

namespace kjit::fp8 {

void gemm(const GemmArgs& args, CUstream stream, Runtime& runtime) {
  kjit::detail::run_memoized<detail::GemmOp>(args, {}, stream, runtime,
                                             [&] { return detail::GemmOp::call(args, runtime, &stream); });
}

}  // namespace kjit::fp8
