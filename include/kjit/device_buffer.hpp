#pragma once
/// \file device_buffer.hpp
/// An owning block of CUDA device memory, for the workspaces and scratch buffers a host
/// application (or a binding) allocates for kjit's ops itself.

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace kjit {

/// `bytes()` bytes of device memory on CUDA device `device()`, allocated with cuMemAlloc in the
/// device's primary context and freed with cuMemFree when the buffer is destroyed. Move-only: a
/// move hands the memory over and leaves the source empty. An empty buffer (default-constructed,
/// moved from, freed, or of 0 bytes) holds no memory: data() is null, bytes() is 0, device() is
/// -1, and destroying it makes no driver call.
///
/// The memory is uninitialized and aligned to at least 256 bytes (cuMemAlloc's guarantee). The
/// destructor cannot report a failed cuMemFree and ignores it; call free() to have it thrown.
/// Destroying a buffer a kernel still uses, or one a captured CUDA graph will replay with, is the
/// caller's error, as for any cuMemFree.
class DeviceBuffer {
 public:
  /// An empty buffer.
  DeviceBuffer() noexcept = default;
  /// Allocates `bytes` bytes on device `device` (an ordinal), making the device's primary context
  /// current on this thread when no context is (ensure_context's rule: a current context of
  /// another device is refused). `bytes` 0 gives an empty buffer without a driver call. Throws
  /// InvalidArgument for an ordinal out of range or a current context of another device, and
  /// DriverError naming the call when the driver is missing or cuMemAlloc fails
  /// (CUDA_ERROR_OUT_OF_MEMORY; also during a stream capture that forbids it).
  DeviceBuffer(int device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  /// Frees what this buffer held (a failure ignored, as in the destructor), then takes `other`'s.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  /// The device address of the first byte, or null when empty.
  void* data() const noexcept { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  /// The size in bytes (0 when empty).
  size_t bytes() const noexcept { return bytes_; }
  /// The CUDA device ordinal the memory is on, or -1 when empty.
  int device() const noexcept { return device_; }
  bool empty() const noexcept { return ptr_ == 0; }

  /// Frees the memory now (cuMemFree; the buffer's device's primary context is made current
  /// first when no context is). The buffer is empty afterwards, also when this throws. Throws
  /// DriverError naming cuMemFree and the CUresult when the driver refuses.
  void free();

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace kjit
