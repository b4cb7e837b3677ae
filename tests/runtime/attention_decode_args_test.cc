// Host-only checks of kjit::attention::decode: every validation rule fires with a message naming
// the tensor (before any driver call), the split planner's partitions and merges, the workspace
// check, and that every specialization of the family (both merges on sm_90a) compiles without
// spills. No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "attention/decode_params.h"
#include "attention/prefill_params.h"
#include "attention/prefill_sm90_params.h"
#include "runtime/families/attention.hpp"
#include "tests/runtime/decode_dims.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <set>
#include <string>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::attention::DecodeArgs;
namespace ad = kjit::attention::detail;

constexpr int64_t kB = 3, kL = 100, kHq = 8, kHkv = 2, kD = 128;

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

DecodeArgs valid_args() {
  DecodeArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, 1, kHq, kD}, {}, 0);
  a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, kD}, {}, 0);
  a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, kHkv, kD}, {}, 0);
  a.kv_lens = TensorRef(fake_ptr(0x300000), DType::kI32, {kB}, {}, 0);
  a.mask = TensorRef(fake_ptr(0x310000), DType::kBool, {kB, kL}, {}, 0);
  a.out = TensorRef(fake_ptr(0x400000), DType::kBF16, {kB, 1, kHq, kD}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x500000), DType::kF32, {kB, kHq}, {}, 0);
  return a;
}

/// Applies `edit` to valid args and expects validate_decode — and the public decode() and
/// decode_workspace_bytes(), which must validate before touching the driver — to throw
/// InvalidArgument naming the op (the query: itself) and mentioning every `needles`.
void expect_invalid(const std::function<void(DecodeArgs&)>& edit, std::initializer_list<const char*> needles) {
  DecodeArgs a = valid_args();
  edit(a);
  for (int via = 0; via < 3; ++via) {
    try {
      if (via == 0) {
        ad::validate_decode(a);
      } else if (via == 1) {
        kjit::attention::decode(a, nullptr, 0, nullptr);
      } else {
        kjit::attention::decode_workspace_bytes(a);
      }
      ADD_FAILURE() << "no error for an invalid argument (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      const std::string named = via == 2 ? "kjit::attention::decode_workspace_bytes: " : "kjit::attention::decode: ";
      EXPECT_EQ(what.rfind(named, 0), 0u) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

TEST(AttentionDecodeArgs, ValidArgsPass) {
  const ad::DecodeDims d = ad::validate_decode(valid_args());
  EXPECT_EQ(d.batch, kB);
  EXPECT_EQ(d.max_kv_len, kL);
  EXPECT_EQ(d.q_heads, kHq);
  EXPECT_EQ(d.kv_heads, kHkv);
  EXPECT_EQ(d.head_dim, kD);
  EXPECT_EQ(d.group, kHq / kHkv);
  EXPECT_TRUE(d.has_kv_lens && d.has_mask && d.has_lse);
  DecodeArgs a = valid_args();
  a.kv_lens = {};
  a.mask = {};
  a.lse = {};
  const ad::DecodeDims e = ad::validate_decode(a);
  EXPECT_FALSE(e.has_kv_lens || e.has_mask || e.has_lse);
  // A u8 mask and an empty cache are fine too.
  a = valid_args();
  a.mask.dtype = DType::kU8;
  EXPECT_NO_THROW(ad::validate_decode(a));
  a = valid_args();
  a.k = TensorRef(nullptr, DType::kBF16, {kB, 0, kHkv, kD}, {}, 0);
  a.v = TensorRef(nullptr, DType::kBF16, {kB, 0, kHkv, kD}, {}, 0);
  a.mask = TensorRef(nullptr, DType::kBool, {kB, 0}, {}, 0);
  EXPECT_NO_THROW(ad::validate_decode(a));
}

// One fact, one place: every attention family declares its head_dim set once, the validators
// accept exactly that set, and every declared value has a launch shape for each kernel. Adding a
// head_dim to a declaration without teaching a consumer fails here.
std::set<int64_t> declared(const kjit::Family& f, const char* param) {
  std::set<int64_t> out;
  for (const kjit::ParamValue& v : f.params[f.param_index(param)].values) out.insert(v.code);
  return out;
}

TEST(AttentionFamilies, ValidatorsAndKernelsFollowTheDeclaredHeadDims) {
  namespace at = kjit::attention;
  const std::set<int64_t> mma(std::begin(at::kHeadDims), std::end(at::kHeadDims));
  for (const kjit::Family* f : {&at::decode_family(), &at::paged_decode_family(), &at::decode_merge_family(),
                                &at::paged_append_family(), &at::prefill_family(), &at::paged_prefill_family()}) {
    EXPECT_EQ(declared(*f, "head_dim"), mma) << f->name;
    EXPECT_EQ(f->min_sm, at::kMinSm) << f->name;
  }
  const std::set<int64_t> sm90 = declared(at::prefill_sm90_family(), "head_dim");
  EXPECT_EQ(sm90, std::set<int64_t>(std::begin(at::kSm90HeadDims), std::end(at::kSm90HeadDims)));
  EXPECT_EQ(declared(at::paged_prefill_sm90_family(), "head_dim"), sm90);
  const std::set<int64_t> block_ms(std::begin(at::kBlockMs), std::end(at::kBlockMs));
  EXPECT_EQ(declared(at::prefill_family(), "block_m"), block_ms);
  EXPECT_EQ(declared(at::paged_prefill_family(), "block_m"), block_ms);
  for (int m = 0; m <= 512; ++m) {  // the paged prefill planner takes the declared tile rows (0: choose)
    const int32_t qo_indptr[] = {0, 100};
    bool accepted = true;
    try {
      kjit::attention::plan_paged_prefill(qo_indptr, 1, 128, m);
    } catch (const kjit::InvalidArgument&) {
      accepted = false;
    }
    EXPECT_EQ(accepted, m == 0 || block_ms.count(m) == 1) << "tile_rows " << m;
  }
  for (int64_t d = 8; d <= 1024; d += 8) {  // bf16 rows stay 16-byte aligned
    DecodeArgs a = valid_args();
    a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, d}, {}, 0);
    a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, kHkv, d}, {}, 0);
    a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, 1, kHq, d}, {}, 0);
    a.out = TensorRef(fake_ptr(0x400000), DType::kBF16, {kB, 1, kHq, d}, {}, 0);
    bool accepted = true;
    try {
      ad::validate_decode(a);
    } catch (const kjit::InvalidArgument& e) {
      accepted = false;
      if (!mma.count(d)) {
        for (int64_t v : mma) EXPECT_NE(std::string(e.what()).find(std::to_string(v)), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(accepted, mma.count(d) == 1) << "head_dim " << d;
    EXPECT_EQ(ad::supported_head_dim(d), mma.count(d) == 1) << "head_dim " << d;
  }
  for (int64_t d : mma) {
    EXPECT_GT(kjit::attention::decode_launch_shape(static_cast<int>(d)).threads, 0) << d;
    for (int64_t bm : declared(at::prefill_family(), "block_m")) {
      EXPECT_GT(kjit::attention::prefill_launch_shape(static_cast<int>(d), static_cast<int>(bm)).threads, 0) << d;
    }
  }
  for (int64_t d : sm90) EXPECT_GT(kjit::attention::prefill_sm90_launch_shape(static_cast<int>(d)).threads, 0) << d;
}

TEST(AttentionDecodeArgs, QRules) {
  expect_invalid([](DecodeArgs& a) { a.q = {}; }, {"q is required"});
  expect_invalid([](DecodeArgs& a) { a.q.dtype = DType::kF16; }, {"q must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, kHq, kD}, {}, 0); }, {"q must be 4-d"});
  expect_invalid([](DecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, 2, kHq, kD}, {}, 0); },
                 {"q dim 1 must be 1"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, 1, kHq, 96}, {}, 0);
        a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, 96}, {}, 0);
      },
      {"head_dim", "64, 128 or 256"});
  expect_invalid([](DecodeArgs& a) { a.q.device = -1; }, {"q must be on a CUDA device"});
  expect_invalid([](DecodeArgs& a) { a.q.data = fake_ptr(8); }, {"q data pointer", "16-byte aligned"});
  expect_invalid([](DecodeArgs& a) { a.q.strides[3] = 2; a.q.strides[2] = 2 * kD; }, {"q must have a contiguous last dimension"});
  expect_invalid([](DecodeArgs& a) { a.q.data = nullptr; }, {"q has a null data pointer"});
  expect_invalid([](DecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, 1, 0, kD}, {}, 0); },
                 {"q must have at least one head (dim 2)"});
}

