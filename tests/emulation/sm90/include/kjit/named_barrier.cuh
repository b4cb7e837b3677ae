#pragma once
// Host emulation of kernel_sources/kjit/named_barrier.cuh (emu_sm90.hpp's named barriers).
#include "kjit/config.cuh"

namespace kjit {

inline void named_barrier(int id, int threads) { ::emu::sm90::named_barrier(id, threads, true); }
template <int kId, int kThreads>
inline void named_barrier() {
  ::emu::sm90::named_barrier(kId, kThreads, true);
}
template <int kId, int kThreads>
inline void named_barrier_arrive() {
  ::emu::sm90::named_barrier(kId, kThreads, false);
}
inline void named_barrier_arrive(int id, int threads) { ::emu::sm90::named_barrier(id, threads, false); }
inline void named_barrier_wg(int id) { ::emu::sm90::named_barrier(id, 128, true); }

}  // namespace kjit
