#pragma once
// Fixed-width integer types for headers that both g++ (host) and NVRTC (device) compile, such as
// the per-kernel Params structs. This is the one place the __CUDACC_RTC__ difference for them lives.
// Under NVRTC they are declared here, as <cuda/std/cstdint> declares them there (the same types,
// so a kernel that also includes that header sees no conflict), without the 15–20 ms its
// configuration headers cost every compile.
#if defined(__CUDACC_RTC__)
using int8_t = signed char;
using int16_t = signed short;
using int32_t = signed int;
using int64_t = signed long long;
using uint8_t = unsigned char;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
using intptr_t = int64_t;
using uintptr_t = uint64_t;
#else
#include <cstdint>
#endif
