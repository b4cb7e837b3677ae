#include "tools/testing/reference_rotary.hpp"

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace kjit::testing {

RopeTables rope_tables(int64_t max_position, int rotary_dim, double theta) {
  const int half = rotary_dim / 2;
  RopeTables t;
  t.cos.resize(static_cast<size_t>(max_position) * half);
  t.sin.resize(t.cos.size());
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / rotary_dim);
    for (int64_t p = 0; p < max_position; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      t.cos[p * half + i] = static_cast<float>(std::cos(angle));
      t.sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return t;
}

std::vector<uint16_t> gather_heads(const std::vector<uint16_t>& buffer, int64_t offset,
                                   int64_t tokens, int64_t heads, int64_t head_dim,
                                   int64_t token_stride, int64_t head_stride) {
  std::vector<uint16_t> out(static_cast<size_t>(tokens * heads * head_dim));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t* src = buffer.data() + offset + t * token_stride + h * head_stride;
      std::memcpy(out.data() + (t * heads + h) * head_dim, src, head_dim * sizeof(uint16_t));
    }
  }
  return out;
}

std::vector<double> rotary_reference(const std::vector<uint16_t>& x, int64_t tokens,
                                     int64_t heads, int64_t head_dim, int rotary_dim,
                                     RotaryStyle style, const std::vector<float>& cos,
                                     const std::vector<float>& sin,
                                     const std::vector<int64_t>& positions) {
  const int half = rotary_dim / 2;
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = positions[t];
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t* in = x.data() + (t * heads + h) * head_dim;
      double* y = out.data() + (t * heads + h) * head_dim;
      for (int64_t d = rotary_dim; d < head_dim; ++d) y[d] = bf16_to_float(in[d]);
      for (int i = 0; i < half; ++i) {
        const int64_t e0 = style == RotaryStyle::kNeoX ? i : 2 * i;
        const int64_t e1 = style == RotaryStyle::kNeoX ? i + half : 2 * i + 1;
        const double x0 = bf16_to_float(in[e0]);
        const double x1 = bf16_to_float(in[e1]);
        const double c = cos[p * half + i];
        const double s = sin[p * half + i];
        y[e0] = x0 * c - x1 * s;
        y[e1] = x1 * c + x0 * s;
      }
    }
  }
  return out;
}

