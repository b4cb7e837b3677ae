#include "tools/testing/reference_fp8.hpp"

#include <kjit/ops/fp8.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

namespace kjit::testing {
namespace {

/// The 127 non-negative finite values of a format, indexed by code 0x00..0x7e (E4M3) or
/// 0x00..0x7b (E5M2); codes ascend with value, which is what the encoder's search relies on.
struct Grid {
  std::array<double, 128> value{};
  int count = 0;  // finite non-negative codes
};

double decode_magnitude(uint8_t v, Fp8Format f) {
  const int mag = v & 0x7f;
  if (f == Fp8Format::kE4M3) {
    const int e = mag >> 3, m = mag & 7;
    if (e == 0) return std::ldexp(static_cast<double>(m), -9);  // m/8 · 2^-6
    return std::ldexp(1.0 + m / 8.0, e - 7);
  }
  const int e = mag >> 2, m = mag & 3;
  if (e == 0) return std::ldexp(static_cast<double>(m), -16);  // m/4 · 2^-14
  return std::ldexp(1.0 + m / 4.0, e - 15);
}

const Grid& grid(Fp8Format f) {
  static const Grid g4 = [] {
    Grid g;
    g.count = 0x7f;  // 0x7f is NaN
    for (int c = 0; c < g.count; ++c) g.value[c] = decode_magnitude(static_cast<uint8_t>(c), Fp8Format::kE4M3);
    return g;
  }();
  static const Grid g5 = [] {
    Grid g;
    g.count = 0x7c;  // 0x7c is inf
    for (int c = 0; c < g.count; ++c) g.value[c] = decode_magnitude(static_cast<uint8_t>(c), Fp8Format::kE5M2);
    return g;
  }();
  return f == Fp8Format::kE4M3 ? g4 : g5;
}

}  // namespace

const char* fp8_name(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.f : 57344.f; }

bool fp8_is_nan(uint8_t v, Fp8Format f) {
  const int mag = v & 0x7f;
  return f == Fp8Format::kE4M3 ? mag == 0x7f : mag > 0x7c;
}

float fp8_decode(uint8_t v, Fp8Format f) {
  const int mag = v & 0x7f;
  const bool neg = (v & 0x80) != 0;
  if (fp8_is_nan(v, f)) return std::nanf("");
  if (f == Fp8Format::kE5M2 && mag == 0x7c) return neg ? -INFINITY : INFINITY;
  const double d = decode_magnitude(v, f);
  return static_cast<float>(neg ? -d : d);
}

uint8_t fp8_encode(float x, Fp8Format f) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  const Grid& g = grid(f);
  const double max = g.value[g.count - 1];
  // Saturation: beyond max + ulp(max)/2 (E4M3: 464 itself still rounds to even = 448, as in
  // CUDA's converter; E5M2: 61440 and up saturate, the tie included).
  const double ulp_half = f == Fp8Format::kE4M3 ? 16.0 : 4096.0;
  if (f == Fp8Format::kE4M3 ? a > max + ulp_half : a >= max + ulp_half) return sign | static_cast<uint8_t>(g.count - 1);
  // Nearest grid value, ties to the even code (the value grid is uniform between powers of two
  // and the codes count up with value, so "even code" is "even mantissa").
  const double* begin = g.value.data();
  const double* end = begin + g.count;
  const double* hi = std::lower_bound(begin, end, a);  // first value ≥ a
  if (hi == end) return sign | static_cast<uint8_t>(g.count - 1);
  int code = static_cast<int>(hi - begin);
  if (*hi != a && code > 0) {
    const double up = *hi - a, down = a - *(hi - 1);
    if (down < up || (down == up && ((code - 1) & 1) == 0)) code -= 1;
  }
  return sign | static_cast<uint8_t>(code);
}

float fp8_round_multiplier(float m, bool pow2) {
  if (!pow2) return m;
  uint32_t u;
  std::memcpy(&u, &m, 4);
  u &= 0x7f800000u;
  std::memcpy(&m, &u, 4);
  return m;
}

float fp8_multiplier_from_amax(float amax, Fp8Format f, bool pow2) {
  float m = 1.f;
  if (amax > 0.f && amax <= FLT_MAX) m = std::min(fp8_max(f) / amax, FLT_MAX);
  return fp8_round_multiplier(m, pow2);
}

float fp8_delayed_multiplier(const std::vector<float>& history, float current, Fp8Format f, int margin) {
  float h = 0.f;
  for (float v : history) h = std::fmax(h, v);
  if (!(h > 0.f && h <= FLT_MAX)) return current;
  volatile float q = fp8_max(f) / h;
  volatile float m = q / std::ldexp(1.f, margin);
  return std::min(std::max(static_cast<float>(m), FLT_MIN), FLT_MAX);
}

