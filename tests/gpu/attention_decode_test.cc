// kjit::attention::decode on the GPU against the float64 reference (tools/testing/
// reference_attention.hpp). Every case uses fresh random data (the random seed is printed on failure),
// poisons out/lse/workspace with 0xFF (NaN) and the k/v padding and dead tokens (at or past
// kv_len, past max_kv_len in strided views) with NaN, so an unwritten output, a read past the
// live cache or a write into padding fails the case. On sm_90+ the cluster merge runs every split
// count 2..8 (forced and automatic) and must match the merge kernel's output. Skips without a GPU.
//
// Tolerances: out is bf16, so rounding the result alone costs up to 2^-9 relative per element,
// and P is rounded to bf16 before P·V (FlashAttention does the same); the expected relative L2
// error is ~3e-3. 1e-2 leaves margin, while an indexing or masking bug gives O(1) errors. The
// LSE is f32 from exact bf16 products accumulated in f32 (~1e-6 relative): 1e-4.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include "tests/gpu/cluster_merge_check.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace {

using kjit::testing::DecodeCase;

constexpr double kOutTol = 1e-2;
constexpr double kLseTol = 1e-4;

class AttentionDecodeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kjit::testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

void check(const DecodeCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  kjit::testing::DecodeCaseResult r;
  try {
    r = kjit::testing::run_decode_case(c, seed);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
    return;
  }
  EXPECT_TRUE(r.ok(kOutTol, kLseTol)) << r.describe();
}

