#pragma once
// Host emulation of kernel_sources/kjit/fast_math.cuh (tests/emulation only): ex2.approx,
// lg2.approx and rcp.approx as the exact functions; their ≤ 2^-22 relative error is far below
// the emulators' tolerances.
#include "kjit/config.cuh"

#include <cmath>

namespace kjit {

inline float fast_exp2(float x) { return std::exp2(x); }
inline float fast_log2(float x) { return std::log2(x); }
inline float fast_rcp(float x) { return 1.f / x; }

}  // namespace kjit