TEST(AttentionDecodeArgs, KvRules) {
  expect_invalid([](DecodeArgs& a) { a.k.dtype = DType::kF16; }, {"k must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.v.dtype = DType::kF32; }, {"v must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.k = {}; }, {"k is required"});
  expect_invalid([](DecodeArgs& a) { a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv * kD}, {}, 0); },
                 {"k must be 4-d"});
  expect_invalid([](DecodeArgs& a) { a.k.shape[0] = kB + 1; }, {"k dim 0", "batch"});
  expect_invalid([](DecodeArgs& a) { a.k.shape[3] = 64; }, {"k dim 3", "head_dim"});
  expect_invalid([](DecodeArgs& a) { a.v.shape[1] = kL - 1; }, {"v dim 1", "max_kv_len"});
  expect_invalid([](DecodeArgs& a) { a.v.shape[2] = kHkv * 2; }, {"v dim 2", "kv_heads"});
  expect_invalid([](DecodeArgs& a) { a.v.shape[0] = 1; }, {"v dim 0"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, 3, kD}, {}, 0);
        a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, 3, kD}, {}, 0);
      },
      {"q_heads (8", "multiple of kv_heads (3"});
  expect_invalid([](DecodeArgs& a) { a.k.strides[3] = 2; }, {"k must have a contiguous last dimension"});
  expect_invalid([](DecodeArgs& a) { a.v.data = fake_ptr(0x200000 + 2); }, {"v data pointer", "16-byte aligned"});
  // A token stride of kHkv·kD + 4 elements = 8-byte aligned rows.
  expect_invalid([](DecodeArgs& a) { a.k.strides[1] = kHkv * kD + 4; a.k.strides[0] = kL * a.k.strides[1]; },
                 {"k stride of dim 1", "multiple of 16 bytes"});
  expect_invalid([](DecodeArgs& a) { a.v.device = 1; }, {"v is on CUDA device 1"});
  expect_invalid([](DecodeArgs& a) { a.k.device = -1; }, {"k is on the host"});
  expect_invalid([](DecodeArgs& a) { a.k.data = nullptr; }, {"k has a null data pointer"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, 0, kD}, {}, 0);
        a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, 0, kD}, {}, 0);
      },
      {"k must have at least one kv head (dim 2)"});
}

