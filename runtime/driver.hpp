#pragma once
/// \file driver.hpp
/// The CUDA Driver API, loaded at run time: dlopen("libcuda.so.1"), cuInit, then every other
/// entry point through cuGetProcAddress. libkjit has no link-time dependency on libcuda, so
/// everything but launching works on machines without a GPU.

#include <cuda.h>

#include <string>

namespace kjit::detail {

#define KJIT_DRIVER_ENTRY_POINTS(X)                                   \
  X(cuGetErrorName) X(cuGetErrorString) X(cuDriverGetVersion)          \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem)                          \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)             \
  X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice)              \
  X(cuCtxSynchronize) X(cuCtxCreate) X(cuCtxDestroy)                   \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)         \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute)                          \
  X(cuLaunchKernel) X(cuLaunchKernelEx)                                \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)           \
  X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemGetInfo)     \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)          \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                  \
  X(cuEventSynchronize) X(cuEventElapsedTime)

/// Function pointers to the driver entry points kjit uses, named as in cuda.h.
struct Driver {
#define KJIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  KJIT_DRIVER_ENTRY_POINTS(KJIT_DRIVER_MEMBER)
#undef KJIT_DRIVER_MEMBER
};

/// The loaded driver (loaded and cuInit'ed once, thread-safely). Throws DriverError naming the
/// reason ("libcuda.so.1 not found: no NVIDIA driver on this machine") when it cannot be loaded.
const Driver& driver();
/// The driver, or nullptr when it cannot be loaded (never throws).
const Driver* try_driver() noexcept;

/// Why the driver could not be loaded ("" when it loaded).
std::string driver_reason();

/// Throws DriverError "<call> failed: CUDA_ERROR_X (text)" unless `result` is CUDA_SUCCESS.
void check_driver(CUresult result, const char* call);

/// Makes a context current for `ordinal`'s device when none is (the device's primary context,
/// retained once for the process) and returns the current context.
CUcontext ensure_context(int ordinal);

}  // namespace kjit::detail

/// Calls a driver entry point and throws DriverError naming the call when it fails:
/// KJIT_CU(cuMemAlloc(&ptr, bytes)).
#define KJIT_CU(call_expr) \
  ::kjit::detail::check_driver(::kjit::detail::driver().call_expr, #call_expr)
