// kjit::rotary on the GPU against the float64 reference (tools/testing/reference_rotary.hpp).
//
// Tolerance: the reference is computed in float64 from the exact bf16 inputs and f32 tables;
// kjit computes in f32 with an error-free product and rounds once to bf16, so every rotated
// output must be the correctly rounded value or its neighbour (≤ 1 bf16 ulp), and the relative
// L2 error must be at most 4e-3 (bf16 rounding alone gives ≈ 1.6e-3 on random data). Dims at or
// past rotary_dim must be bit-identical to the input. Outputs are poisoned (0xFF = bf16 NaN)
// first, so an element the kernel skipped fails the ulp check; memory around the views (gaps of
// strided layouts, the v part of a fused qkv buffer) must come back untouched.
#include <kjit/error.hpp>
#include <kjit/ops/rotary.hpp>

#include "runtime/ops/rotary/rotary.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_rotary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using kjit::RotaryStyle;
using kjit::TensorRef;
namespace kt = kjit::testing;

enum class Layout {
  kContiguous,  // q [T, Hq, D], k [T, Hkv, D]
  kPadded,      // views into [T, H, 2D] buffers: head stride 2D (outputs padded the same way)
  kFused,       // q and k views into one [T, Hq + 2 Hkv, D] qkv buffer: token stride ≠ H·D
  kOdd,         // buffers [1 + T·H·(D+1)], views at element 1 with head stride D+1: 2-byte aligned
  kOffset8,     // views at element 4 with head stride D+8: strides aligned, pointer 8-byte only
};

struct Case {
  const char* name;
  int64_t tokens;
  int64_t q_heads;
  int64_t kv_heads;  // 0: no k
  int64_t head_dim;
  int rotary_dim;  // 0: head_dim
  RotaryStyle style;
  bool pos_i64;
  bool in_place;
  Layout layout;
  int64_t max_position;
  bool expect_vector;  // which kernel the plan must pick, so scalar cases really test it
};

/// One strided [tokens, heads, head_dim] view inside buffer `buffer` (elements).
struct View {
  int buffer = -1;
  int64_t offset = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  int64_t heads = 0;
};

struct Buffers {
  std::vector<int64_t> elems;  // per buffer
  View q, k;
};

Buffers input_buffers(const Case& c) {
  const int64_t T = c.tokens, Hq = c.q_heads, Hk = c.kv_heads, D = c.head_dim;
  Buffers b;
  auto separate = [&](int64_t pad, int64_t offset) {
    b.elems.push_back(offset + T * Hq * (D + pad));
    b.q = {0, offset, Hq * (D + pad), D + pad, Hq};
    if (Hk > 0) {
      b.elems.push_back(offset + T * Hk * (D + pad));
      b.k = {1, offset, Hk * (D + pad), D + pad, Hk};
    }
  };
  switch (c.layout) {
    case Layout::kContiguous: separate(0, 0); break;
    case Layout::kPadded: separate(D, 0); break;
    case Layout::kOdd: separate(1, 1); break;
    case Layout::kOffset8: separate(8, 4); break;
    case Layout::kFused: {
      const int64_t W = Hq + 2 * Hk;
      b.elems.push_back(T * W * D);
      b.q = {0, 0, W * D, D, Hq};
      if (Hk > 0) b.k = {0, Hq * D, W * D, D, Hk};
      break;
    }
  }
  return b;
}

Buffers output_buffers(const Case& c) {
  Case o = c;
  o.layout = c.layout == Layout::kPadded ? Layout::kPadded : Layout::kContiguous;
  return input_buffers(o);
}

void* view_ptr(const std::vector<kt::DeviceBuffer>& dev, const View& v) {
  return static_cast<char*>(dev[v.buffer].get()) + v.offset * 2;
}

TensorRef view_tensor(const std::vector<kt::DeviceBuffer>& dev, const View& v, const Case& c) {
  return TensorRef(view_ptr(dev, v), kjit::DType::kBF16, {c.tokens, v.heads, c.head_dim},
                   {v.token_stride, v.head_stride, 1});
}