TEST(AttentionDecodeArgs, OutputRules) {
  expect_invalid([](DecodeArgs& a) { a.out = {}; }, {"out is required"});
  expect_invalid([](DecodeArgs& a) { a.out.dtype = DType::kF32; }, {"out must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.out.shape[2] = kHq / 2; }, {"out dim 2", "q_heads"});
  expect_invalid([](DecodeArgs& a) { a.out.shape[0] = 1; }, {"out dim 0"});
  expect_invalid([](DecodeArgs& a) { a.out.device = 2; }, {"out is on CUDA device 2"});
  expect_invalid([](DecodeArgs& a) { a.out.data = fake_ptr(0x400000 + 4); }, {"out data pointer"});
  expect_invalid([](DecodeArgs& a) { a.lse.dtype = DType::kBF16; }, {"lse must be f32"});
  expect_invalid([](DecodeArgs& a) { a.lse.shape[1] = kHq + 1; }, {"lse dim 1", "q_heads"});
  expect_invalid([](DecodeArgs& a) { a.lse = TensorRef(fake_ptr(0x500000), DType::kF32, {kB * kHq}, {}, 0); },
                 {"lse must be 2-d"});
  expect_invalid([](DecodeArgs& a) { a.lse.device = 1; }, {"lse is on CUDA device 1"});
  expect_invalid([](DecodeArgs& a) { a.lse.data = fake_ptr(0x500000 + 2); }, {"lse data pointer", "4-byte aligned"});
  expect_invalid([](DecodeArgs& a) { a.lse.data = nullptr; }, {"lse has a null data pointer"});
}

TEST(AttentionDecodeArgs, LensMaskAndScalars) {
  expect_invalid([](DecodeArgs& a) { a.kv_lens.dtype = DType::kI64; }, {"kv_lens must be i32"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.shape[0] = kB + 1; }, {"kv_lens dim 0", "batch"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens = TensorRef(fake_ptr(0x300000), DType::kI32, {kB, 1}, {}, 0); },
                 {"kv_lens must be 1-d"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.strides[0] = 2; }, {"kv_lens must be contiguous"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.device = 3; }, {"kv_lens is on CUDA device 3"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.data = fake_ptr(0x300000 + 2); },
                 {"kv_lens data pointer", "4-byte aligned"});
  expect_invalid([](DecodeArgs& a) { a.mask.shape[0] = -1; }, {"mask has a negative size"});
  expect_invalid([](DecodeArgs& a) { a.mask.data = nullptr; }, {"mask has a null data pointer"});
  expect_invalid([](DecodeArgs& a) { a.mask.dtype = DType::kF32; }, {"mask must be bool or u8"});
  expect_invalid([](DecodeArgs& a) { a.mask.shape[1] = kL + 1; }, {"mask dim 1", "max_kv_len"});
  expect_invalid([](DecodeArgs& a) { a.mask = TensorRef(fake_ptr(0x310000), DType::kBool, {kB, 1, kL}, {}, 0); },
                 {"mask must be 2-d"});
  expect_invalid([](DecodeArgs& a) { a.mask.device = -1; }, {"mask is on the host"});
  expect_invalid([](DecodeArgs& a) { a.scale = NAN; }, {"scale must be finite"});
  expect_invalid([](DecodeArgs& a) { a.scale = INFINITY; }, {"scale must be finite"});
  expect_invalid([](DecodeArgs& a) { a.num_splits = -1; }, {"num_splits must be >= 0"});
  expect_invalid([](DecodeArgs& a) { a.merge = static_cast<kjit::attention::DecodeMerge>(3); },
                 {"merge must be one of 'auto', 'kernel', 'cluster'", "DecodeMerge(3)"});
  expect_invalid([](DecodeArgs& a) { a.merge = static_cast<kjit::attention::DecodeMerge>(-1); }, {"merge must be one of"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.merge = kjit::attention::DecodeMerge::kCluster;
        a.num_splits = 9;
      },
      {"merge 'cluster' combines at most 8 splits", "num_splits=9"});
  // 1..8 splits (and 0: choose among them) pass with a forced cluster merge.
  for (int splits = 0; splits <= 8; ++splits) {
    DecodeArgs a = valid_args();
    a.merge = kjit::attention::DecodeMerge::kCluster;
    a.num_splits = splits;
    EXPECT_EQ(ad::validate_decode(a).requested_merge, kjit::attention::DecodeMerge::kCluster) << splits;
  }
}

constexpr int kH200Sms = 132;
constexpr int kH200SmemPerSm = 233472;

ad::DecodePlan h200_plan(const ad::DecodeDims& d, int splits = 0) {
  return ad::plan_decode(d, splits, kH200Sms, ad::decode_ctas_per_sm(d.head_dim, kH200SmemPerSm));
}

TEST(AttentionDecodePlan, OnePlannedCtaPerSmOnH200) {
  for (int hd : {64, 128, 256}) EXPECT_EQ(ad::decode_ctas_per_sm(hd, kH200SmemPerSm), 1) << hd;
  EXPECT_EQ(ad::decode_ctas_per_sm(128, 10 * 1024), 1);  // never zero, even when nothing fits
  // Every shape's ring fits the 227 KiB a CTA may opt into, with its 32 KiB stages.
  for (int hd : {64, 128, 256}) {
    const auto s = kjit::attention::decode_launch_shape(hd);
    EXPECT_EQ(s.smem_bytes, 3 * 32 * 1024) << hd;
    EXPECT_EQ(s.smem_bytes, 3 * s.tile_tokens * hd * 4) << hd;
    EXPECT_EQ(s.threads, 128) << hd;
  }
}

TEST(AttentionDecodePlan, PeerShapesTakeTheMeasuredBestSplits) {
  // The split counts a sweep of every forced count found fastest on the H200 (2026-11-30).
  EXPECT_EQ(h200_plan(decode_dims(16, 4096, 32, 8, 128)).num_splits, 1);  // 128 CTAs
  ad::DecodePlan p = h200_plan(decode_dims(64, 4096, 32, 8, 128));
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.workspace_bytes, 0u);
  EXPECT_EQ(h200_plan(decode_dims(1, 8192, 32, 8, 128)).num_splits, 16);
  EXPECT_EQ(h200_plan(decode_dims(1, 512, 32, 8, 128)).num_splits, 8);  // one 64-token tile a split
  EXPECT_EQ(h200_plan(decode_dims(32, 4096, 32, 8, 64)).num_splits, 1);
  EXPECT_EQ(h200_plan(decode_dims(16, 4096, 16, 4, 256)).num_splits, 2);
}

using kjit::attention::DecodeMerge;

/// plan_decode on the H200 for a device with thread-block clusters (sm_90+) or without.
ad::DecodePlan h200_plan_merge(const ad::DecodeDims& d, int splits, DecodeMerge merge, bool clusters) {
  return ad::plan_decode(d, splits, kH200Sms, ad::decode_ctas_per_sm(d.head_dim, kH200SmemPerSm), 0, merge, clusters);
}

TEST(AttentionDecodePlan, ClusterMergeOnSm90ForTwoToEightSplits) {
  // Auto: cluster exactly where the device has clusters and the plan has 2..8 splits.
  for (int splits = 1; splits <= 20; ++splits) {
    const ad::DecodePlan with = h200_plan_merge(decode_dims(2, 8192, 32, 8, 128), splits, DecodeMerge::kAuto, true);
    const ad::DecodePlan without = h200_plan_merge(decode_dims(2, 8192, 32, 8, 128), splits, DecodeMerge::kAuto, false);
    ASSERT_EQ(with.num_splits, splits);
    EXPECT_EQ(with.merge, splits >= 2 && splits <= 8 ? DecodeMerge::kCluster : DecodeMerge::kKernel) << splits;
    EXPECT_EQ(without.merge, DecodeMerge::kKernel) << splits;
    // The same splits, ctas and workspace whatever the merge (a cluster plan may fall back).
    EXPECT_EQ(with.ctas, without.ctas);
    EXPECT_EQ(with.workspace_bytes, without.workspace_bytes);
    EXPECT_EQ(with.o_part_bytes, without.o_part_bytes);
    EXPECT_EQ(with.workspace_bytes == 0, splits == 1);
    // A forced merge kernel stays one.
    EXPECT_EQ(h200_plan_merge(decode_dims(2, 8192, 32, 8, 128), splits, DecodeMerge::kKernel, true).merge,
              DecodeMerge::kKernel);
  }
  // The planner's own counts: B16 L4096 runs one split (nothing to merge); B1 L8192 16 (above a
  // cluster: the merge kernel); B16 L4096 at hd256 two (a cluster of 2).
  EXPECT_EQ(h200_plan_merge(decode_dims(16, 4096, 32, 8, 128), 0, DecodeMerge::kAuto, true).merge, DecodeMerge::kKernel);
  ad::DecodePlan p = h200_plan_merge(decode_dims(1, 8192, 32, 8, 128), 0, DecodeMerge::kAuto, true);
  EXPECT_EQ(p.num_splits, 16);
  EXPECT_EQ(p.merge, DecodeMerge::kKernel);
  p = h200_plan_merge(decode_dims(16, 4096, 16, 4, 256), 0, DecodeMerge::kAuto, true);
  EXPECT_EQ(p.num_splits, 2);
  EXPECT_EQ(p.merge, DecodeMerge::kCluster);
  // A forced cluster merge chooses among 1..8 splits: B1 L8192's best count there is 8.
  p = h200_plan_merge(decode_dims(1, 8192, 32, 8, 128), 0, DecodeMerge::kCluster, true);
  EXPECT_EQ(p.num_splits, 8);
  EXPECT_EQ(p.merge, DecodeMerge::kCluster);
  EXPECT_EQ(p.workspace_bytes, h200_plan_merge(decode_dims(1, 8192, 32, 8, 128), 8, DecodeMerge::kKernel, true).workspace_bytes);
  // ... and a plan that needs one split merges nothing: the merge=kernel point.
  p = h200_plan_merge(decode_dims(64, 4096, 32, 8, 128), 0, DecodeMerge::kCluster, true);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.merge, DecodeMerge::kKernel);
  for (int len : {1, 2, 63, 64, 65, 1000, 4097, 32768}) {
    for (int batch : {1, 3, 16}) {
      const ad::DecodePlan c = h200_plan_merge(decode_dims(batch, len, 32, 8, 64), 0, DecodeMerge::kCluster, true);
      EXPECT_LE(c.num_splits, 8) << batch << " " << len;
      EXPECT_EQ(c.merge, c.num_splits > 1 ? DecodeMerge::kCluster : DecodeMerge::kKernel);
    }
  }
  EXPECT_EQ(ad::plan_merge(DecodeMerge::kCluster, 1, true), DecodeMerge::kKernel);
  EXPECT_EQ(ad::plan_merge(DecodeMerge::kAuto, 9, true), DecodeMerge::kKernel);
  EXPECT_EQ(ad::plan_merge(DecodeMerge::kAuto, 8, true), DecodeMerge::kCluster);
}