namespace {

/// Maps bf16 bits onto integers that increase with the value (−0 and +0 both to 0), so the
/// difference of two keys counts the representable values between them.
int64_t bf16_order_key(uint16_t bits) {
  const int64_t magnitude = bits & 0x7fff;
  return (bits & 0x8000) ? -magnitude : magnitude;
}

/// `v` rounded to the nearest bf16 (ties to even), directly from double (one rounding).
uint16_t double_to_bf16(double v) {
  if (std::isnan(v)) return 0x7fc0;
  // Nearest f32 first would double-round; instead find the two bf16 neighbours of v.
  const float f = static_cast<float>(v);  // within 2^-24 relative: the bf16 candidates are near
  uint16_t lo = float_to_bf16(f);
  // Check the candidate and its neighbours; pick the nearest to v (ties to even).
  uint16_t best = lo;
  double best_err = std::numeric_limits<double>::infinity();
  for (int delta = -1; delta <= 1; ++delta) {
    const int64_t key = bf16_order_key(lo) + delta;
    const uint16_t bits = key < 0 ? static_cast<uint16_t>(0x8000 | (-key)) : static_cast<uint16_t>(key);
    if ((bits & 0x7fff) >= 0x7f80) continue;  // inf/NaN
    const double err = std::abs(static_cast<double>(bf16_to_float(bits)) - v);
    if (err < best_err || (err == best_err && (bits & 1) == 0)) {
      best = bits;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

int64_t bf16_ulp_distance(uint16_t out, double ref) {
  if ((out & 0x7fff) > 0x7f80 || std::isnan(ref)) return std::numeric_limits<int32_t>::max();
  return std::abs(bf16_order_key(out) - bf16_order_key(double_to_bf16(ref)));
}

UlpCheck check_ulps(const std::vector<uint16_t>& out, const std::vector<double>& ref,
                    int64_t limit) {
  UlpCheck c;
  const size_t n = std::min(out.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    const int64_t d = bf16_ulp_distance(out[i], ref[i]);
    if (d > limit) ++c.over_limit;
    if (d > c.max_ulp) {
      c.max_ulp = d;
      c.worst_index = i;
    }
  }
  if (out.size() != ref.size()) c.over_limit += std::max(out.size(), ref.size()) - n;
  return c;
}

std::string RotaryCase::describe() const {
  return fmt::format("T{} Hq{}/Hkv{} D{} rotary_dim={} {} {}", tokens, q_heads, kv_heads, head_dim, rotary_dim,
                     enum_name(kRotaryStyleNames, style), pos_i64 ? "i64" : "i32");
}

std::string RotaryCaseResult::describe() const {
  return fmt::format("{}; {} outputs over 1 bf16 ulp (max {}); seed {}", cmp.describe(), ulps.over_limit, ulps.max_ulp,
                     seed);
}

RotaryCaseResult run_rotary_case(const RotaryCase& c, uint64_t seed, Runtime& runtime) {
  RotaryCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> q(static_cast<size_t>(c.tokens * c.q_heads * c.head_dim));
  std::vector<uint16_t> k(static_cast<size_t>(c.tokens * c.kv_heads * c.head_dim));
  for (auto& x : q) x = float_to_bf16(normal(rng));
  for (auto& x : k) x = float_to_bf16(normal(rng));
  const RopeTables tables = rope_tables(c.max_position, c.rotary_dim, 500000.0);
  std::vector<int64_t> positions(static_cast<size_t>(c.tokens));
  for (auto& p : positions) p = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.max_position));
  const std::vector<int32_t> positions32(positions.begin(), positions.end());

  const int device = current_device();
  DeviceBuffer dq = to_device(q), dk = to_device(k), dcos = to_device(tables.cos), dsin = to_device(tables.sin);
  DeviceBuffer dpos = c.pos_i64 ? to_device(positions) : to_device(positions32);
  DeviceBuffer qo(q.size() * 2), ko(k.size() * 2);
  qo.fill(0xFF);
  ko.fill(0xFF);
  RotaryArgs a;
  a.q = TensorRef(dq.get(), DType::kBF16, {c.tokens, c.q_heads, c.head_dim}, {}, device);
  a.k = TensorRef(dk.get(), DType::kBF16, {c.tokens, c.kv_heads, c.head_dim}, {}, device);
  a.cos = TensorRef(dcos.get(), DType::kF32, {c.max_position, c.rotary_dim / 2}, {}, device);
  a.sin = TensorRef(dsin.get(), DType::kF32, {c.max_position, c.rotary_dim / 2}, {}, device);
  a.positions = TensorRef(dpos.get(), c.pos_i64 ? DType::kI64 : DType::kI32, {c.tokens}, {}, device);
  a.q_out = TensorRef(qo.get(), DType::kBF16, {c.tokens, c.q_heads, c.head_dim}, {}, device);
  a.k_out = TensorRef(ko.get(), DType::kBF16, {c.tokens, c.kv_heads, c.head_dim}, {}, device);
  a.rotary_dim = c.rotary_dim;
  a.style = c.style;
  rotary(a, nullptr, runtime);
  synchronize();

  std::vector<uint16_t> y = qo.download<uint16_t>(q.size());
  const std::vector<uint16_t> yk = ko.download<uint16_t>(k.size());
  y.insert(y.end(), yk.begin(), yk.end());
  std::vector<double> ref =
      rotary_reference(q, c.tokens, c.q_heads, c.head_dim, c.rotary_dim, c.style, tables.cos, tables.sin, positions);
  const std::vector<double> rk =
      rotary_reference(k, c.tokens, c.kv_heads, c.head_dim, c.rotary_dim, c.style, tables.cos, tables.sin, positions);
  ref.insert(ref.end(), rk.begin(), rk.end());
  std::vector<float> yf(y.size());
  for (size_t i = 0; i < y.size(); ++i) yf[i] = bf16_to_float(y[i]);
  result.cmp = compare(yf, ref);
  result.ulps = check_ulps(y, ref, 1);
  return result;
}

}  // namespace kjit::testing
