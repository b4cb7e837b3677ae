#pragma once
/// \file validate.hpp
/// Argument checks shared by the typed ops. Each throws InvalidArgument with a message that names
/// the op, the tensor and the rule ("kjit::rotary: q must be bf16, got [4, 8, 128] f32"). The
/// checks build strings only when they fail.

#include <kjit/tensor.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace kjit::detail {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// `t` is present (ndim > 0) and has rank `ndim`.
void check_rank(const char* op, const char* name, const TensorRef& t, int ndim);
/// `t` has dtype `dtype`.
void check_dtype(const char* op, const char* name, const TensorRef& t, DType dtype);
/// `t` has one of `dtypes`.
void check_dtype(const char* op, const char* name, const TensorRef& t,
                 std::initializer_list<DType> dtypes);
/// t.size(dim) == expected; `what` names the expected quantity ("batch").
void check_dim(const char* op, const char* name, const TensorRef& t, int dim, int64_t expected,
               const char* what);
/// The last dimension has stride 1.
void check_last_dim_contiguous(const char* op, const char* name, const TensorRef& t);
/// The whole tensor is compact row-major.
void check_contiguous(const char* op, const char* name, const TensorRef& t);
/// The data pointer and every stride other than a unit stride (in bytes) are multiples of
/// `bytes`, so each row along the contiguous dimension starts aligned.
void check_rows_aligned(const char* op, const char* name, const TensorRef& t, int bytes);
/// No dimension is negative.
void check_sizes(const char* op, const char* name, const TensorRef& t);
/// A tensor with elements has a data pointer.
void check_not_null(const char* op, const char* name, const TensorRef& t);
/// The tensor lives on CUDA device `device`.
void check_device(const char* op, const char* name, const TensorRef& t, int device);
/// Throws InvalidArgument "<op>: <message>" (fmt-formatted by the caller).
[[noreturn]] void fail(const char* op, const std::string& message);

}  // namespace kjit::detail