TEST(AttentionDecodePlan, TheOpPlansTheMergeForTheDevice) {
  const kjit::DeviceInfo h100 = planner_device(9, 0);
  const kjit::DeviceInfo a100 = planner_device(8, 0);
  ad::DecodeDims d = decode_dims(2, 8192, 32, 8, 128);
  d.requested_splits = 4;
  ad::DecodePlan p = ad::DecodeOp::plan(d, h100);
  EXPECT_EQ(p.merge, DecodeMerge::kCluster);
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 rows=8 merge=cluster");
  EXPECT_EQ(ad::DecodeOp::second_choice(d, p).family, nullptr) << "a cluster plan loads no merge program";
  p = ad::DecodeOp::plan(d, a100);
  EXPECT_EQ(p.merge, DecodeMerge::kKernel);
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 rows=8 merge=kernel");
  EXPECT_EQ(ad::DecodeOp::second_choice(d, p).family, &kjit::attention::decode_merge_family());
  // A forced cluster merge below sm_90 is Unsupported, naming the device's target.
  d.requested_merge = DecodeMerge::kCluster;
  try {
    ad::DecodeOp::plan(d, a100);
    ADD_FAILURE() << "no error for merge=cluster on sm_80";
  } catch (const kjit::Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kjit::attention::decode: merge 'cluster' needs thread-block clusters (sm_90+)"),
              std::string::npos) << what;
    EXPECT_NE(what.find("sm_80"), std::string::npos) << what;
  }
  EXPECT_EQ(ad::DecodeOp::plan(d, h100).merge, DecodeMerge::kCluster);
  d.requested_merge = DecodeMerge::kKernel;
  EXPECT_EQ(ad::DecodeOp::plan(d, h100).merge, DecodeMerge::kKernel);
}

