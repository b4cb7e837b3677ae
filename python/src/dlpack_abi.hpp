#pragma once
/// \file dlpack_abi.hpp
/// The parts of the DLPack 1.x ABI that the system's dlpack.h (0.6 on Debian 12) lacks: the
/// versioned managed tensor, the data type codes added in 1.1 and the C exchange API of 1.3
/// (`__dlpack_c_exchange_api__`: a PyCapsule named "dlpack_exchange_api" on the tensor type, e.g.
/// torch.Tensor since 2.10). Layouts follow dlpack.h 1.3 field for field; the names carry a
/// `Kjit` prefix so that they never clash with a newer dlpack.h.

#include <dlpack/dlpack.h>

#include <cstdint>

namespace kjit::python {

/// DLDataTypeCode values of DLPack 1.x that 0.6 has no names for.
inline constexpr uint8_t kDLBoolCode = 6;
inline constexpr uint8_t kDLFloat8E4M3FnCode = 10;
inline constexpr uint8_t kDLFloat8E5M2Code = 12;

struct KjitDLPackVersion {
  uint32_t major;
  uint32_t minor;
};

struct KjitDLManagedTensorVersioned {
  KjitDLPackVersion version;
  void* manager_ctx;
  void (*deleter)(KjitDLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

struct KjitDLPackExchangeAPIHeader {
  KjitDLPackVersion version;
  KjitDLPackExchangeAPIHeader* prev_api;
};

/// Every entry point returns 0 on success and -1 with a Python exception set; none
/// synchronizes: the consumer launches on current_work_stream.
struct KjitDLPackExchangeAPI {
  KjitDLPackExchangeAPIHeader header;
  /// A new tensor of the producer's framework shaped like `prototype` (dtype, ndim, shape,
  /// device); on failure calls `set_error` and returns non-zero.
  int (*managed_tensor_allocator)(DLTensor* prototype, KjitDLManagedTensorVersioned** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind, const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, KjitDLManagedTensorVersioned** out);
  /// Steals `tensor`; `*out_py_object` is a new reference.
  int (*managed_tensor_to_py_object_no_sync)(KjitDLManagedTensorVersioned* tensor, void** out_py_object);
  /// A non-owning view valid while the object lives (optional: may be null).
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(DLDeviceType device_type, int32_t device_id, void** out_current_stream);
};

}  // namespace kjit::python
