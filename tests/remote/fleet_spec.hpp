#pragma once
/// \file fleet_spec.hpp
/// The program the fleet tests compile, shared by the test and its worker processes so both
/// compute one key: a tiny host kernel whose `variant` changes the key, `slow` makes ptxas work
/// for a while (so a test can kill a compile midway; `depth` sets how long: 60 takes seconds, 12
/// a fraction of one), and `broken` makes NVRTC fail.

#include <kjit/device.hpp>
#include <kjit/runtime.hpp>

#include <string>

namespace kjit::test {

inline const Target kFleetTarget = Target::parse("sm_89");

inline ProgramSpec fleet_spec(const std::string& variant, bool slow = false, bool broken = false, int depth = 60) {
  constexpr int kSlowChains = 1;
  ProgramSpec s;
  s.family = "fleet_demo";
  s.template_args = "variant=" + variant + (slow ? " slow" : "") + (broken ? " broken" : "");
  if (slow && depth != 60) s.template_args += " depth=" + std::to_string(depth);
  s.source_name = "fleet_demo.cu";
  s.source_text = "// variant " + variant + "\n";
  if (broken) s.source_text += "__global__ void broken_kernel() { undeclared_thing = 1; }\n";
  if (slow) {
    // Deep recursive templates, inlined into one long dependent chain: the compile takes a
    // second or more, long enough to kill it midway.
    s.source_text +=
        "template <int N, int K> struct Chain { static __device__ __forceinline__ float f(float a, volatile float* v) {\n"
        "  return Chain<N - 1, K>::f(sinf(a) * v[(N + K) % 7] + cosf(a * v[N % 5]), v); } };\n"
        "template <int K> struct Chain<0, K> { static __device__ __forceinline__ float f(float a, volatile float*) { return a; } };\n"
        "template <int N> __global__ void fleet(float* out, float x) {\n"
        "  float a = x;\n";
    for (int k = 0; k < kSlowChains; ++k) s.source_text += "  a = Chain<N, " + std::to_string(k) + ">::f(a, out);\n";
    s.source_text += "  out[threadIdx.x] = a;\n}\n";
    s.name_expressions = {"fleet<" + std::to_string(depth) + ">"};
  } else {
    s.source_text +=
        "template <int N> __global__ void fleet(float* out, float x) { out[threadIdx.x] = x * N; }\n";
    s.name_expressions = {"fleet<3>"};
  }
  return s;
}

}  // namespace kjit::test