DecodeCase make(int batch, int len, int q_heads, int kv_heads, int head_dim) {
  DecodeCase c;
  c.batch = batch;
  c.max_kv_len = len;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

const int kLens[] = {0, 1, 2, 63, 64, 65, 1000, 4097};
const int kHeadDims[] = {64, 128, 256};

TEST_F(AttentionDecodeGpu, EdgeLengthsEveryHeadDim) {
  for (int hd : kHeadDims) {
    for (int len : kLens) {
      DecodeCase c = make(3, len, 8, 2, hd);
      c.lse = true;
      check(c);
    }
  }
}

TEST_F(AttentionDecodeGpu, GqaRatios) {
  // 1, 2, 4, 8 use 8-row CTAs; 12 and 16 the 16-row ones; 32 two M tiles per KV head.
  for (int hd : kHeadDims) {
    for (int group : {1, 2, 4, 8, 12, 16, 32}) {
      DecodeCase c = make(3, 300, 2 * group, 2, hd);
      c.ragged = true;
      c.lse = true;
      check(c);
    }
  }
}

TEST_F(AttentionDecodeGpu, ForcedSplitCounts) {
  for (int hd : kHeadDims) {
    for (int splits : {1, 3, 0}) {
      for (int len : {1, 2, 65, 1000, 4097}) {
        DecodeCase c = make(3, len, 16, 4, hd);
        c.num_splits = splits;
        c.ragged = true;
        c.lse = true;
        check(c);
      }
    }
  }
}

TEST_F(AttentionDecodeGpu, MaskIncludingARowKeepingNothing) {
  for (int batch : {1, 3, 8}) {
    for (int splits : {1, 3, 0}) {
      for (int len : {65, 1000}) {
        DecodeCase c = make(batch, len, 32, 8, 128);
        c.mask = true;
        c.lse = true;
        c.ragged = batch > 1;
        c.num_splits = splits;
        check(c);
      }
    }
  }
  for (int hd : {64, 256}) {
    DecodeCase c = make(3, 777, 16, 2, hd);
    c.mask = true;
    c.lse = true;
    check(c);
  }
}

TEST_F(AttentionDecodeGpu, StridedViewsOfLargerBuffers) {
  for (int hd : kHeadDims) {
    for (int splits : {1, 0}) {
      DecodeCase c = make(3, 1000, 16, 4, hd);
      c.strided = true;
      c.ragged = true;
      c.lse = true;
      c.mask = hd == 128;
      c.num_splits = splits;
      check(c);
    }
  }
  DecodeCase c = make(8, 64, 32, 8, 128);
  c.strided = true;
  check(c);
}

TEST_F(AttentionDecodeGpu, CustomScaleAndPeakySoftmax) {
  for (float scale : {0.5f, 0.02f, 1.0f}) {
    DecodeCase c = make(3, 1000, 32, 8, 128);
    c.scale = scale;
    c.lse = true;
    c.num_splits = 3;
    check(c);
  }
  // A large q range makes a few positions dominate: exercises the running-max rescale.
  for (int hd : kHeadDims) {
    DecodeCase c = make(2, 4097, 8, 2, hd);
    c.q_range = 12.f;
    c.lse = true;
    check(c);
  }
}

TEST_F(AttentionDecodeGpu, WithoutKvLens) {
  for (int hd : kHeadDims) {
    DecodeCase c = make(3, 513, 8, 1, hd);
    c.pass_kv_lens = false;
    c.lse = true;
    check(c);
  }
}

TEST_F(AttentionDecodeGpu, LlamaShape) {
  DecodeCase c = make(16, 4096, 32, 8, 128);
  c.ragged = true;
  c.lse = true;
  check(c);
}

TEST_F(AttentionDecodeGpu, SampledGrid) {
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  auto pick = [&](auto const& values) { return values[std::uniform_int_distribution<size_t>(0, std::size(values) - 1)(rng)]; };
  const int batches[] = {1, 3, 8};
  const int ratios[] = {1, 2, 4, 8, 16};
  const int splits[] = {1, 3, 0};
  const float scales[] = {0.f, 0.3f};
  for (int i = 0; i < 80; ++i) {
    DecodeCase c = make(pick(batches), pick(kLens), 0, 2, pick(kHeadDims));
    c.q_heads = c.kv_heads * pick(ratios);
    c.ragged = rng() % 2 && c.batch > 1;
    c.mask = rng() % 2;
    c.lse = rng() % 2;
    c.strided = rng() % 4 == 0;
    c.num_splits = pick(splits);
    c.scale = pick(scales);
    check(c);
  }
}

// ---- The cluster merge (merge=cluster: sm_90+, 2..8 splits) --------------------------------

using kjit::attention::DecodeMerge;
using kjit::testing::device_has_clusters;

/// The cluster merge against the reference and the merge kernel (cluster_merge_check.hpp).
void check_cluster_against_kernel(const DecodeCase& c, DecodeMerge merge) {
  kjit::testing::check_cluster_against_kernel(c, merge, fresh_seed(), kOutTol, kLseTol,
                                              [](const DecodeCase& x, uint64_t seed) {
                                                return kjit::testing::run_decode_case(x, seed);
                                              });
}

TEST_F(AttentionDecodeGpu, ClusterMergeEverySplitCountGqaAndHeadDim) {
  if (!device_has_clusters()) GTEST_SKIP() << "the cluster merge needs sm_90+";
  for (int hd : kHeadDims) {
    for (int group : {1, 4, 8, 32}) {  // 32: rows 16, two M tiles per KV head
      if (group == 32 && hd != 128) continue;
      for (int splits = 2; splits <= 8; ++splits) {
        for (DecodeMerge merge : {DecodeMerge::kCluster, DecodeMerge::kAuto}) {
          DecodeCase c = make(3, 1000, 2 * group, 2, hd);  // ragged: request 2 is empty
          c.ragged = true;
          c.lse = true;
          c.num_splits = splits;
          check_cluster_against_kernel(c, merge);
        }
      }
    }
  }
}

TEST_F(AttentionDecodeGpu, ClusterMergeEdgeLengthsMaskAndViews) {
  if (!device_has_clusters()) GTEST_SKIP() << "the cluster merge needs sm_90+";
  for (int hd : kHeadDims) {
    // Lengths 0 and 1 (every split but the first empty, or all of them), splits of one token,
    // lengths around the 64-token tile.
    for (int len : {0, 1, 2, 7, 63, 64, 65, 129}) {
      for (int splits : {2, 5, 8}) {
        DecodeCase c = make(3, len, 8, 2, hd);
        c.ragged = true;
        c.lse = true;
        c.num_splits = splits;
        check_cluster_against_kernel(c, DecodeMerge::kCluster);
      }
    }
    DecodeCase c = make(4, 777, 16, 2, hd);
    c.mask = true;  // the last request keeps nothing
    c.lse = true;
    c.strided = true;
    c.num_splits = 3;
    check_cluster_against_kernel(c, DecodeMerge::kCluster);
    c.num_splits = 0;  // the forced cluster merge's own count (1..8)
    c.scale = 0.3f;
    check_cluster_against_kernel(c, DecodeMerge::kCluster);
  }
}

TEST_F(AttentionDecodeGpu, ClusterMergeWhereThePlannerSplits) {
  if (!device_has_clusters()) GTEST_SKIP() << "the cluster merge needs sm_90+";
  // The planner's own split counts: hd256 B16 Hq16 Hkv4 L4096 takes 2 (a cluster); B2 L8192
  // more than 8 under auto (the merge kernel) and at most 8 under a forced cluster merge.
  DecodeCase c = make(16, 4096, 16, 4, 256);
  c.ragged = true;
  c.lse = true;
  check_cluster_against_kernel(c, DecodeMerge::kAuto);
  c = make(2, 8192, 32, 8, 128);
  c.lse = true;
  check(c);
  c.merge = DecodeMerge::kCluster;
  check(c);
  // One split merges nothing: a forced cluster merge runs the plain kernel.
  c = make(3, 1000, 32, 8, 128);
  c.num_splits = 1;
  c.merge = DecodeMerge::kCluster;
  c.lse = true;
  check(c);
}

TEST_F(AttentionDecodeGpu, ClusterMergeBelowSm90IsUnsupported) {
  if (device_has_clusters()) GTEST_SKIP() << "the device has clusters";
  DecodeCase c = make(3, 1000, 32, 8, 128);
  c.num_splits = 4;
  c.merge = DecodeMerge::kCluster;
  EXPECT_THROW(kjit::testing::run_decode_case(c, fresh_seed()), kjit::Unsupported);
  c.merge = DecodeMerge::kAuto;  // the merge kernel
  check(c);
}

TEST_F(AttentionDecodeGpu, WorkspaceTooSmallNamesTheBytes) {
  kjit::testing::DeviceBuffer q(16 * 32 * 128 * 2), k(16 * 4096 * 8 * 128 * 2), v(16 * 4096 * 8 * 128 * 2),
      out(16 * 32 * 128 * 2);
  kjit::attention::DecodeArgs a;
  a.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {16, 1, 32, 128}, {}, 0);
  a.k = kjit::TensorRef(k.get(), kjit::DType::kBF16, {16, 4096, 8, 128}, {}, 0);
  a.v = kjit::TensorRef(v.get(), kjit::DType::kBF16, {16, 4096, 8, 128}, {}, 0);
  a.out = kjit::TensorRef(out.get(), kjit::DType::kBF16, {16, 1, 32, 128}, {}, 0);
  a.num_splits = 4;
  const size_t need = kjit::attention::decode_workspace_bytes(a);
  ASSERT_GT(need, 0u);
  kjit::testing::DeviceBuffer ws(need);
  try {
    kjit::attention::decode(a, ws.get(), need - 1, nullptr);
    ADD_FAILURE() << "no error for a short workspace";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs " + std::to_string(need) + " bytes"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(kjit::attention::decode(a, ws.get(), need, nullptr));
  // Whatever the merge, the same bytes (a cluster plan may fall back to the merge kernel).
  for (DecodeMerge merge : {DecodeMerge::kKernel, DecodeMerge::kCluster}) {
    a.merge = merge;
    if (merge == DecodeMerge::kCluster && !device_has_clusters()) continue;
    EXPECT_EQ(kjit::attention::decode_workspace_bytes(a), need);
    EXPECT_THROW(kjit::attention::decode(a, ws.get(), need - 1, nullptr), kjit::InvalidArgument);
    EXPECT_NO_THROW(kjit::attention::decode(a, ws.get(), need, nullptr));
  }
  a.merge = DecodeMerge::kAuto;
  // One split needs none.
  a.num_splits = 1;
  EXPECT_EQ(kjit::attention::decode_workspace_bytes(a), 0u);
  EXPECT_NO_THROW(kjit::attention::decode(a, nullptr, 0, nullptr));
  kjit::testing::synchronize();
}

}  // namespace