// A cluster plan's Params carry no workspace (its partials stay in shared memory); a
// merge-kernel plan of the same splits writes its partials to the workspace. (The launch's
// cluster dimension is checked on the stand-in driver: runtime/host_path_test.cc.)
TEST(AttentionDecodePlan, ClusterPlansGiveTheKernelNoWorkspace) {
  const ad::DecodeDims d = decode_dims(3, 1000, 32, 8, 128);
  DecodeArgs a = valid_args();
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {3, 1, 32, 128}, {}, 0);
  a.out = a.q;
  a.k = a.v = TensorRef(fake_ptr(0x100000), DType::kBF16, {3, 1000, 8, 128}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x500000), DType::kF32, {3, 32}, {}, 0);
  for (int splits = 2; splits <= 8; ++splits) {
    const ad::DecodePlan cluster = h200_plan_merge(d, splits, DecodeMerge::kAuto, true);
    ASSERT_EQ(cluster.merge, DecodeMerge::kCluster);
    EXPECT_EQ(cluster.ctas % cluster.num_splits, 0);
    const kjit::attention::DecodeParams p = ad::DecodeOp::params(a, d, cluster, fake_ptr(0x900000));
    EXPECT_EQ(p.o_part, nullptr);
    EXPECT_EQ(p.lse_part, nullptr);
    EXPECT_EQ(p.num_splits, splits);
    const ad::DecodePlan kernel = h200_plan_merge(d, splits, DecodeMerge::kKernel, true);
    const kjit::attention::DecodeParams pk = ad::DecodeOp::params(a, d, kernel, fake_ptr(0x900000));
    EXPECT_EQ(pk.o_part, static_cast<float*>(fake_ptr(0x900000)));
    EXPECT_NE(pk.lse_part, nullptr);
  }
}

/// The decode kernel's Params for `plan` of `d` over fake tensors of d's shape (head_dim 128).
kjit::attention::DecodeParams params_of(const ad::DecodeDims& d, const ad::DecodePlan& plan) {
  DecodeArgs a = valid_args();
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {d.batch, 1, d.q_heads, 128}, {}, 0);
  a.out = a.q;
  a.k = a.v = TensorRef(fake_ptr(0x100000), DType::kBF16, {d.batch, d.max_kv_len, d.kv_heads, 128}, {}, 0);
  return ad::DecodeOp::params(a, d, plan, fake_ptr());
}

/// A decode CTA's (b, kv head, split, M tile).
struct CtaCoords {
  int b, kv_head, split, m_tile;
  bool operator==(const CtaCoords& o) const {
    return b == o.b && kv_head == o.kv_head && split == o.split && m_tile == o.m_tile;
  }
};
std::ostream& operator<<(std::ostream& os, const CtaCoords& c) {
  return os << "(b " << c.b << ", kv head " << c.kv_head << ", split " << c.split << ", m tile " << c.m_tile << ")";
}

/// CTA `cta`'s coordinates as decode_kernel splits blockIdx.x with p's FastDivs: M tiles
/// innermost, or (`cluster`: the cluster merge) splits innermost.
CtaCoords cta_coords(const kjit::attention::DecodeParams& p, uint32_t cta, bool cluster) {
  uint32_t idx = cta;
  auto digit = [&idx](kjit::FastDiv div, int radix) {
    const uint32_t q = kjit::fast_quotient(idx, div);
    const int d = static_cast<int>(idx - q * static_cast<uint32_t>(radix));
    idx = q;
    return d;
  };
  CtaCoords c{};
  if (cluster) {
    c.split = digit(p.num_splits_div, p.num_splits);
    c.m_tile = digit(p.m_tiles_div, p.m_tiles);
  } else {
    c.m_tile = digit(p.m_tiles_div, p.m_tiles);
    c.split = digit(p.num_splits_div, p.num_splits);
  }
  c.kv_head = digit(p.kv_heads_div, p.kv_heads);
  c.b = static_cast<int>(idx);
  return c;
}

// Under the cluster merge the kernel splits blockIdx.x = ((b · kv_heads + kv_head) · m_tiles +
// m_tile) · num_splits + split: a cluster of num_splits consecutive CTAs is one split group.
TEST(AttentionDecodePlan, ClusterGridPutsTheSplitsOfAGroupSideBySide) {
  for (int64_t group : {1, 8, 32}) {
    const int64_t batch = 2, hkv = 3;
    const ad::DecodeDims d = decode_dims(batch, 2000, hkv * group, hkv, 128);
    for (int splits = 2; splits <= 8; ++splits) {
      const ad::DecodePlan plan = h200_plan_merge(d, splits, DecodeMerge::kAuto, true);
      ASSERT_EQ(plan.merge, DecodeMerge::kCluster);
      const kjit::attention::DecodeParams p = params_of(d, plan);
      uint32_t cta = 0;
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < hkv; ++h)
          for (int m = 0; m < p.m_tiles; ++m)
            for (int s = 0; s < p.num_splits; ++s, ++cta) {
              ASSERT_EQ(cta_coords(p, cta, true), (CtaCoords{b, h, s, m})) << cta;
              ASSERT_EQ(cta % static_cast<uint32_t>(p.num_splits), static_cast<uint32_t>(s)) << "the cluster rank";
            }
      EXPECT_EQ(cta, static_cast<uint32_t>(plan.ctas));
    }
  }
}

