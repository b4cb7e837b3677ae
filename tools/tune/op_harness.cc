// What every `kjit tune` op harness shares (op_harness.hpp): parallel fills, seeded bf16 values,
// the random decode problem, a tune spec's help and default shape; and the registry of the
// built-in ops, one register_*_ops per op family file (ops_attention.cc, ops_fp8.cc, ops_mla.cc)
// plus the ops whose default plan is their only candidate.
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>

#include "runtime/internal.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>
#include <thread>

namespace kjit::tune {
namespace detail {

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) {
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 64);
  if (n <= kChunk || threads == 1) {
    fn(0, n);
    return;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t b = next.fetch_add(kChunk); b < n; b = next.fetch_add(kChunk)) fn(b, std::min(n, b + kChunk));
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

float uniform01(uint64_t seed, size_t i) {
  uint64_t x = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(i) + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
}

std::vector<float> random_bf16_values(size_t n, float range, uint64_t seed) {
  std::vector<float> v(n);
  parallel_for(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) v[i] = kjit::testing::round_bf16(range * (2 * uniform01(seed, i) - 1));
  });
  return v;
}

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  parallel_for(v.size(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) h[i] = kjit::testing::float_to_bf16(v[i]);
  });
  return h;
}

kjit::testing::DecodeProblem random_decode_problem(int batch, int kv_len, int q_heads, int kv_heads, int head_dim,
                                                   uint64_t seed) {
  kjit::testing::DecodeProblem p;
  p.batch = batch;
  p.max_kv_len = kv_len;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const size_t kv = static_cast<size_t>(batch) * kv_len * kv_heads * head_dim;
  p.q = random_bf16_values(static_cast<size_t>(batch) * q_heads * head_dim, 2.f, seed);
  p.k = random_bf16_values(kv, 1.f, seed + 1);
  p.v = random_bf16_values(kv, 1.f, seed + 2);
  return p;
}

}  // namespace detail

namespace detail {

Shape spec_defaults(const kjit::detail::TuneOpSpec& spec) {
  Shape s;
  std::stringstream words(spec.shape_keys);
  std::string w;
  while (words >> w) {
    const size_t eq = w.find('=');
    s[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return s;
}

std::string spec_help(const kjit::detail::TuneOpSpec& spec) {
  std::string knobs;
  for (int i = 0; i < spec.knob_count(); ++i) knobs += (knobs.empty() ? "" : ", ") + std::string(spec.knobs[i]);
  return fmt::format("shape keys (defaults): {}; knobs: family point{}{}; bucket: {}", spec.shape_keys,
                     knobs.empty() ? "" : " × ", knobs, spec.bucket_rule);
}

}  // namespace detail

void register_builtin_ops() {
  register_attention_ops();
  register_fp8_ops();
  register_mla_ops();
  // Ops whose every choice follows from the call. Said here, and in docs/tuning.md.
  TuneOp rotary;
  rotary.name = "rotary";
  rotary.help = "not tunable: the default plan is the only candidate";
  rotary.only_default =
      "kjit::rotary's family point (style, head_dim, position type) is fixed by the call, the vector kernel runs "
      "whenever the alignment allows it (the scalar one is its fallback, never faster), and the CTA size and work "
      "per thread are compile-time constants of the kernel";
  register_op(rotary);
  TuneOp quantize;
  quantize.name = "fp8_quantize";
  quantize.help = "not tunable: the default plan is the only candidate";
  quantize.only_default =
      "kjit::fp8::quantize's family point (input type, format, granularity, pow2) is fixed by the call and each "
      "granularity has one kernel whose launch shape follows from the tensor; the one free launch choice, a "
      "grid-stride per-tensor grid instead of one CTA per 1024 vectors, measured slower on the H200 and is not a "
      "table knob";
  register_op(quantize);
}

}  // namespace kjit::tune
