// kjit::fp8::gemm through the op pipeline: the cluster capacities of the second planning phase,
// the launch value (Params, TMA descriptors, clusters) and the public entry.
#include "runtime/ops/fp8/gemm.hpp"

#include "runtime/driver.hpp"
#include "runtime/ops/kernel_table.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kjit::fp8::detail {
namespace {

/// Encodes the TMA descriptor of a K-major fp8 operand [rows, k] (row stride `ld` bytes) for
/// boxes of 128 k × `box_rows` rows with the 128-byte swizzle the wgmma kernel's descriptors
/// expect; out-of-bounds elements read as zero. Host-only driver call, no allocation.
void encode_tma(TmaDescriptor* out, const void* base, int64_t k, int64_t rows, int64_t ld, int box_rows) {
  static_assert(sizeof(CUtensorMap) == sizeof(TmaDescriptor), "CUtensorMap is 128 bytes");
  CUtensorMap map;
  // A single-row operand may have a nominal stride below K; TMA wants strides ≥ the row bytes.
  const int64_t stride = std::max<int64_t>(ld, (k + 15) / 16 * 16);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride)};
  const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  KJIT_CU(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                                 elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  std::memcpy(out, &map, sizeof(map));
}

/// Encodes the TMA descriptor of D [rows, cols] (bf16 or f32, row stride `ld` elements) for
/// boxes of 128 bytes of columns × 64 rows with the 128-byte swizzle of the wgmma kernel's
/// staging tile. Host-only driver call, no allocation.
void encode_tma_store(TmaDescriptor* out, void* base, bool f32, int64_t cols, int64_t rows, int64_t ld) {
  CUtensorMap map;
  const int elem = f32 ? 4 : 2;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(std::max<int64_t>(ld, cols) * elem)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem), 64};
  const cuuint32_t elem_strides[2] = {1, 1};
  KJIT_CU(cuTensorMapEncodeTiled(&map, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                 base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  std::memcpy(out, &map, sizeof(map));
}

/// How many clusters of `size` CTAs of `kernel` (`threads` threads, `smem` bytes of dynamic
/// shared memory) device `device` holds at once, from cuOccupancyMaxActiveClusters; asked once
/// per device, kernel (its fp8.gemm point) and size, because the answer depends on the kernel's
/// footprint and the device's GPCs, neither of which changes while the process runs.
int cluster_capacity(const Kernel& kernel, int device, const Point& point, int size, int threads, int smem) {
  struct Key {
    int device;
    int size;
    Point point;
  };
  static std::shared_mutex mutex;
  static std::unordered_map<Key, int, kjit::detail::PodHash<Key>, kjit::detail::PodEqual<Key>> known;
  Key key{};
  key.device = device;
  key.size = size;
  key.point = point;
  {
    std::shared_lock lock(mutex);
    const auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  kernel.reserve_dynamic_smem(static_cast<uint32_t>(smem));
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = static_cast<unsigned>(size);
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(size);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = static_cast<unsigned>(threads);
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(smem);
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  KJIT_CU(cuOccupancyMaxActiveClusters(&clusters, kernel.function(), &config));
  clusters = std::max(clusters, 1);
  std::unique_lock lock(mutex);
  known.emplace(key, clusters);
  return clusters;
}

}  // namespace

GemmParams mma_params(const GemmDims& g, const GemmPlan& plan) {
  GemmParams p = g.params;
  p.tiles_m = static_cast<int32_t>(plan.tiles_m);
  p.tiles_n = static_cast<int32_t>(plan.tiles_n);
  return p;
}

GemmSm90Params sm90_params(const GemmDims& g, const GemmPlan& plan) {
  GemmSm90Params p{};
  p.d = g.params.d;
  p.scale_a = g.params.scale_a;
  p.scale_b = g.params.scale_b;
  p.bias = g.params.bias;
  p.ldd = g.params.ldd;
  p.sa_stride_m = g.params.sa_stride_m;
  p.sb_stride_n = g.params.sb_stride_n;
  p.m = g.params.m;
  p.n = g.params.n;
  p.k = g.params.k;
  p.tiles_m = static_cast<int32_t>(plan.tiles_m);
  p.tiles_n = static_cast<int32_t>(plan.tiles_n);
  p.bias_bf16 = g.params.bias_bf16;
  p.bias_rows = g.params.bias_rows;
  const int elem = g.out_f32 ? 4 : 2;
  p.pair_store = reinterpret_cast<uintptr_t>(g.params.d) % (2 * elem) == 0 && g.params.ldd % 2 == 0 ? 1 : 0;
  // TMA stores need a 16-byte aligned base and row stride; split-K stores directly.
  const bool aligned = reinterpret_cast<uintptr_t>(g.params.d) % 16 == 0 && (g.params.ldd * elem) % 16 == 0;
  p.tma_store = aligned && plan.splits == 1 && (g.m == 1 || g.params.ldd >= g.n) ? 1 : 0;
  p.splits = plan.splits;
  p.cluster_m = plan.cluster_m;
  return p;
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
                             const DeviceInfo& /*info*/) {
  Launch l;
  if (program == nullptr) return l;
  LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(plan.grid);
  config.block[0] = static_cast<uint32_t>(plan.threads);
  config.dynamic_smem_bytes = static_cast<uint32_t>(plan.smem_bytes);
  if (!plan.wgmma) {
    auto& step = l.step<0>();
    step.kernel = &program->kernel(0);
    step.config = config;
    step.params = mma_params(g, plan);
    return l;
  }
  // Split-K: the CTAs of a tile (consecutive blockIdx.x) form one cluster; so do B-sharing pairs.
  if (plan.splits > 1) config.cluster[0] = static_cast<uint32_t>(plan.splits);
  if (plan.cluster_m > 1) config.cluster[0] = static_cast<uint32_t>(plan.cluster_m);
  auto& step = l.step<1>();
  step.kernel = &program->kernel(0);
  step.config = config;
  GemmSm90Params& p = step.params;
  p = sm90_params(g, plan);
  encode_tma(&p.tma_a, g.params.a, g.k, g.m, g.params.lda, kSm90BM);
  encode_tma(&p.tma_b, g.params.b, g.k, g.n, g.params.ldb, plan.bn / plan.cluster_m);
  if (p.tma_store) encode_tma_store(&p.tma_d, g.params.d, g.out_f32, g.n, g.m, g.params.ldd);
  return l;
}

GemmOp::Launch GemmOp::launch_value(const GemmArgs& args, Runtime& runtime, const GemmPlan* forced,
                                    const CUstream* stream) {
  kjit::detail::Planned<GemmOp> p = kjit::detail::plan<GemmOp>(args, forced);
  if (p.plan.choice.family == nullptr) return Launch{};
  const DeviceInfo& info = *p.device.info;
  const LoadedProgram* program = &kjit::detail::load<GemmOp>(p.plan.choice, runtime, p.device.context, stream);
  if (forced == nullptr) {
    const GemmPlan refined = refine(p.dims, p.plan, *program, info);
    // Capacities move only splits and the grid (plan_gemm); were that ever to change the
    // kernel, launching the first plan's program with the second plan's shape would be wrong.
    if (refined.choice.point != p.plan.choice.point) {
      program = &kjit::detail::load<GemmOp>(refined.choice, runtime, p.device.context, stream);
    }
    p.plan = refined;
  }
  return build(args, p.dims, p.plan, program, {}, info);
}

}  // namespace kjit::fp8::detail

namespace kjit::fp8 {

void gemm(const GemmArgs& args, CUstream stream, Runtime& runtime) {
  detail::GemmOp::launch_value(args, runtime, nullptr, &stream).launch(stream);
}

}  // namespace kjit::fp8
