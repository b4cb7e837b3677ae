#pragma once
// Device-side configuration every kernel source includes first: the CUDA headers NVRTC needs
// (found through -I<cuda>/include and -I<cuda>/include/cccl), kjit's integer types and a few
// macros. Kernel sources never include host headers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kjit/types.h"

#define KJIT_DEVICE __device__ __forceinline__
// Params are passed by value in the kernel parameter space; __grid_constant__ (sm_70+) lets
// kernels take their address without a local copy.
#define KJIT_PARAMS const __grid_constant__

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KJIT_HAS_SM80 1
#else
#define KJIT_HAS_SM80 0
#endif
