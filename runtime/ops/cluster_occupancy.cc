// The cluster occupancy query of the cluster launches (runtime/ops/cluster_occupancy.hpp).
#include "runtime/ops/cluster_occupancy.hpp"

#include "runtime/driver.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/pod_memo.hpp"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kjit::detail {

int max_active_clusters(const Kernel& kernel, int device, const Family& family, const Point& point, int size,
                        int threads, int smem_bytes) {
  struct Key {
    const Family* family;
    int device;
    int size;
    Point point;
  };
  static std::shared_mutex mutex;
  static std::unordered_map<Key, int, PodHash<Key>, PodEqual<Key>> known;
  Key key{};
  key.family = &family;
  key.device = device;
  key.size = size;
  key.point = point;
  // A split-K GEMM asks for every cluster size up to its own: the thread's memo answers the
  // repeats without the shared lock.
  using Memo = PodMemo<Key, int, 16>;
  return thread_memo<Memo>().get(key, [&](const Key&) {
    {
      std::shared_lock lock(mutex);
      const auto it = known.find(key);
      if (it != known.end()) return it->second;
    }
    kernel.reserve_dynamic_smem(static_cast<uint32_t>(smem_bytes));
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
    config.sharedMemBytes = static_cast<unsigned>(smem_bytes);
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    KJIT_CU(cuOccupancyMaxActiveClusters(&clusters, kernel.function(), &config));
    std::unique_lock lock(mutex);
    known.emplace(key, clusters);
    return clusters;
  });
}

}  // namespace kjit::detail
