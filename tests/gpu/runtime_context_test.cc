// Runtime::load across CUDA context lifetimes, and cached binaries the driver refuses (issue 9):
// programs are context-independent libraries keyed by device, so a context destroyed and another
// created (possibly at the same address) never gets a dead module; a cached cubin that passes its
// checksum but does not load is rebuilt once, and a fresh one that does not load is an error.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/runtime.hpp>

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/store.hpp"
#include "runtime/driver.hpp"
#include "tools/testing/gpu.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace kt = kjit::testing;

// Creates a context on device 0 and makes it current.
CUcontext create_context() { return kt::create_context(0); }

void destroy_context(CUcontext ctx) { kt::destroy_context(ctx); }

struct FillParams {
  int* out;
  int n;
  int value;
};

kjit::ProgramSpec fill_spec() {
  kjit::ProgramSpec s;
  s.family = "test.fill";
  s.source_name = "fill.cu";
  s.source_text = R"(#include "kjit/config.cuh"
struct FillParams { int* out; int n; int value; };
__global__ void fill(KJIT_PARAMS FillParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out[i] = p.value + i;
}
)";
  s.name_expressions = {"fill"};
  return s;
}

// Loads fill_spec into the current context, launches it and checks the result.
const kjit::LoadedProgram& fill_and_check(kjit::Runtime& rt, int value) {
  CUcontext ctx = nullptr;
  KJIT_CU(cuCtxGetCurrent(&ctx));
  const kjit::LoadedProgram& program = rt.load(fill_spec(), ctx);
  constexpr int kN = 1000;
  kt::DeviceBuffer out(kN * sizeof(int));
  out.fill(0);
  kjit::LaunchConfig config;
  config.grid[0] = (kN + 255) / 256;
  config.block[0] = 256;
  kjit::launch(program.kernel(0), config, FillParams{static_cast<int*>(out.get()), kN, value});
  kt::synchronize();
  const auto host = out.download<int>(kN);
  for (int i = 0; i < kN; ++i) {
    if (host[i] != value + i) {
      ADD_FAILURE() << "element " << i << " is " << host[i] << ", expected " << value + i;
      break;
    }
  }
  return program;
}

class RuntimeContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
    std::string pattern = (fs::temp_directory_path() / "kjit-ctx-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    config_ = kjit::RuntimeConfig::from_env();
    config_.cache_dir = dir_.string();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
    if (kt::has_gpu()) KJIT_CU(cuCtxSetCurrent(kjit::detail::ensure_context(0)));
  }
  fs::path dir_;
  kjit::RuntimeConfig config_;
};

TEST_F(RuntimeContextTest, ProgramSurvivesContextDestroyedAndRecreated) {
  kjit::Runtime rt(config_);
  std::set<CUcontext> addresses;
  int reused = 0;
  const kjit::LoadedProgram* first = nullptr;
  for (int round = 0; round < 8; ++round) {
    CUcontext ctx = create_context();
    if (!addresses.insert(ctx).second) ++reused;
    const kjit::LoadedProgram& program = fill_and_check(rt, 100 * round);
    if (!first) first = &program;
    EXPECT_EQ(&program, first) << "one library per device serves every context";
    destroy_context(ctx);
  }
  EXPECT_EQ(rt.stats().loads, 1u);
  // Which addresses the driver hands out is its business; the test holds either way.
  std::printf("contexts created at a destroyed context's address: %d of 7\n", reused);
}

TEST_F(RuntimeContextTest, OpsSurviveContextDestroyedAndRecreated) {
  // The op tables key on the device, not the context: a new context gets a working kernel.
  for (int round = 0; round < 4; ++round) {
    CUcontext ctx = create_context();
    constexpr int64_t kTokens = 4, kHeads = 2, kDim = 64, kMaxPos = 16;
    kt::DeviceBuffer q(kTokens * kHeads * kDim * 2), cos(kMaxPos * kDim / 2 * 4), sin(kMaxPos * kDim / 2 * 4);
    std::vector<int64_t> pos_host = {0, 1, 2, 3};
    kt::DeviceBuffer pos = kt::to_device(pos_host);
    q.fill(0);
    cos.fill(0);
    sin.fill(0);
    kjit::RotaryArgs args;
    args.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {kTokens, kHeads, kDim});
    args.cos = kjit::TensorRef(cos.get(), kjit::DType::kF32, {kMaxPos, kDim / 2});
    args.sin = kjit::TensorRef(sin.get(), kjit::DType::kF32, {kMaxPos, kDim / 2});
    args.positions = kjit::TensorRef(pos.get(), kjit::DType::kI64, {kTokens});
    EXPECT_NO_THROW(kjit::rotary(args, nullptr)) << "round " << round;
    EXPECT_NO_THROW(kt::synchronize()) << "round " << round;
    q = kt::DeviceBuffer();
    cos = kt::DeviceBuffer();
    sin = kt::DeviceBuffer();
    pos = kt::DeviceBuffer();
    destroy_context(ctx);
  }
}

