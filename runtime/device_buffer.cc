#include <kjit/device_buffer.hpp>

#include "runtime/driver.hpp"

#include <cstdint>
#include <utility>

namespace kjit {

DeviceBuffer::DeviceBuffer(int device, size_t bytes) {
  if (bytes == 0) return;
  detail::ensure_context(device);
  KJIT_CU(cuMemAlloc(&ptr_, bytes));
  bytes_ = bytes;
  device_ = device;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(std::exchange(other.device_, -1)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));  // freed at the end of this scope
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == 0) return;
  try {
    free();
  } catch (...) {
  }
}

void DeviceBuffer::free() {
  if (ptr_ == 0) return;
  const CUdeviceptr ptr = std::exchange(ptr_, 0);
  const int device = std::exchange(device_, -1);
  bytes_ = 0;
  const detail::Driver& d = detail::driver();
  // cuMemFree needs a context; the address (unified addressing) names its own device.
  CUcontext current = nullptr;
  detail::check_driver(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current == nullptr) detail::ensure_context(device);
  detail::check_driver(d.cuMemFree(ptr), "cuMemFree");
}

}  // namespace kjit
