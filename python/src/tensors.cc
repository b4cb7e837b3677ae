#include "tensors.hpp"

#include "errors.hpp"

#include "runtime/internal/python.hpp"

#include <kjit/error.hpp>

#include <cstring>
#include <string>

namespace kjit::python {

namespace {

constexpr int kMaxTypes = 32;
TypeInfo g_types[kMaxTypes];
int g_num_types = 0;
int g_last_type = 0;  // the slot of the last lookup: an op's tensors are mostly of one type
bool g_exchange_disabled = false;

Framework framework_of(PyTypeObject* type) {
  nb::handle t(reinterpret_cast<PyObject*>(type));
  std::string module;
  if (PyObject* m = PyObject_GetAttrString(t.ptr(), "__module__")) {
    if (PyUnicode_Check(m)) module = PyUnicode_AsUTF8(m);
    Py_DECREF(m);
  } else {
    PyErr_Clear();
  }
  auto starts = [&](const char* p) { return module.rfind(p, 0) == 0; };
  if (starts("torch")) return Framework::kTorch;
  if (starts("cupy")) return Framework::kCupy;
  if (starts("jax") || starts("jaxlib")) return Framework::kJax;
  if (starts("numpy")) return Framework::kNumpy;
  return Framework::kOther;
}

const KjitDLPackExchangeAPI* exchange_api_of(PyTypeObject* type) {
  if (g_exchange_disabled) return nullptr;
  PyObject* attr = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (!attr) {
    PyErr_Clear();
    return nullptr;
  }
  const KjitDLPackExchangeAPI* api = nullptr;
  if (PyCapsule_CheckExact(attr)) {
    api = static_cast<const KjitDLPackExchangeAPI*>(PyCapsule_GetPointer(attr, "dlpack_exchange_api"));
    if (!api) PyErr_Clear();
  }
  Py_DECREF(attr);
  // A table of another major version has another layout: use the Python protocol instead.
  if (api && (api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync ||
              !api->current_work_stream || !api->managed_tensor_allocator ||
              !api->managed_tensor_to_py_object_no_sync)) {
    api = nullptr;
  }
  return api;
}

// DLPack's stream argument for a CUstream (the protocol reserves 0; 1 is the legacy default
// stream, 2 the per-thread default stream).
long long dlpack_stream_value(CUstream s) {
  const auto v = reinterpret_cast<uintptr_t>(s);
  if (v == 0) return 1;
  return static_cast<long long>(v);
}

[[noreturn]] void fail_argument(const char* op, const char* name, const std::string& what) {
  throw InvalidArgument(std::string(op) + ": " + name + ": " + what);
}

// `force`: read the bits as this dtype (an output allocated with a same-width stand-in dtype).
TensorRef from_dl(const char* op, const char* name, const DLTensor& t, const DType* force = nullptr) {
  try {
    if (force && t.dtype.bits == dtype_size(*force) * 8 && t.dtype.lanes == 1) {
      DLTensor forced = t;
      forced.dtype = dl_dtype(*force);
      return TensorRef::from_dlpack(forced);
    }
    return TensorRef::from_dlpack(t);
  } catch (const InvalidArgument& e) {
    fail_argument(op, name, e.what());
  }
}

void set_error_cb(void* ctx, const char* kind, const char* message) {
  auto* out = static_cast<std::string*>(ctx);
  *out = std::string(kind ? kind : "error") + ": " + (message ? message : "");
}

}  // namespace

const TypeInfo& type_info(PyTypeObject* type) {
  if (g_last_type < g_num_types && g_types[g_last_type].type == type) return g_types[g_last_type];
  for (int i = 0; i < g_num_types; ++i) {
    if (g_types[i].type == type) {
      g_last_type = i;
      return g_types[i];
    }
  }
  TypeInfo info;
  info.type = type;
  info.api = exchange_api_of(type);
  info.framework = framework_of(type);
  if (g_num_types == kMaxTypes) {
    // Many distinct tensor types in one process: recycle the oldest slot.
    Py_DECREF(reinterpret_cast<PyObject*>(g_types[0].type));
    std::memmove(&g_types[0], &g_types[1], sizeof(TypeInfo) * (kMaxTypes - 1));
    --g_num_types;
  }
  Py_INCREF(reinterpret_cast<PyObject*>(type));  // no other type can take its address
  g_types[g_num_types] = info;
  return g_types[g_num_types++];
}

void set_exchange_api_disabled(bool disabled) {
  for (int i = 0; i < g_num_types; ++i) Py_DECREF(reinterpret_cast<PyObject*>(g_types[i].type));
  g_num_types = 0;
  g_exchange_disabled = disabled;
}

CUstream parse_stream(nb::handle stream) {
  PyObject* s = stream.ptr();
  if (PyLong_Check(s)) return reinterpret_cast<CUstream>(static_cast<uintptr_t>(PyLong_AsUnsignedLongLongMask(s)));
  for (const char* attr : {"cuda_stream", "ptr"}) {
    if (PyObject_HasAttrString(s, attr)) {
      nb::object v = nb::steal(PyObject_GetAttrString(s, attr));
      if (v.is_valid() && PyLong_Check(v.ptr())) {
        return reinterpret_cast<CUstream>(static_cast<uintptr_t>(PyLong_AsUnsignedLongLongMask(v.ptr())));
      }
    }
  }
  if (PyObject_HasAttrString(s, "__cuda_stream__")) {
    nb::object v = nb::steal(PyObject_CallMethod(s, "__cuda_stream__", nullptr));
    if (!v.is_valid()) throw nb::python_error();
    if (PyTuple_Check(v.ptr()) && PyTuple_Size(v.ptr()) == 2) {
      return reinterpret_cast<CUstream>(
          static_cast<uintptr_t>(PyLong_AsUnsignedLongLongMask(PyTuple_GetItem(v.ptr(), 1))));
    }
  }
  throw InvalidArgument(std::string("stream: expected an int (a CUstream), a torch.cuda.Stream, a cupy.cuda.Stream or an "
                                    "object with __cuda_stream__, got ") +
                        Py_TYPE(s)->tp_name);
}

OpCall::OpCall(const char* op, nb::handle stream) : op_(op), stream_arg_(stream) {
  if (!stream.is_none()) {
    stream_ = parse_stream(stream);
    stream_resolved_ = true;
  }
}

OpCall::~OpCall() {
  for (int i = num_kept_ - 1; i >= 0; --i) Py_DECREF(kept_[i]);
}

void OpCall::keep(PyObject* owned) {
  if (num_kept_ == kMaxKept) {
    Py_DECREF(owned);
    throw InvalidArgument(std::string(op_) + ": too many tensors in one call");
  }
  kept_[num_kept_++] = owned;
}

void OpCall::resolve_stream(const TypeInfo& info, const DLTensor* first) {
  if (stream_resolved_) return;
  stream_resolved_ = true;
  if (info.api && first && (first->device.device_type == kDLCUDA || first->device.device_type == kDLCUDAManaged)) {
    void* s = nullptr;
    if (info.api->current_work_stream(kDLCUDA, first->device.device_id, &s) != 0) throw nb::python_error();
    stream_ = static_cast<CUstream>(s);
  } else if (info.framework == Framework::kCupy) {
    nb::object cupy_cuda = nb::module_::import_("cupy.cuda");
    nb::object s = cupy_cuda.attr("get_current_stream")();
    stream_ = reinterpret_cast<CUstream>(nb::cast<uintptr_t>(s.attr("ptr")));
  }
  // Anything else (JAX, NumPy, unknown producers): the legacy default stream.
}

TensorRef OpCall::tensor(nb::handle obj, const char* name) { return import(obj, name, nullptr); }

TensorRef OpCall::import(nb::handle obj, const char* name, const DType* force) {
  if (obj.is_none()) return TensorRef();
  PyObject* o = obj.ptr();
  const TypeInfo& info = type_info(Py_TYPE(o));
  if (!first_) {
    first_ = o;
    first_info_ = &info;
  }
  if (info.api) {
    DLTensor t;
    if (info.api->dltensor_from_py_object_no_sync(o, &t) != 0) throw nb::python_error();
    resolve_stream(info, &t);
    TensorRef r = from_dl(op_, name, t, force);
    if (device_ < 0) device_ = r.device;
    return r;
  }
  resolve_stream(info, nullptr);
  if (info.framework == Framework::kJax) sync_after_ = true;
  PyObject* dev = PyObject_CallMethod(o, "__dlpack_device__", nullptr);
  if (!dev) {
    PyErr_Clear();
    fail_argument(op_, name,
                  std::string("expected a DLPack tensor (an object with __dlpack__ and __dlpack_device__), got ") +
                      Py_TYPE(o)->tp_name);
  }
  long device_type = -1;
  if (PyTuple_Check(dev) && PyTuple_Size(dev) >= 1) device_type = PyLong_AsLong(PyTuple_GetItem(dev, 0));
  Py_DECREF(dev);
  PyObject* capsule = nullptr;
  if (device_type == kDLCUDA || device_type == kDLCUDAManaged) {
    nb::object dlpack = nb::steal(PyObject_GetAttrString(o, "__dlpack__"));
    if (!dlpack.is_valid()) throw nb::python_error();
    nb::dict kwargs;
    kwargs["stream"] = dlpack_stream_value(stream_);
    capsule = PyObject_Call(dlpack.ptr(), nb::tuple().ptr(), kwargs.ptr());
  } else {
    capsule = PyObject_CallMethod(o, "__dlpack__", nullptr);
  }
  if (!capsule) throw nb::python_error();
  keep(capsule);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (!managed) {
    PyErr_Clear();
    fail_argument(op_, name, "__dlpack__() did not return an unused \"dltensor\" capsule");
  }
  TensorRef r = from_dl(op_, name, managed->dl_tensor, force);
  if (device_ < 0) device_ = r.device;
  return r;
}

TensorRef OpCall::required(nb::handle obj, const char* name) {
  if (obj.is_none()) fail_argument(op_, name, "is required (got None)");
  return tensor(obj, name);
}

DLDataType dl_dtype(DType dtype) noexcept {
  switch (dtype) {
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF64: return {kDLFloat, 64, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU8: return {kDLUInt, 8, 1};
    case DType::kBool: return {kDLBoolCode, 8, 1};
    case DType::kE4M3: return {kDLFloat8E4M3FnCode, 8, 1};
    case DType::kE5M2: return {kDLFloat8E5M2Code, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

nb::object OpCall::allocate(DType dtype, std::initializer_list<int64_t> shape, TensorRef* ref) {
  return allocate(dtype, shape.begin(), static_cast<int>(shape.size()), ref);
}

nb::object OpCall::allocate(DType dtype, const int64_t* shape, int ndim, TensorRef* ref) {
  if (!first_) throw InvalidArgument(std::string(op_) + ": no input tensor to allocate the output like");
  const TypeInfo& info = *first_info_;
  if (info.api) {
    DLTensor proto{};
    proto.device.device_type = device_ >= 0 ? kDLCUDA : kDLCPU;
    proto.device.device_id = device_ >= 0 ? device_ : 0;
    proto.ndim = ndim;
    proto.dtype = dl_dtype(dtype);
    proto.shape = const_cast<int64_t*>(shape);
    KjitDLManagedTensorVersioned* managed = nullptr;
    std::string error;
    if (info.api->managed_tensor_allocator(&proto, &managed, &error, set_error_cb) != 0 || !managed) {
      if (PyErr_Occurred()) throw nb::python_error();
      throw InvalidArgument(std::string(op_) + ": allocating the output failed: " + error);
    }
    TensorRef view;
    try {
      view = from_dl(op_, "output", managed->dl_tensor, &dtype);
    } catch (...) {
      if (managed->deleter) managed->deleter(managed);
      throw;
    }
    // The tensor object owns `managed` from here on (and with it the memory `view` points to).
    void* out = nullptr;
    if (info.api->managed_tensor_to_py_object_no_sync(managed, &out) != 0) throw nb::python_error();
    *ref = view;
    return nb::steal(static_cast<PyObject*>(out));
  }
  // The Python protocol: kjit._alloc.empty(like, shape, dtype name) picks the framework's call.
  nb::tuple shape_t = nb::steal<nb::tuple>(PyTuple_New(ndim));
  for (int i = 0; i < ndim; ++i) PyTuple_SET_ITEM(shape_t.ptr(), i, PyLong_FromLongLong(shape[i]));
  nb::object empty = nb::module_::import_("kjit._alloc").attr("empty");
  nb::object result = empty(nb::handle(first_), shape_t, dtype_name(dtype));
  // NumPy and CuPy have no FP8 (nor a DLPack-exportable bf16) dtype: kjit._alloc gives a
  // stand-in of the same width.
  *ref = import(result, "output", &dtype);
  return result;
}

void OpCall::finish() {
  if (sync_after_) KJIT_CU(cuStreamSynchronize(stream_));
}

}  // namespace kjit::python
