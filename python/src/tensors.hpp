#pragma once
/// \file tensors.hpp
/// Python objects → kjit::TensorRef, the stream an op runs on, and outputs allocated in the
/// framework of the op's first tensor. One OpCall lives on the stack of each op binding and
/// owns what the conversions needed for the call (DLPack capsules, allocated outputs).
///
/// How a tensor is read, per Python type (looked up once per type and cached):
///   * the DLPack C exchange API (`type.__dlpack_c_exchange_api__`, torch ≥ 2.10): a C call
///     fills a DLTensor view, no Python call, no allocation; the framework's current stream
///     comes from the same table (torch.cuda.current_stream);
///   * otherwise the Python protocol: `__dlpack_device__()`, then `__dlpack__(stream=s)` for CUDA
///     tensors (the producer orders its pending work before stream s, as the protocol says) and
///     `__dlpack__()` for host ones; the capsule lives until the call ends. CuPy's current
///     stream is `cupy.cuda.get_current_stream()`; JAX has no current stream: kjit runs on the
///     legacy default stream and synchronizes it before returning when a JAX array was written
///     (JAX cannot be told about a write).

#include "dlpack_abi.hpp"

#include <kjit/tensor.hpp>

#include <cuda.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <initializer_list>

namespace kjit::python {

namespace nb = nanobind;

enum class Framework : uint8_t { kOther, kTorch, kCupy, kJax, kNumpy };

/// What kjit knows about one Python tensor type.
struct TypeInfo {
  PyTypeObject* type = nullptr;
  const KjitDLPackExchangeAPI* api = nullptr;  ///< null: the Python protocol
  Framework framework = Framework::kOther;
};

/// The TypeInfo of `type` (cached; the cache holds a reference to the type).
const TypeInfo& type_info(PyTypeObject* type);

/// Turns the exchange API off (true) or on again, for tests and benchmarks that compare the
/// two paths; clears the type cache.
void set_exchange_api_disabled(bool disabled);

/// Parses a `stream=` argument: an int (a CUstream value), an object with `cuda_stream`
/// (torch.cuda.Stream) or `ptr` (cupy.cuda.Stream), or one with `__cuda_stream__()` (the CUDA
/// stream protocol: returns (version, pointer)). Throws InvalidArgument otherwise.
CUstream parse_stream(nb::handle stream);

/// One op call: the stream and everything the converted tensors borrow from.
class OpCall {
 public:
  /// `op` names the op in error messages ("kjit.rotary"); `stream` is the `stream=` argument
  /// (None: the framework's current stream, resolved by the first tensor imported).
  OpCall(const char* op, nb::handle stream);
  ~OpCall();
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;

  /// A view of `obj` (any DLPack tensor); None gives an absent TensorRef (ndim 0). `name` names
  /// the argument in errors. The first tensor imported fixes the call's framework and stream.
  TensorRef tensor(nb::handle obj, const char* name);
  /// Like tensor(), but None is an error naming the argument.
  TensorRef required(nb::handle obj, const char* name);

  /// A new tensor of `dtype` and `shape` on `like`'s device, allocated by `like`'s framework
  /// (the first tensor's when `like` is null). Returns the Python object; `*ref` views it.
  nb::object allocate(DType dtype, std::initializer_list<int64_t> shape, TensorRef* ref);
  nb::object allocate(DType dtype, const int64_t* shape, int ndim, TensorRef* ref);

  /// The stream to launch on (resolved by the first tensor; 0 before).
  CUstream stream() const noexcept { return stream_; }
  const char* op() const noexcept { return op_; }
  /// True when the first tensor's framework has the DLPack exchange API (allocations through it).
  bool has_exchange_api() const noexcept { return first_info_ && first_info_->api; }
  /// After a successful launch: synchronizes when a JAX array was written.
  void finish();

 private:
  TensorRef import(nb::handle obj, const char* name, const DType* force);
  void resolve_stream(const TypeInfo& info, const DLTensor* first);
  void keep(PyObject* owned);

  const char* op_;
  nb::handle stream_arg_;
  CUstream stream_ = nullptr;
  bool stream_resolved_ = false;
  bool sync_after_ = false;
  PyObject* first_ = nullptr;
  const TypeInfo* first_info_ = nullptr;
  int device_ = -1;
  static constexpr int kMaxKept = 24;
  PyObject* kept_[kMaxKept];
  int num_kept_ = 0;
};

/// DLPack code and bits of a kjit dtype.
DLDataType dl_dtype(DType dtype) noexcept;

}  // namespace kjit::python
