#pragma once
/// \file gpu.hpp
/// Small device helpers for tests, selftest and benchmarks, on top of kjit's run-time loaded
/// driver: is there a GPU, device buffers, poisoning, synchronization.

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

namespace kjit::testing {

/// True when the driver loads and at least one device exists. Makes device 0's primary context
/// current (once) when it returns true.
bool has_gpu();

/// The ordinal of the device whose context is current on this thread; with none current, makes
/// device 0's primary context current and returns 0. The case runners (reference_*.hpp) and the
/// selftest put their tensors on this device, so a thread runs them on device N by making a
/// context of device N current first (use_device, or a context of its own).
int current_device();

/// Makes device `ordinal`'s primary context current on this thread (retained for the process),
/// replacing whatever context was current. Throws InvalidArgument naming the device count when
/// `ordinal` is out of range, DriverError without a driver.
void use_device(int ordinal);

/// Creates a CUDA context of its own on device `ordinal` (cuCtxCreate, default flags) and makes
/// it current on this thread, for tests of what kjit does across contexts (kjit itself uses
/// primary contexts). The caller destroys it with destroy_context. Throws DriverError.
CUcontext create_context(int ordinal);
/// cuCtxDestroy of a context create_context made. Throws DriverError.
void destroy_context(CUcontext context);

/// An owning device allocation (cuMemAlloc / cuMemFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const noexcept { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const noexcept { return bytes_; }

  /// Copies `bytes` host bytes in (synchronous).
  void upload(const void* host, size_t bytes);
  template <class T>
  void upload(const std::vector<T>& host) { upload(host.data(), host.size() * sizeof(T)); }
  /// Copies `bytes` out (synchronous).
  void download(void* host, size_t bytes) const;
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> out(count);
    download(out.data(), count * sizeof(T));
    return out;
  }
  /// Fills every byte with `value` (0xFF makes bf16 NaN: a poisoned output).
  void fill(uint8_t value);

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// A device buffer holding a copy of `host`.
template <class T>
DeviceBuffer to_device(const std::vector<T>& host) {
  DeviceBuffer b(host.size() * sizeof(T) == 0 ? 16 : host.size() * sizeof(T));
  if (!host.empty()) b.upload(host);
  return b;
}

/// cuCtxSynchronize; throws DriverError on an asynchronous kernel fault.
void synchronize();

/// Device-event timing of `fn` (already warmed up): median milliseconds over `reps` runs.
double time_ms(const std::function<void()>& fn, int reps, CUstream stream = nullptr);

}  // namespace kjit::testing
