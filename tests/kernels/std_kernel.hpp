#pragma once
// One ordinary CUDA kernel that includes standard headers and uses them the way code written
// for nvcc does (`using namespace std`, unqualified math calls, std::min, numeric_limits,
// tuples, arrays). The CPU tests compile it with kjit (its NVRTC standard headers) and with nvcc
// (the host's real headers); the GPU test runs both binaries and compares them with
// std_kernel_reference.
//
// Only what nvcc accepts in device code is used: <cmath> and <cstring>'s device functions, and
// constexpr functions of the C++17 library (compiled with --expt-relaxed-constexpr).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace kjit::testing {

inline constexpr const char* kStdKernelSource = R"(#include <cstdint>
#include <cstddef>
#include <climits>
#include <cfloat>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <limits>
#include <utility>
#include <tuple>
#include <array>
#include <algorithm>

using namespace std;

struct StdKernelParams {
  const float* x;
  float* y;      // kStdKernelOutputs floats per element
  int32_t n;
};

template <class T>
__device__ T clamp_to_unit(T v) {
  static_assert(is_floating_point<T>::value, "floating point only");
  return std::clamp(v, T(-1), T(1));
}

extern "C" __global__ void std_kernel(const StdKernelParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  assert(p.n > 0);
  const float x = p.x[i];
  float* out = p.y + static_cast<size_t>(i) * 8;
  const pair<float, int> pr = make_pair(x, i);
  const tuple<float, double, int32_t> t = make_tuple(x * 2.0f, sqrt(2.0), INT32_MAX);
  array<float, 4> a = {x, -x, 0.5f * x, 3.0f};
  out[0] = sqrt(fabs(x)) + exp(-x * x) + std::pow(x, 2);
  out[1] = static_cast<float>(std::pow(i, 2) + std::sqrt(i) + std::hypot(3, 4));
  out[2] = std::min(x, 0.25f) + max(a[1], a[2]) + clamp_to_unit(x);
  out[3] = isnan(x) || isinf(x) ? -1.0f : static_cast<float>(signbit(x));
  out[4] = numeric_limits<float>::epsilon() * 1.0e6f + static_cast<float>(FLT_EPSILON * 1.0e6f) +
           static_cast<float>(numeric_limits<int8_t>::max()) + static_cast<float>(CHAR_BIT);
  out[5] = get<0>(t) + static_cast<float>(get<1>(t)) + static_cast<float>(get<2>(t) % 1000) + pr.first +
           static_cast<float>(pr.second);
  out[6] = a[0] + a[1] + a[2] + a[3] + static_cast<float>(a.size()) + floor(x * 3.7f) + fmod(x, 0.3f) +
           copysign(1.0f, x) + static_cast<float>(lround(x * 10.0f));
  uint32_t bits = 0;
  memcpy(&bits, &x, sizeof(bits));
  out[7] = static_cast<float>(bits >> 23) + (is_same<int32_t, int>::value ? 1.0f : 0.0f) +
           static_cast<float>(sizeof(size_t)) + atan2(x, 2.0f) + tanh(x) + log1p(x * x);
  if (i == 0 && p.n < 0) printf("never printed %d\n", p.n);
}
)";

/// A kernel using what kjit's headers give device code and nvcc's do not (std::sort,
/// std::nth_element, the str* functions, fpclassify): the GPU test checks it against the host.
inline constexpr const char* kStdKjitOnlySource = R"(#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
struct Params { const float* x; float* sorted; float* nth; int32_t* misc; int32_t n; };
__global__ void kjit_only(const Params p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  float v[8];
  for (int k = 0; k < 8; ++k) v[k] = p.x[(i * 7 + k * 13) % p.n];
  float w[8];
  std::memcpy(w, v, sizeof(v));
  std::sort(v, v + 8);
  for (int k = 0; k < 8; ++k) p.sorted[i * 8 + k] = v[k];
  std::nth_element(w, w + 3, w + 8, [](float a, float b) { return a > b; });
  p.nth[i] = w[3];
  const char* words = "kjit compiles standard headers";
  p.misc[i * 3 + 0] = static_cast<int32_t>(std::strlen(words)) + std::strncmp(words, "kjit", 4);
  p.misc[i * 3 + 1] = static_cast<int32_t>(std::strstr(words, "standard") - words);
  p.misc[i * 3 + 2] = std::fpclassify(p.x[i]) * 10 + std::isnormal(p.x[i]);
}
)";

/// Floats std_kernel writes per element.
inline constexpr int kStdKernelOutputs = 8;

/// std_kernel's outputs for `x`, computed on the host in double.
inline std::vector<double> std_kernel_reference(const std::vector<float>& x) {
  std::vector<double> out;
  out.reserve(x.size() * kStdKernelOutputs);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], n = static_cast<double>(i);
    const double a0 = v, a1 = -v, a2 = 0.5 * v, a3 = 3.0;
    const double clamped = v < -1 ? -1 : v > 1 ? 1 : v;
    uint32_t bits = 0;
    const float f = x[i];
    std::memcpy(&bits, &f, sizeof(bits));
    out.push_back(std::sqrt(std::fabs(v)) + std::exp(-v * v) + v * v);
    out.push_back(n * n + std::sqrt(n) + 5.0);
    out.push_back(std::min(v, 0.25) + std::max(a1, a2) + clamped);
    out.push_back(std::signbit(f) ? 1.0 : 0.0);
    out.push_back(static_cast<double>(std::numeric_limits<float>::epsilon()) * 2.0e6 + 127.0 + 8.0);
    out.push_back(2.0 * v + std::sqrt(2.0) + 647.0 + v + n);
    out.push_back(a0 + a1 + a2 + a3 + 4.0 + std::floor(f * 3.7f) + std::fmod(f, 0.3f) + std::copysign(1.0, v) +
                  static_cast<double>(std::lround(f * 10.0f)));
    out.push_back(static_cast<double>(bits >> 23) + 1.0 + 8.0 + std::atan2(v, 2.0) + std::tanh(v) +
                  std::log1p(v * v));
  }
  return out;
}

}  // namespace kjit::testing
