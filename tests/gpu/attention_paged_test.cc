// The paged KV cache on the GPU: kjit::attention::append_paged_kv (bit-exact placement, nothing
// else touched) and kjit::attention::paged_decode against the float64 reference, page sizes 1
// through 64 (and 7), lengths 1, page − 1, page, page + 1 and 0, pool slots past each request
// and spare pages (also reachable through the page table's spare capacity) filled with NaN, and
// a decode loop driven only through kjit's API (append one token per request, decode, repeat)
// checked step by step against both the reference and kjit's contiguous decode. On sm_90+ the
// cluster merge runs every split count 2..8 and must match the merge kernel's output. Skips
// without a GPU. Tolerances as in attention_decode_test.cc (bf16 output: 1e-2 relative L2; LSE 1e-4).
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "tests/gpu/cluster_merge_check.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::testing::AppendCase;
using kjit::testing::DeviceBuffer;
using kjit::testing::PagedDecodeCase;

constexpr double kOutTol = 1e-2;
constexpr double kLseTol = 1e-4;
const int kHeadDims[] = {64, 128, 256};

class AttentionPagedGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kjit::testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

void check(const AppendCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  try {
    const kjit::testing::AppendCaseResult r = kjit::testing::run_append_case(c, seed);
    EXPECT_TRUE(r.ok()) << r.describe();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
}

void check(const PagedDecodeCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  try {
    const kjit::testing::AttentionCaseResult r = kjit::testing::run_paged_decode_case(c, seed);
    EXPECT_TRUE(r.ok(kOutTol, kLseTol)) << r.describe();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
}

/// Lengths 1, page − 1, page, page + 1, a long one and 0.
std::vector<int> edge_lengths(int page_size) {
  return {1, std::max(page_size - 1, 1), page_size, page_size + 1, 5 * page_size + 3, 0};
}

/// Requests of edge_lengths(page_size), Hq8 / Hkv2 at `head_dim`, with lse, `splits` splits.
PagedDecodeCase edge_case(int page_size, int head_dim, int splits) {
  PagedDecodeCase c;
  c.kv_lens = edge_lengths(page_size);
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = head_dim;
  c.layout.page_size = page_size;
  c.lse = true;
  c.num_splits = splits;
  return c;
}

// ---- append_paged_kv ------------------------------------------------------------------------

TEST_F(AttentionPagedGpu, AppendPlacesEveryTokenAndTouchesNothingElse) {
  for (int ps : {1, 16, 64, 7}) {
    for (bool indptr_mode : {true, false}) {
      AppendCase c;
      c.kv_lens = {1, std::max(ps - 1, 1), ps, ps + 1, 3 * ps + 2, 0};
      // New tokens cross page boundaries (ps + 1 from ps − 1 ...), include a whole request and none.
      c.new_counts = {1, std::max(ps - 1, 1) / 2 + 1, 1, 2, ps + 1, 0};
      c.kv_heads = 2;
      c.head_dim = 128;
      c.layout.page_size = ps;
      c.indptr_mode = indptr_mode;
      c.stray_tokens = !indptr_mode;
      check(c);
    }
  }
  for (int hd : kHeadDims) {
    AppendCase c;
    c.kv_lens = {40, 17};
    c.new_counts = {40, 9};
    c.kv_heads = 3;
    c.head_dim = hd;
    c.layout.page_size = 16;
    c.layout.interleaved = true;
    check(c);
    c.indptr_mode = false;
    check(c);
  }
}

// ---- paged decode ---------------------------------------------------------------------------

TEST_F(AttentionPagedGpu, DecodePageSizesAndLengthsAroundPages) {
  for (int ps : {1, 16, 64}) {
    for (int hd : kHeadDims) {
      for (int splits : {1, 3, 0}) check(edge_case(ps, hd, splits));
    }
  }
  PagedDecodeCase c;  // a page size that is not a power of two
  c.kv_lens = edge_lengths(7);
  c.layout.page_size = 7;
  c.lse = true;
  check(c);
}

TEST_F(AttentionPagedGpu, DecodeGqaRatios) {
  for (int group : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32}) {
    PagedDecodeCase c;
    c.kv_lens = {300, 17, 64, 1};
    c.q_heads = 2 * group;
    c.kv_heads = 2;
    c.head_dim = group % 2 ? 64 : 128;
    c.layout.page_size = 16;
    c.lse = true;
    check(c);
  }
}

TEST_F(AttentionPagedGpu, DecodeLayoutsHintsAndTheEntry) {
  for (int hd : kHeadDims) {
    PagedDecodeCase c;
    c.kv_lens = {1000, 33, 0, 517};
    c.head_dim = hd;
    c.layout.page_size = 16;
    c.layout.interleaved = true;
    c.lse = true;
    check(c);
    c.layout.via_append = true;  // the pools written only by append_paged_kv
    check(c);
    c.layout.interleaved = false;
    c.use_entry = true;
    check(c);
  }
  // The planner's length hint changes the split count, never the result.
  for (int64_t hint : {1, 64, 100000}) {
    PagedDecodeCase c;
    c.kv_lens = {2000, 5, 700};
    c.layout.page_size = 16;
    c.kv_len_hint = hint;
    c.lse = true;
    check(c);
  }
  // One request far longer than the rest; and a Llama-like batch.
  PagedDecodeCase c;
  c.kv_lens = {8000, 3, 1, 40, 2, 9};
  c.q_heads = 32;
  c.kv_heads = 8;
  c.layout.page_size = 16;
  c.lse = true;
  check(c);
  c.kv_lens.assign(16, 4096);
  c.layout.page_size = 1;
  check(c);
}

// ---- The cluster merge (merge=cluster: sm_90+, 2..8 splits) ----------------------------------

using kjit::attention::DecodeMerge;
using kjit::testing::device_has_clusters;

/// The cluster merge against the reference and the merge kernel (cluster_merge_check.hpp).
void check_cluster_against_kernel(const PagedDecodeCase& c, DecodeMerge merge) {
  kjit::testing::check_cluster_against_kernel(c, merge, fresh_seed(), kOutTol, kLseTol,
                                              [](const PagedDecodeCase& x, uint64_t seed) {
                                                return kjit::testing::run_paged_decode_case(x, seed);
                                              });
}

TEST_F(AttentionPagedGpu, ClusterMergeEverySplitCountPageSizeGqaAndHeadDim) {
  if (!device_has_clusters()) GTEST_SKIP() << "the cluster merge needs sm_90+";
  for (int ps : {1, 16, 64}) {
    for (int hd : kHeadDims) {
      for (int splits = 2; splits <= 8; ++splits) {
        PagedDecodeCase c = edge_case(ps, hd, splits);  // 1, page − 1, page, page + 1, a long one, 0
        c.kv_lens.push_back(300);
        check_cluster_against_kernel(c, splits % 2 ? DecodeMerge::kCluster : DecodeMerge::kAuto);
      }
    }
  }
  for (int group : {1, 4, 8, 32}) {  // 32: rows 16, two M tiles per KV head
    for (int hd : kHeadDims) {
      if (group == 32 && hd != 128) continue;
      for (int splits : {2, 3, 8}) {
        for (DecodeMerge merge : {DecodeMerge::kCluster, DecodeMerge::kAuto}) {
          PagedDecodeCase c;
          c.kv_lens = {300, 17, 64, 1, 0};
          c.q_heads = 2 * group;
          c.kv_heads = 2;
          c.head_dim = hd;
          c.layout.page_size = 16;
          c.lse = true;
          c.num_splits = splits;
          check_cluster_against_kernel(c, merge);
        }
      }
    }
  }
}

TEST_F(AttentionPagedGpu, ClusterMergeLayoutsTheEntryAndThePlannersSplits) {
  if (!device_has_clusters()) GTEST_SKIP() << "the cluster merge needs sm_90+";
  PagedDecodeCase c;
  c.kv_lens = {1000, 33, 0, 517};
  c.layout.page_size = 7;
  c.layout.interleaved = true;
  c.lse = true;
  c.num_splits = 4;
  check_cluster_against_kernel(c, DecodeMerge::kCluster);
  c.layout.interleaved = false;
  c.use_entry = true;
  check_cluster_against_kernel(c, DecodeMerge::kCluster);
  // The Llama-like batch at page 16 the cluster merge is for: the planner takes 2 splits.
  c = PagedDecodeCase();
  c.kv_lens.assign(16, 4096);
  c.q_heads = 32;
  c.kv_heads = 8;
  c.layout.page_size = 16;
  c.lse = true;
  check_cluster_against_kernel(c, DecodeMerge::kAuto);
  // A forced cluster merge with the planner's count, over a hint that would take more than 8.
  c.kv_lens = {8000, 3, 1, 40};
  c.kv_len_hint = 1 << 16;
  check_cluster_against_kernel(c, DecodeMerge::kCluster);
}

TEST_F(AttentionPagedGpu, ClusterMergeBelowSm90IsUnsupported) {
  if (device_has_clusters()) GTEST_SKIP() << "the device has clusters";
  PagedDecodeCase c;
  c.kv_lens = {300, 17};
  c.num_splits = 2;
  c.merge = DecodeMerge::kCluster;
  EXPECT_THROW(kjit::testing::run_paged_decode_case(c, fresh_seed()), kjit::Unsupported);
}

// ---- The merge program ------------------------------------------------------------------------

// The split merge is its own program (attention.decode_merge): a plan that does not split never
// compiles it, and the contiguous and the paged decode share it at one head_dim (merge=kernel:
// on sm_90+ a split plan would otherwise merge in a cluster, without it). Launch values only,
// over fake addresses: nothing is launched.
TEST_F(AttentionPagedGpu, MergeProgramOnlyWhenSplitSharedByBothOps) {
  namespace ad = kjit::attention::detail;
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  config.disk_cache = false;  // count compiles
  kjit::Runtime rt(config);
  auto fake = [](uintptr_t i) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + (i << 28)); };
  const kjit::detail::Workspace ws{fake(15), size_t{1} << 28};
  constexpr int64_t kB = 2, kL = 2048, kHq = 32, kHkv = 8, kD = 128, kPs = 16, kPages = kB * kL / kPs;
  kjit::attention::DecodeArgs a;
  a.q = TensorRef(fake(1), DType::kBF16, {kB, 1, kHq, kD});
  a.k = TensorRef(fake(2), DType::kBF16, {kB, kL, kHkv, kD});
  a.v = TensorRef(fake(3), DType::kBF16, {kB, kL, kHkv, kD});
  a.out = TensorRef(fake(4), DType::kBF16, {kB, 1, kHq, kD});
  a.merge = kjit::attention::DecodeMerge::kKernel;
  a.num_splits = 1;
  const auto one = kjit::detail::launch_value<ad::DecodeOp>(a, ws, rt);
  ASSERT_NE(one.step<0>().kernel, nullptr);
  EXPECT_EQ(one.step<1>().kernel, nullptr);
  EXPECT_EQ(rt.stats().compiles, 1u) << "an unsplit decode compiles the decode program alone";
  a.num_splits = 4;
  const auto split = kjit::detail::launch_value<ad::DecodeOp>(a, ws, rt);
  EXPECT_EQ(split.step<0>().kernel, one.step<0>().kernel);
  ASSERT_NE(split.step<1>().kernel, nullptr);
  EXPECT_EQ(split.step<1>().kernel->info().name_expression, "kjit::attention::decode_merge_kernel<128>");
  EXPECT_EQ(rt.stats().compiles, 2u) << "a split decode adds the merge program";

  kjit::attention::PagedDecodeArgs p;
  p.q = a.q;
  p.out = a.out;
  p.cache.k = TensorRef(fake(5), DType::kBF16, {kPages, kPs, kHkv, kD});
  p.cache.v = TensorRef(fake(6), DType::kBF16, {kPages, kPs, kHkv, kD});
  p.cache.indptr = TensorRef(fake(7), DType::kI32, {kB + 1});
  p.cache.page_indices = TensorRef(fake(8), DType::kI32, {kPages});
  p.cache.last_page_len = TensorRef(fake(9), DType::kI32, {kB});
  p.num_splits = 4;
  p.merge = kjit::attention::DecodeMerge::kKernel;
  const auto paged = kjit::detail::launch_value<ad::PagedDecodeOp>(p, ws, rt);
  ASSERT_NE(paged.step<0>().kernel, nullptr);
  EXPECT_EQ(paged.step<1>().kernel, split.step<1>().kernel) << "one merge program for both ops";
  EXPECT_EQ(rt.stats().compiles, 3u) << "the paged decode program only";
}

