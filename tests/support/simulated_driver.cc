// A stand-in libcuda.so.1 for CPU tests: one simulated device whose compute capability the test
// chooses (KJIT_SIM_CC, "13.0" by default), so the driver-facing paths that only query a
// device (device_info, the target choice, `kjit devices`, the CLI's default target) run on a
// machine without a GPU. Every other entry point answers CUDA_ERROR_NOT_SUPPORTED: nothing
// here can launch, allocate or load a module.
//
// KJIT_SIM_HOST_PATH=1 adds what an op's host path needs, so its cost can be timed and its
// memos tested without a GPU; nothing here computes (a kernel emulator may, through
// kjitSimSetLaunchHook):
//   contexts    one primary context per process, current per thread
//   memory      "device" memory is host memory (cuMemAlloc is an aligned malloc; copies and
//               memsets are memcpy and memset), so a device pointer is an ordinary address
//   modules     cuLibraryLoadData keeps a copy of the ELF image (a cubin; PTX text is refused:
//               this driver has no JIT); cuLibraryGetKernel finds a kernel by its name in the
//               image's bytes; MAX_THREADS_PER_BLOCK is the device's 1024, SHARED_SIZE_BYTES 0
//   launches    cuLaunchKernelEx checks the config (non-empty grid, 1..1024 threads, dynamic
//               shared memory within 48 KB or the kernel's raised limit, a kernel and its
//               parameters, a cluster of at most 8 CTAs that divides the grid) and counts the
//               launch; no kernel runs unless a hook runs it; it takes no host time unless
//               kjitSimSetLaunchNs() asked for some
//   TMA maps    cuTensorMapEncodeTiled checks the geometry as the driver documents it (rank,
//               16-byte aligned base and strides, boxes of 1..256, a swizzled box row within its
//               span) and writes its arguments packed into the 128 bytes
//               (tests/support/simulated_tensor_map.hpp: not the hardware's encoding)
//   captures    cuStreamBeginCapture / cuStreamEndCapture mark any stream handle as captured
//               (cuStreamIsCapturing says ACTIVE meanwhile; nothing is recorded into a graph);
//               cuThreadExchangeStreamCaptureMode keeps a mode per thread; cuLibraryLoadData
//               refuses (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) while a global-mode capture is
//               open, unless the calling thread's mode is relaxed, as the driver does
//   the rest    clusters per device: SMs / cluster size, or 0 for clusters larger than
//               KJIT_SIM_MAX_CLUSTER when that is set (read at each query: a device that cannot
//               hold such clusters); synchronizing waits for nothing
// The device has 132 SMs, or KJIT_SIM_SMS when that is set (read at each query: a kernel
// emulator takes few, so a persistent grid's CTAs each walk several tiles).
// kjitSimLaunches() (extern "C") returns the launches accepted so far, kjitSimLastKernel() the
// name of the kernel the calling thread launched last (null before its first launch), and
// kjitSimSetLaunchNs(ns) makes each accepted launch spin for `ns` nanoseconds of the calling
// thread's CPU time, as a real driver's launch takes some (0, the default: none), and
// kjitSimSetLaunchHook(hook) hands each accepted launch to `hook` (a kernel emulator), which may
// compute it.
#include "runtime/driver.hpp"
#include "tests/support/simulated_tensor_map.hpp"

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

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

