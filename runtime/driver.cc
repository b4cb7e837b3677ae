#include "runtime/driver.hpp"

#include <kjit/error.hpp>

#include <dlfcn.h>
#include <fmt/format.h>

#include <array>
#include <mutex>
#include <string>

namespace kjit::detail {
namespace {

struct Loaded {
  Driver driver;
  bool ok = false;
  std::string reason;
};

// Each entry point is resolved for the version listed in KJIT_DRIVER_ENTRY_POINTS, so its
// signature is the PFN_<name>_v<version> type we call it through.
Loaded load_driver() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l.reason = fmt::format("cannot load libcuda.so.1 ({}): no NVIDIA driver on this machine",
                           e ? e : "unknown error");
    return l;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(lib, "cuInit"));
  if (!get_proc || !init) {
    l.reason = "libcuda.so.1 lacks cuGetProcAddress_v2/cuInit: the driver is older than CUDA 12";
    return l;
  }
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    l.reason = fmt::format("cuInit failed with CUresult {} (no usable device or driver mismatch)",
                           static_cast<int>(r));
    return l;
  }
  bool missing = false;
  std::string missing_names;
#define KJIT_RESOLVE(name, version)                                                        \
  {                                                                                        \
    void* p = nullptr;                                                                     \
    CUdriverProcAddressQueryResult q{};                                                    \
    if (get_proc(#name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS      \
        || !p) {                                                                           \
      missing = true;                                                                      \
      missing_names += " " #name;                                                          \
    }                                                                                      \
    l.driver.name = reinterpret_cast<decltype(l.driver.name)>(p);                          \
  }
  KJIT_DRIVER_ENTRY_POINTS(KJIT_RESOLVE)
#undef KJIT_RESOLVE
  if (missing) {
    l.reason = "the CUDA driver lacks entry points:" + missing_names;
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load_driver();
  return l;
}

}  // namespace

const Driver* try_driver() noexcept {
  try {
    const Loaded& l = loaded();
    return l.ok ? &l.driver : nullptr;
  } catch (...) {
    return nullptr;
  }
}

const Driver& driver() {
  const Loaded& l = loaded();
  // Worded as the CLI words the same refusal: what is missing, then why.
  if (!l.ok) throw DriverError("kjit: no CUDA device: this call needs a GPU (" + l.reason + ")", 0);
  return l.driver;
}

std::string driver_reason() { return loaded().reason; }

void check_driver(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (const Driver* d = try_driver()) {
    d->cuGetErrorName(result, &name);
    d->cuGetErrorString(result, &text);
  }
  throw DriverError(fmt::format("{} failed: {} ({})", call, name ? name : "CUDA_ERROR_?",
                                text ? text : "no description"),
                    static_cast<int>(result));
}

namespace {
// The device of the thread's last context: a context's device never changes, and the ops ask on
// every call. A context destroyed and another created at its address on another device by the
// same thread would be misreported until the thread uses a third context; ensure_context then
// rejects the call (InvalidArgument) rather than launching on the wrong device.
KJIT_FAST_TLS thread_local CUcontext known_context = nullptr;
KJIT_FAST_TLS thread_local int known_device = -1;

int current_context_device(const Driver& d, CUcontext current) {
  if (current != known_context) {
    CUdevice dev = 0;
    check_driver(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
    known_context = current;
    known_device = static_cast<int>(dev);
  }
  return known_device;
}
}  // namespace

int context_device(CUcontext context) {
  if (context && context == known_context) return known_device;
  const Driver& d = driver();
  CUcontext current = nullptr;
  check_driver(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (!context || context == current) {
    if (!current) throw DriverError("kjit: no CUDA context is current", static_cast<int>(CUDA_ERROR_INVALID_CONTEXT));
    return current_context_device(d, current);
  }
  // cuCtxGetDevice (at the ABI we resolve) asks about the current context: switch for the call.
  check_driver(d.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUdevice dev = 0;
  const CUresult r = d.cuCtxGetDevice(&dev);
  d.cuCtxSetCurrent(current);
  check_driver(r, "cuCtxGetDevice");
  return static_cast<int>(dev);
}

bool binary_rejected(CUresult result) noexcept {
  switch (result) {
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
    case CUDA_ERROR_SHARED_OBJECT_INIT_FAILED:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC:
      return true;
    default:
      return false;
  }
}

CUcontext ensure_context(int ordinal) {
  const Driver& d = driver();
  CUcontext current = nullptr;
  check_driver(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current) {
    const int device = current_context_device(d, current);
    if (device != ordinal) {
      throw InvalidArgument(fmt::format(
          "tensors are on device {} but the current CUDA context belongs to device {}", ordinal, device));
    }
    return current;
  }
  // Retain each device's primary context once for the life of the process (what the CUDA
  // runtime does), so host apps that never touched CUDA still get a working context.
  static std::mutex mutex;
  static std::array<CUcontext, 64> primary{};
  std::lock_guard lock(mutex);
  if (ordinal < 0 || ordinal >= static_cast<int>(primary.size())) {
    throw InvalidArgument(fmt::format("device ordinal {} out of range", ordinal));
  }
  if (!primary[ordinal]) {
    CUdevice dev = 0;
    check_driver(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    check_driver(d.cuDevicePrimaryCtxRetain(&primary[ordinal], dev), "cuDevicePrimaryCtxRetain");
  }
  check_driver(d.cuCtxSetCurrent(primary[ordinal]), "cuCtxSetCurrent");
  return primary[ordinal];
}

}  // namespace kjit::detail
