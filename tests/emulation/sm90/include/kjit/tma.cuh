#pragma once
// Host emulation of kernel_sources/kjit/tma.cuh (emu_sm90.hpp): mbarriers, and TMA through the
// stand-in driver's tensor maps (tests/support/simulated_tensor_map.hpp). Loads land at issue
// and complete their bytes on the barrier; stores are performed at issue. Multicast loads land in
// every masked CTA of the cluster (the CTAs of a cluster run at once: emu_sm90.hpp).
#include "kjit/config.cuh"

namespace kjit::sm90 {

inline void mbarrier_init(uint32_t bar, uint32_t count) { ::emu::sm90::mbarrier_init(bar, count); }
inline void fence_barrier_init() {}
inline void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) { ::emu::sm90::mbarrier_arrive(bar, bytes); }
inline void mbarrier_arrive(uint32_t bar) { ::emu::sm90::mbarrier_arrive(bar); }
inline void mbarrier_wait(uint32_t bar, uint32_t parity) { ::emu::sm90::mbarrier_wait(bar, parity); }
inline void prefetch_tensormap(const void*) {}

inline void tma_load_2d(uint32_t dst, const void* tmap, int32_t x, int32_t y, uint32_t bar) {
  ::emu::sm90::tma_load(dst, tmap, {x, y, 0, 0, 0}, 2, bar);
}
inline void tma_load_2d_multicast(uint32_t dst, const void* tmap, int32_t x, int32_t y, uint32_t bar,
                                  uint16_t cta_mask) {
  if (cta_mask == 0) ::emu::sm90::fail("TMA multicast with an empty CTA mask");
  ::emu::sm90::tma_load(dst, tmap, {x, y, 0, 0, 0}, 2, bar, cta_mask);
}
inline void tma_store_2d(const void* tmap, int32_t x, int32_t y, uint32_t src) {
  ::emu::sm90::tma_store(tmap, {x, y, 0, 0, 0}, 2, src);
}
inline void bulk_commit() {}
template <int kPending>
inline void bulk_wait_read() {}
inline void bulk_wait_all() {}
inline void tma_load_4d(uint32_t dst, const void* tmap, int32_t x0, int32_t x1, int32_t x2, int32_t x3, uint32_t bar) {
  ::emu::sm90::tma_load(dst, tmap, {x0, x1, x2, x3, 0}, 4, bar);
}
inline void tma_store_4d(const void* tmap, int32_t x0, int32_t x1, int32_t x2, int32_t x3, uint32_t src) {
  ::emu::sm90::tma_store(tmap, {x0, x1, x2, x3, 0}, 4, src);
}
/// The emulation's shared memory has one proxy: nothing to order.
inline void fence_proxy_async() {}

}  // namespace kjit::sm90