Fp8QuantizeReference fp8_quantize_reference(const std::vector<float>& x, int64_t rows, int64_t cols, Fp8Format f,
                                            Fp8Granularity g, bool pow2, bool dynamic, float multiplier) {
  Fp8QuantizeReference r;
  const int64_t cb = (cols + 127) / 128;
  switch (g) {
    case Fp8Granularity::kTensor: r.group_rows = 1, r.group_cols = 1; break;
    case Fp8Granularity::kRow: r.group_rows = rows, r.group_cols = 1; break;
    case Fp8Granularity::kBlock1x128: r.group_rows = rows, r.group_cols = cb; break;
    case Fp8Granularity::kBlock128x128: r.group_rows = (rows + 127) / 128, r.group_cols = cb; break;
  }
  auto group_of = [&](int64_t i, int64_t j) -> int64_t {
    switch (g) {
      case Fp8Granularity::kTensor: return 0;
      case Fp8Granularity::kRow: return i;
      case Fp8Granularity::kBlock1x128: return i * cb + j / 128;
      default: return (i / 128) * cb + j / 128;
    }
  };
  const size_t groups = static_cast<size_t>(r.group_rows * r.group_cols);
  r.amax.assign(groups, 0.f);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float& a = r.amax[static_cast<size_t>(group_of(i, j))];
      a = std::fmax(a, std::fabs(x[static_cast<size_t>(i * cols + j)]));  // fmax drops NaN, as fmaxf
    }
  }
  r.multiplier.resize(groups);
  r.scale_inv.resize(groups);
  for (size_t i = 0; i < groups; ++i) {
    if (g == Fp8Granularity::kTensor && !dynamic) {
      r.multiplier[i] = fp8_round_multiplier(multiplier, pow2);
    } else {
      r.multiplier[i] = fp8_multiplier_from_amax(r.amax[i], f, pow2);
    }
    r.scale_inv[i] = 1.f / r.multiplier[i];
  }
  r.y.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const size_t e = static_cast<size_t>(i * cols + j);
      volatile float product = x[e] * r.multiplier[static_cast<size_t>(group_of(i, j))];  // one f32 rounding
      r.y[e] = fp8_encode(product, f);
    }
  }
  return r;
}

std::vector<double> fp8_gemm_reference(const Fp8GemmProblem& p) {
  std::vector<double> d(static_cast<size_t>(p.m * p.n));
  std::array<double, 256> lut_a{}, lut_b{};
  for (int c = 0; c < 256; ++c) {
    lut_a[c] = fp8_decode(static_cast<uint8_t>(c), p.fa);
    lut_b[c] = fp8_decode(static_cast<uint8_t>(c), p.fb);
  }
  const int64_t kb_count = p.block ? p.k / 128 : 1;
  // Rows in groups of kRows share each B element they read: kRows independent sums per B row
  // (each still in k order, so every output is what a row-at-a-time loop gives) instead of one
  // serial chain, and a kRows-th of the B traffic.
  constexpr int64_t kRows = 8;
  auto worker = [&](int64_t r0, int64_t r1) {
    std::vector<double> arows(static_cast<size_t>(kRows * p.k));
    for (int64_t i0 = r0; i0 < r1; i0 += kRows) {
      const int64_t rows = std::min(kRows, r1 - i0);
      std::fill(arows.begin(), arows.end(), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          double s;
          if (p.block) {
            s = p.scale_a[static_cast<size_t>(i * kb_count + kk / 128)];
          } else {
            s = p.scale_a.size() == 1 ? p.scale_a[0] : p.scale_a[static_cast<size_t>(i)];
          }
          arows[static_cast<size_t>(r * p.k + kk)] = lut_a[p.a[static_cast<size_t>(i * p.k + kk)]] * s;
        }
      }
      for (int64_t j = 0; j < p.n; ++j) {
        const uint8_t* brow = p.b.data() + j * p.k;
        double acc[kRows] = {};
        if (p.block) {
          for (int64_t kb = 0; kb < kb_count; ++kb) {
            const double sb = p.scale_b[static_cast<size_t>((j / 128) * kb_count + kb)];
            double part[kRows] = {};
            for (int64_t kk = kb * 128; kk < (kb + 1) * 128; ++kk) {
              const double b = lut_b[brow[kk]];
              for (int64_t r = 0; r < kRows; ++r) part[r] += arows[static_cast<size_t>(r * p.k + kk)] * b;
            }
            for (int64_t r = 0; r < kRows; ++r) acc[r] += part[r] * sb;
          }
        } else {
          for (int64_t kk = 0; kk < p.k; ++kk) {
            const double b = lut_b[brow[kk]];
            for (int64_t r = 0; r < kRows; ++r) acc[r] += arows[static_cast<size_t>(r * p.k + kk)] * b;
          }
          const double sb = p.scale_b.size() == 1 ? p.scale_b[0] : p.scale_b[static_cast<size_t>(j)];
          for (int64_t r = 0; r < kRows; ++r) acc[r] *= sb;
        }
        for (int64_t r = 0; r < rows; ++r) {
          if (!p.bias.empty()) acc[r] += p.bias[static_cast<size_t>(j)];
          d[static_cast<size_t>((i0 + r) * p.n + j)] = acc[r];
        }
      }
    }
  };
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), p.m));
  std::vector<std::thread> pool;
  const int64_t per = (p.m + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t r0 = t * per, r1 = std::min(p.m, r0 + per);
    if (r0 < r1) pool.emplace_back(worker, r0, r1);
  }
  for (auto& t : pool) t.join();
  return d;
}

