// `kjit selftest` checks of kjit::fp8. Quantize (4096×4096 bf16 → e4m3, per tensor with a given
// multiplier and per row): every fp8 byte, amax and scale_inv must equal the host reference
// bit for bit (the kernels do the reference's f32 operations); rel_l2 reports the dequantized
// output against the dequantized reference (0 when exact). GEMM (256×512×1024 e4m3 → bf16, per
// tensor/channel and 1×128/128×128 blocks): relative L2 against the float64 GEMM on the
// dequantized operands ≤ 1e-2 (bf16 output rounding gives ≈ 2e-3; any indexing bug gives O(1)).
#include "tools/selftest/selftest.hpp"

#include <kjit/device.hpp>
#include <kjit/ops/fp8.hpp>

#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace kjit::selftest {
namespace {

namespace kt = kjit::testing;
using kt::Fp8Format;

constexpr double kGemmTolerance = 1e-2;

Result check_quantize(Runtime& runtime, fp8::Granularity g) {
  constexpr int64_t kRows = 4096, kCols = 4096;
  constexpr float kMultiplier = 37.3f;  // not a power of two; saturates the tail of the inputs
  Result r;
  r.op = "fp8.quantize";
  r.shape = fmt::format("{}x{} bf16 -> e4m3 {}", kRows, kCols,
                        g == fp8::Granularity::kTensor ? fmt::format("per-tensor multiplier={}", kMultiplier)
                                                       : std::string("per-row"));
  r.tolerance = 0;
  const unsigned seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> xb(static_cast<size_t>(kRows * kCols));
  std::vector<float> x(xb.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = kt::float_to_bf16(normal(rng) * (1.f + static_cast<float>(i % 97)));
    x[i] = kt::bf16_to_float(xb[i]);
  }
  const int device = kt::current_device();
  kt::DeviceBuffer dx = kt::to_device(xb);
  kt::DeviceBuffer dy(x.size()), damax(kRows * 4), dscale(kRows * 4);
  dy.fill(0xFF);
  damax.fill(0xFF);
  dscale.fill(0xFF);

  fp8::QuantizeArgs a;
  a.x = TensorRef(dx.get(), DType::kBF16, {kRows, kCols}, {}, device);
  a.y = TensorRef(dy.get(), DType::kE4M3, {kRows, kCols}, {}, device);
  a.granularity = g;
  const int64_t groups = g == fp8::Granularity::kTensor ? 1 : kRows;
  a.amax = TensorRef(damax.get(), DType::kF32, {groups}, {}, device);
  a.scale_inv = TensorRef(dscale.get(), DType::kF32, {groups}, {}, device);
  a.multiplier_value = kMultiplier;
  fp8::quantize(a, nullptr, runtime);
  kt::synchronize();

  const kt::Fp8QuantizeReference ref = kt::fp8_quantize_reference(
      x, kRows, kCols, Fp8Format::kE4M3, static_cast<kt::Fp8Granularity>(g), false, false, kMultiplier);
  const std::vector<uint8_t> y = dy.download<uint8_t>(x.size());
  const std::vector<float> amax = damax.download<float>(static_cast<size_t>(groups));
  const std::vector<float> scale = dscale.download<float>(static_cast<size_t>(groups));
  size_t bad_y = 0, bad_s = 0;
  std::vector<float> got(x.size());
  std::vector<double> want(x.size());
  for (size_t i = 0; i < y.size(); ++i) {
    bad_y += y[i] != ref.y[i];
    const size_t grp = g == fp8::Granularity::kTensor ? 0 : i / kCols;
    got[i] = kt::fp8_decode(y[i], Fp8Format::kE4M3) * scale[grp];
    want[i] = static_cast<double>(kt::fp8_decode(ref.y[i], Fp8Format::kE4M3)) * ref.scale_inv[grp];
  }
  for (int64_t i = 0; i < groups; ++i) {
    bad_s += amax[static_cast<size_t>(i)] != ref.amax[static_cast<size_t>(i)] ||
             scale[static_cast<size_t>(i)] != ref.scale_inv[static_cast<size_t>(i)];
  }
  const kt::Comparison cmp = kt::compare(got, want);
  r.rel_l2 = cmp.rel_l2;
  r.passed = bad_y == 0 && bad_s == 0 && cmp.non_finite == 0;
  r.detail = fmt::format("{} of {} fp8 bytes differ, {} of {} amax/scale_inv differ; dequantized {}; seed {}", bad_y,
                         y.size(), bad_s, groups, cmp.describe(), seed);
  return r;
}

Result check_gemm(Runtime& runtime, bool block, fp8::GemmKernel kernel = fp8::GemmKernel::kAuto) {
  constexpr int64_t kM = 256, kN = 512, kK = 1024;
  Result r;
  r.op = "fp8.gemm";
  r.shape = fmt::format("M={} N={} K={} e4m3 x e4m3 -> bf16 {}{}", kM, kN, kK,
                        block ? "1x128/128x128 block scales" : "per-tensor A, per-channel B scales",
                        kernel == fp8::GemmKernel::kWgmma ? " (wgmma kernel)" : "");
  r.tolerance = kGemmTolerance;
  const unsigned seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  kt::Fp8GemmProblem p;
  p.m = kM, p.n = kN, p.k = kK, p.block = block;
  // Operands as the quantizer would make them: bf16-like values quantized per 1x128 row block.
  std::normal_distribution<float> normal(0.f, 1.f);
  p.a.resize(kM * kK);
  p.b.resize(kN * kK);
  for (auto& v : p.a) v = kt::fp8_encode(normal(rng) * 60.f, Fp8Format::kE4M3);
  for (auto& v : p.b) v = kt::fp8_encode(normal(rng) * 60.f, Fp8Format::kE4M3);
  std::uniform_real_distribution<float> sd(0.002f, 0.02f);
  if (block) {
    p.scale_a.resize(kM * (kK / 128));
    p.scale_b.resize((kN / 128) * (kK / 128));
  } else {
    p.scale_a.resize(1);
    p.scale_b.resize(kN);
  }
  for (auto& s : p.scale_a) s = sd(rng);
  for (auto& s : p.scale_b) s = sd(rng);
  const int device = kt::current_device();
  kt::DeviceBuffer da = kt::to_device(p.a), db = kt::to_device(p.b);
  kt::DeviceBuffer dsa = kt::to_device(p.scale_a), dsb = kt::to_device(p.scale_b);
  kt::DeviceBuffer dd(kM * kN * 2);
  dd.fill(0xFF);

  fp8::GemmArgs g;
  g.a = TensorRef(da.get(), DType::kE4M3, {kM, kK}, {}, device);
  g.b = TensorRef(db.get(), DType::kE4M3, {kN, kK}, {}, device);
  g.d = TensorRef(dd.get(), DType::kBF16, {kM, kN}, {}, device);
  if (block) {
    g.scale_mode = fp8::ScaleMode::kBlockwise;
    g.scale_a = TensorRef(dsa.get(), DType::kF32, {kM, kK / 128}, {}, device);
    g.scale_b = TensorRef(dsb.get(), DType::kF32, {kN / 128, kK / 128}, {}, device);
  } else {
    g.scale_a = TensorRef(dsa.get(), DType::kF32, {1}, {}, device);
    g.scale_b = TensorRef(dsb.get(), DType::kF32, {kN}, {}, device);
  }
  g.kernel = kernel;
  fp8::gemm(g, nullptr, runtime);
  kt::synchronize();

  const std::vector<double> ref = kt::fp8_gemm_reference(p);
  const std::vector<uint16_t> out = dd.download<uint16_t>(kM * kN);
  std::vector<float> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) got[i] = kt::bf16_to_float(out[i]);
  const kt::Comparison cmp = kt::compare(got, ref);
  r.rel_l2 = cmp.rel_l2;
  r.passed = cmp.ok(kGemmTolerance);
  r.detail = fmt::format("{}; seed {}", cmp.describe(), seed);
  return r;
}

