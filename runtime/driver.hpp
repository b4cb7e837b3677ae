#pragma once
/// \file driver.hpp
/// The CUDA Driver API, loaded at run time: dlopen("libcuda.so.1"), cuInit, then every other
/// entry point through cuGetProcAddress. libkjit has no link-time dependency on libcuda, so
/// everything but launching works on machines without a GPU.

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

// libkjit is a shared library, where thread_local defaults to the general-dynamic TLS model (a
// __tls_get_addr call per access). The hot path's few bytes of TLS use initial-exec instead.
#if defined(__GNUC__)
#define KJIT_FAST_TLS __attribute__((tls_model("initial-exec")))
#else
#define KJIT_FAST_TLS
#endif

namespace kjit::detail {

// Each entry point with the CUDA version whose ABI we call (cudaTypedefs.h names the function
// type PFN_<name>_v<version>). cuGetProcAddress is asked for exactly that version, so a driver
// newer than our headers (where e.g. cuCtxGetDevice gained a context argument in 13.0) still
// hands us the signature we were compiled against.
#define KJIT_DRIVER_ENTRY_POINTS(X)                                                        \
  X(cuGetErrorName, 6000) X(cuGetErrorString, 6000) X(cuDriverGetVersion, 2020)            \
  X(cuDeviceGetCount, 2000) X(cuDeviceGet, 2000) X(cuDeviceGetName, 2000)                 \
  X(cuDeviceGetAttribute, 2000) X(cuDeviceTotalMem, 3020)                                  \
  X(cuDevicePrimaryCtxRetain, 7000)                                                        \
  X(cuCtxGetCurrent, 4000) X(cuCtxSetCurrent, 4000) X(cuCtxGetDevice, 2000)                \
  X(cuCtxSynchronize, 2000)                                                                \
  X(cuLibraryLoadData, 12000) X(cuLibraryUnload, 12000) X(cuLibraryGetKernel, 12000)       \
  X(cuKernelGetAttribute, 12000) X(cuKernelSetAttribute, 12000)                            \
  X(cuLaunchKernelEx, 11060) X(cuOccupancyMaxActiveClusters, 11070)                        \
  X(cuMemAlloc, 3020) X(cuMemFree, 3020) X(cuMemcpyHtoD, 3020) X(cuMemcpyDtoH, 3020)       \
  X(cuMemsetD8, 3020) X(cuMemsetD8Async, 3020)                                             \
  X(cuStreamCreate, 2000) X(cuStreamDestroy, 4000) X(cuStreamSynchronize, 2000)            \
  X(cuEventCreate, 2000) X(cuEventDestroy, 4000) X(cuEventRecord, 2000)                    \
  X(cuEventSynchronize, 2000) X(cuEventElapsedTime, 2000)                                  \
  X(cuTensorMapEncodeTiled, 12000)                                                         \
  X(cuStreamIsCapturing, 10000) X(cuStreamBeginCapture, 10010) X(cuStreamEndCapture, 10000) \
  X(cuThreadExchangeStreamCaptureMode, 10010)                                              \
  X(cuGraphInstantiateWithFlags, 11040) X(cuGraphLaunch, 10000)                            \
  X(cuGraphExecDestroy, 10000) X(cuGraphDestroy, 10000)

/// Function pointers to the driver entry points kjit uses, named as in cuda.h.
struct Driver {
#define KJIT_DRIVER_MEMBER(name, version) PFN_##name##_v##version name = nullptr;
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
/// retained once for the process) and returns the current context. Throws InvalidArgument when
/// the current context belongs to another device.
CUcontext ensure_context(int ordinal);

/// The device ordinal of `context` (nullptr = the current one). The answer for the thread's last
/// context is remembered, so asking about the context ensure_context just returned makes no
/// driver call. Throws DriverError when the driver fails.
int context_device(CUcontext context);

/// Whether `result` says the driver refused a binary (wrong arch, bad image, missing symbol)
/// rather than that it failed for another reason (out of memory, no context).
bool binary_rejected(CUresult result) noexcept;

}  // namespace kjit::detail

/// Calls a driver entry point and throws DriverError naming the call when it fails:
/// KJIT_CU(cuMemAlloc(&ptr, bytes)).
#define KJIT_CU(call_expr) \
  ::kjit::detail::check_driver(::kjit::detail::driver().call_expr, #call_expr)