std::string QuantizeCase::describe() const {
  return fmt::format("{}x{} bf16->{} {}", rows, cols, fp8_name(format),
                     fp8::granularity_name(static_cast<fp8::Granularity>(granularity)));
}

std::string QuantizeCaseResult::describe() const {
  return fmt::format("{} fp8 bytes and {} groups (amax, scale_inv) differ from the reference bit for bit, {} elements "
                     "written past the groups; seed {}",
                     bad_bytes, bad_groups, written_past, seed);
}

QuantizeCaseResult run_quantize_case(const QuantizeCase& c, uint64_t seed, Runtime& runtime) {
  QuantizeCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> xb(static_cast<size_t>(c.rows * c.cols));
  std::vector<float> x(xb.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = float_to_bf16(normal(rng) * (1.f + static_cast<float>(i % 97)));
    x[i] = bf16_to_float(xb[i]);
  }
  const bool tensor = c.granularity == Fp8Granularity::kTensor;
  const Fp8QuantizeReference ref = fp8_quantize_reference(x, c.rows, c.cols, c.format, c.granularity, false, tensor);
  const size_t groups = ref.amax.size();
  const auto g = static_cast<fp8::Granularity>(c.granularity);
  const fp8::ScaleShape shape = fp8::scale_shape(g, c.rows, c.cols);

  const int device = current_device();
  DeviceBuffer dx = to_device(xb), dy(x.size()), damax((groups + 1) * 4), dscale((groups + 1) * 4);
  dy.fill(0xFF);
  damax.fill(0xFF);
  dscale.fill(0xFF);
  fp8::QuantizeArgs a;
  a.x = TensorRef(dx.get(), DType::kBF16, {c.rows, c.cols}, {}, device);
  a.y = TensorRef(dy.get(), c.format == Fp8Format::kE4M3 ? DType::kE4M3 : DType::kE5M2, {c.rows, c.cols}, {}, device);
  a.granularity = g;
  a.dynamic = tensor;
  auto group_ref = [&](DeviceBuffer& b) {
    if (shape.ndim == 1) return TensorRef(b.get(), DType::kF32, {shape.shape[0]}, {}, device);
    return TensorRef(b.get(), DType::kF32, {shape.shape[0], shape.shape[1]}, {}, device);
  };
  a.amax = group_ref(damax);
  a.scale_inv = group_ref(dscale);
  fp8::quantize(a, nullptr, runtime);
  synchronize();

  const std::vector<uint8_t> y = dy.download<uint8_t>(x.size());
  for (size_t i = 0; i < y.size(); ++i) {
    result.bad_bytes += fp8_is_nan(ref.y[i], c.format) ? !fp8_is_nan(y[i], c.format) : y[i] != ref.y[i];
  }
  const std::vector<float> amax = damax.download<float>(groups + 1), scale = dscale.download<float>(groups + 1);
  for (size_t i = 0; i < groups; ++i) result.bad_groups += !(amax[i] == ref.amax[i] && scale[i] == ref.scale_inv[i]);
  uint32_t tail[2];
  std::memcpy(&tail[0], &amax[groups], 4);
  std::memcpy(&tail[1], &scale[groups], 4);
  result.written_past = (tail[0] != 0xFFFFFFFFu) + (tail[1] != 0xFFFFFFFFu);
  return result;
}

}  // namespace kjit::testing
