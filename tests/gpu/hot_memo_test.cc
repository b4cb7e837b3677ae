// The per-thread TMA map memos on the GPU (sm_90a): a memoized map is byte for byte the fresh
// encode, the wgmma prefill called on two buffers of one geometry in turn computes each one's
// answer (a map is never served for another address), the same tensor address with another
// stride gets its own maps from the call memo, and a CUDA graph captured from a call keeps its
// own maps after the memos have moved on. Outputs are poisoned (0xFF: NaN) before each
// run and compared with the float64 reference on fresh random data. Skips without an sm_90 GPU.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include "runtime/driver.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/tma_map.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace kd = kjit::detail;
using kjit::DType;
using kjit::TensorRef;
using kjit::testing::DeviceBuffer;

constexpr double kOutTol = 1e-2;  // bf16 output and P (see attention_prefill_test.cc)

class HotMemoGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kjit::testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
    if (!kjit::device_info(0).target().has_wgmma()) GTEST_SKIP() << "the TMA kernels need sm_90a";
  }
};

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

/// One causal prefill B1 L200 Hq8 Hkv2 D128 on its own buffers, with its float64 reference.
struct PrefillSetup {
  static constexpr int64_t kL = 200, kHq = 8, kHkv = 2, kD = 128;
  DeviceBuffer q{kL * kHq * kD * 2}, k{kL * kHkv * kD * 2}, v{kL * kHkv * kD * 2}, out{kL * kHq * kD * 2};
  kjit::attention::PrefillArgs args;
  std::vector<double> ref;
  std::vector<uint16_t> k_bits;  // k as uploaded, [L, Hkv, D]
  uint64_t seed;

  explicit PrefillSetup(uint64_t s) : seed(s) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    kjit::testing::PrefillProblem p;
    p.q_heads = kHq;
    p.kv_heads = kHkv;
    p.head_dim = kD;
    p.q_lens = {static_cast<int32_t>(kL)};
    p.kv_lens = {static_cast<int32_t>(kL)};
    p.causal = true;
    p.scale = 1.0 / std::sqrt(static_cast<double>(kD));
    auto fill = [&](std::vector<float>& host, DeviceBuffer& dev, int64_t n) {
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      host.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        bits[i] = kjit::testing::float_to_bf16(2.f * dist(rng));
        host[i] = kjit::testing::bf16_to_float(bits[i]);
      }
      dev.upload(bits);
    };
    fill(p.q, q, kL * kHq * kD);
    fill(p.k, k, kL * kHkv * kD);
    k_bits = k.download<uint16_t>(static_cast<size_t>(kL * kHkv * kD));
    fill(p.v, v, kL * kHkv * kD);
    ref = kjit::testing::prefill_reference(p).out;
    args.q = TensorRef(q.get(), DType::kBF16, {1, kL, kHq, kD});
    args.k = TensorRef(k.get(), DType::kBF16, {1, kL, kHkv, kD});
    args.v = TensorRef(v.get(), DType::kBF16, {1, kL, kHkv, kD});
    args.out = TensorRef(out.get(), DType::kBF16, {1, kL, kHq, kD});
    args.causal = true;
    args.variant = kjit::attention::AttentionVariant::kWgmma;
  }

  /// Reads out back (after a synchronize) and compares it with the reference.
  void check(const std::string& what) const {
    kjit::testing::synchronize();
    const std::vector<uint16_t> bits = out.download<uint16_t>(static_cast<size_t>(kL * kHq * kD));
    std::vector<float> got(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) got[i] = kjit::testing::bf16_to_float(bits[i]);
    const kjit::testing::Comparison c = kjit::testing::compare(got, ref);
    EXPECT_TRUE(c.ok(kOutTol)) << what << " (seed " << seed << "): " << c.describe();
  }
};

TEST_F(HotMemoGpu, AMemoizedMapIsTheFreshEncode) {
  DeviceBuffer buf(64 << 20);
  const TensorRef q(buf.get(), DType::kBF16, {2, 300, 8, 128});
  const TensorRef one_token(buf.get(), DType::kBF16, {1, 1, 2, 64});
  const std::vector<kd::TmaMapKey> keys = {
      ad::blhd_tma_map_key(q, 128), ad::blhd_tma_map_key(q, 64), ad::blhd_tma_map_key(one_token, 128),
      kjit::fp8::detail::operand_tma_map_key(buf.get(), 2048, 64, 2048, 128),
      kjit::fp8::detail::output_tma_map_key(buf.get(), true, 7168, 64, 7168)};
  kd::tma_map_memo().clear();
  for (int round = 0; round < 2; ++round) {  // a miss, then a hit
    for (size_t i = 0; i < keys.size(); ++i) {
      kd::TmaDescriptor fresh{};
      kd::encode_tma_map(keys[i], &fresh);
      const kd::TmaDescriptor memo = kd::tma_map(keys[i]);
      EXPECT_EQ(std::memcmp(&memo, &fresh, sizeof(fresh)), 0) << "key " << i << " round " << round;
    }
  }
  EXPECT_GE(kd::tma_map_memo().hits(), keys.size());
}

