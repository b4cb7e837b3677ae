// `kjit selftest` checks of kjit::mla::swa_decode on DeepSeek-V4-like decode shapes (T = 8
// tokens, 128 query heads, latent 512, window 128, paged E4M3 cache of 256-row blocks) against
// the float64 reference (tools/testing/reference_swa.hpp: gather, dequantize to bf16, SDPA).
#include "tools/selftest/selftest.hpp"

#include "tools/testing/reference_swa.hpp"

#include <exception>
#include <random>

namespace kjit::selftest {

std::vector<Result> swa_decode(Runtime& runtime) {
  // Tolerances: see kSwaOutTol / kSwaLseTol in tools/testing/reference_swa.hpp (bf16 output
  // rounding plus the reference's bf16 rounding of dequantized values, which the kernel skips).
  std::vector<testing::SwaCase> cases;
  auto add = [&](auto&& tweak) {
    testing::SwaCase c;
    c.tokens = 8;
    c.heads = 128;
    c.window = 128;
    c.block_size = 256;
    tweak(c);
    cases.push_back(c);
  };
  add([](testing::SwaCase&) {});  // full windows, the planner's splits
  add([](testing::SwaCase& c) {    // lens 0, 1, W−1, W, …; 10% invalid indices; LSE
    c.lens = testing::SwaCase::Lens::kEdges;
    c.invalid_fraction = 0.1;
    c.lse = true;
  });
  add([](testing::SwaCase& c) {    // an empty row, one split, the default softmax scale
    c.all_invalid_row = true;
    c.num_splits = 1;
    c.softmax_scale = 0.f;
    c.lse = true;
  });
  add([](testing::SwaCase& c) {    // E4M3 over its whole range, inv_scale 1e-3 and 300
    c.full_range = true;
    c.mixed_scales = true;
    c.lens = testing::SwaCase::Lens::kRandom;
    c.lse = true;
  });
  add([](testing::SwaCase& c) {    // 32 heads per CTA (what large batches use)
    c.head_group = 32;
    c.lens = testing::SwaCase::Lens::kRandom;
    c.invalid_fraction = 0.1;
  });

  std::vector<Result> results;
  std::random_device device;
  for (const auto& c : cases) {
    Result r;
    r.op = "mla.swa_decode";
    r.shape = c.describe();
    r.tolerance = testing::kSwaOutTol;
    const uint64_t seed = (static_cast<uint64_t>(device()) << 32) | device();
    try {
      const testing::SwaCaseResult got = testing::run_swa_case(c, seed, runtime);
      r.rel_l2 = got.out.rel_l2;
      r.passed = got.ok(testing::kSwaOutTol, testing::kSwaLseTol);
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
