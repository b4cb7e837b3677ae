#pragma once
/// \file runtime/ops/cluster_occupancy.hpp
/// How many thread-block clusters of a loaded kernel a device holds at once: the occupancy fact
/// the cluster launches (the FP8 GEMM's split-K and CTA pairs, the decode kernels' cluster
/// merge) plan with. It needs a loaded kernel to ask, so ops query it after loading the plan's
/// program.

#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

namespace kjit::detail {

/// cuOccupancyMaxActiveClusters for clusters of `size` CTAs (a 1-D cluster) of `kernel`, a
/// kernel of `family` at `point`, launched with `threads` threads and `smem_bytes` of dynamic
/// shared memory on device `device`: how many such clusters can be resident at once; 0 when one
/// cannot be scheduled at all (its CTAs do not fit the SMs of one GPC). Asked once per device,
/// family, point and size (the answer depends on the kernel's footprint and the device's GPCs,
/// neither of which changes while the process runs); repeats are a per-thread memo hit. Reserves
/// `smem_bytes` of dynamic shared memory on the kernel first (Kernel::reserve_dynamic_smem).
/// Throws DriverError when the driver fails.
int max_active_clusters(const Kernel& kernel, int device, const Family& family, const Point& point, int size,
                        int threads, int smem_bytes);

}  // namespace kjit::detail