/// Copies the elements of `v` from `from` into `into` (both whole buffers).
void copy_view(std::vector<uint16_t>& into, const std::vector<uint16_t>& from, const View& v,
               const Case& c) {
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < v.heads; ++h) {
      const int64_t at = v.offset + t * v.token_stride + h * v.head_stride;
      std::memcpy(into.data() + at, from.data() + at, c.head_dim * 2);
    }
  }
}

std::vector<kt::DeviceBuffer> upload(const std::vector<std::vector<uint16_t>>& host) {
  std::vector<kt::DeviceBuffer> dev;
  for (const auto& h : host) {
    dev.emplace_back(std::max<size_t>(h.size() * 2, 16));
    if (!h.empty()) dev.back().upload(h);
  }
  return dev;
}

std::vector<std::vector<uint16_t>> download(const std::vector<kt::DeviceBuffer>& dev,
                                            const std::vector<int64_t>& elems) {
  std::vector<std::vector<uint16_t>> host;
  for (size_t i = 0; i < dev.size(); ++i) host.push_back(dev[i].download<uint16_t>(elems[i]));
  return host;
}

class RotaryGpu : public ::testing::TestWithParam<Case> {};

TEST_P(RotaryGpu, MatchesFloat64Reference) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "case " << c.name << ", seed " << seed);
  std::mt19937_64 rng(seed);
  const int rd = c.rotary_dim == 0 ? static_cast<int>(c.head_dim) : c.rotary_dim;
  const bool has_k = c.kv_heads > 0;

  // Inputs: every element of every buffer random (gaps too, so "untouched" is checkable).
  const Buffers in = input_buffers(c);
  const float scale = std::uniform_real_distribution<float>(0.25f, 8.f)(rng);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<std::vector<uint16_t>> in_host;
  for (int64_t n : in.elems) {
    std::vector<uint16_t> b(n);
    for (auto& x : b) x = kt::float_to_bf16(normal(rng));
    in_host.push_back(std::move(b));
  }
  std::vector<kt::DeviceBuffer> in_dev = upload(in_host);

  // Tables and positions: unsorted, uniformly random, the last table row always used.
  const kt::RopeTables tables = kt::rope_tables(c.max_position, rd);
  kt::DeviceBuffer cos_dev = kt::to_device(tables.cos), sin_dev = kt::to_device(tables.sin);
  std::vector<int64_t> positions(c.tokens);
  std::uniform_int_distribution<int64_t> pick(0, c.max_position - 1);
  for (auto& p : positions) p = pick(rng);
  if (c.tokens > 0) positions[rng() % c.tokens] = c.max_position - 1;
  kt::DeviceBuffer pos_dev;
  if (c.pos_i64) {
    pos_dev = kt::to_device(positions);
  } else {
    pos_dev = kt::to_device(std::vector<int32_t>(positions.begin(), positions.end()));
  }

  // Outputs, poisoned.
  const Buffers out = c.in_place ? in : output_buffers(c);
  std::vector<kt::DeviceBuffer> out_dev;
  if (!c.in_place) {
    for (int64_t n : out.elems) {
      out_dev.emplace_back(std::max<size_t>(n * 2, 16));
      out_dev.back().fill(0xFF);
    }
  }

  kjit::RotaryArgs args;
  args.q = view_tensor(in_dev, in.q, c);
  if (has_k) args.k = view_tensor(in_dev, in.k, c);
  args.cos = TensorRef(cos_dev.get(), kjit::DType::kF32, {c.max_position, rd / 2});
  args.sin = TensorRef(sin_dev.get(), kjit::DType::kF32, {c.max_position, rd / 2});
  args.positions = TensorRef(pos_dev.get(), c.pos_i64 ? kjit::DType::kI64 : kjit::DType::kI32,
                             {c.tokens});
  if (!c.in_place) {
    args.q_out = view_tensor(out_dev, out.q, c);
    if (has_k) args.k_out = view_tensor(out_dev, out.k, c);
  }
  args.rotary_dim = c.rotary_dim;
  args.style = c.style;

  const kjit::detail::RotaryPlan plan =
      kjit::detail::RotaryOp::plan(kjit::detail::RotaryOp::validate(args), kjit::device_info(0));
  EXPECT_EQ(plan.vector, c.expect_vector) << "the case meant to exercise the other kernel";
  ASSERT_NO_THROW(kjit::rotary(args, nullptr));
  kt::synchronize();

  const std::vector<kt::DeviceBuffer>& result_dev = c.in_place ? in_dev : out_dev;
  std::vector<std::vector<uint16_t>> result = download(result_dev, out.elems);

  // Each view against the reference.
  const View* in_views[2] = {&in.q, has_k ? &in.k : nullptr};
  const View* out_views[2] = {&out.q, has_k ? &out.k : nullptr};
  const char* names[2] = {"q", "k"};
  for (int i = 0; i < 2; ++i) {
    if (!in_views[i]) continue;
    const View& iv = *in_views[i];
    const View& ov = *out_views[i];
    const std::vector<uint16_t> x = kt::gather_heads(in_host[iv.buffer], iv.offset, c.tokens,
                                                     iv.heads, c.head_dim, iv.token_stride, iv.head_stride);
    const std::vector<uint16_t> y = kt::gather_heads(result[ov.buffer], ov.offset, c.tokens,
                                                     ov.heads, c.head_dim, ov.token_stride, ov.head_stride);
    const std::vector<double> ref = kt::rotary_reference(x, c.tokens, iv.heads, c.head_dim, rd,
                                                         c.style, tables.cos, tables.sin, positions);
    const kt::UlpCheck ulps = kt::check_ulps(y, ref, 1);
    EXPECT_EQ(ulps.over_limit, 0u)
        << names[i] << ": " << ulps.over_limit << " outputs more than 1 bf16 ulp off; worst "
        << ulps.max_ulp << " ulp at " << ulps.worst_index << " (got "
        << kt::bf16_to_float(y.empty() ? 0 : y[ulps.worst_index]) << ", want "
        << (ref.empty() ? 0.0 : ref[ulps.worst_index]) << ")";
    std::vector<float> yf(y.size());
    for (size_t j = 0; j < y.size(); ++j) yf[j] = kt::bf16_to_float(y[j]);
    const kt::Comparison cmp = kt::compare(yf, ref);
    EXPECT_TRUE(cmp.ok(kt::kRotaryTol)) << names[i] << ": " << cmp.describe();
    // Pass-through dims: the input bits, untouched (in place) or copied (out of place).
    size_t tail_diffs = 0;
    for (size_t row = 0; row * c.head_dim < y.size(); ++row) {
      for (int64_t d = rd; d < c.head_dim; ++d) {
        tail_diffs += y[row * c.head_dim + d] != x[row * c.head_dim + d];
      }
    }
    EXPECT_EQ(tail_diffs, 0u) << names[i] << ": pass-through dims [" << rd << ", " << c.head_dim
                              << ") changed";
  }

  // Everything outside the views: as it was (inputs in place; poison for separate outputs).
  std::vector<std::vector<uint16_t>> expected;
  if (c.in_place) {
    expected = in_host;
  } else {
    for (int64_t n : out.elems) expected.emplace_back(n, 0xFFFF);
  }
  for (int i = 0; i < 2; ++i) {
    if (out_views[i]) copy_view(expected[out_views[i]->buffer], result[out_views[i]->buffer], *out_views[i], c);
  }
  for (size_t b = 0; b < expected.size(); ++b) {
    EXPECT_TRUE(expected[b] == result[b]) << "output buffer " << b << " changed outside the q/k views";
  }
  if (!c.in_place) {
    // Out of place leaves the inputs alone.
    const auto after = download(in_dev, in.elems);
    for (size_t b = 0; b < in_host.size(); ++b) EXPECT_TRUE(after[b] == in_host[b]) << "input buffer " << b << " changed";
  }
}

