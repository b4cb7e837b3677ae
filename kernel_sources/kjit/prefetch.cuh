#pragma once
// Prefetch hints: pull a global line into L1 or L2 ahead of its use. They have no register
// result, so issuing one never stalls the warp.
#include "kjit/config.cuh"

namespace kjit {

KJIT_DEVICE void prefetch_l1(const void* ptr) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(ptr));
}

KJIT_DEVICE void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr)); }

}  // namespace kjit
