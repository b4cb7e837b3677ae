// kjit's NVRTC standard headers on the GPU: one ordinary kernel (tests/kernels/std_kernel.hpp)
// compiled through kjit and through nvcc (run here, with the host's real headers) gives the same
// results, and both match a host reference; a kernel that uses what only kjit's headers give
// device code (std::sort, std::nth_element, the str* functions, fpclassify) matches its host
// reference exactly.
#include <kjit/device.hpp>
#include <kjit/launch.hpp>
#include <kjit/runtime.hpp>

#include "runtime/driver.hpp"
#include "tests/cli/process.hpp"
#include "tests/kernels/std_kernel.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace kt = kjit::testing;

struct StdKernelParams {  // as in kStdKernelSource
  const float* x;
  float* y;
  int32_t n;
};

std::vector<float> inputs(int n) {
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = -3.0f + 6.0f * static_cast<float>((i * 37) % n) / static_cast<float>(n);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1.0f;
  x[3] = -1.0f;
  return x;
}

kjit::RuntimeConfig config() {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  return c;
}

kjit::ProgramSpec std_kernel_spec() {
  kjit::ProgramSpec spec;
  spec.family = "test.std_kernel";
  spec.source_name = "std_kernel.cu";
  spec.source_text = kt::kStdKernelSource;
  spec.name_expressions = {"std_kernel"};
  return spec;
}

// Runs the nvcc-compiled cubin `image`'s std_kernel on `params`.
void run_nvcc_cubin(const std::string& image, StdKernelParams params, int n) {
  auto& d = kjit::detail::driver();
  CUlibrary lib = nullptr;
  KJIT_CU(cuLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel = nullptr;
  KJIT_CU(cuLibraryGetKernel(&kernel, lib, "std_kernel"));
  CUlaunchConfig c{};
  c.gridDimX = static_cast<unsigned>((n + 127) / 128);
  c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 128;
  c.blockDimY = c.blockDimZ = 1;
  void* args[] = {&params};
  KJIT_CU(cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(kernel), args, nullptr));
  kt::synchronize();
  d.cuLibraryUnload(lib);
}

