#include "runtime/ops/validate.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

namespace kjit::detail {

void fail(const char* op, const std::string& message) {
  throw InvalidArgument(fmt::format("{}: {}", op, message));
}

void check_rank(const char* op, const char* name, const TensorRef& t, int ndim) {
  if (t.ndim == 0) fail(op, fmt::format("{} is required ({}-d tensor)", name, ndim));
  if (t.ndim != ndim) fail(op, fmt::format("{} must be {}-d, got {}", name, ndim, t.describe()));
}

void check_dtype(const char* op, const char* name, const TensorRef& t, DType dtype) {
  if (t.dtype != dtype) fail(op, fmt::format("{} must be {}, got {}", name, dtype_name(dtype), t.describe()));
}

void check_dtype(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) {
    if (t.dtype == d) return;
  }
  std::string names;
  for (DType d : dtypes) names += fmt::format("{}{}", names.empty() ? "" : " or ", dtype_name(d));
  fail(op, fmt::format("{} must be {}, got {}", name, names, t.describe()));
}

void check_dim(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected, const char* what) {
  if (t.size(dim) != expected) {
    fail(op, fmt::format("{} dim {} must be {} = {}, got {}", name, dim, what, expected, t.describe()));
  }
}

void check_last_dim_contiguous(const char* op, const char* name, const TensorRef& t) {
  if (t.ndim > 0 && t.size(-1) > 1 && t.stride(-1) != 1) {
    fail(op, fmt::format("{} must have a contiguous last dimension (stride 1), got {}", name, t.describe()));
  }
}

void check_contiguous(const char* op, const char* name, const TensorRef& t) {
  if (!t.is_contiguous()) fail(op, fmt::format("{} must be contiguous, got {}", name, t.describe()));
}

void check_rows_aligned(const char* op, const char* name, const TensorRef& t, int bytes) {
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  if (address % bytes != 0) {
    fail(op, fmt::format("{} data pointer {:#x} must be {}-byte aligned, got {}", name, address, bytes, t.describe()));
  }
  const int elem = dtype_size(t.dtype);
  for (int i = 0; i < t.ndim; ++i) {
    // The unit-stride (contiguous) dimension is covered by the pointer check; the others must
    // keep every row start aligned.
    if (t.shape[i] > 1 && t.strides[i] != 1 && (t.strides[i] * elem) % bytes != 0) {
      fail(op, fmt::format("{} stride of dim {} ({} elements = {} bytes) must be a multiple of {} bytes (rows "
                           "{}-byte aligned), got {}",
                           name, i, t.strides[i], t.strides[i] * elem, bytes, bytes, t.describe()));
    }
  }
}

void check_sizes(const char* op, const char* name, const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) fail(op, fmt::format("{} has a negative size, got {}", name, t.describe()));
  }
}

void check_not_null(const char* op, const char* name, const TensorRef& t) {
  if (t.data == nullptr && t.numel() > 0) fail(op, fmt::format("{} has a null data pointer, got {}", name, t.describe()));
}

void check_device(const char* op, const char* name, const TensorRef& t, int device) {
  if (t.device != device) {
    fail(op, fmt::format("{} is on {}, expected CUDA device {}", name,
                         t.device < 0 ? std::string("the host") : fmt::format("CUDA device {}", t.device), device));
  }
}

}  // namespace kjit::detail
