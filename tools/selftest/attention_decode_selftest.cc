// `kjit selftest` checks of kjit::attention::decode on Llama-3-8B-like shapes (32 q heads, 8 kv
// heads, head_dim 128, batch 4) against the float64 reference, with the splits combined by the
// merge kernel and, on a device with thread-block clusters, in clusters.
#include "tools/selftest/selftest.hpp"

#include <kjit/device.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <exception>
#include <random>

namespace kjit::selftest {

std::vector<Result> attention_decode(Runtime& runtime) {
  // bf16 output rounding (2^-9 relative) plus P rounded to bf16 before P·V put the expected
  // relative L2 error near 3e-3; 1e-2 leaves margin while any indexing bug shows as O(1).
  constexpr double kOutTol = 1e-2;
  constexpr double kLseTol = 1e-4;  // f32 scores from exact bf16 inputs: ~1e-6 relative

  std::vector<testing::DecodeCase> cases;
  auto add = [&](int len, auto&& tweak) {
    testing::DecodeCase c;
    c.batch = 4;
    c.max_kv_len = len;
    c.q_heads = 32;
    c.kv_heads = 8;
    c.head_dim = 128;
    tweak(c);
    cases.push_back(c);
  };
  add(512, [](testing::DecodeCase&) {});
  add(4096, [](testing::DecodeCase&) {});
  add(4096, [](testing::DecodeCase& c) { c.num_splits = 1; });
  add(4096, [](testing::DecodeCase& c) {
    c.ragged = true;
    c.lse = true;
  });
  add(1000, [](testing::DecodeCase& c) {
    c.mask = true;
    c.lse = true;
  });
  add(8192, [](testing::DecodeCase& c) { c.ragged = true; });
  add(4096, [](testing::DecodeCase& c) {
    c.num_splits = 4;
    c.merge = attention::DecodeMerge::kKernel;
    c.ragged = true;
    c.lse = true;
  });
  if (device_info(testing::current_device()).target().has_clusters()) {
    add(4096, [](testing::DecodeCase& c) {
      c.num_splits = 4;
      c.merge = attention::DecodeMerge::kCluster;
      c.ragged = true;
      c.lse = true;
    });
  }

  std::vector<Result> results;
  std::random_device device;
  for (const auto& c : cases) {
    Result r;
    r.op = "attention.decode";
    r.shape = c.describe();
    r.tolerance = kOutTol;
    const uint64_t seed = (static_cast<uint64_t>(device()) << 32) | device();
    try {
      const testing::DecodeCaseResult got = testing::run_decode_case(c, seed, runtime);
      r.rel_l2 = got.out.rel_l2;
      r.passed = got.ok(kOutTol, kLseTol);
      r.detail = got.describe();
    } catch (const std::exception& e) {
      r.passed = false;
      r.detail = e.what();
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace kjit::selftest
