#pragma once
// Fixed-width integer types for headers that both g++ (host) and NVRTC (device) compile, such as
// the per-kernel Params structs. This is the one place the __CUDACC_RTC__ difference for them lives.
#if defined(__CUDACC_RTC__)
#include <cuda/std/cstdint>
#else
#include <cstdint>
#endif
