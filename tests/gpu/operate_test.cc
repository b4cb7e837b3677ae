// Freeze after warm-up on a GPU: an op's warm specialization keeps running (same bits), a new
// specialization of the same op is refused with JitDisabled naming it, and the listeners see the
// warm-up's compile and load and the refusal. NVTX ranges are on (KJIT_NVTX) to run that path.
#include <kjit/error.hpp>
#include <kjit/events.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/runtime.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_rotary.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace kt = kjit::testing;
using kjit::TensorRef;

/// q [T, H, D] bf16 with its tables and positions on the device; rotates into `out`.
struct RotaryProblem {
  static constexpr int64_t kTokens = 33, kHeads = 4, kMaxPosition = 64;
  explicit RotaryProblem(int64_t head_dim) : D(head_dim) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<uint16_t> host(kTokens * kHeads * D);
    for (auto& x : host) x = kt::float_to_bf16(normal(rng));
    const kt::RopeTables tables = kt::rope_tables(kMaxPosition, static_cast<int>(D));
    std::vector<int32_t> pos(kTokens);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % kMaxPosition);
    q = kt::to_device(host);
    cos = kt::to_device(tables.cos);
    sin = kt::to_device(tables.sin);
    positions = kt::to_device(pos);
    out = kt::DeviceBuffer(host.size() * 2);
  }
  std::vector<uint16_t> run(kjit::Runtime& rt) {
    out.fill(0xFF);
    kjit::RotaryArgs a;
    a.q = TensorRef(q.get(), kjit::DType::kBF16, {kTokens, kHeads, D});
    a.cos = TensorRef(cos.get(), kjit::DType::kF32, {kMaxPosition, D / 2});
    a.sin = TensorRef(sin.get(), kjit::DType::kF32, {kMaxPosition, D / 2});
    a.positions = TensorRef(positions.get(), kjit::DType::kI32, {kTokens});
    a.q_out = TensorRef(out.get(), kjit::DType::kBF16, {kTokens, kHeads, D});
    kjit::rotary(a, nullptr, rt);
    kt::synchronize();
    return out.download<uint16_t>(static_cast<size_t>(kTokens * kHeads * D));
  }
  int64_t D;
  kt::DeviceBuffer q, cos, sin, positions, out;
};

TEST(OperateGpu, FreezeAfterWarmUpRefusesANewSpecializationAndKeepsTheWarmOne) {
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fs::temp_directory_path() / ("kjit-operate-gpu-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.cache_dir = dir.string();  // empty: every specialization is a miss
  c.kernel_dir.clear();
  c.jit = kjit::JitMode::kOn;
  c.nvtx = true;
  kjit::Runtime rt(c);
  std::mutex mutex;
  std::vector<std::pair<kjit::EventKind, std::string>> seen;
  int load_device = -2;
  rt.add_listener([&](const kjit::Event& e) {
    std::lock_guard lock(mutex);
    seen.emplace_back(e.kind, std::string(e.params));
    if (e.kind == kjit::EventKind::kLoad) load_device = e.device;
  });

  RotaryProblem warm(128), cold(64);
  const std::vector<uint16_t> first = warm.run(rt);  // warm-up: compile + load
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_EQ(load_device, 0);
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0].first, kjit::EventKind::kCompile);
    EXPECT_EQ(seen[1].first, kjit::EventKind::kLoad);
    EXPECT_NE(seen[0].second.find("head_dim=128"), std::string::npos) << seen[0].second;
    seen.clear();
  }

  rt.freeze(kjit::JitMode::kOff);
  EXPECT_EQ(warm.run(rt), first);  // the warm specialization still runs, bit for bit
  try {
    cold.run(rt);
    FAIL() << "a new specialization compiled after freeze(off)";
  } catch (const kjit::JitDisabled& e) {
    EXPECT_EQ(e.family(), "rotary");
    EXPECT_NE(e.params().find("head_dim=64"), std::string::npos) << e.params();
    EXPECT_NE(std::string(e.what()).find("kjit compile rotary"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Runtime::freeze(off)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_EQ(warm.run(rt), first);  // and after the refusal too
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].first, kjit::EventKind::kRefused);
  }
  // Unfrozen, the new specialization compiles and writes every output (none left poisoned).
  rt.unfreeze();
  const std::vector<uint16_t> rotated = cold.run(rt);
  EXPECT_EQ(rt.stats().compiles, 2u);
  EXPECT_EQ(std::count(rotated.begin(), rotated.end(), uint16_t{0xFFFF}), 0);
  fs::remove_all(dir);
}

}  // namespace
