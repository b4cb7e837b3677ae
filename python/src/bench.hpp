#pragma once
/// \file bench.hpp
/// The C++ baseline of tools/bench/bench_python.py: with a repeat count set
/// (kjit._C._bench_set_repeat), each op binding runs its C++ op call that many times, on the
/// arguments it converted once, and records the host time of the loop
/// (kjit._C._bench_last_ns). What the binding adds per call is then the Python call's time
/// minus this one, measured in the same process on the same tensors. Default 0: one call.
/// -1: no call at all (what the binding alone costs: dispatch, conversions, allocations, the
/// result).

#include <chrono>

namespace kjit::python::bench {

extern int g_repeat;
extern double g_last_ns;

template <class F>
inline void run(F&& call) {
  if (__builtin_expect(g_repeat == 0, 1)) {
    call();
    return;
  }
  if (g_repeat < 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < g_repeat; ++i) call();
  g_last_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kjit::python::bench