CUresult CUDAAPI get_error_name(CUresult r, const char** s) {
  switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    case CUDA_ERROR_ILLEGAL_STATE: *s = "CUDA_ERROR_ILLEGAL_STATE"; break;
    default: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI get_error_string(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NOT_SUPPORTED ? "not supported by the simulated driver" : "refused by the simulated driver";
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
int simulated_sms() {
  const char* sms = std::getenv("KJIT_SIM_SMS");
  const int n = sms != nullptr ? std::atoi(sms) : 0;
  return n > 0 ? n : 132;
}
CUresult CUDAAPI device_attribute(int* v, CUdevice_attribute a, CUdevice) {
  int major = 0, minor = 0;
  simulated_cc(&major, &minor);
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = simulated_sms(); break;
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

// --- KJIT_SIM_HOST_PATH=1: contexts, host memory, modules, checked launches, TMA maps ---------

bool host_path() {
  const char* v = std::getenv("KJIT_SIM_HOST_PATH");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

int primary_context_storage = 0;
CUcontext primary_context() { return reinterpret_cast<CUcontext>(&primary_context_storage); }
// Initial-exec, as libkjit's own hot TLS: the stand-in's calls should cost what a driver's do,
// not a __tls_get_addr each.
__attribute__((tls_model("initial-exec"))) thread_local CUcontext current_context = nullptr;
std::atomic<uint64_t> launches{0};
std::atomic<uint64_t> launch_ns{0};  // host time each accepted launch spins (kjitSimSetLaunchNs)
thread_local const char* last_kernel = nullptr;  // the name of the kernel this thread launched last
using LaunchHook = void (*)(const char* kernel, const CUlaunchConfig* config, void** params);
std::atomic<LaunchHook> launch_hook{nullptr};  // kjitSimSetLaunchHook

CUresult CUDAAPI primary_ctx_retain(CUcontext* ctx, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = primary_context();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ctx_get_current(CUcontext* ctx) {
  *ctx = current_context;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ctx_set_current(CUcontext ctx) {
  if (ctx != nullptr && ctx != primary_context()) return CUDA_ERROR_INVALID_CONTEXT;
  current_context = ctx;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ctx_get_device(CUdevice* d) {
  if (current_context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ctx_synchronize() { return current_context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
CUresult CUDAAPI stream_synchronize(CUstream) { return ctx_synchronize(); }
// The open captures (stream, mode) and each thread's capture mode.
std::mutex capture_mutex;
std::vector<std::pair<CUstream, CUstreamCaptureMode>> captures;
thread_local CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult CUDAAPI stream_is_capturing(CUstream stream, CUstreamCaptureStatus* status) {
  std::lock_guard lock(capture_mutex);
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  for (const auto& c : captures) {
    if (c.first == stream) *status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stream_begin_capture(CUstream stream, CUstreamCaptureMode mode) {
  std::lock_guard lock(capture_mutex);
  for (const auto& c : captures) {
    if (c.first == stream) return CUDA_ERROR_ILLEGAL_STATE;
  }
  captures.emplace_back(stream, mode);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stream_end_capture(CUstream stream, CUgraph* graph) {
  std::lock_guard lock(capture_mutex);
  for (auto it = captures.begin(); it != captures.end(); ++it) {
    if (it->first == stream) {
      captures.erase(it);
      *graph = nullptr;  // nothing is recorded here
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_ILLEGAL_STATE;
}
CUresult CUDAAPI thread_exchange_capture_mode(CUstreamCaptureMode* mode) {
  std::swap(*mode, thread_capture_mode);
  return CUDA_SUCCESS;
}
// Whether this thread may make a call a capture forbids (a module load) now.
bool capture_forbids_unsafe_calls() {
  if (thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  std::lock_guard lock(capture_mutex);
  for (const auto& c : captures) {
    if (c.second == CU_STREAM_CAPTURE_MODE_GLOBAL) return true;
  }
  return false;
}

CUresult CUDAAPI mem_alloc(CUdeviceptr* ptr, size_t bytes) {
  if (current_context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI mem_free(CUdeviceptr ptr) {
  std::free(reinterpret_cast<void*>(ptr));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI memcpy_htod(CUdeviceptr dst, const void* src, size_t bytes) {
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI memcpy_dtoh(void* dst, CUdeviceptr src, size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI memset_d8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI memset_d8_async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream) {
  return memset_d8(dst, value, bytes);
}

struct SimKernel {
  std::string name;
  std::atomic<int> max_dynamic_smem{48 * 1024};
};
struct SimLibrary {
  std::vector<char> image;
  std::mutex mutex;
  std::vector<std::unique_ptr<SimKernel>> kernels;
};

// An ELF image's size from its header: it ends with the section or program header table.
size_t elf_size(const void* code) {
  const auto* p = static_cast<const unsigned char*>(code);
  if (std::memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2) return 0;  // ELF64 only
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, p + at, 8);
    return v;
  };
  auto u16 = [&](size_t at) {
    uint16_t v;
    std::memcpy(&v, p + at, 2);
    return static_cast<uint64_t>(v);
  };
  const uint64_t sections = u64(0x28) + u16(0x3c) * u16(0x3a);
  const uint64_t segments = u64(0x20) + u16(0x38) * u16(0x36);
  return static_cast<size_t>(sections > segments ? sections : segments);
}

CUresult CUDAAPI library_load(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned,
                              CUlibraryOption*, void**, unsigned) {
  if (current_context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (capture_forbids_unsafe_calls()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const size_t bytes = elf_size(code);
  if (bytes == 0) return CUDA_ERROR_INVALID_IMAGE;  // PTX: nothing here JIT-compiles it
  auto lib = std::make_unique<SimLibrary>();
  lib->image.assign(static_cast<const char*>(code), static_cast<const char*>(code) + bytes);
  *library = reinterpret_cast<CUlibrary>(lib.release());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI library_unload(CUlibrary library) {
  delete reinterpret_cast<SimLibrary*>(library);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI library_get_kernel(CUkernel* kernel, CUlibrary library, const char* name) {
  auto* lib = reinterpret_cast<SimLibrary*>(library);
  if (lib == nullptr || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const size_t n = std::strlen(name) + 1;  // the symbol with its terminator, as a string table holds it
  bool found = false;
  for (size_t i = 0; !found && i + n <= lib->image.size(); ++i) found = std::memcmp(&lib->image[i], name, n) == 0;
  if (!found) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard lock(lib->mutex);
  auto k = std::make_unique<SimKernel>();
  k->name = name;
  *kernel = reinterpret_cast<CUkernel>(k.get());
  lib->kernels.push_back(std::move(k));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI kernel_get_attribute(int* v, CUfunction_attribute a, CUkernel kernel, CUdevice d) {
  if (kernel == nullptr || d != 0) return CUDA_ERROR_INVALID_HANDLE;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *v = reinterpret_cast<SimKernel*>(kernel)->max_dynamic_smem.load();
      break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI kernel_set_attribute(CUfunction_attribute a, int v, CUkernel kernel, CUdevice d) {
  if (kernel == nullptr || d != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_NOT_SUPPORTED;
  if (v < 0 || v > 232448) return CUDA_ERROR_INVALID_VALUE;
  reinterpret_cast<SimKernel*>(kernel)->max_dynamic_smem.store(v);
  return CUDA_SUCCESS;
}
uint64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

CUresult CUDAAPI launch_kernel_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  if (current_context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (c == nullptr || f == nullptr || (params == nullptr && extra == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t threads = uint64_t{c->blockDimX} * c->blockDimY * c->blockDimZ;
  if (c->gridDimX == 0 || c->gridDimY == 0 || c->gridDimZ == 0 || threads == 0 || threads > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A CUfunction taken from a CUkernel is the kernel's handle here.
  const auto* kernel = reinterpret_cast<const SimKernel*>(f);
  if (static_cast<int>(c->sharedMemBytes) > kernel->max_dynamic_smem.load(std::memory_order_relaxed)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& d = c->attrs[i].value.clusterDim;
    if (d.x == 0 || d.y == 0 || d.z == 0 || uint64_t{d.x} * d.y * d.z > 8 || c->gridDimX % d.x != 0 ||
        c->gridDimY % d.y != 0 || c->gridDimZ % d.z != 0) {
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
  }
  launches.fetch_add(1, std::memory_order_relaxed);
  last_kernel = kernel->name.c_str();
  if (const LaunchHook hook = launch_hook.load(); hook != nullptr) hook(last_kernel, c, params);
  if (const uint64_t ns = launch_ns.load(std::memory_order_relaxed); ns != 0) {
    // The thread's CPU time, not the wall clock: a launch is host work, so time the thread
    // spends descheduled meanwhile adds to the call as it would to a driver's launch.
    const uint64_t until = thread_cpu_ns() + ns;
    while (thread_cpu_ns() < until) {
    }
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI occupancy_max_active_clusters(int* clusters, CUfunction f, const CUlaunchConfig* c) {
  if (f == nullptr || c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned size = 1;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) size = c->attrs[i].value.clusterDim.x;
  }
  *clusters = simulated_sms() / static_cast<int>(size == 0 ? 1 : size);
  if (const char* max = std::getenv("KJIT_SIM_MAX_CLUSTER"); max != nullptr && size > std::strtoul(max, nullptr, 10)) {
    *clusters = 0;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* base,
                                         const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                         const cuuint32_t* elem_strides, CUtensorMapInterleave interleave,
                                         CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                         CUtensorMapFloatOOBfill oob) {
  const int* kElemBytes = kjit::testing::kSimTensorMapElemBytes;
  if (map == nullptr || rank < 1 || rank > 5 || static_cast<unsigned>(dtype) > 12) return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256 || elem_strides[i] == 0 || elem_strides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (uint64_t{1} << 40))) return CUDA_ERROR_INVALID_VALUE;
  }
  const int span = swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? 128 : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64 : 32;
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
      box[0] * kElemBytes[dtype] > static_cast<uint32_t>(span)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  kjit::testing::SimTensorMap m;
  m.base = reinterpret_cast<uintptr_t>(base);
  for (cuuint32_t i = 0; i < rank; ++i) {
    m.dims[i] = dims[i];
    m.box[i] = box[i];
    m.elem_strides[i] = elem_strides[i];
    if (i + 1 < rank) m.strides[i] = strides[i];
  }
  m.dtype = static_cast<uint8_t>(dtype);
  m.rank = static_cast<uint8_t>(rank);
  m.interleave = static_cast<uint8_t>(interleave);
  m.swizzle = static_cast<uint8_t>(swizzle);
  m.l2 = static_cast<uint8_t>(l2);
  m.oob = static_cast<uint8_t>(oob);
  kjit::testing::pack_sim_tensor_map(m, map);
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
  // Typed: each function must have the signature kjit calls it through.
#define KJIT_SIM_HOST(name, version, fn) {#name, entry<PFN_##name##_v##version>(&fn)}
  const Known host[] = {
      KJIT_SIM_HOST(cuDevicePrimaryCtxRetain, 7000, primary_ctx_retain),
      KJIT_SIM_HOST(cuCtxGetCurrent, 4000, ctx_get_current),
      KJIT_SIM_HOST(cuCtxSetCurrent, 4000, ctx_set_current),
      KJIT_SIM_HOST(cuCtxGetDevice, 2000, ctx_get_device),
      KJIT_SIM_HOST(cuCtxSynchronize, 2000, ctx_synchronize),
      KJIT_SIM_HOST(cuStreamSynchronize, 2000, stream_synchronize),
      KJIT_SIM_HOST(cuStreamIsCapturing, 10000, stream_is_capturing),
      KJIT_SIM_HOST(cuStreamBeginCapture, 10010, stream_begin_capture),
      KJIT_SIM_HOST(cuStreamEndCapture, 10000, stream_end_capture),
      KJIT_SIM_HOST(cuThreadExchangeStreamCaptureMode, 10010, thread_exchange_capture_mode),
      KJIT_SIM_HOST(cuMemAlloc, 3020, mem_alloc),
      KJIT_SIM_HOST(cuMemFree, 3020, mem_free),
      KJIT_SIM_HOST(cuMemcpyHtoD, 3020, memcpy_htod),
      KJIT_SIM_HOST(cuMemcpyDtoH, 3020, memcpy_dtoh),
      KJIT_SIM_HOST(cuMemsetD8, 3020, memset_d8),
      KJIT_SIM_HOST(cuMemsetD8Async, 3020, memset_d8_async),
      KJIT_SIM_HOST(cuLibraryLoadData, 12000, library_load),
      KJIT_SIM_HOST(cuLibraryUnload, 12000, library_unload),
      KJIT_SIM_HOST(cuLibraryGetKernel, 12000, library_get_kernel),
      KJIT_SIM_HOST(cuKernelGetAttribute, 12000, kernel_get_attribute),
      KJIT_SIM_HOST(cuKernelSetAttribute, 12000, kernel_set_attribute),
      KJIT_SIM_HOST(cuLaunchKernelEx, 11060, launch_kernel_ex),
      KJIT_SIM_HOST(cuOccupancyMaxActiveClusters, 11070, occupancy_max_active_clusters),
      KJIT_SIM_HOST(cuTensorMapEncodeTiled, 12000, tensor_map_encode_tiled),
  };
#undef KJIT_SIM_HOST
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  for (const Known& k : known) {
    if (std::strcmp(symbol, k.name) == 0) {
      *pfn = k.fn;
      return CUDA_SUCCESS;
    }
  }
  if (host_path()) {
    for (const Known& k : host) {
      if (std::strcmp(symbol, k.name) == 0) {
        *pfn = k.fn;
        return CUDA_SUCCESS;
      }
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

/// The launches cuLaunchKernelEx accepted in this process (KJIT_SIM_HOST_PATH=1).
__attribute__((visibility("default"))) uint64_t kjitSimLaunches() { return launches.load(); }

/// The lowered name of the kernel the calling thread launched last, or null (KJIT_SIM_HOST_PATH=1).
__attribute__((visibility("default"))) const char* kjitSimLastKernel() { return last_kernel; }

/// From now on each accepted launch spins for `ns` nanoseconds of the calling thread's CPU time
/// (0: none).
__attribute__((visibility("default"))) void kjitSimSetLaunchNs(uint64_t ns) { launch_ns.store(ns); }

/// From now on each accepted launch calls `hook` (null: none) on the launching thread with the
/// kernel's lowered name, the launch config and the kernel parameters as passed, before
/// cuLaunchKernelEx returns (KJIT_SIM_HOST_PATH=1). The Hopper kernel emulator runs the kernel
/// there, on the host memory the stand-in's allocations are.
__attribute__((visibility("default"))) void kjitSimSetLaunchHook(LaunchHook hook) { launch_hook.store(hook); }

}  // extern "C"