template <class F>
Result guarded(const char* op, const char* shape, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    Result r;
    r.op = op;
    r.shape = shape;
    r.passed = false;
    r.detail = e.what();
    return r;
  }
}

}  // namespace

std::vector<Result> fp8(Runtime& runtime) {
  std::vector<Result> results;
  results.push_back(guarded("fp8.quantize", "4096x4096 per-tensor",
                            [&] { return check_quantize(runtime, fp8::Granularity::kTensor); }));
  results.push_back(guarded("fp8.quantize", "4096x4096 per-row", [&] { return check_quantize(runtime, fp8::Granularity::kRow); }));
  results.push_back(guarded("fp8.gemm", "256x512x1024 tensorwise", [&] { return check_gemm(runtime, false); }));
  results.push_back(guarded("fp8.gemm", "256x512x1024 blockwise", [&] { return check_gemm(runtime, true); }));
  // The planner runs this shape on the mma.sync kernel; on Hopper check the wgmma kernel too.
  if (device_info(kt::current_device()).target().has_wgmma()) {
    results.push_back(guarded("fp8.gemm", "256x512x1024 tensorwise (wgmma)",
                              [&] { return check_gemm(runtime, false, fp8::GemmKernel::kWgmma); }));
  }
  return results;
}

}  // namespace kjit::selftest