TEST_F(HotMemoGpu, PrefillOnTwoBuffersOfOneGeometryInTurn) {
  PrefillSetup a(fresh_seed()), b(fresh_seed());
  kd::tma_call_memo().clear();
  kd::tma_map_memo().clear();
  const uint64_t misses = kd::tma_map_memo().misses();
  for (int round = 0; round < 3; ++round) {
    for (PrefillSetup* s : {&a, &b}) {
      s->out.fill(0xFF);
      kjit::attention::prefill(s->args, nullptr);
      s->check(std::string(s == &a ? "a" : "b") + " round " + std::to_string(round));
    }
    // The first round encodes eight maps (q, k, v, out of each: eight addresses); the next ones
    // find them (unless five of them share a set of the memo, which only costs encodes).
    if (round == 0) EXPECT_EQ(kd::tma_map_memo().misses(), misses + 8);
  }
}

TEST_F(HotMemoGpu, AGraphKeepsTheMapsOfTheCallItCaptured) {
  const kd::Driver& d = kd::driver();
  PrefillSetup a(fresh_seed()), b(fresh_seed());
  CUstream stream = nullptr;
  KJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  kjit::attention::prefill(a.args, stream);  // loaded outside the capture
  KJIT_CU(cuStreamSynchronize(stream));
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  kjit::attention::prefill(a.args, stream);
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  // The memos move on: emptied, then filled with b's maps (and overwritten host memory).
  kd::tma_call_memo().clear();
  kd::tma_map_memo().clear();
  b.out.fill(0xFF);
  kjit::attention::prefill(b.args, stream);
  KJIT_CU(cuStreamSynchronize(stream));
  b.check("b, outside the graph");
  a.out.fill(0xFF);
  ASSERT_EQ(d.cuGraphLaunch(exec, stream), CUDA_SUCCESS);
  KJIT_CU(cuStreamSynchronize(stream));
  a.check("a, graph replay");
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
  d.cuStreamDestroy(stream);
}

// The same K at the same address, packed and then with rows twice as far apart: the call memo
// must tell the two calls apart by the stride alone (a stale map would read the wrong rows).
TEST_F(HotMemoGpu, PrefillWithAnotherStrideAtTheSameAddress) {
  PrefillSetup a(fresh_seed());
  constexpr int64_t kL = PrefillSetup::kL, kHkv = PrefillSetup::kHkv, kD = PrefillSetup::kD;
  DeviceBuffer room{kL * 2 * kHkv * kD * 2};
  room.upload(a.k_bits);  // packed at the start of the buffer
  a.args.k = TensorRef(room.get(), DType::kBF16, {1, kL, kHkv, kD});
  kd::tma_call_memo().clear();
  a.out.fill(0xFF);
  kjit::attention::prefill(a.args, nullptr);
  a.check("packed k");
  std::vector<uint16_t> strided(static_cast<size_t>(kL * 2 * kHkv * kD), 0x7FC0);  // NaN between the rows
  for (int64_t l = 0; l < kL; ++l) {
    std::memcpy(&strided[static_cast<size_t>(l * 2 * kHkv * kD)], &a.k_bits[static_cast<size_t>(l * kHkv * kD)],
                static_cast<size_t>(kHkv * kD) * 2);
  }
  kjit::testing::synchronize();
  room.upload(strided);
  a.args.k = TensorRef(room.get(), DType::kBF16, {1, kL, kHkv, kD}, {kL * 2 * kHkv * kD, 2 * kHkv * kD, kD, 1});
  const uint64_t misses = kd::tma_call_memo().misses();
  a.out.fill(0xFF);
  kjit::attention::prefill(a.args, nullptr);
  EXPECT_EQ(kd::tma_call_memo().misses(), misses + 1);
  a.check("k rows twice as far apart, same address");
}

}  // namespace
