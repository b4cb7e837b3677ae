#pragma once
/// \file reference_attention.hpp
/// Float64 reference of kjit::attention::decode (include/kjit/ops/attention.hpp), and a random
/// decode problem runner that the GPU tests, `kjit selftest` and benchmarks share: it builds
/// poisoned, optionally strided device tensors, runs the op and compares every output.

#include <kjit/runtime.hpp>

#include "tools/testing/compare.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::testing {

/// A decode problem as compact host arrays of the exact values the device sees (bf16-rounded).
struct DecodeProblem {
  int64_t batch = 0;
  int64_t max_kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<float> q;          ///< [batch][q_heads][head_dim]
  std::vector<float> k;          ///< [batch][max_kv_len][kv_heads][head_dim]
  std::vector<float> v;          ///< [batch][max_kv_len][kv_heads][head_dim]
  std::vector<int32_t> kv_lens;  ///< [batch]; empty = every sequence has max_kv_len tokens
  std::vector<uint8_t> mask;     ///< [batch][max_kv_len], nonzero = attend; empty = none
  double scale = 0;              ///< softmax scale (already resolved: never 0)
};

/// Reference outputs of a DecodeProblem.
struct DecodeReference {
  /// [batch][q_heads][head_dim]: Σ_j p_j v_j with p = softmax over attended j of scale · q·k_j,
  /// zeros for a row with no attended position.
  std::vector<double> out;
  /// [batch][q_heads]: natural-log log-sum-exp of the attended scaled scores; −inf when none.
  std::vector<double> lse;
};

/// Computes the reference in float64 (max-subtracted exponentials, GQA head h reads kv head
/// h / (q_heads / kv_heads)), over positions j < kv_lens[b] with mask[b][j] set. Multithreaded
/// over (batch, head).
DecodeReference decode_reference(const DecodeProblem& problem);

/// One randomized decode launch (see run_decode_case).
struct DecodeCase {
  int batch = 1;
  int max_kv_len = 0;
  int q_heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  /// Per-sequence lengths drawn in [0, max_kv_len] (sequence 0 gets max_kv_len, sequence 2 gets
  /// 0 when batch > 2); false: every sequence has max_kv_len tokens.
  bool ragged = false;
  /// Pass the kv_lens tensor (false and !ragged: omit it, meaning max_kv_len everywhere).
  bool pass_kv_lens = true;
  /// A random keep mask (p = 0.7), and when batch > 1 the last sequence keeps nothing.
  bool mask = false;
  bool lse = false;
  /// q, k, v, out and lse as views of larger buffers (padded batch, token and head strides);
  /// the padding is poisoned and must stay unread (k/v) and unwritten (out/lse).
  bool strided = false;
  int num_splits = 0;  ///< DecodeArgs::num_splits (0 = auto)
  float scale = 0.f;   ///< DecodeArgs::scale (0 = 1/sqrt(head_dim))
  float q_range = 2.f; ///< q ~ U(−q_range, q_range); k, v ~ U(−1, 1)

  /// "B3 L65 Hq32/Hkv8 D128 ragged mask lse strided splits=3 scale=0.5".
  std::string describe() const;
};

/// What run_decode_case found.
struct DecodeCaseResult {
  Comparison out;           ///< bf16 output vs reference (poisoned = NaN counts as non-finite)
  Comparison lse;           ///< when the case asks for lse
  size_t padding_written = 0;  ///< out/lse padding elements that lost their poison
  uint64_t seed = 0;
  /// True when out.rel_l2 ≤ out_tol, lse.rel_l2 ≤ lse_tol, nothing non-finite, no padding written.
  bool ok(double out_tol, double lse_tol) const;
  std::string describe() const;
};

/// Builds `c` from `seed` (k/v tokens at or past each kv_len, and all padding, hold NaN; outputs
/// and the workspace are 0xFF-poisoned), runs kjit::attention::decode on the default stream,
/// synchronizes and compares with decode_reference. Needs a GPU (device 0's context current).
/// Throws what decode throws.
DecodeCaseResult run_decode_case(const DecodeCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

}  // namespace kjit::testing
