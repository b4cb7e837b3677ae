#pragma once
/// \file validate.hpp
/// Argument checks shared by the typed ops. Each throws InvalidArgument with a message that names
/// the op, the tensor and the rule ("kjit::rotary: q must be bf16, got [4, 8, 128] f32"). The
/// checks build strings only when they fail.

#include <kjit/device.hpp>
#include <kjit/tensor.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace kjit::detail {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Whether `x` is one of `values` (a family's declared set, e.g. attention::kHeadDims).
template <typename T, size_t N>
constexpr bool is_one_of(int64_t x, const T (&values)[N]) noexcept {
  for (const T& v : values) {
    if (x == v) return true;
  }
  return false;
}
/// "64, 128 or 256": a declared set for an error message (built only when a check fails).
std::string one_of_text(const int64_t* values, size_t n);
template <typename T, size_t N>
std::string one_of_text(const T (&values)[N]) {
  int64_t copy[N];
  for (size_t i = 0; i < N; ++i) copy[i] = values[i];
  return one_of_text(copy, N);
}

// The ops validate on every call, so each check is an inline test here and its message is built
// in an out-of-line, never-returning function in validate.cc, reached only when the check fails.
[[noreturn]] void rank_failed(const char* op, const char* name, const TensorRef& t, int ndim);
[[noreturn]] void dtype_failed(const char* op, const char* name, const TensorRef& t,
                               std::initializer_list<DType> dtypes);
[[noreturn]] void dim_failed(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected,
                             const char* what);
[[noreturn]] void last_dim_failed(const char* op, const char* name, const TensorRef& t);
[[noreturn]] void contiguous_failed(const char* op, const char* name, const TensorRef& t);
[[noreturn]] void pointer_alignment_failed(const char* op, const char* name, const TensorRef& t, int bytes);
[[noreturn]] void stride_alignment_failed(const char* op, const char* name, const TensorRef& t, int dim, int bytes);
[[noreturn]] void negative_size_failed(const char* op, const char* name, const TensorRef& t);
[[noreturn]] void null_failed(const char* op, const char* name, const TensorRef& t);
[[noreturn]] void device_failed(const char* op, const char* name, const TensorRef& t, int device);
[[noreturn]] void same_shape_failed(const char* op, const char* name, const TensorRef& t, const char* ref_name,
                                    const TensorRef& ref);
[[noreturn]] void count_failed(const char* op, const char* name, const TensorRef& t, int dim, const char* what);
[[noreturn]] void scale_failed(const char* op, float scale);

