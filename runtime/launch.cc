#include <kjit/error.hpp>
#include <kjit/launch.hpp>

#include "runtime/driver.hpp"

#include <fmt/format.h>

#include <mutex>

namespace kjit {
namespace {
// Raising a function's shared-memory limit is rare (once per new high-water mark), so one lock
// for all kernels is enough.
std::mutex smem_mutex;
}  // namespace

void Kernel::reserve_dynamic_smem(uint32_t bytes) const {
  if (bytes <= reserved_smem_->load(std::memory_order_acquire)) return;
  if (static_cast<int64_t>(bytes) > max_dynamic_smem_) {
    throw InvalidArgument(fmt::format(
        "kernel {}: {} bytes of dynamic shared memory requested, the device allows {} (plus {} static)",
        info_->name_expression, bytes, max_dynamic_smem_, static_smem_));
  }
  std::lock_guard lock(smem_mutex);
  if (bytes <= reserved_smem_->load(std::memory_order_relaxed)) return;
  // Per device: a context-independent kernel carries one limit per device, in every context.
  detail::check_driver(detail::driver().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                             static_cast<int>(bytes), kernel_,
                                                             static_cast<CUdevice>(device_)),
                       "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  reserved_smem_->store(bytes, std::memory_order_release);
}

namespace detail {

void launch_raw(const Kernel& kernel, const LaunchConfig& c, void* params) {
  const uint64_t threads = uint64_t{c.block[0]} * c.block[1] * c.block[2];
  if (threads == 0 || threads > static_cast<uint64_t>(kernel.max_threads_per_block())) {
    throw InvalidArgument(fmt::format("kernel {}: CTA of {}x{}x{} = {} threads, the function allows 1..{}",
                                      kernel.info().name_expression, c.block[0], c.block[1], c.block[2],
                                      threads, kernel.max_threads_per_block()));
  }
  if (c.grid[0] == 0 || c.grid[1] == 0 || c.grid[2] == 0) {
    throw InvalidArgument(fmt::format("kernel {}: empty grid {}x{}x{}", kernel.info().name_expression,
                                      c.grid[0], c.grid[1], c.grid[2]));
  }
  // Up to 48 KB in all needs no opt-in; above it, raise the attribute to the high-water mark.
  if (static_cast<int64_t>(c.dynamic_smem_bytes) + kernel.static_smem_bytes() > 48 * 1024) {
    kernel.reserve_dynamic_smem(c.dynamic_smem_bytes);
  }

  CUlaunchAttribute attr[2] = {};
  CUlaunchConfig config{};
  config.gridDimX = c.grid[0];
  config.gridDimY = c.grid[1];
  config.gridDimZ = c.grid[2];
  config.blockDimX = c.block[0];
  config.blockDimY = c.block[1];
  config.blockDimZ = c.block[2];
  config.sharedMemBytes = c.dynamic_smem_bytes;
  config.hStream = c.stream;
  unsigned num_attrs = 0;
  if (c.cluster[0] * c.cluster[1] * c.cluster[2] > 1) {
    CUlaunchAttribute& a = attr[num_attrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = c.cluster[0];
    a.value.clusterDim.y = c.cluster[1];
    a.value.clusterDim.z = c.cluster[2];
  }
  if (c.overlap_previous) {
    CUlaunchAttribute& a = attr[num_attrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  if (num_attrs > 0) {
    config.attrs = attr;
    config.numAttrs = num_attrs;
  }
  void* args[] = {params};
  const CUresult r = driver().cuLaunchKernelEx(&config, kernel.function(), args, nullptr);
  if (r != CUDA_SUCCESS) check_driver(r, "cuLaunchKernelEx");
}

}  // namespace detail
}  // namespace kjit
