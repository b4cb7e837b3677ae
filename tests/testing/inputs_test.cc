// The random inputs tools/testing builds for every check (random.hpp, reference_attention.hpp):
// the tuner's problems and the GPU tests' come from here, so what they promise is pinned on the
// host: seeded and repeatable, bf16-exact, in range, and a paged pool that holds each token's row
// where its table says and NaN everywhere else.
#include "tools/testing/host_types.hpp"
#include "tools/testing/random.hpp"
#include "tools/testing/reference_attention.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace {

namespace kt = kjit::testing;

TEST(RandomInputs, Bf16ValuesAreSeededExactAndInRange) {
  const size_t n = (size_t{1} << 17) + 5;  // more than one parallel chunk
  const std::vector<float> a = kt::random_bf16_values(n, 2.f, 7);
  EXPECT_EQ(a, kt::random_bf16_values(n, 2.f, 7));
  EXPECT_NE(a, kt::random_bf16_values(n, 2.f, 8));
  float lo = 0, hi = 0;
  for (float x : a) {
    ASSERT_EQ(x, kt::round_bf16(x));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GE(lo, -2.f);
  EXPECT_LE(hi, 2.f);
  EXPECT_LT(lo, -1.9f);  // the whole range is drawn
  EXPECT_GT(hi, 1.9f);
  // A prefix does not depend on how many values are drawn (counter-based: value i is (seed, i)).
  const std::vector<float> head = kt::random_bf16_values(100, 2.f, 7);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), a.begin()));
  const std::vector<uint16_t> bits = kt::bf16_bits(a);
  for (size_t i = 0; i < n; i += 997) EXPECT_EQ(kt::bf16_to_float(bits[i]), a[i]);
}

TEST(RandomInputs, Fp8ValuesAreTheEncodingsOfTheSameStream) {
  const std::vector<uint8_t> v = kt::random_fp8_values(1000, 2.f, kt::Fp8Format::kE4M3, 3);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(v[i], kt::fp8_encode(2.f * (2 * kt::uniform01(3, i) - 1), kt::Fp8Format::kE4M3)) << i;
  }
}

TEST(RandomInputs, ProblemsHaveTheirSizesAndScale) {
  const kt::DecodeProblem d = kt::random_decode_problem(3, 17, 8, 2, 64, 11);
  EXPECT_EQ(d.q.size(), 3u * 8 * 64);
  EXPECT_EQ(d.k.size(), 3u * 17 * 2 * 64);
  EXPECT_EQ(d.v.size(), d.k.size());
  EXPECT_NE(d.k, d.v);
  EXPECT_TRUE(d.kv_lens.empty() && d.mask.empty());
  EXPECT_DOUBLE_EQ(d.scale, 1.0 / 8.0);
  const kt::PrefillProblem p = kt::random_prefill_problem({3, 5}, {4, 9}, 4, 2, 128, true, 11);
  EXPECT_EQ(p.q.size(), 8u * 4 * 128);
  EXPECT_EQ(p.k.size(), 13u * 2 * 128);
  EXPECT_TRUE(p.causal);
  EXPECT_DOUBLE_EQ(p.scale, 1.0 / std::sqrt(128.0));
}

void expect_pool_holds_the_tokens(const kt::PagedLayout& layout) {
  SCOPED_TRACE(::testing::Message() << "page " << layout.page_size << (layout.interleaved ? " interleaved" : "")
                                    << " spare " << layout.spare_pages);
  const std::vector<int> lens = {5, 0, 16, 33};
  const int64_t H = 2, D = 8, row = H * D;
  int64_t total = 0;
  for (int len : lens) total += len;
  const std::vector<float> k = kt::random_bf16_values(static_cast<size_t>(total * row), 1.f, 1);
  const std::vector<float> v = kt::random_bf16_values(k.size(), 1.f, 2);
  std::mt19937_64 rng(5);
  const kt::PagedKVImage img = kt::paged_kv_image(lens, H, D, layout, rng, &k, &v);
  int64_t pages = 0;
  for (int len : lens) pages += (len + layout.page_size - 1) / layout.page_size;
  ASSERT_EQ(img.num_pages, pages + layout.spare_pages);
  ASSERT_EQ(img.indptr.size(), lens.size() + 1);
  ASSERT_EQ(img.indices.size(), static_cast<size_t>(img.num_pages));
  EXPECT_EQ(std::set<int32_t>(img.indices.begin(), img.indices.end()).size(), img.indices.size());  // a permutation
  ASSERT_EQ(img.pool.size(), static_cast<size_t>(2 * img.num_pages * layout.page_size * row));
  std::vector<bool> owned(img.pool.size(), false);
  int64_t first = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    const int n = img.indptr[b + 1] - img.indptr[b];
    EXPECT_EQ(n, (lens[b] + layout.page_size - 1) / layout.page_size);
    if (n > 0) EXPECT_EQ(img.last[b], lens[b] - (n - 1) * layout.page_size);
    for (int j = 0; j < lens[b]; ++j) {
      const int64_t page = img.indices[static_cast<size_t>(img.indptr[b] + j / layout.page_size)];
      for (int64_t e = 0; e < row; ++e) {
        const size_t src = static_cast<size_t>((first + j) * row + e);
        const size_t at_k = img.offset(page, 0, j % layout.page_size, e / D, e % D);
        const size_t at_v = img.offset(page, 1, j % layout.page_size, e / D, e % D);
        ASSERT_EQ(kt::bf16_to_float(img.pool[at_k]), k[src]);
        ASSERT_EQ(kt::bf16_to_float(img.pool[at_v]), v[src]);
        owned[at_k] = owned[at_v] = true;
      }
    }
    first += lens[b];
  }
  for (size_t i = 0; i < img.pool.size(); ++i) {
    if (!owned[i]) ASSERT_TRUE(std::isnan(kt::bf16_to_float(img.pool[i]))) << "slot " << i << " owned by no token";
  }
  // Without rows the pool is all NaN (to be appended), with the same table for the same draws.
  std::mt19937_64 again(5);
  const kt::PagedKVImage empty = kt::paged_kv_image(lens, H, D, layout, again);
  EXPECT_EQ(empty.indices, img.indices);
  for (uint16_t x : empty.pool) ASSERT_TRUE(std::isnan(kt::bf16_to_float(x)));
}

TEST(RandomInputs, PagedPoolHoldsEachTokenWhereItsTableSays) {
  expect_pool_holds_the_tokens({16, false, 0, false});
  expect_pool_holds_the_tokens({16, true, 3, false});
  expect_pool_holds_the_tokens({1, false, 2, false});
  expect_pool_holds_the_tokens({7, true, 0, false});
}

}  // namespace
