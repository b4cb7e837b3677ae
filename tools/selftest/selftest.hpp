#pragma once
/// \file selftest.hpp
/// `kjit selftest`: launch every shipped op on real-shaped inputs (Llama-3-8B-like: 32 q heads,
/// 8 kv heads, head_dim 128) and check each against its float64 reference.

#include <kjit/runtime.hpp>

#include <string>
#include <vector>

namespace kjit::selftest {

/// One checked launch.
struct Result {
  std::string op;      ///< "rotary", "attention.decode"
  std::string shape;   ///< "tokens=4096 q_heads=32 kv_heads=8 head_dim=128 neox"
  double rel_l2 = 0;   ///< relative L2 error against the float64 reference
  double tolerance = 0;
  bool passed = false;
  std::string detail;  ///< the comparison, or the exception text when the launch threw
  int device = 0;      ///< the CUDA device ordinal it ran on (set by the caller, `kjit selftest`)
};

/// Each op's checks, on the device of the current context (testing::current_device: device 0
/// when none is current).
std::vector<Result> rotary(Runtime& runtime);
std::vector<Result> attention_decode(Runtime& runtime);
/// Prefill, paged decode, ragged paged prefill and the paged append.
std::vector<Result> attention(Runtime& runtime);
std::vector<Result> swa_decode(Runtime& runtime);
std::vector<Result> fp8(Runtime& runtime);  ///< quantize + GEMM

}  // namespace kjit::selftest
