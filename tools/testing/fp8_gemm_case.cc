// See fp8_gemm_case.hpp.
#include "tools/testing/fp8_gemm_case.hpp"

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kjit::testing {
namespace {

Fp8Format fmt_of(DType t) { return t == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2; }

/// A random fp8 byte of format `f` whose value is finite.
uint8_t random_fp8(std::mt19937_64& rng, Fp8Format f) {
  for (;;) {
    const uint8_t v = static_cast<uint8_t>(rng());
    const float x = fp8_decode(v, f);
    if (std::isfinite(x) && std::fabs(x) <= (f == Fp8Format::kE4M3 ? 448.f : 2048.f)) return v;
  }
}

}  // namespace

std::string Fp8GemmCase::describe() const {
  static const char* sn[] = {"tensor", "channel", "block"};
  static const char* kn[] = {"auto", "mma", "wgmma"};
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " a_" + (a_trans ? "km" : "mk") +
         " b_" + (b_trans ? "kn" : "nk") + " " + kjit::dtype_name(fa) + "x" + kjit::dtype_name(fb) + "->" +
         kjit::dtype_name(out) + " " + sn[static_cast<int>(scales)] + " tile=" + fp8::gemm_tile_name(tile) +
         " stages=" + std::to_string(stages) + (bias != DType::kU8 ? std::string(" bias=") + kjit::dtype_name(bias) : "") +
         (d_colmajor ? " D-colmajor" : "") + (padded ? " padded" : "") + " kernel=" + kn[static_cast<int>(kernel)] +
         " splits=" + std::to_string(splits) + " multicast=" + std::to_string(multicast) +
         (b_constant ? " b_constant" : "");
}

std::string Fp8GemmResult::describe() const {
  return fmt::format("{} (worst at row {}, col {}){}", cmp.describe(), n > 0 ? cmp.worst_index / n : 0,
                     n > 0 ? cmp.worst_index % n : 0,
                     padding_written != 0 ? fmt::format(", {} bytes of D's padding written", padding_written) : "");
}

Fp8GemmResult run_fp8_gemm_case(const Fp8GemmCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp8GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k, p.fa = fmt_of(c.fa), p.fb = fmt_of(c.fb), p.block = c.scales == GemmScales::kBlock;
  p.a.resize(static_cast<size_t>(c.m * c.k));
  p.b.resize(static_cast<size_t>(c.n * c.k));
  for (auto& v : p.a) v = random_fp8(rng, p.fa);
  for (auto& v : p.b) v = random_fp8(rng, p.fb);
  std::uniform_real_distribution<float> sd(0.01f, 0.3f);  // dequant scales, not powers of two
  const int64_t kb = c.k / 128;
  if (p.block) {
    p.scale_a.resize(static_cast<size_t>(c.m * kb));
    p.scale_b.resize(static_cast<size_t>((c.n + 127) / 128 * kb));
  } else {
    p.scale_a.resize(c.scales == GemmScales::kChannel ? static_cast<size_t>(c.m) : 1);
    p.scale_b.resize(c.scales == GemmScales::kChannel ? static_cast<size_t>(c.n) : 1);
  }
  for (auto& s : p.scale_a) s = sd(rng);
  for (auto& s : p.scale_b) s = sd(rng);
  std::vector<float> bias_f;
  std::vector<uint16_t> bias_h;
  if (c.bias != DType::kU8) {
    for (int64_t j = 0; j < c.n; ++j) {
      float v = sd(rng) * 1000.f - 150.f;
      if (c.bias == DType::kBF16) v = round_bf16(v);
      bias_f.push_back(v);
      bias_h.push_back(float_to_bf16(v));
      p.bias.push_back(v);
    }
  }

  // Operands as stored: A [M, K] or [K, M], B [N, K] or [K, N], rows padded to 16-byte strides
  // (+16 more when padded) whose padding holds NaN and must not leak into the result.
  const int64_t a_outer = c.a_trans ? c.k : c.m, a_inner = c.a_trans ? c.m : c.k;
  const int64_t b_outer = c.b_trans ? c.k : c.n, b_inner = c.b_trans ? c.n : c.k;
  const int64_t lda = (a_inner + 15) / 16 * 16 + (c.padded ? 16 : 0);
  const int64_t ldb = (b_inner + 15) / 16 * 16 + (c.padded ? 32 : 0);
  std::vector<uint8_t> ha(static_cast<size_t>(a_outer * lda), 0x7f), hb(static_cast<size_t>(b_outer * ldb), 0x7f);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t kk = 0; kk < c.k; ++kk)
      ha[static_cast<size_t>(c.a_trans ? kk * lda + i : i * lda + kk)] = p.a[static_cast<size_t>(i * c.k + kk)];
  for (int64_t j = 0; j < c.n; ++j)
    for (int64_t kk = 0; kk < c.k; ++kk)
      hb[static_cast<size_t>(c.b_trans ? kk * ldb + j : j * ldb + kk)] = p.b[static_cast<size_t>(j * c.k + kk)];
  DeviceBuffer da = to_device(ha), db = to_device(hb);
  const int es = kjit::dtype_size(c.out);
  const int64_t d_outer = c.d_colmajor ? c.n : c.m, d_inner = c.d_colmajor ? c.m : c.n;
  const int64_t ldd = d_inner + (c.padded ? 5 : 0);
  DeviceBuffer dd(static_cast<size_t>(d_outer * ldd * es));
  dd.fill(0xFF);
  DeviceBuffer dsa = to_device(p.scale_a), dsb = to_device(p.scale_b);
  DeviceBuffer dbias = c.bias == DType::kBF16 ? to_device(bias_h) : to_device(bias_f);

  fp8::GemmArgs g;
  g.a = c.a_trans ? TensorRef(da.get(), c.fa, {c.m, c.k}, {1, lda}, 0) : TensorRef(da.get(), c.fa, {c.m, c.k}, {lda, 1}, 0);
  g.b = c.b_trans ? TensorRef(db.get(), c.fb, {c.n, c.k}, {1, ldb}, 0) : TensorRef(db.get(), c.fb, {c.n, c.k}, {ldb, 1}, 0);
  g.d = c.d_colmajor ? TensorRef(dd.get(), c.out, {c.m, c.n}, {1, ldd}, 0)
                     : TensorRef(dd.get(), c.out, {c.m, c.n}, {ldd, 1}, 0);
  if (p.block) {
    g.scale_mode = fp8::ScaleMode::kBlockwise;
    g.scale_a = TensorRef(dsa.get(), DType::kF32, {c.m, kb}, {}, 0);
    g.scale_b = TensorRef(dsb.get(), DType::kF32, {(c.n + 127) / 128, kb}, {}, 0);
  } else {
    g.scale_a = TensorRef(dsa.get(), DType::kF32, {static_cast<int64_t>(p.scale_a.size())}, {}, 0);
    g.scale_b = TensorRef(dsb.get(), DType::kF32, {static_cast<int64_t>(p.scale_b.size())}, {}, 0);
  }
  if (c.bias != DType::kU8) g.bias = TensorRef(dbias.get(), c.bias, {c.n}, {}, 0);
  g.tile = c.tile;
  g.stages = c.stages;
  g.kernel = c.kernel;
  g.splits = c.splits;
  g.multicast = c.multicast;
  g.b_constant = c.b_constant;
  fp8::gemm(g, nullptr);
  synchronize();

  const std::vector<double> ref = fp8_gemm_reference(p);
  std::vector<uint8_t> raw = dd.download<uint8_t>(static_cast<size_t>(d_outer * ldd * es));
  std::vector<float> out(static_cast<size_t>(c.m * c.n));
  size_t pad = 0;
  for (int64_t r = 0; r < d_outer; ++r) {
    for (int64_t q = 0; q < ldd; ++q) {
      const uint8_t* src = raw.data() + (r * ldd + q) * es;
      if (q >= d_inner) {
        for (int b = 0; b < es; ++b) pad += src[b] != 0xFF;
        continue;
      }
      float v;
      if (es == 4) {
        std::memcpy(&v, src, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, src, 2);
        v = bf16_to_float(h);
      }
      const int64_t i = c.d_colmajor ? q : r, j = c.d_colmajor ? r : q;
      out[static_cast<size_t>(i * c.n + j)] = v;
    }
  }
  Fp8GemmResult r;
  r.cmp = compare(out, ref);
  r.tol = c.out == DType::kF32 ? 2e-3 : 1e-2;
  r.padding_written = pad;
  r.n = c.n;
  return r;
}

}  // namespace kjit::testing