// The tuner's view of the merge: a point parameter, so `kjit tune decode` measures both on
// sm_90+; a stored cluster choice fits only a device with clusters and 2..8 splits; a call that
// forces a merge is not tuned.
TEST(AttentionDecodeTune, ClusterChoicesNeedClustersAndTwoToEightSplits) {
  const kjit::DeviceInfo h100 = planner_device(9, 0);
  const kjit::DeviceInfo a100 = planner_device(8, 0);
  const kjit::Family& f = kjit::attention::decode_family();
  kjit::detail::TunedChoice c;
  c.family = &f;
  c.point = f.parse({{"head_dim", "128"}, {"rows", "8"}, {"merge", "cluster"}});
  for (int splits = 1; splits <= 12; ++splits) {
    c.knobs[0] = splits;
    const std::string why = ad::DecodeOp::tune_spec().fits(c, h100);
    if (splits >= 2 && splits <= 8) {
      EXPECT_EQ(why, "") << splits;
    } else {
      EXPECT_NE(why.find("merge=cluster combines 2..8 splits"), std::string::npos) << why;
    }
    if (splits >= 2 && splits <= 8) {
      EXPECT_NE(ad::DecodeOp::tune_spec().fits(c, a100).find("merge=cluster needs thread-block clusters"),
                std::string::npos);
    }
  }
  // apply_tuned runs the choice's merge; a length the choice's count cannot split runs one
  // split and merges nothing (the merge=kernel point).
  c.knobs[0] = 4;
  ad::DecodePlan plan;
  ASSERT_TRUE(ad::DecodeOp::apply_tuned(decode_dims(2, 4096, 32, 8, 128), h100, c, &plan));
  EXPECT_EQ(plan.num_splits, 4);
  EXPECT_EQ(plan.merge, DecodeMerge::kCluster);
  EXPECT_EQ(plan.choice.point, c.point);
  ASSERT_TRUE(ad::DecodeOp::apply_tuned(decode_dims(2, 1, 32, 8, 128), h100, c, &plan));
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_EQ(plan.merge, DecodeMerge::kKernel);
  EXPECT_EQ(f.describe(plan.choice.point), "head_dim=128 rows=8 merge=kernel");
  // A merge=kernel choice keeps the merge kernel on sm_90.
  c.point = f.parse({{"head_dim", "128"}, {"rows", "8"}, {"merge", "kernel"}});
  ASSERT_TRUE(ad::DecodeOp::apply_tuned(decode_dims(2, 4096, 32, 8, 128), h100, c, &plan));
  EXPECT_EQ(plan.merge, DecodeMerge::kKernel);
  // The candidates on sm_90 hold both merges, clusters only at 2..8 splits; none below sm_90.
  const ad::DecodeDims d = decode_dims(1, 8192, 32, 8, 128);
  int clusters = 0;
  for (const kjit::detail::TunedChoice& x : ad::DecodeOp::tune_candidates(d, h100)) {
    if (ad::merge_of(x) != DecodeMerge::kCluster) continue;
    ++clusters;
    EXPECT_GE(x.knobs[0], 2);
    EXPECT_LE(x.knobs[0], 8);
  }
  EXPECT_GT(clusters, 0);
  for (const kjit::detail::TunedChoice& x : ad::DecodeOp::tune_candidates(d, a100)) {
    EXPECT_EQ(ad::merge_of(x), DecodeMerge::kKernel);
  }
  kjit::detail::TunedKey key{};
  EXPECT_TRUE(ad::DecodeOp::tune_key(d, &key));
  ad::DecodeDims forced = d;
  forced.requested_merge = DecodeMerge::kKernel;
  EXPECT_FALSE(ad::DecodeOp::tune_key(forced, &key));
}

TEST(AttentionDecodePlan, RowsAndMTiles) {
  EXPECT_EQ(h200_plan(decode_dims(2, 64, 8, 8, 128)).heads_per_cta, 8);    // group 1
  EXPECT_EQ(h200_plan(decode_dims(2, 64, 64, 8, 128)).heads_per_cta, 8);   // group 8
  ad::DecodePlan p = h200_plan(decode_dims(2, 64, 96, 8, 128));   // group 12
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.m_tiles, 1);
  p = h200_plan(decode_dims(2, 64, 32, 1, 128));                  // group 32
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.m_tiles, 2);
  EXPECT_EQ(p.ctas, 2 * 1 * p.num_splits * 2);
}

// The kernel splits blockIdx.x = ((b · kv_heads + kv_head) · num_splits + split) · m_tiles + m_tile
// with the Params' FastDivs (decode.cu): every CTA of a launch gets its own coordinates back.
TEST(AttentionDecodePlan, GridDivisorsSplitEveryCtaIndex) {
  for (int64_t hkv : {1, 3, 8}) {
    for (int64_t group : {1, 5, 16, 40}) {
      for (int req : {0, 1, 7}) {
        const int64_t batch = 3;
        const ad::DecodeDims d = decode_dims(batch, 300, hkv * group, hkv, 128);
        const ad::DecodePlan plan = h200_plan(d, req);
        const kjit::attention::DecodeParams p = params_of(d, plan);
        SCOPED_TRACE(testing::Message() << "Hkv " << hkv << " group " << group << " splits " << p.num_splits);
        uint32_t cta = 0;
        for (int b = 0; b < batch; ++b)
          for (int h = 0; h < hkv; ++h)
            for (int s = 0; s < p.num_splits; ++s)
              for (int m = 0; m < p.m_tiles; ++m, ++cta) {
                ASSERT_EQ(cta_coords(p, cta, false), (CtaCoords{b, h, s, m})) << cta;
              }
        EXPECT_EQ(cta, static_cast<uint32_t>(plan.ctas));
      }
    }
  }
}

TEST(AttentionDecodePlan, PartitionsCoverEveryTokenWithoutEmptySplits) {
  for (int64_t batch : {1, 3, 16, 200}) {
    for (int64_t len : {0, 1, 2, 63, 64, 65, 1000, 4097, 32768}) {
      for (int hd : {64, 128, 256}) {
        for (int req : {0, 1, 3, 7, 1000}) {
          const ad::DecodePlan p = h200_plan(decode_dims(batch, len, 32, 8, hd), req);
          const int64_t n = std::max<int64_t>(len, 1);
          SCOPED_TRACE(testing::Message() << "B" << batch << " L" << len << " D" << hd << " req " << req);
          EXPECT_GE(p.num_splits, 1);
          EXPECT_GE(int64_t{p.split_tokens} * p.num_splits, n);
          EXPECT_LT(int64_t{p.split_tokens} * (p.num_splits - 1), n);  // no empty trailing split
          if (req > 0) EXPECT_LE(p.num_splits, req);
          EXPECT_EQ(p.ctas, batch * 8 * p.num_splits);
          const size_t rows = static_cast<size_t>(batch * 32 * p.num_splits);
          if (p.num_splits == 1) {
            EXPECT_EQ(p.workspace_bytes, 0u);
          } else {
            EXPECT_EQ(p.o_part_bytes, rows * hd * 4);
            EXPECT_GE(p.workspace_bytes, p.o_part_bytes + rows * 4);
            EXPECT_EQ(p.o_part_bytes % 16, 0u);
          }
        }
      }
    }
  }
  // A forced split count is honoured exactly when the cache is long enough.
  const ad::DecodePlan p = h200_plan(decode_dims(3, 65, 32, 8, 128), 3);
  EXPECT_EQ(p.num_splits, 3);
  EXPECT_EQ(p.split_tokens, 22);
}