// ---- A decode loop through kjit's API only ----------------------------------------------------

TEST_F(AttentionPagedGpu, DecodeLoopAppendThenDecodeMatchesContiguousDecode) {
  // B requests with different prompt lengths; each step appends one token per request
  // (append_indptr mode, pages allocated by this "host app") and decodes; every step's output
  // must match the float64 reference and kjit's contiguous decode over the same tokens.
  std::mt19937_64 rng(fresh_seed());
  const int B = 3, Hq = 8, Hkv = 2, D = 128, ps = 16, steps = 20, cap = 200;
  std::vector<int> lens = {5, 16, 31};
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Contiguous mirror of the cache: [B][cap][Hkv][D] bf16 values (host floats).
  std::vector<float> kc(static_cast<size_t>(B * cap * Hkv * D)), vc(kc.size());
  for (auto& x : kc) x = kjit::testing::round_bf16(u(rng));
  for (auto& x : vc) x = kjit::testing::round_bf16(u(rng));
  // Pages: each request owns a private run of ceil(cap / ps) pages in a shuffled pool.
  const int pages_per = (cap + ps - 1) / ps;
  const int num_pages = B * pages_per + 1;
  std::vector<int32_t> order(num_pages);
  for (int i = 0; i < num_pages; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<uint16_t> pool(static_cast<size_t>(2) * num_pages * ps * Hkv * D, 0xFFFF);
  auto page_of = [&](int b, int j) { return order[b * pages_per + j / ps]; };
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < lens[b]; ++j)
      for (int e = 0; e < Hkv * D; ++e) {
        const size_t row = static_cast<size_t>((int64_t{page_of(b, j)} * ps + j % ps) * Hkv * D + e);
        pool[row] = kjit::testing::float_to_bf16(kc[static_cast<size_t>((b * cap + j) * Hkv * D + e)]);
        pool[static_cast<size_t>(num_pages) * ps * Hkv * D + row] =
            kjit::testing::float_to_bf16(vc[static_cast<size_t>((b * cap + j) * Hkv * D + e)]);
      }
  DeviceBuffer dpool = kjit::testing::to_device(pool);
  auto* base = static_cast<uint16_t*>(dpool.get());
  std::vector<int32_t> indices;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < pages_per; ++i) indices.push_back(order[b * pages_per + i]);
  DeviceBuffer dindices = kjit::testing::to_device(indices);
  // Contiguous copies for kjit::attention::decode.
  std::vector<uint16_t> kbits(kc.size()), vbits(vc.size());
  for (size_t i = 0; i < kc.size(); ++i) {
    kbits[i] = kjit::testing::float_to_bf16(kc[i]);
    vbits[i] = kjit::testing::float_to_bf16(vc[i]);
  }
  DeviceBuffer dk = kjit::testing::to_device(kbits), dv = kjit::testing::to_device(vbits);
  DeviceBuffer dout(B * Hq * D * 2), dout_contig(B * Hq * D * 2), dq(B * Hq * D * 2);
  DeviceBuffer dnew_k(B * Hkv * D * 2), dnew_v(B * Hkv * D * 2);
  DeviceBuffer dindptr(4 * (B + 1)), dlast(4 * B), dappend(4 * (B + 1)), dlens(4 * B);
  const std::vector<int32_t> append_indptr = {0, 1, 2, 3};
  dappend.upload(append_indptr);
  DeviceBuffer ws(1 << 20);

  for (int step = 0; step < steps; ++step) {
    // The host app grows each request by one token: table first, then append, then decode. Its
    // table is the CSR of the first ceil(len / ps) pages of each request's private run.
    std::vector<int32_t> compact{0}, compact_indices, last;
    for (int b = 0; b < B; ++b) {
      ++lens[b];
      const int pages = (lens[b] + ps - 1) / ps;
      for (int i = 0; i < pages; ++i) compact_indices.push_back(indices[b * pages_per + i]);
      compact.push_back(static_cast<int32_t>(compact_indices.size()));
      last.push_back(lens[b] - (pages - 1) * ps);
    }
    DeviceBuffer dcompact = kjit::testing::to_device(compact_indices);
    dindptr.upload(compact);
    dlast.upload(last);
    std::vector<uint16_t> nk(B * Hkv * D), nv(B * Hkv * D), qbits(B * Hq * D);
    std::vector<float> q(B * Hq * D);
    for (int b = 0; b < B; ++b)
      for (int e = 0; e < Hkv * D; ++e) {
        nk[b * Hkv * D + e] = kbits[static_cast<size_t>((b * cap + lens[b] - 1) * Hkv * D + e)];
        nv[b * Hkv * D + e] = vbits[static_cast<size_t>((b * cap + lens[b] - 1) * Hkv * D + e)];
      }
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = kjit::testing::round_bf16(2.f * u(rng));
      qbits[i] = kjit::testing::float_to_bf16(q[i]);
    }
    dnew_k.upload(nk);
    dnew_v.upload(nv);
    dq.upload(qbits);
    kjit::attention::PagedKVCache cache;
    cache.k = TensorRef(base, DType::kBF16, {num_pages, ps, Hkv, D}, {}, 0);
    cache.v = TensorRef(base + int64_t{num_pages} * ps * Hkv * D, DType::kBF16, {num_pages, ps, Hkv, D}, {}, 0);
    cache.indptr = TensorRef(dindptr.get(), DType::kI32, {B + 1}, {}, 0);
    cache.page_indices = TensorRef(dcompact.get(), DType::kI32, {static_cast<int64_t>(compact_indices.size())}, {}, 0);
    cache.last_page_len = TensorRef(dlast.get(), DType::kI32, {B}, {}, 0);
    kjit::attention::AppendPagedKVArgs a;
    a.k = TensorRef(dnew_k.get(), DType::kBF16, {B, Hkv, D}, {}, 0);
    a.v = TensorRef(dnew_v.get(), DType::kBF16, {B, Hkv, D}, {}, 0);
    a.cache = cache;
    a.append_indptr = TensorRef(dappend.get(), DType::kI32, {B + 1}, {}, 0);
    ASSERT_NO_THROW(kjit::attention::append_paged_kv(a, nullptr));

    kjit::attention::PagedDecodeArgs d;
    d.q = TensorRef(dq.get(), DType::kBF16, {B, 1, Hq, D}, {}, 0);
    d.cache = cache;
    d.out = TensorRef(dout.get(), DType::kBF16, {B, 1, Hq, D}, {}, 0);
    d.num_splits = step % 3;  // 0 (auto), 1, 2
    const size_t ws_bytes = kjit::attention::paged_decode_workspace_bytes(d);
    ASSERT_LE(ws_bytes, ws.bytes());
    dout.fill(0xFF);
    ASSERT_NO_THROW(kjit::attention::paged_decode(d, ws.get(), ws_bytes, nullptr));

    std::vector<int32_t> lens32(lens.begin(), lens.end());
    dlens.upload(lens32);
    kjit::attention::DecodeArgs dc;
    dc.q = d.q;
    dc.k = TensorRef(dk.get(), DType::kBF16, {B, cap, Hkv, D}, {}, 0);
    dc.v = TensorRef(dv.get(), DType::kBF16, {B, cap, Hkv, D}, {}, 0);
    dc.kv_lens = TensorRef(dlens.get(), DType::kI32, {B}, {}, 0);
    dc.out = TensorRef(dout_contig.get(), DType::kBF16, {B, 1, Hq, D}, {}, 0);
    const size_t ws2 = kjit::attention::decode_workspace_bytes(dc);
    DeviceBuffer ws_contig(std::max<size_t>(ws2, 16));
    ASSERT_NO_THROW(kjit::attention::decode(dc, ws_contig.get(), ws2, nullptr));
    kjit::testing::synchronize();

    kjit::testing::DecodeProblem pr = kjit::testing::decode_problem(B, cap, Hq, Hkv, D);
    pr.q = q;
    pr.k = kc;
    pr.v = vc;
    pr.kv_lens = lens32;
    const kjit::testing::DecodeReference ref = kjit::testing::decode_reference(pr);
    const auto paged_bits = dout.download<uint16_t>(B * Hq * D);
    const auto contig_bits = dout_contig.download<uint16_t>(B * Hq * D);
    std::vector<float> paged(paged_bits.size()), contig(contig_bits.size());
    for (size_t i = 0; i < paged.size(); ++i) {
      paged[i] = kjit::testing::bf16_to_float(paged_bits[i]);
      contig[i] = kjit::testing::bf16_to_float(contig_bits[i]);
    }
    const kjit::testing::Comparison cp = kjit::testing::compare(paged, ref.out);
    const kjit::testing::Comparison cc = kjit::testing::compare(contig, ref.out);
    EXPECT_TRUE(cp.ok(kOutTol)) << "step " << step << " paged: " << cp.describe();
    EXPECT_TRUE(cc.ok(kOutTol)) << "step " << step << " contiguous: " << cc.describe();
  }
}

}  // namespace
