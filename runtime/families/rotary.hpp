#pragma once
/// \file runtime/families/rotary.hpp
/// The "rotary" kernel family (kernel_sources/rotary/rotary.cu). Parameters, in order:
///   style     neox | gptj   (codes rope::kStyleNeoX / kStyleGPTJ)
///   head_dim  32 | 64 | 80 | 96 | 128 | 160 | 192 | 256 | 512
///   pos       i32 | i64     (dtype of the positions tensor; codes 0 / 1)
/// One program of two kernels: [0] the 16-byte vector kernel, [1] the scalar fallback. min_sm 80
/// (bf16x2 conversions; one floor keeps the family simple).

#include <kjit/families.hpp>

namespace kjit {

const Family& rotary_family();

namespace detail {
/// Head dims the family is specialized for (the `head_dim` parameter's values).
inline constexpr int kRotaryHeadDims[] = {32, 64, 80, 96, 128, 160, 192, 256, 512};
/// The family's and the op's lowest SM (bf16x2 conversions).
inline constexpr int kRotaryMinSm = 80;
}  // namespace detail

}  // namespace kjit