constexpr RotaryStyle kNeoX = RotaryStyle::kNeoX;
constexpr RotaryStyle kGPTJ = RotaryStyle::kGPTJ;
constexpr Layout kC = Layout::kContiguous;

// name, tokens, q_heads, kv_heads, head_dim, rotary_dim, style, i64, in_place, layout,
// max_position, expect_vector
const Case kCases[] = {
    // Llama-3-8B-like.
    {"llama3_neox_out_i64", 4096, 32, 8, 128, 0, kNeoX, true, false, kC, 8192, true},
    {"llama3_neox_inplace_i32", 4096, 32, 8, 128, 0, kNeoX, false, true, kC, 8192, true},
    {"gptj_128_out", 4096, 16, 4, 128, 0, kGPTJ, true, false, kC, 4096, true},
    // GPT-J-6B: rotary 64 of 256, interleaved.
    {"gptj6b_partial_inplace", 7, 16, 16, 256, 64, kGPTJ, false, true, kC, 2048, true},
    {"gptj6b_partial_out", 7, 16, 16, 256, 64, kGPTJ, true, false, kC, 2048, true},
    {"neox_64_t7", 7, 8, 2, 64, 0, kNeoX, false, false, kC, 64, true},
    {"neox_256_t1", 1, 8, 1, 256, 0, kNeoX, true, false, kC, 4096, true},
    {"neox_256_t1_inplace", 1, 8, 1, 256, 0, kNeoX, true, true, kC, 4096, true},
    // Non-power-of-two head dims (Phi-2: 80 with rotary 32).
    {"neox_80_full", 1000, 32, 32, 80, 0, kNeoX, true, false, kC, 2048, true},
    {"phi2_80_partial32_inplace", 777, 32, 32, 80, 32, kNeoX, true, true, kC, 2048, true},
    {"phi2_80_partial32_out", 777, 32, 32, 80, 32, kNeoX, true, false, kC, 2048, true},
    {"neox_96_full", 333, 12, 4, 96, 0, kNeoX, false, false, kC, 1024, true},
    {"neox_96_partial80_inplace", 333, 12, 4, 96, 80, kNeoX, false, true, kC, 1024, true},
    {"gptj_96_full", 333, 12, 4, 96, 0, kGPTJ, false, false, kC, 1024, true},
    {"neox_32", 100, 4, 4, 32, 0, kNeoX, true, false, kC, 256, true},
    {"gptj_32_16", 100, 4, 4, 32, 16, kGPTJ, true, false, kC, 256, true},
    {"neox_160", 64, 8, 8, 160, 0, kNeoX, true, false, kC, 256, true},
    {"neox_192_partial96", 64, 8, 8, 192, 96, kNeoX, true, false, kC, 256, true},
    {"neox_512", 64, 4, 2, 512, 0, kNeoX, true, false, kC, 256, true},
    {"gptj_512_inplace", 64, 4, 2, 512, 0, kGPTJ, true, true, kC, 256, true},
    // Partial rotary on head_dim 128: tail copied out of place, untouched in place.
    {"neox_128_partial64_out", 513, 32, 8, 128, 64, kNeoX, true, false, kC, 4096, true},
    {"neox_128_partial64_inplace", 513, 32, 8, 128, 64, kNeoX, true, true, kC, 4096, true},
    {"gptj_128_partial64_out", 513, 32, 8, 128, 64, kGPTJ, false, false, kC, 4096, true},
    // rotary_dim / 2 not a multiple of 8: the scalar kernel.
    {"neox_128_rd40_scalar_out", 513, 32, 8, 128, 40, kNeoX, true, false, kC, 4096, false},
    {"neox_128_rd40_scalar_inplace", 513, 32, 8, 128, 40, kNeoX, false, true, kC, 4096, false},
    {"gptj_128_rd40_scalar_out", 513, 32, 8, 128, 40, kGPTJ, true, false, kC, 4096, false},
    {"gptj_64_rd24_scalar_inplace", 65, 8, 8, 64, 24, kGPTJ, false, true, kC, 128, false},
    {"neox_64_rd2_scalar_out", 65, 8, 8, 64, 2, kNeoX, true, false, kC, 128, false},
    {"neox_80_rd72_scalar_out", 65, 8, 8, 80, 72, kNeoX, true, false, kC, 128, false},
    // No tokens: nothing is written, nothing fails.
    {"tokens0_out", 0, 32, 8, 128, 0, kNeoX, true, false, kC, 16, true},
    {"tokens0_inplace_scalar", 0, 32, 8, 128, 40, kNeoX, false, true, kC, 16, false},
    // k absent.
    {"no_k_out", 4096, 40, 0, 128, 0, kNeoX, true, false, kC, 8192, true},
    {"no_k_inplace_gptj", 1000, 40, 0, 128, 0, kGPTJ, false, true, kC, 2048, true},
    {"no_k_scalar", 100, 40, 0, 128, 40, kNeoX, true, false, kC, 2048, false},
    // Head counts that leave partial groups of 4 (q 5 → 4 + 1, k 3).
    {"odd_heads", 37, 5, 3, 128, 0, kNeoX, true, false, kC, 64, true},
    {"odd_heads_inplace_gptj", 37, 5, 3, 128, 0, kGPTJ, false, true, kC, 64, true},
    {"one_head_each", 4096, 1, 1, 128, 0, kNeoX, true, false, kC, 4096, true},
    // Strided views.
    {"padded_inplace", 300, 16, 4, 128, 0, kNeoX, true, true, Layout::kPadded, 1024, true},
    {"padded_out", 300, 16, 4, 128, 64, kNeoX, true, false, Layout::kPadded, 1024, true},
    {"fused_qkv_inplace", 4096, 32, 8, 128, 0, kNeoX, true, true, Layout::kFused, 8192, true},
    {"fused_qkv_out", 300, 32, 8, 128, 0, kNeoX, false, false, Layout::kFused, 1024, true},
    {"fused_qkv_gptj_partial_inplace", 300, 32, 8, 128, 64, kGPTJ, true, true, Layout::kFused, 1024, true},
    {"fused_qkv_scalar_inplace", 300, 32, 8, 128, 40, kNeoX, true, true, Layout::kFused, 1024, false},
    // Misaligned views fall back to the scalar kernel.
    {"odd_alignment_inplace", 300, 8, 2, 128, 0, kNeoX, true, true, Layout::kOdd, 1024, false},
    {"odd_alignment_out", 300, 8, 2, 128, 64, kGPTJ, false, false, Layout::kOdd, 1024, false},
    {"offset8_out", 300, 8, 2, 128, 0, kNeoX, true, false, Layout::kOffset8, 1024, false},
    // Positions up to 65535 in a 65536-row table.
    {"pos65536_i32_out", 4096, 8, 2, 128, 0, kNeoX, false, false, kC, 65536, true},
    {"pos65536_i64_inplace", 4096, 8, 2, 128, 0, kNeoX, true, true, kC, 65536, true},
    {"pos65536_gptj_scalar", 1024, 8, 2, 128, 40, kGPTJ, true, false, kC, 65536, false},
};