/// `t` is present (ndim > 0) and has rank `ndim`.
inline void check_rank(const char* op, const char* name, const TensorRef& t, int ndim) {
  if (t.ndim != ndim || ndim == 0) rank_failed(op, name, t, ndim);
}
/// `t` has dtype `dtype`.
inline void check_dtype(const char* op, const char* name, const TensorRef& t, DType dtype) {
  if (t.dtype != dtype) dtype_failed(op, name, t, {dtype});
}
/// `t` has one of `dtypes`.
inline void check_dtype(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) {
    if (t.dtype == d) return;
  }
  dtype_failed(op, name, t, dtypes);
}
/// t.size(dim) == expected; `what` names the expected quantity ("batch").
inline void check_dim(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected,
                      const char* what) {
  if (t.size(dim) != expected) dim_failed(op, name, t, dim, expected, what);
}
/// The last dimension has stride 1.
inline void check_last_dim_contiguous(const char* op, const char* name, const TensorRef& t) {
  if (t.ndim > 0 && t.size(-1) > 1 && t.stride(-1) != 1) last_dim_failed(op, name, t);
}
/// The whole tensor is compact row-major.
inline void check_contiguous(const char* op, const char* name, const TensorRef& t) {
  if (!t.is_contiguous()) contiguous_failed(op, name, t);
}
/// The data pointer is a multiple of `bytes`.
inline void check_pointer_aligned(const char* op, const char* name, const TensorRef& t, int bytes) {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes != 0) pointer_alignment_failed(op, name, t, bytes);
}
/// The data pointer and every stride other than a unit stride (in bytes) are multiples of
/// `bytes`, so each row along the contiguous dimension starts aligned.
inline void check_rows_aligned(const char* op, const char* name, const TensorRef& t, int bytes) {
  check_pointer_aligned(op, name, t, bytes);
  const int elem = dtype_size(t.dtype);
  for (int i = 0; i < t.ndim; ++i) {
    // The unit-stride (contiguous) dimension is covered by the pointer check; the others must
    // keep every row start aligned.
    if (t.shape[i] > 1 && t.strides[i] != 1 && (t.strides[i] * elem) % bytes != 0) {
      stride_alignment_failed(op, name, t, i, bytes);
    }
  }
}
/// No dimension is negative.
inline void check_sizes(const char* op, const char* name, const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) negative_size_failed(op, name, t);
  }
}
/// A tensor with elements has a data pointer.
inline void check_not_null(const char* op, const char* name, const TensorRef& t) {
  if (t.data == nullptr && t.numel() > 0) null_failed(op, name, t);
}
/// The tensor lives on CUDA device `device`.
inline void check_device(const char* op, const char* name, const TensorRef& t, int device) {
  if (t.device != device) device_failed(op, name, t, device);
}
/// The opening checks of every tensor an op takes, in this order: present with rank `rank`, no
/// negative size, one of `dtypes`, on CUDA device `device`.
inline void check_tensor(const char* op, const char* name, const TensorRef& t, int rank,
                         std::initializer_list<DType> dtypes, int device) {
  check_rank(op, name, t, rank);
  check_sizes(op, name, t);
  check_dtype(op, name, t, dtypes);
  check_device(op, name, t, device);
}
/// `t` has the shape of `ref` (named `ref_name`), dimension by dimension; ranks are checked
/// before.
inline void check_same_shape(const char* op, const char* name, const TensorRef& t, const char* ref_name,
                             const TensorRef& ref) {
  for (int i = 0; i < ref.ndim; ++i) {
    if (t.shape[i] != ref.shape[i]) same_shape_failed(op, name, t, ref_name, ref);
  }
}
/// t.size(dim) ≥ 1: `t` has at least one `what` ("head", "kv head") along `dim`.
inline void check_at_least_one(const char* op, const char* name, const TensorRef& t, int dim, const char* what) {
  if (t.size(dim) < 1) count_failed(op, name, t, dim, what);
}
/// A softmax scale is finite (0 stands for the op's default).
inline void check_finite_scale(const char* op, float scale) {
  if (!std::isfinite(scale)) scale_failed(op, scale);
}
/// A bf16 tensor of rank `rank` on `device` with a contiguous last dimension, 16-byte aligned
/// rows and a data pointer: what every attention-style kernel loads with 16-byte copies.
inline void check_bf16_rows(const char* op, const char* name, const TensorRef& t, int rank, int device) {
  check_tensor(op, name, t, rank, {DType::kBF16}, device);
  check_last_dim_contiguous(op, name, t);
  check_rows_aligned(op, name, t, 16);
  check_not_null(op, name, t);
}
[[noreturn]] void host_memory_failed(const char* op, const char* name, const TensorRef& t);
/// The first tensor of an op: rank `ndim` and on a CUDA device, whose ordinal it returns (every
/// other tensor must be on it).
inline int check_leading(const char* op, const char* name, const TensorRef& t, int ndim) {
  check_rank(op, name, t, ndim);
  if (t.device < 0) host_memory_failed(op, name, t);
  return t.device;
}
[[noreturn]] void arch_failed(const char* op, const DeviceInfo& info, int device, int min_sm, const char* why);
[[noreturn]] void workspace_failed(const char* op, size_t needed, const void* workspace, size_t workspace_bytes,
                                   const char* what);
/// Throws Unsupported unless the device is sm_`min_sm` or newer (`why` names what it needs).
inline void check_arch(const char* op, const DeviceInfo& info, int device, int min_sm, const char* why) {
  if (info.cc_major * 10 + info.cc_minor < min_sm) arch_failed(op, info, device, min_sm, why);
}
/// Throws InvalidArgument unless `workspace` holds `needed` bytes (nothing when 0), 16-byte
/// aligned; `what` names what it holds.
inline void check_workspace(const char* op, size_t needed, const void* workspace, size_t workspace_bytes,
                            const char* what) {
  if (needed == 0) return;
  if (workspace_bytes < needed || workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {
    workspace_failed(op, needed, workspace, workspace_bytes, what);
  }
}
/// Throws InvalidArgument "<op>: <message>" (fmt-formatted by the caller).
[[noreturn]] void fail(const char* op, const std::string& message);

}  // namespace kjit::detail
