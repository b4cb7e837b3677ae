#pragma once
// Cache-hinted global loads and stores of the quantize kernels: every input byte is read once
// and every fp8 byte written once, so neither should displace what L1 and L2 hold for others.
#include "kjit/config.cuh"

namespace kjit::fp8 {

/// Streaming 16-byte load (read once: no L1 allocation).
KJIT_DEVICE uint4 load_vec(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

/// Evict-first 8- and 4-byte stores (written once).
KJIT_DEVICE void store_u64(void* ptr, uint32_t lo, uint32_t hi) {
  asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(ptr), "r"(lo), "r"(hi) : "memory");
}
KJIT_DEVICE void store_u32(void* ptr, uint32_t v) {
  asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

}  // namespace kjit::fp8
