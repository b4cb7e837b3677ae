#include "runtime/ops/validate.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

namespace kjit::detail {

std::string one_of_text(const int64_t* values, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += std::to_string(values[i]);
  }
  return out;
}

void fail(const char* op, const std::string& message) {
  throw InvalidArgument(fmt::format("{}: {}", op, message));
}

void host_memory_failed(const char* op, const char* name, const TensorRef& t) {
  fail(op, fmt::format("{} must be on a CUDA device, got host memory {}", name, t.describe()));
}

void arch_failed(const char* op, const DeviceInfo& info, int device, int min_sm, const char* why) {
  throw Unsupported(fmt::format("{}: needs sm_{} or newer ({}); device {} ({}) is sm_{}{}", op, min_sm, why, device,
                                info.name, info.cc_major, info.cc_minor));
}

void workspace_failed(const char* op, size_t needed, const void* workspace, size_t workspace_bytes,
                      const char* what) {
  if (workspace_bytes < needed || workspace == nullptr) {
    fail(op, fmt::format("workspace too small: needs {} bytes for {}, got {} bytes at {}", needed, what,
                         workspace_bytes, workspace));
  }
  fail(op, fmt::format("workspace pointer {} must be 16-byte aligned", workspace));
}

void rank_failed(const char* op, const char* name, const TensorRef& t, int ndim) {
  if (t.ndim == 0) fail(op, fmt::format("{} is required ({}-d tensor)", name, ndim));
  fail(op, fmt::format("{} must be {}-d, got {}", name, ndim, t.describe()));
}

void dtype_failed(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes) {
  std::string names;
  for (DType d : dtypes) names += fmt::format("{}{}", names.empty() ? "" : " or ", dtype_name(d));
  fail(op, fmt::format("{} must be {}, got {}", name, names, t.describe()));
}

void dim_failed(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected, const char* what) {
  fail(op, fmt::format("{} dim {} must be {} = {}, got {}", name, dim, what, expected, t.describe()));
}

void last_dim_failed(const char* op, const char* name, const TensorRef& t) {
  fail(op, fmt::format("{} must have a contiguous last dimension (stride 1), got {}", name, t.describe()));
}

void contiguous_failed(const char* op, const char* name, const TensorRef& t) {
  fail(op, fmt::format("{} must be contiguous, got {}", name, t.describe()));
}

void pointer_alignment_failed(const char* op, const char* name, const TensorRef& t, int bytes) {
  fail(op, fmt::format("{} data pointer {:#x} must be {}-byte aligned, got {}", name,
                       reinterpret_cast<uintptr_t>(t.data), bytes, t.describe()));
}

void stride_alignment_failed(const char* op, const char* name, const TensorRef& t, int dim, int bytes) {
  const int64_t stride_bytes = t.strides[dim] * dtype_size(t.dtype);
  fail(op, fmt::format("{} stride of dim {} ({} elements = {} bytes) must be a multiple of {} bytes (rows "
                       "{}-byte aligned), got {}",
                       name, dim, t.strides[dim], stride_bytes, bytes, bytes, t.describe()));
}

void negative_size_failed(const char* op, const char* name, const TensorRef& t) {
  fail(op, fmt::format("{} has a negative size, got {}", name, t.describe()));
}

void null_failed(const char* op, const char* name, const TensorRef& t) {
  fail(op, fmt::format("{} has a null data pointer, got {}", name, t.describe()));
}

void same_shape_failed(const char* op, const char* name, const TensorRef& t, const char* ref_name,
                       const TensorRef& ref) {
  fail(op, fmt::format("{} must have the shape of {}, got {} {} and {} {}", name, ref_name, ref_name, ref.describe(),
                       name, t.describe()));
}

void count_failed(const char* op, const char* name, const TensorRef& t, int dim, const char* what) {
  fail(op, fmt::format("{} must have at least one {} (dim {}), got {}", name, what, dim, t.describe()));
}

void scale_failed(const char* op, float scale) {
  fail(op, fmt::format("scale must be finite (0 = 1/sqrt(head_dim)), got {}", scale));
}

void device_failed(const char* op, const char* name, const TensorRef& t, int device) {
  fail(op, fmt::format("{} is on {}, expected CUDA device {}", name,
                       t.device < 0 ? std::string("the host") : fmt::format("CUDA device {}", t.device), device));
}

}  // namespace kjit::detail
