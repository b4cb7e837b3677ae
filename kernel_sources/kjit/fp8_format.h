#pragma once
// FP8 formats as the kernels' template arguments. Compiled by g++ (the op layer picks them) and
// by NVRTC (the fp8 mma/wgmma/cvt wrappers select their PTX type from them).
namespace kjit::fp8 {

constexpr int kFormatE4M3 = 0;  // OCP E4M3 "fn": max 448, no inf, NaN = S.1111.111
constexpr int kFormatE5M2 = 1;  // E5M2: max 57344, IEEE-style inf and NaN

}  // namespace kjit::fp8