INSTANTIATE_TEST_SUITE_P(Cases, RotaryGpu, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// The op is graph-capturable and repeatable: a second call on the same shape (a table hit) gives
// the same bits as the first.
TEST(RotaryGpuRepeat, SecondCallGivesTheSameBits) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t T = 257, H = 8, D = 128;
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> q(T * H * D);
  for (auto& x : q) x = kt::float_to_bf16(normal(rng));
  const kt::RopeTables tables = kt::rope_tables(512, D);
  std::vector<int32_t> pos(T);
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 512);
  kt::DeviceBuffer q_dev = kt::to_device(q), cos_dev = kt::to_device(tables.cos),
                   sin_dev = kt::to_device(tables.sin), pos_dev = kt::to_device(pos);
  kt::DeviceBuffer out1(q.size() * 2), out2(q.size() * 2);
  out1.fill(0xFF);
  out2.fill(0xFF);
  kjit::RotaryArgs a;
  a.q = TensorRef(q_dev.get(), kjit::DType::kBF16, {T, H, D});
  a.cos = TensorRef(cos_dev.get(), kjit::DType::kF32, {512, D / 2});
  a.sin = TensorRef(sin_dev.get(), kjit::DType::kF32, {512, D / 2});
  a.positions = TensorRef(pos_dev.get(), kjit::DType::kI32, {T});
  a.q_out = TensorRef(out1.get(), kjit::DType::kBF16, {T, H, D});
  kjit::rotary(a, nullptr);
  a.q_out.data = out2.get();
  kjit::rotary(a, nullptr);
  kt::synchronize();
  EXPECT_TRUE(out1.download<uint16_t>(q.size()) == out2.download<uint16_t>(q.size()));
}

}  // namespace
