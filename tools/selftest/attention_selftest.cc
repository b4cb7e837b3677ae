// `kjit selftest` checks of the rest of the attention family on Llama-3-8B-like shapes (32 q
// heads, 8 kv heads, head_dim 128): dense prefill (causal and masked), paged decode (page sizes
// 1 and 16, filled through append_paged_kv), ragged paged prefill and the append itself, each
// against the float64 reference.
#include "tools/selftest/selftest.hpp"

#include "tools/testing/reference_attention.hpp"

#include <exception>
#include <functional>
#include <random>
#include <string>

namespace kjit::selftest {
namespace {

// Same budget as the decode checks: bf16 output rounding and P rounded to bf16 before P·V give
// ~3e-3; indexing bugs show as O(1).
constexpr double kOutTol = 1e-2;
constexpr double kLseTol = 1e-4;

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

Result check(const char* op, const std::string& shape,
             const std::function<testing::AttentionCaseResult(uint64_t)>& run) {
  Result r;
  r.op = op;
  r.shape = shape;
  r.tolerance = kOutTol;
  try {
    const testing::AttentionCaseResult got = run(fresh_seed());
    r.rel_l2 = got.out.rel_l2;
    r.passed = got.ok(kOutTol, kLseTol);
    r.detail = got.describe();
  } catch (const std::exception& e) {
    r.detail = e.what();
  }
  return r;
}

}  // namespace

std::vector<Result> attention(Runtime& runtime) {
  std::vector<Result> results;

  for (int mask : {0, 3}) {
    testing::PrefillCase c;
    c.batch = 2;
    c.q_len = 1000;
    c.kv_len = 1500;  // chunked prefill: queries aligned to the end of the KV
    c.q_heads = 32;
    c.kv_heads = 8;
    c.head_dim = 128;
    c.causal = mask == 0;
    c.mask = mask;
    c.lse = true;
    results.push_back(check("attention.prefill", c.describe(),
                            [&](uint64_t seed) { return testing::run_prefill_case(c, seed, runtime); }));
  }

  for (int page : {1, 16}) {
    testing::PagedDecodeCase c;
    c.kv_lens = {4096, 17, 1, 2049};
    c.q_heads = 32;
    c.kv_heads = 8;
    c.head_dim = 128;
    c.layout.page_size = page;
    c.layout.via_append = true;
    c.lse = true;
    results.push_back(check("attention.paged_decode", c.describe(),
                            [&](uint64_t seed) { return testing::run_paged_decode_case(c, seed, runtime); }));
  }

  {
    testing::PagedPrefillCase c;
    c.q_lens = {70, 10, 130, 0};  // a ragged batch (one request spans two q tiles) plus an empty request
    c.kv_lens = {70, 500, 130, 33};
    c.q_heads = 32;
    c.kv_heads = 8;
    c.head_dim = 128;
    c.layout.page_size = 16;
    c.causal = true;
    c.lse = true;
    results.push_back(check("attention.paged_prefill", c.describe(),
                            [&](uint64_t seed) { return testing::run_paged_prefill_case(c, seed, runtime); }));
  }

  {
    testing::AppendCase c;
    c.kv_lens = {300, 1, 64};
    c.new_counts = {7, 1, 64};
    c.kv_heads = 8;
    c.head_dim = 128;
    c.layout.page_size = 16;
    Result r;
    r.op = "attention.paged_append";
    r.shape = c.describe();
    r.tolerance = 0;  // a copy: every appended slot bit for bit, nothing else touched
    try {
      const testing::AppendCaseResult got = testing::run_append_case(c, fresh_seed(), runtime);
      r.passed = got.ok();
      r.rel_l2 = static_cast<double>(got.wrong + got.clobbered);
      r.detail = got.describe();
    } catch (const std::exception& e) {
      r.detail = e.what();
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace kjit::selftest
