#include "tools/testing/gpu.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>

#include "runtime/internal/driver.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace kjit::testing {

bool has_gpu() {
  static const bool present = [] {
    if (kjit::device_count() == 0) return false;
    detail::ensure_context(0);
    return true;
  }();
  if (present) detail::ensure_context(0);
  return present;
}

int current_device() {
  CUcontext current = nullptr;
  KJIT_CU(cuCtxGetCurrent(&current));
  if (current == nullptr) {
    detail::ensure_context(0);
    return 0;
  }
  return detail::context_device(current);
}

void use_device(int ordinal) {
  const int count = kjit::device_count();
  if (ordinal < 0 || ordinal >= count) {
    throw InvalidArgument(fmt::format("device {} out of range: this machine has {} CUDA device{}", ordinal, count,
                                      count == 1 ? "" : "s"));
  }
  // ensure_context keeps a current context of another device as an error; clear it first.
  KJIT_CU(cuCtxSetCurrent(nullptr));
  detail::ensure_context(ordinal);
}

namespace {

// Context creation is test-only, so the library's driver table does not carry it: the legacy
// ABI symbols (flags, device) are enough here.
struct ContextApi {
  CUresult (*create)(CUcontext*, unsigned int, CUdevice) = nullptr;
  CUresult (*destroy)(CUcontext) = nullptr;
};

const ContextApi& context_api() {
  static const ContextApi api = [] {
    ContextApi a;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw DriverError("kjit testing: libcuda.so.1 could not be loaded to create a context", 0);
    a.create = reinterpret_cast<decltype(a.create)>(dlsym(lib, "cuCtxCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(dlsym(lib, "cuCtxDestroy_v2"));
    if (!a.create || !a.destroy) throw DriverError("kjit testing: libcuda.so.1 lacks cuCtxCreate_v2/cuCtxDestroy_v2", 0);
    return a;
  }();
  return api;
}

}  // namespace

CUcontext create_context(int ordinal) {
  CUdevice device = 0;
  detail::check_driver(detail::driver().cuDeviceGet(&device, ordinal), "cuDeviceGet");
  CUcontext context = nullptr;
  detail::check_driver(context_api().create(&context, 0, device), "cuCtxCreate_v2");
  return context;
}

void destroy_context(CUcontext context) { detail::check_driver(context_api().destroy(context), "cuCtxDestroy_v2"); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) KJIT_CU(cuMemAlloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) {
    if (const detail::Driver* d = detail::try_driver()) d->cuMemFree(ptr_);
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes) KJIT_CU(cuMemcpyHtoD(ptr_, host, bytes));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes) KJIT_CU(cuMemcpyDtoH(host, ptr_, bytes));
}

void DeviceBuffer::fill(uint8_t value) {
  if (bytes_) KJIT_CU(cuMemsetD8(ptr_, value, bytes_));
}

void synchronize() { KJIT_CU(cuCtxSynchronize()); }

double time_ms(const std::function<void()>& fn, int reps, CUstream stream) {
  CUevent start = nullptr, stop = nullptr;
  KJIT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  KJIT_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    KJIT_CU(cuEventRecord(start, stream));
    fn();
    KJIT_CU(cuEventRecord(stop, stream));
    KJIT_CU(cuEventSynchronize(stop));
    float ms = 0;
    KJIT_CU(cuEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  detail::driver().cuEventDestroy(start);
  detail::driver().cuEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times.empty() ? 0 : times[times.size() / 2];
}

}  // namespace kjit::testing