TEST(AttentionDecodePlan, WorkspaceCheckNamesTheBytes) {
  const ad::DecodePlan p = h200_plan(decode_dims(1, 8192, 32, 8, 128));  // 16 splits
  ASSERT_GT(p.workspace_bytes, 0u);
  const std::string needed = std::to_string(p.workspace_bytes);
  try {
    ad::check_decode_workspace(p, fake_ptr(), p.workspace_bytes - 1);
    ADD_FAILURE() << "no error for a short workspace";
  } catch (const kjit::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("workspace too small"), std::string::npos) << what;
    EXPECT_NE(what.find("needs " + needed + " bytes"), std::string::npos) << what;
  }
  EXPECT_THROW(ad::check_decode_workspace(p, nullptr, p.workspace_bytes), kjit::InvalidArgument);
  EXPECT_THROW(ad::check_decode_workspace(p, fake_ptr(8), p.workspace_bytes), kjit::InvalidArgument);
  EXPECT_NO_THROW(ad::check_decode_workspace(p, fake_ptr(), p.workspace_bytes));
  // One split needs no workspace at all.
  EXPECT_NO_THROW(ad::check_decode_workspace(h200_plan(decode_dims(64, 4096, 32, 8, 128)), nullptr, 0));
}

TEST(AttentionDecodeFamily, SpaceAndSpecs) {
  const kjit::Family& f = kjit::attention::decode_family();
  EXPECT_EQ(f.name, "attention.decode");
  EXPECT_EQ(f.min_sm, 80);
  EXPECT_FALSE(f.defaults.empty());
  const kjit::ProgramSpec spec = f.spec({{"head_dim", "256"}, {"rows", "16"}, {"merge", "kernel"}});
  // The decode kernel alone: the merge kernel is attention.decode_merge's program.
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::attention::decode_kernel<256, 16, kjit::attention::ContigKV, false>");
  EXPECT_EQ(spec.source_name, "attention/decode.cu");
  EXPECT_EQ(f.spec({{"head_dim", "64"}, {"rows", "8"}, {"merge", "cluster"}}).name_expressions[0],
            "kjit::attention::decode_kernel<64, 8, kjit::attention::ContigKV, true>");
  EXPECT_EQ(kjit::attention::paged_decode_family()
                .spec({{"head_dim", "128"}, {"rows", "8"}, {"merge", "cluster"}})
                .name_expressions[0],
            "kjit::attention::decode_kernel<128, 8, kjit::attention::PagedKV, true>");
  EXPECT_THROW(f.spec({{"head_dim", "96"}, {"rows", "8"}, {"merge", "kernel"}}), kjit::InvalidArgument);
  // A point written before merge existed runs as it did then: merge=kernel.
  EXPECT_EQ(f.spec({{"head_dim", "128"}, {"rows", "8"}}).name_expressions,
            f.spec({{"head_dim", "128"}, {"rows", "8"}, {"merge", "kernel"}}).name_expressions);
  EXPECT_THROW(f.spec({{"head_dim", "128"}, {"merge", "kernel"}}), kjit::InvalidArgument);  // no rows
  EXPECT_THROW(f.spec({{"head_dim", "128"}, {"rows", "8"}, {"merge", "auto"}}), kjit::InvalidArgument);
}

// merge is performance-only (a KJIT_JIT=async fallback may run the other value), its values are
// DecodeMerge's names and codes, and merge=cluster has a kernel from sm_90 only.
TEST(AttentionDecodeFamily, MergeParameter) {
  for (const kjit::Family* f : {&kjit::attention::decode_family(), &kjit::attention::paged_decode_family()}) {
    SCOPED_TRACE(f->name);
    const int i = f->param_index("merge");
    ASSERT_GE(i, 0);
    const kjit::FamilyParam& param = f->params[static_cast<size_t>(i)];
    EXPECT_TRUE(param.performance_only);
    ASSERT_EQ(param.values.size(), 2u);
    EXPECT_EQ(param.values[0].text, "kernel");
    EXPECT_EQ(param.values[0].code, static_cast<int64_t>(DecodeMerge::kKernel));
    EXPECT_EQ(param.values[1].text, "cluster");
    EXPECT_EQ(param.values[1].code, static_cast<int64_t>(DecodeMerge::kCluster));
    const kjit::Point kernel = f->parse({{"head_dim", "128"}, {"rows", "8"}, {"merge", "kernel"}});
    const kjit::Point cluster = f->parse({{"head_dim", "128"}, {"rows", "8"}, {"merge", "cluster"}});
    EXPECT_TRUE(f->same_semantics(cluster, *f, kernel));
    for (const char* t : {"sm_80", "sm_89"}) {
      EXPECT_EQ(f->unsupported_reason(kernel, kjit::Target::parse(t)), "") << t;
      EXPECT_NE(f->unsupported_reason(cluster, kjit::Target::parse(t)).find("merge=cluster needs thread-block clusters"),
                std::string::npos)
          << t;
    }
    for (const char* t : {"sm_90", "sm_90a", "sm_100a", "compute_90"}) {
      EXPECT_EQ(f->unsupported_reason(cluster, kjit::Target::parse(t)), "") << t;
    }
    // Every default in both merges.
    size_t clusters = 0;
    for (const kjit::ParamMap& m : f->defaults) clusters += m.at("merge") == "cluster";
    EXPECT_EQ(2 * clusters, f->defaults.size());
  }
}

