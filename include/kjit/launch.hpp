#pragma once
/// \file launch.hpp
/// Launching a kjit Kernel: one trivially copyable Params struct by value through
/// cuLaunchKernelEx. The launch path builds no strings and allocates nothing unless it throws.

#include <kjit/runtime.hpp>

#include <cuda.h>

#include <cstdint>
#include <type_traits>

namespace kjit {

/// Grid, CTA, dynamic shared memory, stream and (sm_90+) cluster shape of one launch.
struct LaunchConfig {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamic_smem_bytes = 0;
  CUstream stream = nullptr;
  /// Thread-block cluster dims; {1,1,1} = no cluster attribute.
  uint32_t cluster[3] = {1, 1, 1};
  /// Programmatic dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; sm_90+
  /// devices only, the caller checks): the kernel may be scheduled before the previous kernel in
  /// the stream has finished, hiding its launch latency, and must execute KJIT_WAIT_PREVIOUS_GRID()
  /// (kernel_sources/kjit/config.cuh) before reading that kernel's output. CUDA graphs capture it
  /// as a programmatic edge.
  bool overlap_previous = false;
};

namespace detail {
/// Validates `config` against `kernel` (threads per CTA, dynamic shared memory; the error names
/// the numbers), raises the shared-memory attribute if needed and launches with one parameter.
void launch_raw(const Kernel& kernel, const LaunchConfig& config, void* params);
}  // namespace detail

/// Launches `kernel` with `params` passed by value as its one argument. Throws InvalidArgument
/// when the CTA has more threads than the function allows or asks for more shared memory than
/// the device has, DriverError when cuLaunchKernelEx fails.
template <class Params>
inline void launch(const Kernel& kernel, const LaunchConfig& config, const Params& params) {
  static_assert(std::is_trivially_copyable_v<Params>, "kernel Params must be trivially copyable");
  detail::launch_raw(kernel, config, const_cast<Params*>(&params));
}

}  // namespace kjit
