// `kjit selftest` checks of kjit::rotary: real model shapes against the float64 reference.
// Passing means: relative L2 ≤ 4e-3, every rotated output within 1 bf16 ulp of the reference,
// the pass-through dims bit-exact, no output left poisoned.
#include "tools/selftest/selftest.hpp"

#include <kjit/ops/rotary.hpp>

#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_rotary.hpp"

#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

namespace kjit::selftest {
namespace {

constexpr double kTolerance = kjit::testing::kRotaryTol;

struct Shape {
  int64_t tokens;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t head_dim;
  int rotary_dim;
  RotaryStyle style;
  bool in_place;
  int64_t max_position;
};

std::string describe(const Shape& s) {
  return fmt::format("tokens={} q_heads={} kv_heads={} head_dim={} rotary_dim={} {} i64 {}",
                     s.tokens, s.q_heads, s.kv_heads, s.head_dim, s.rotary_dim,
                     s.style == RotaryStyle::kNeoX ? "neox" : "gptj",
                     s.in_place ? "in-place" : "out-of-place");
}

Result check(Runtime& runtime, const Shape& s) {
  namespace kt = kjit::testing;
  Result r;
  r.op = "rotary";
  r.shape = describe(s);
  r.tolerance = kTolerance;
  const unsigned seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);

  const int64_t nq = s.tokens * s.q_heads * s.head_dim, nk = s.tokens * s.kv_heads * s.head_dim;
  std::vector<uint16_t> q(nq), k(nk);
  for (auto& x : q) x = kt::float_to_bf16(normal(rng));
  for (auto& x : k) x = kt::float_to_bf16(normal(rng));
  const kt::RopeTables tables = kt::rope_tables(s.max_position, s.rotary_dim, 500000.0);
  std::vector<int64_t> positions(s.tokens);
  for (auto& p : positions) p = static_cast<int64_t>(rng() % s.max_position);

  const int device = kt::current_device();
  kt::DeviceBuffer q_dev = kt::to_device(q), k_dev = kt::to_device(k);
  kt::DeviceBuffer cos_dev = kt::to_device(tables.cos), sin_dev = kt::to_device(tables.sin);
  kt::DeviceBuffer pos_dev = kt::to_device(positions);
  kt::DeviceBuffer q_out(nq * 2), k_out(nk * 2);
  q_out.fill(0xFF);
  k_out.fill(0xFF);

  RotaryArgs a;
  a.q = TensorRef(q_dev.get(), DType::kBF16, {s.tokens, s.q_heads, s.head_dim}, {}, device);
  a.k = TensorRef(k_dev.get(), DType::kBF16, {s.tokens, s.kv_heads, s.head_dim}, {}, device);
  a.cos = TensorRef(cos_dev.get(), DType::kF32, {s.max_position, s.rotary_dim / 2}, {}, device);
  a.sin = TensorRef(sin_dev.get(), DType::kF32, {s.max_position, s.rotary_dim / 2}, {}, device);
  a.positions = TensorRef(pos_dev.get(), DType::kI64, {s.tokens}, {}, device);
  if (!s.in_place) {
    a.q_out = TensorRef(q_out.get(), DType::kBF16, {s.tokens, s.q_heads, s.head_dim}, {}, device);
    a.k_out = TensorRef(k_out.get(), DType::kBF16, {s.tokens, s.kv_heads, s.head_dim}, {}, device);
  }
  a.rotary_dim = s.rotary_dim;
  a.style = s.style;
  kjit::rotary(a, nullptr, runtime);
  kt::synchronize();

  const std::vector<uint16_t> yq = (s.in_place ? q_dev : q_out).download<uint16_t>(nq);
  const std::vector<uint16_t> yk = (s.in_place ? k_dev : k_out).download<uint16_t>(nk);
  const auto rq = kt::rotary_reference(q, s.tokens, s.q_heads, s.head_dim, s.rotary_dim, s.style,
                                       tables.cos, tables.sin, positions);
  const auto rk = kt::rotary_reference(k, s.tokens, s.kv_heads, s.head_dim, s.rotary_dim, s.style,
                                       tables.cos, tables.sin, positions);
  // One comparison over q and k together.
  std::vector<uint16_t> y = yq;
  y.insert(y.end(), yk.begin(), yk.end());
  std::vector<double> ref = rq;
  ref.insert(ref.end(), rk.begin(), rk.end());
  std::vector<float> yf(y.size());
  for (size_t i = 0; i < y.size(); ++i) yf[i] = kt::bf16_to_float(y[i]);
  const kt::Comparison cmp = kt::compare(yf, ref);
  const kt::UlpCheck ulps = kt::check_ulps(y, ref, 1);
  size_t tail_diffs = 0;
  std::vector<uint16_t> x = q;
  x.insert(x.end(), k.begin(), k.end());
  for (size_t row = 0; row * s.head_dim < y.size(); ++row) {
    for (int64_t d = s.rotary_dim; d < s.head_dim; ++d) {
      tail_diffs += y[row * s.head_dim + d] != x[row * s.head_dim + d];
    }
  }
  r.rel_l2 = cmp.rel_l2;
  r.passed = cmp.ok(kTolerance) && ulps.over_limit == 0 && tail_diffs == 0;
  r.detail = fmt::format("{}; max {} bf16 ulp ({} over 1); {} pass-through dims changed; seed {}",
                         cmp.describe(), ulps.max_ulp, ulps.over_limit, tail_diffs, seed);
  return r;
}

}  // namespace

std::vector<Result> rotary(Runtime& runtime) {
  const Shape shapes[] = {
      // Llama-3-8B prefill chunk: NeoX, theta 500000, 8192-position table.
      {4096, 32, 8, 128, 128, RotaryStyle::kNeoX, false, 8192},
      {4096, 32, 8, 128, 128, RotaryStyle::kNeoX, true, 8192},
      // GPT-J-6B: interleaved, rotary 64 of 256.
      {1024, 16, 16, 256, 64, RotaryStyle::kGPTJ, true, 2048},
      // Partial rotary: Phi-2 (32 of 80), and 40 of 128 (the scalar kernel).
      {2048, 32, 32, 80, 32, RotaryStyle::kNeoX, false, 2048},
      {1024, 32, 8, 128, 40, RotaryStyle::kNeoX, false, 4096},
  };
  std::vector<Result> results;
  for (const Shape& s : shapes) {
    try {
      results.push_back(check(runtime, s));
    } catch (const std::exception& e) {
      Result r;
      r.op = "rotary";
      r.shape = describe(s);
      r.tolerance = kTolerance;
      r.passed = false;
      r.detail = e.what();
      results.push_back(r);
    }
  }
  return results;
}

}  // namespace kjit::selftest