TEST(AttentionDecodeFamily, MergeIsItsOwnProgram) {
  const kjit::Family& m = kjit::attention::decode_merge_family();
  EXPECT_EQ(m.name, "attention.decode_merge");
  EXPECT_EQ(&kjit::family("attention.decode_merge"), &m);
  EXPECT_EQ(m.min_sm, kjit::attention::decode_family().min_sm);
  ASSERT_EQ(m.params.size(), 1u);
  // Every head_dim decode takes, each a default: a precompiled cache serves split plans.
  EXPECT_EQ(m.params[0].texts(), kjit::attention::decode_family().params[0].texts());
  EXPECT_EQ(m.default_points().size(), m.params[0].values.size());
  const kjit::ProgramSpec spec = m.spec({{"head_dim", "128"}});
  EXPECT_EQ(spec.family, "attention.decode_merge");
  EXPECT_EQ(spec.template_args, "head_dim=128");
  EXPECT_EQ(spec.source_name, "attention/decode_merge.cu");
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::attention::decode_merge_kernel<128>");
  // Neither program's text holds the other kernel or its params header.
  const kjit::detail::KernelSources sources("");
  const std::optional<std::string> merge_text = sources.read(spec.source_name);
  const std::optional<std::string> decode_text = sources.read(
      kjit::attention::decode_family().spec({{"head_dim", "128"}, {"rows", "8"}, {"merge", "kernel"}}).source_name);
  ASSERT_TRUE(merge_text && decode_text);
  EXPECT_EQ(merge_text->find("decode_kernel("), std::string::npos);
  EXPECT_EQ(merge_text->find("attention/decode_params.h"), std::string::npos);
  EXPECT_NE(merge_text->find("decode_merge_kernel("), std::string::npos);
  EXPECT_EQ(decode_text->find("decode_merge_kernel("), std::string::npos);
  EXPECT_EQ(decode_text->find("attention/decode_merge_params.h"), std::string::npos);
  EXPECT_NE(decode_text->find("decode_kernel("), std::string::npos);
  EXPECT_EQ(sources.read("attention/decode_params.h")->find("DecodeMergeParams"), std::string::npos);
  EXPECT_THROW(m.spec({{"head_dim", "96"}}), kjit::InvalidArgument);
}

// The merge program is the ops' second program, only when the plan splits, at the call's
// head_dim, the same point for the contiguous and the paged op (one cached cubin for both).
TEST(AttentionDecodeFamily, MergeChoiceOnlyWhenSplit) {
  static_assert(kjit::detail::HasSecondProgram<ad::DecodeOp>::value);
  static_assert(kjit::detail::HasSecondProgram<ad::PagedDecodeOp>::value);
  const ad::DecodeDims d = decode_dims(1, 8192, 32, 8, 256);
  const ad::DecodePlan one = ad::plan_decode(d, 1, kH200Sms, 1);
  ASSERT_EQ(one.num_splits, 1);
  EXPECT_EQ(ad::DecodeOp::second_choice(d, one).family, nullptr);
  const ad::DecodePlan split = ad::plan_decode(d, 4, kH200Sms, 1);
  ASSERT_EQ(split.num_splits, 4);
  const kjit::detail::Choice c = ad::DecodeOp::second_choice(d, split);
  ASSERT_EQ(c.family, &kjit::attention::decode_merge_family());
  EXPECT_EQ(c.family->describe(c.point), "head_dim=256");
  ad::PagedDecodeDims pd;
  pd.head_dim = 256;
  const kjit::detail::Choice pc = ad::PagedDecodeOp::second_choice(pd, split);
  EXPECT_EQ(pc.family, c.family);
  EXPECT_EQ(pc.point, c.point);
  // A cluster plan merges in the decode kernel: no second program.
  const ad::DecodePlan cluster = ad::plan_decode(d, 4, kH200Sms, 1, 0, DecodeMerge::kAuto, true);
  ASSERT_EQ(cluster.merge, DecodeMerge::kCluster);
  EXPECT_EQ(ad::DecodeOp::second_choice(d, cluster).family, nullptr);
  EXPECT_EQ(ad::PagedDecodeOp::second_choice(pd, cluster).family, nullptr);
}

// Every specialization compiles for the oldest and the H200 arch (the cluster merge on the
// H200's only: it has no kernel below sm_90, where the family refuses it), and ptxas reports no
// spills. (attention_paged_args_test compiles the paged family's.)
TEST(AttentionDecodeFamily, EverySpecializationCompilesWithoutSpills) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  const kjit::Family& f = kjit::attention::decode_family();
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const kjit::Target target = kjit::Target::parse(arch);
    for (const char* hd : {"64", "128", "256"}) {
      for (const char* rows : {"8", "16"}) {
        for (const char* merge : {"kernel", "cluster"}) {
          const kjit::ParamMap params{{"head_dim", hd}, {"rows", rows}, {"merge", merge}};
          SCOPED_TRACE(testing::Message() << arch << " " << f.describe(f.parse(params)));
          if (std::string why = f.unsupported_reason(params, target); !why.empty()) {
            EXPECT_TRUE(std::string(merge) == "cluster" && target.sm() < 90) << why;
            continue;
          }
          const auto prog = rt.compile(f.spec(params), f.compile_target(f.parse(params), target));
          ASSERT_EQ(prog->kernels.size(), 1u);
          for (const auto& k : prog->kernels) {
            std::printf("%s %s: %d registers, %d spill bytes\n", arch, k.name_expression.c_str(), k.registers,
                        k.spill_bytes);
            EXPECT_LE(k.spill_bytes, 0) << k.name_expression;
            EXPECT_LE(k.registers, 255) << k.name_expression;
          }
        }
      }
      SCOPED_TRACE(testing::Message() << arch << " attention.decode_merge head_dim=" << hd);
      const auto merge = rt.compile(kjit::attention::decode_merge_family().spec({{"head_dim", hd}}),
                                    kjit::Target::parse(arch));
      ASSERT_EQ(merge->kernels.size(), 1u);
      std::printf("%s %s: %d registers, %d spill bytes\n", arch, merge->kernels[0].name_expression.c_str(),
                  merge->kernels[0].registers, merge->kernels[0].spill_bytes);
      EXPECT_LE(merge->kernels[0].spill_bytes, 0);
    }
  }
}

}  // namespace
