#pragma once
/// \file tensor.hpp
/// A non-owning, fixed-capacity tensor view that ops take by const reference. It is built from a
/// DLPack `DLTensor` (what PyTorch, CuPy and JAX export) or directly from a pointer, dtype, shape
/// and strides. Building one allocates nothing, so ops stay allocation-free on the hot path.

#include <kjit/names.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace kjit {

/// Element types kjit's kernels read or write.
enum class DType : uint8_t {
  kBF16,
  kF16,
  kF32,
  kF64,
  kI32,
  kI64,
  kU8,    ///< raw bytes; FP8 caches are passed as bytes (DLPack 0.6 has no FP8 code)
  kBool,  ///< one byte per element, 0 = false
  kE4M3,  ///< FP8 E4M3 (OCP "fn" variant: max 448, NaN = 0x7f/0xff, no inf)
  kE5M2,  ///< FP8 E5M2 (max 57344, IEEE-like inf/NaN)
};

/// Bytes per element of `t`.
constexpr int dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kU8:
    case DType::kBool:
    case DType::kE4M3:
    case DType::kE5M2: return 1;
  }
  return 0;
}
/// DType's names, in enumerator order (kjit/names.hpp).
inline constexpr EnumName<DType> kDTypeNames[] = {
    {DType::kBF16, "bf16"}, {DType::kF16, "f16"}, {DType::kF32, "f32"},  {DType::kF64, "f64"},
    {DType::kI32, "i32"},   {DType::kI64, "i64"}, {DType::kU8, "u8"},    {DType::kBool, "bool"},
    {DType::kE4M3, "e4m3"}, {DType::kE5M2, "e5m2"},
};
/// Lower-case name ("bf16", "e4m3", ...: kDTypeNames).
const char* dtype_name(DType t) noexcept;

/// A strided view of device (or host) memory with at most `kMaxDims` dimensions.
/// Shapes and strides are in elements (as DLPack), row-major when built without strides.
struct TensorRef {
  static constexpr int kMaxDims = 6;

  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  /// CUDA device ordinal, or -1 for host memory.
  int device = 0;

  TensorRef() = default;
  /// A view of `data` with `shape`; `strides` empty means contiguous row-major.
  /// Throws InvalidArgument for more than kMaxDims dimensions or a stride/shape count mismatch.
  TensorRef(void* data, DType dtype, std::initializer_list<int64_t> shape,
            std::initializer_list<int64_t> strides = {}, int device = 0);

  /// Wraps a DLPack tensor (byte_offset applied; NULL strides = compact row-major). Besides the
  /// 0.6 codes it reads DLPack 1.x's bool (code 6) and FP8 e4m3fn / e5m2 (codes 10 / 12) as kBool,
  /// kE4M3 and kE5M2 (what torch.bool, torch.float8_e4m3fn and torch.float8_e5m2 export).
  /// Throws InvalidArgument for a dtype kjit has no name for or more than kMaxDims dimensions.
  static TensorRef from_dlpack(const DLTensor& t);

  int64_t size(int dim) const noexcept { return shape[dim < 0 ? dim + ndim : dim]; }
  int64_t stride(int dim) const noexcept { return strides[dim < 0 ? dim + ndim : dim]; }
  /// Number of elements (1 for a 0-d tensor).
  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  /// True when the strides are those of a compact row-major tensor of this shape.
  bool is_contiguous() const noexcept;
  /// A "[2, 3, 4] bf16" description for error messages.
  std::string describe() const;
};

}  // namespace kjit
