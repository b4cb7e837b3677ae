#include <kjit/error.hpp>
#include <kjit/tensor.hpp>

#include <fmt/format.h>

namespace kjit {

const char* dtype_name(DType t) noexcept { return enum_name(kDTypeNames, t); }

namespace {
void set_contiguous_strides(TensorRef& t) {
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = s;
    s *= t.shape[i];
  }
}
}  // namespace

TensorRef::TensorRef(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                     std::initializer_list<int64_t> strides_, int device_)
    : data(data_), dtype(dtype_), ndim(static_cast<int>(shape_.size())), device(device_) {
  if (shape_.size() > kMaxDims) {
    throw InvalidArgument(fmt::format("TensorRef: {} dims, at most {} supported", shape_.size(), kMaxDims));
  }
  if (strides_.size() != 0 && strides_.size() != shape_.size()) {
    throw InvalidArgument(fmt::format("TensorRef: {} strides for {} dims", strides_.size(), shape_.size()));
  }
  int i = 0;
  for (int64_t s : shape_) shape[i++] = s;
  if (strides_.size() == 0) {
    set_contiguous_strides(*this);
  } else {
    i = 0;
    for (int64_t s : strides_) strides[i++] = s;
  }
}

TensorRef TensorRef::from_dlpack(const DLTensor& t) {
  TensorRef r;
  if (t.ndim > kMaxDims || t.ndim < 0) {
    throw InvalidArgument(fmt::format("DLTensor with {} dims: at most {} supported", t.ndim, kMaxDims));
  }
  if (t.dtype.lanes != 1) throw InvalidArgument("DLTensor with vector lanes is not supported");
  const auto code = t.dtype.code;
  const auto bits = t.dtype.bits;
  if (code == kDLBfloat && bits == 16) r.dtype = DType::kBF16;
  else if (code == kDLFloat && bits == 16) r.dtype = DType::kF16;
  else if (code == kDLFloat && bits == 32) r.dtype = DType::kF32;
  else if (code == kDLFloat && bits == 64) r.dtype = DType::kF64;
  else if (code == kDLInt && bits == 32) r.dtype = DType::kI32;
  else if (code == kDLInt && bits == 64) r.dtype = DType::kI64;
  else if (code == kDLUInt && bits == 8) r.dtype = DType::kU8;
  else if (code == kDLUInt && bits == 1) r.dtype = DType::kBool;  // PyTorch exports bool so
  else if (code == kDLInt && bits == 8) r.dtype = DType::kU8;
  // DLPack 1.x codes (absent from the 0.6 header): kDLBool, kDLFloat8_e4m3fn, kDLFloat8_e5m2,
  // as PyTorch exports torch.bool, torch.float8_e4m3fn and torch.float8_e5m2.
  else if (code == 6 && bits == 8) r.dtype = DType::kBool;
  else if (code == 10 && bits == 8) r.dtype = DType::kE4M3;
  else if (code == 12 && bits == 8) r.dtype = DType::kE5M2;
  else throw InvalidArgument(fmt::format("DLTensor dtype code={} bits={} is not supported", code, bits));
  r.data = static_cast<char*>(t.data) + t.byte_offset;
  r.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) r.shape[i] = t.shape[i];
  if (t.strides) {
    for (int i = 0; i < t.ndim; ++i) r.strides[i] = t.strides[i];
  } else {
    set_contiguous_strides(r);
  }
  r.device = (t.device.device_type == kDLCUDA || t.device.device_type == kDLCUDAManaged)
                 ? t.device.device_id
                 : -1;
  return r;
}

bool TensorRef::is_contiguous() const noexcept {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string TensorRef::describe() const {
  if (ndim == 0) return fmt::format("(absent) {}", dtype_name(dtype));
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  s += "] ";
  s += dtype_name(dtype);
  if (!is_contiguous()) {
    s += " strides [";
    for (int i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", strides[i]);
    s += "]";
  }
  return s;
}

}  // namespace kjit
