#pragma once
// Device-side configuration every kernel source includes first: kjit's integer types and a few
// macros. Kernel sources include no host headers and no CUDA library headers: NVRTC's built-ins
// (vector types, intrinsics, math) and kjit's own PTX wrappers cover what they use (16-bit floats:
// kjit/f16_bits.cuh; FP8: kjit/fp8_cvt.cuh). Parsing cuda_bf16.h, cuda_fp16.h and cuda_fp8.h was
// 60–85 ms of every compile's front end.
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

// Thread-block clusters and distributed shared memory (kjit/cluster.cuh): sm_90+.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KJIT_HAS_SM90 1
#else
#define KJIT_HAS_SM90 0
#endif

// Programmatic dependent launch (sm_90+; PTX ISA "griddepcontrol"). A kernel launched with
// LaunchConfig::overlap_previous may start while the kernel before it in the stream is still
// running: it must pass KJIT_WAIT_PREVIOUS_GRID() before it reads anything that kernel wrote
// (the wait returns once that grid has completed and its memory is visible). A primary kernel
// calls KJIT_LAUNCH_DEPENDENTS() once its remaining work no longer needs the SM slots the
// dependent's CTAs would take. Both are no-ops below sm_90, where the launch attribute is not used.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KJIT_WAIT_PREVIOUS_GRID() asm volatile("griddepcontrol.wait;" ::: "memory")
#define KJIT_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define KJIT_WAIT_PREVIOUS_GRID() ((void)0)
#define KJIT_LAUNCH_DEPENDENTS() ((void)0)
#endif