TEST(StdHeadersGpu, SameKernelThroughKjitAndNvccGivesTheSameResults) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr int kN = 4096;
  const std::vector<float> x = inputs(kN);
  const std::vector<double> ref = kt::std_kernel_reference(x);
  kt::DeviceBuffer dx = kt::to_device(x);
  kt::DeviceBuffer dy(kN * kt::kStdKernelOutputs * sizeof(float));

  kjit::Runtime rt(config());
  const kjit::LoadedProgram& program = rt.load(std_kernel_spec());
  dy.fill(0xFF);
  kjit::LaunchConfig lc;
  lc.grid[0] = (kN + 127) / 128;
  lc.block[0] = 128;
  kjit::launch(program.kernel(0), lc, StdKernelParams{static_cast<const float*>(dx.get()), static_cast<float*>(dy.get()), kN});
  kt::synchronize();
  const std::vector<float> from_kjit = dy.download<float>(kN * kt::kStdKernelOutputs);
  const kt::Comparison vs_ref = kt::compare(from_kjit, ref);
  EXPECT_TRUE(vs_ref.ok(1e-5)) << "kjit against the host reference: " << vs_ref.describe();

  const kjit::Target target = program.compiled().target;
  const fs::path nvcc = fs::path(rt.cuda_include_dir()).parent_path() / "bin" / "nvcc";
  if (!fs::exists(nvcc) || target.ptx) GTEST_SKIP() << "no nvcc at " << nvcc << " (compared with the host reference only)";
  const fs::path dir = kjit::test::fresh_dir("std_kernel_gpu_nvcc");
  { std::ofstream(dir / "std_kernel.cu") << kt::kStdKernelSource; }
  const auto r = kjit::test::run_process({nvcc.string(), "-cubin", "-arch=" + target.str(), "-std=c++17",
                                          "--expt-relaxed-constexpr", (dir / "std_kernel.cu").string(), "-o",
                                          (dir / "std_kernel.cubin").string()},
                                         {}, dir);
  ASSERT_EQ(r.code, 0) << r.describe();
  dy.fill(0xFF);
  run_nvcc_cubin(kjit::test::read_file(dir / "std_kernel.cubin"),
                 StdKernelParams{static_cast<const float*>(dx.get()), static_cast<float*>(dy.get()), kN}, kN);
  const std::vector<float> from_nvcc = dy.download<float>(kN * kt::kStdKernelOutputs);
  EXPECT_TRUE(kt::compare(from_nvcc, ref).ok(1e-5)) << "nvcc against the host reference: " << kt::compare(from_nvcc, ref).describe();
  // Both call the same CUDA math library; where they round differently (std::pow(float, int)
  // is float in CUDA's overload, double in libstdc++'s) the difference is an ulp or so.
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < from_kjit.size(); ++i) {
    const float a = from_kjit[i], b = from_nvcc[i];
    if (std::fabs(a - b) > 1e-5f * std::max(1.0f, std::fabs(b))) {
      if (differ++ == 0) first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << "first at element " << first / kt::kStdKernelOutputs << " output "
                        << first % kt::kStdKernelOutputs << ": kjit " << from_kjit[first] << ", nvcc " << from_nvcc[first];
}


TEST(StdHeadersGpu, KjitOnlyFacilitiesMatchTheHostExactly) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr int kN = 1000;
  std::vector<float> x = inputs(kN);
  x[4] = std::numeric_limits<float>::denorm_min();
  x[5] = std::numeric_limits<float>::infinity();
  x[6] = std::numeric_limits<float>::quiet_NaN();
  kt::DeviceBuffer dx = kt::to_device(x), sorted(kN * 8 * sizeof(float)), nth(kN * sizeof(float)),
                   misc(kN * 3 * sizeof(int32_t));
  struct Params {
    const float* x;
    float* sorted;
    float* nth;
    int32_t* misc;
    int32_t n;
  } params{static_cast<const float*>(dx.get()), static_cast<float*>(sorted.get()), static_cast<float*>(nth.get()),
           static_cast<int32_t*>(misc.get()), kN};
  kjit::ProgramSpec spec;
  spec.family = "test.std_kjit_only";
  spec.source_name = "kjit_only.cu";
  spec.source_text = kt::kStdKjitOnlySource;
  spec.name_expressions = {"kjit_only"};
  kjit::Runtime rt(config());
  kjit::LaunchConfig lc;
  lc.grid[0] = (kN + 127) / 128;
  lc.block[0] = 128;
  kjit::launch(rt.load(spec).kernel(0), lc, params);
  kt::synchronize();
  const auto got_sorted = sorted.download<float>(kN * 8);
  const auto got_nth = nth.download<float>(kN);
  const auto got_misc = misc.download<int32_t>(kN * 3);
  int bad = 0;
  for (int i = 0; i < kN && bad < 5; ++i) {
    EXPECT_EQ(got_misc[i * 3 + 0], 30) << i;  // strlen("kjit compiles standard headers")
    EXPECT_EQ(got_misc[i * 3 + 1], 14) << i;  // where "standard" starts
    EXPECT_EQ(got_misc[i * 3 + 2], std::fpclassify(x[i]) * 10 + (std::isnormal(x[i]) ? 1 : 0)) << "x = " << x[i];
    std::vector<float> v(8);
    for (int k = 0; k < 8; ++k) v[k] = x[(i * 7 + k * 13) % kN];
    if (std::any_of(v.begin(), v.end(), [](float f) { return std::isnan(f); })) continue;  // NaN has no order
    std::vector<float> w = v;
    std::sort(v.begin(), v.end());
    std::sort(w.begin(), w.end(), [](float a, float b) { return a > b; });
    for (int k = 0; k < 8; ++k) {
      if (got_sorted[i * 8 + k] != v[k]) {
        ADD_FAILURE() << "sorted[" << i << "][" << k << "] = " << got_sorted[i * 8 + k] << ", expected " << v[k];
        ++bad;
      }
    }
    EXPECT_EQ(got_nth[i], w[3]) << "element " << i;
  }
}

}  // namespace