TEST_F(RuntimeContextTest, ContextDestroyedWhileAnotherThreadLaunches) {
  kjit::Runtime rt(config_);
  std::atomic<bool> stop{false};
  std::atomic<int> launches{0};
  std::thread steady([&] {
    CUcontext own = create_context();
    int value = 0;
    while (!stop.load()) {
      fill_and_check(rt, value++);
      launches.fetch_add(1);
    }
    destroy_context(own);
  });
  for (int round = 0; round < 16; ++round) {
    CUcontext ctx = create_context();
    fill_and_check(rt, 7 * round);
    destroy_context(ctx);
  }
  stop = true;
  steady.join();
  EXPECT_GT(launches.load(), 0);
  EXPECT_EQ(rt.stats().loads, 1u);
}

// Publishes, under the key `spec` has for `target`, an entry whose payload is a valid cubin for
// `other` with a correct checksum: what a cache copied from another machine could hold.
void plant_foreign_cubin(const kjit::RuntimeConfig& config, const kjit::ProgramSpec& spec,
                         const kjit::Target& target, const kjit::Target& other) {
  kjit::Runtime rt(config);
  const auto foreign = rt.compile(spec, other);
  kjit::cache::Entry e;
  ASSERT_TRUE(kjit::cache::Key::from_hex(rt.key(spec, target), &e.key));
  e.meta.family = spec.family;
  e.meta.target = target.str();
  e.meta.ptx = false;
  for (const auto& k : foreign->kernels) {
    e.meta.kernels.push_back({k.name_expression, k.lowered_name, k.registers, k.spill_bytes, k.static_smem});
  }
  e.meta.options = foreign->options;
  e.meta.nvrtc_version = rt.nvrtc_version();
  e.meta.cuda_headers_version = rt.cuda_headers_version();
  e.meta.source_name = spec.source_name;
  e.payload = foreign->binary;
  kjit::cache::DiskCache disk(config.cache_dir, 0);
  disk.publish(e);
}

TEST_F(RuntimeContextTest, RefusedCachedCubinIsRebuiltOnceWithOneWarning) {
  const kjit::DeviceInfo& info = kjit::device_info(0);
  const kjit::Target target = info.target();
  // SASS runs only on its own major version: another major's cubin is refused.
  const kjit::Target other = kjit::Target::parse(info.cc_major == 8 ? "sm_90" : "sm_80");
  plant_foreign_cubin(config_, fill_spec(), target, other);
  {
    kjit::Runtime rt(config_);
    testing::internal::CaptureStderr();
    const kjit::LoadedProgram* program = nullptr;
    EXPECT_NO_THROW(program = &fill_and_check(rt, 5));
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_NE(program, nullptr) << err;
    EXPECT_EQ(program->compiled().origin, kjit::CompiledProgram::Origin::kCompiled);
    EXPECT_EQ(rt.stats().load_rebuilds, 1u);
    EXPECT_EQ(rt.stats().compiles, 1u);
    EXPECT_EQ(rt.stats().loads, 1u);
    EXPECT_NE(err.find("refused"), std::string::npos) << err;
    EXPECT_NE(err.find(program->compiled().key), std::string::npos) << err;
    EXPECT_EQ(err.find("refused"), err.rfind("refused")) << "one warning: " << err;
    EXPECT_EQ(&fill_and_check(rt, 6), program);
  }
  // The entry was replaced: the next process loads it from disk without compiling.
  kjit::Runtime rt(config_);
  testing::internal::CaptureStderr();
  const kjit::LoadedProgram& program = fill_and_check(rt, 9);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(program.compiled().origin, kjit::CompiledProgram::Origin::kDisk) << err;
  EXPECT_EQ(rt.stats().compiles, 0u);
  EXPECT_EQ(rt.stats().load_rebuilds, 0u);
}

TEST_F(RuntimeContextTest, FreshCubinTheDriverRefusesIsAnErrorNamingTheReason) {
  // A relocatable cubin with an unresolved device function: NVRTC accepts it, the driver
  // cannot load it without a link step.
  kjit::ProgramSpec spec;
  spec.family = "test.unlinked";
  spec.source_name = "unlinked.cu";
  spec.source_text = "extern __device__ int kjit_test_missing(int);\n"
                     "__global__ void k(int* p) { *p = kjit_test_missing(*p); }\n";
  spec.name_expressions = {"k"};
  spec.options = {"-rdc=true"};
  std::string first_error;
  {
    kjit::Runtime rt(config_);
    try {
      rt.load(spec);
      GTEST_SKIP() << "this driver loads an unlinked relocatable cubin; nothing to refuse";
    } catch (const kjit::DriverError& e) {
      first_error = e.what();
    }
    EXPECT_EQ(rt.stats().load_rebuilds, 0u) << "a fresh compile is not rebuilt";
    EXPECT_NE(first_error.find("CUDA_ERROR_"), std::string::npos) << first_error;
  }
  // From disk: one rebuild (warned), then the same refusal is an error naming the reason.
  kjit::Runtime rt(config_);
  testing::internal::CaptureStderr();
  try {
    rt.load(spec);
    ADD_FAILURE() << "expected DriverError";
  } catch (const kjit::DriverError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDA_ERROR_"), std::string::npos) << what;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt.stats().load_rebuilds, 1u);
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_EQ(err.find("refused"), err.rfind("refused")) << "one warning: " << err;
}

}  // namespace
