// A stand-in libcuda.so.1 for CPU tests: one simulated device whose compute capability the test
// chooses (KJIT_SIM_CC, "13.0" by default), so the driver-facing paths that only query a
// device (device_info, the target choice, `kjit devices`, the CLI's default target) run on a
// machine without a GPU. Every other entry point answers CUDA_ERROR_NOT_SUPPORTED: nothing
// here can launch, allocate or load a module.
#include "runtime/driver.hpp"

#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace {

// Each unsupported entry point with the exact signature kjit calls it through.
template <typename F>
struct Unsupported;
template <typename... A>
struct Unsupported<CUresult(CUDAAPI*)(A...)> {
  static CUresult CUDAAPI call(A...) { return CUDA_ERROR_NOT_SUPPORTED; }
};

void simulated_cc(int* major, int* minor) {
  const char* cc = std::getenv("KJIT_SIM_CC");
  *major = 13;
  *minor = 0;
  if (cc != nullptr) std::sscanf(cc, "%d.%d", major, minor);
}

CUresult CUDAAPI get_error_name(CUresult, const char** s) {
  *s = "CUDA_ERROR_NOT_SUPPORTED";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI get_error_string(CUresult, const char** s) {
  *s = "not supported by the simulated driver";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI driver_version(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_count(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_get(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_name(char* name, int len, CUdevice) {
  int major = 0, minor = 0;
  simulated_cc(&major, &minor);
  std::snprintf(name, static_cast<size_t>(len), "kjit simulated GPU (cc %d.%d)", major, minor);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_total_mem(size_t* bytes, CUdevice) {
  *bytes = size_t{80} << 30;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_attribute(int* v, CUdevice_attribute a, CUdevice) {
  int major = 0, minor = 0;
  simulated_cc(&major, &minor);
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

template <typename Pfn>
void* entry(Pfn implemented) {
  return reinterpret_cast<void*>(implemented);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuInit(unsigned) { return CUDA_SUCCESS; }

// NVRTC (12.9+) opens libcuda.so.1 too, for the driver's compute cache: it is told there is none.
__attribute__((visibility("default"))) CUresult cuGetExportTable(const void** table, const CUuuid*) {
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                                                     CUdriverProcAddressQueryResult* status) {
  struct Known {
    const char* name;
    void* fn;
  };
  const Known known[] = {
      {"cuGetErrorName", entry(&get_error_name)},       {"cuGetErrorString", entry(&get_error_string)},
      {"cuDriverGetVersion", entry(&driver_version)},   {"cuDeviceGetCount", entry(&device_count)},
      {"cuDeviceGet", entry(&device_get)},              {"cuDeviceGetName", entry(&device_name)},
      {"cuDeviceGetAttribute", entry(&device_attribute)}, {"cuDeviceTotalMem", entry(&device_total_mem)},
  };
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  for (const Known& k : known) {
    if (std::strcmp(symbol, k.name) == 0) {
      *pfn = k.fn;
      return CUDA_SUCCESS;
    }
  }
#define KJIT_SIM_UNSUPPORTED(name, version)                                          \
  if (std::strcmp(symbol, #name) == 0) {                                             \
    *pfn = reinterpret_cast<void*>(&Unsupported<PFN_##name##_v##version>::call);     \
    return CUDA_SUCCESS;                                                             \
  }
  KJIT_DRIVER_ENTRY_POINTS(KJIT_SIM_UNSUPPORTED)
#undef KJIT_SIM_UNSUPPORTED
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
