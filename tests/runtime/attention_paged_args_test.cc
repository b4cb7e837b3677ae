// Host-only checks of kjit::attention::paged_decode and append_paged_kv: every validation rule
// fires with a message naming the op and the tensor (before any driver call), the paged split
// planner, the family specs, and that every specialization compiles for sm_80/89/90a/100a without
// spills on sm_80/sm_90a. No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "runtime/ops/attention/paged_append.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "tests/runtime/decode_dims.hpp"
#include "kjit/fast_div.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::attention::AppendPagedKVArgs;
using kjit::attention::PagedDecodeArgs;
using kjit::attention::PagedKVCache;
namespace ad = kjit::attention::detail;

constexpr int64_t kB = 3, kHq = 8, kHkv = 2, kD = 128, kPages = 40, kPs = 16, kNnz = 30;

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

PagedKVCache valid_cache() {
  PagedKVCache c;
  c.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kPages, kPs, kHkv, kD}, {}, 0);
  c.v = TensorRef(fake_ptr(0x900000), DType::kBF16, {kPages, kPs, kHkv, kD}, {}, 0);
  c.indptr = TensorRef(fake_ptr(0x2000000), DType::kI32, {kB + 1}, {}, 0);
  c.page_indices = TensorRef(fake_ptr(0x2001000), DType::kI32, {kNnz}, {}, 0);
  c.last_page_len = TensorRef(fake_ptr(0x2002000), DType::kI32, {kB}, {}, 0);
  return c;
}

PagedDecodeArgs valid_decode() {
  PagedDecodeArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, 1, kHq, kD}, {}, 0);
  a.cache = valid_cache();
  a.out = TensorRef(fake_ptr(0x40000), DType::kBF16, {kB, 1, kHq, kD}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x80000), DType::kF32, {kB, kHq}, {}, 0);
  return a;
}

AppendPagedKVArgs valid_append() {
  AppendPagedKVArgs a;
  a.k = TensorRef(fake_ptr(0x3000000), DType::kBF16, {5, kHkv, kD}, {}, 0);
  a.v = TensorRef(fake_ptr(0x3100000), DType::kBF16, {5, kHkv, kD}, {}, 0);
  a.cache = valid_cache();
  a.append_indptr = TensorRef(fake_ptr(0x3200000), DType::kI32, {kB + 1}, {}, 0);
  return a;
}

template <class Args>
void expect_invalid(const char* op, Args a, const std::function<void(Args&)>& edit,
                    const std::function<void(const Args&)>& validate, const std::function<void(const Args&)>& run,
                    std::initializer_list<const char*> needles) {
  edit(a);
  for (int via_op = 0; via_op < 2; ++via_op) {
    try {
      if (via_op) {
        run(a);
      } else {
        validate(a);
      }
      ADD_FAILURE() << "no error (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(op), std::string::npos) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

void decode_invalid(const std::function<void(PagedDecodeArgs&)>& edit, std::initializer_list<const char*> needles) {
  expect_invalid<PagedDecodeArgs>(
      "kjit::attention::paged_decode", valid_decode(), edit, [](const PagedDecodeArgs& a) { ad::validate_paged_decode(a); },
      [](const PagedDecodeArgs& a) { kjit::attention::paged_decode(a, nullptr, 0, nullptr); }, needles);
  // The workspace query refuses by the same rules, naming itself (it validates before the device).
  PagedDecodeArgs a = valid_decode();
  edit(a);
  try {
    kjit::attention::paged_decode_workspace_bytes(a);
    ADD_FAILURE() << "no error from the workspace query (expected: " << *needles.begin() << ")";
  } catch (const kjit::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("kjit::attention::paged_decode_workspace_bytes: ", 0), 0u) << what;
    for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
  }
}

void append_invalid(const std::function<void(AppendPagedKVArgs&)>& edit, std::initializer_list<const char*> needles) {
  expect_invalid<AppendPagedKVArgs>(
      "kjit::attention::append_paged_kv", valid_append(), edit, [](const AppendPagedKVArgs& a) { ad::validate_append(a); },
      [](const AppendPagedKVArgs& a) { kjit::attention::append_paged_kv(a, nullptr); }, needles);
}

TEST(AttentionPagedArgs, ValidArgsPass) {
  const ad::PagedDecodeDims d = ad::validate_paged_decode(valid_decode());
  EXPECT_EQ(d.batch, kB);
  EXPECT_EQ(d.q_heads, kHq);
  EXPECT_EQ(d.group, kHq / kHkv);
  EXPECT_EQ(d.cache.num_pages, kPages);
  EXPECT_EQ(d.cache.page_size, kPs);
  EXPECT_EQ(d.cache.page_rows, kPs);
  EXPECT_EQ(d.cache.page_div.shift, 4u);  // page size 16: a shift (the multiplier adds nothing)
  EXPECT_EQ(d.cache.page_div.magic, 1u);
  EXPECT_EQ(d.cache.slot_stride, kHkv * kD);
  EXPECT_EQ(d.cache.nnz, kNnz);
  EXPECT_TRUE(d.has_lse);
  // K and V interleaved per page: [pages, 2, ps, H, D] halves share strides, page_rows = 2·ps.
  PagedDecodeArgs a = valid_decode();
  const std::initializer_list<int64_t> strides = {2 * kPs * kHkv * kD, kHkv * kD, kD, 1};
  a.cache.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kPages, kPs, kHkv, kD}, strides, 0);
  a.cache.v = TensorRef(fake_ptr(0x100000 + kPs * kHkv * kD * 2), DType::kBF16, {kPages, kPs, kHkv, kD}, strides, 0);
  EXPECT_EQ(ad::validate_paged_decode(a).cache.page_rows, 2 * kPs);
  // Page size 1 (token-level indirection) and 7 (not a power of two).
  a = valid_decode();
  a.cache.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kPages, 1, kHkv, kD}, {}, 0);
  a.cache.v = TensorRef(fake_ptr(0x900000), DType::kBF16, {kPages, 1, kHkv, kD}, {}, 0);
  const ad::PagedDecodeDims one = ad::validate_paged_decode(a);
  EXPECT_EQ(one.cache.page_rows, 1);
  EXPECT_EQ(one.cache.slot_stride, kHkv * kD);
  EXPECT_EQ(one.cache.page_div.shift, 0u);
  a.cache.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kPages, 7, kHkv, kD}, {}, 0);
  a.cache.v = TensorRef(fake_ptr(0x900000), DType::kBF16, {kPages, 7, kHkv, kD}, {}, 0);
  const kjit::FastDiv seven = ad::validate_paged_decode(a).cache.page_div;
  EXPECT_EQ(seven.shift, 3u);
  EXPECT_EQ(kjit::fast_quotient(699, seven), 99u);
  // An empty page table (nnz 0) is fine.
  a = valid_decode();
  a.cache.page_indices = TensorRef(nullptr, DType::kI32, {0}, {}, 0);
  EXPECT_NO_THROW(ad::validate_paged_decode(a));
  EXPECT_NO_THROW(ad::validate_append(valid_append()));
}

TEST(AttentionPagedArgs, DecodeQAndOutputRules) {
  decode_invalid([](PagedDecodeArgs& a) { a.q = {}; }, {"q is required"});
  decode_invalid([](PagedDecodeArgs& a) { a.q.dtype = DType::kF16; }, {"q must be bf16"});
  decode_invalid([](PagedDecodeArgs& a) { a.q.shape[1] = 2; }, {"q dim 1 must be 1"});
  decode_invalid([](PagedDecodeArgs& a) { a.q.device = -1; }, {"q must be on a CUDA device"});
  decode_invalid([](PagedDecodeArgs& a) { a.q.data = fake_ptr(8); }, {"q data pointer", "16-byte aligned"});
  decode_invalid([](PagedDecodeArgs& a) { a.out.shape[2] = kHq / 2; }, {"out dim 2", "q_heads"});
  decode_invalid([](PagedDecodeArgs& a) { a.out.dtype = DType::kF32; }, {"out must be bf16"});
  decode_invalid([](PagedDecodeArgs& a) { a.lse.shape[0] = kB + 1; }, {"lse dim 0", "batch"});
  decode_invalid([](PagedDecodeArgs& a) { a.lse.dtype = DType::kBF16; }, {"lse must be f32"});
  decode_invalid([](PagedDecodeArgs& a) { a.scale = NAN; }, {"scale must be finite"});
  decode_invalid([](PagedDecodeArgs& a) { a.num_splits = -1; }, {"num_splits must be in"});
  decode_invalid([](PagedDecodeArgs& a) { a.num_splits = ad::kMaxPagedSplits + 1; },
                 {"num_splits must be in [0, ", "(0 = auto)"});
  decode_invalid([](PagedDecodeArgs& a) { a.lse.data = fake_ptr(0x80000 + 2); }, {"lse data pointer", "4-byte aligned"});
  decode_invalid([](PagedDecodeArgs& a) { a.kv_len_hint = -5; }, {"kv_len_hint must be >= 0"});
  decode_invalid(
      [](PagedDecodeArgs& a) {
        a.merge = kjit::attention::DecodeMerge::kCluster;
        a.num_splits = 12;
      },
      {"merge 'cluster' combines at most 8 splits", "num_splits=12"});
  decode_invalid([](PagedDecodeArgs& a) { a.merge = static_cast<kjit::attention::DecodeMerge>(5); },
                 {"merge must be one of 'auto', 'kernel', 'cluster'"});
}

TEST(AttentionPagedArgs, CacheRules) {
  decode_invalid([](PagedDecodeArgs& a) { a.cache.k = {}; }, {"cache.k is required"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.v.dtype = DType::kF16; }, {"cache.v must be bf16"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.k.shape[3] = 64; a.cache.v.shape[3] = 64; },
                 {"cache.k dim 3 must be head_dim"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.v.shape[0] = kPages - 1; }, {"cache.v must have the shape of cache.k"});
  decode_invalid(
      [](PagedDecodeArgs& a) {
        a.cache.v = TensorRef(fake_ptr(0x900000), DType::kBF16, {kPages, kPs, kHkv, kD},
                              {kPs * kHkv * kD + 64, kHkv * kD, kD, 1}, 0);
      },
      {"cache.v must have the strides of cache.k"});
  // A page stride that is not a multiple of the slot stride.
  decode_invalid(
      [](PagedDecodeArgs& a) {
        const std::initializer_list<int64_t> strides = {kPs * kHkv * kD + 8, kHkv * kD, kD, 1};
        a.cache.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kPages, kPs, kHkv, kD}, strides, 0);
        a.cache.v = TensorRef(fake_ptr(0x900000), DType::kBF16, {kPages, kPs, kHkv, kD}, strides, 0);
      },
      {"page stride", "multiple of its slot stride"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.k.data = fake_ptr(0x100000 + 4); }, {"cache.k data pointer"});
  decode_invalid(
      [](PagedDecodeArgs& a) {
        a.cache.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kPages, kPs, 3, kD}, {}, 0);
        a.cache.v = TensorRef(fake_ptr(0x900000), DType::kBF16, {kPages, kPs, 3, kD}, {}, 0);
      },
      {"q_heads (8", "multiple of kv_heads (3"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.indptr.shape[0] = kB; }, {"cache.indptr must have batch + 1 = 4"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.indptr.dtype = DType::kI64; }, {"cache.indptr must be i32"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.page_indices.strides[0] = 2; }, {"cache.page_indices must be contiguous"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.page_indices.device = 1; }, {"cache.page_indices is on CUDA device 1"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.last_page_len.shape[0] = kB + 1; },
                 {"cache.last_page_len must have 3 elements"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.last_page_len = {}; }, {"cache.last_page_len is required"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.k.shape[1] = 0; a.cache.v.shape[1] = 0; }, {"page_size", ">= 1"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.k.shape[2] = 0; a.cache.v.shape[2] = 0; },
                 {"cache.k must have at least one kv head (dim 2)"});
  decode_invalid([](PagedDecodeArgs& a) { a.cache.indptr.data = fake_ptr(0x2000000 + 2); },
                 {"cache.indptr data pointer", "4-byte aligned"});
}

TEST(AttentionPagedArgs, AppendRules) {
  append_invalid([](AppendPagedKVArgs& a) { a.k = {}; }, {"k is required"});
  append_invalid([](AppendPagedKVArgs& a) { a.v.shape[0] = 4; }, {"v must have the shape of k"});
  append_invalid([](AppendPagedKVArgs& a) { a.k.shape[1] = 3; a.v.shape[1] = 3; }, {"k dim 1", "kv_heads"});
  append_invalid([](AppendPagedKVArgs& a) { a.k.dtype = DType::kF32; }, {"k must be bf16"});
  append_invalid([](AppendPagedKVArgs& a) { a.k.device = -1; }, {"k must be on a CUDA device, got host memory"});
  append_invalid([](AppendPagedKVArgs& a) { a.k = TensorRef(fake_ptr(0x3000000), DType::kBF16, {5, kHkv}, {}, 0); },
                 {"k must be 3-d"});
  append_invalid([](AppendPagedKVArgs& a) { a.k.shape[2] = 96; a.v.shape[2] = 96; },
                 {"k head_dim (dim 2) must be 64, 128 or 256"});
  append_invalid(
      [](AppendPagedKVArgs& a) {
        a.batch_indices = TensorRef(fake_ptr(0x3300000), DType::kI32, {5}, {}, 0);
        a.positions = TensorRef(fake_ptr(0x3400000), DType::kI32, {5}, {}, 0);
      },
      {"either batch_indices and positions"});
  append_invalid([](AppendPagedKVArgs& a) { a.append_indptr = {}; }, {"either batch_indices and positions"});
  append_invalid(
      [](AppendPagedKVArgs& a) {
        a.append_indptr = {};
        a.batch_indices = TensorRef(fake_ptr(0x3300000), DType::kI32, {5}, {}, 0);
      },
      {"positions is required"});
  append_invalid(
      [](AppendPagedKVArgs& a) {
        a.append_indptr = {};
        a.batch_indices = TensorRef(fake_ptr(0x3300000), DType::kI32, {5}, {}, 0);
        a.positions = TensorRef(fake_ptr(0x3400000), DType::kI32, {4}, {}, 0);
      },
      {"positions must have 5 elements"});
  append_invalid([](AppendPagedKVArgs& a) { a.append_indptr.shape[0] = kB + 2; }, {"append_indptr must have 4 elements"});
  append_invalid([](AppendPagedKVArgs& a) { a.cache.k.shape[3] = 64; a.cache.v.shape[3] = 64; },
                 {"cache.k dim 3 must be head_dim"});
}

constexpr int kH200Sms = 132;

TEST(AttentionPagedPlan, SplitsFromTheHintOrTheRequest) {
  ad::PagedDecodeDims d = paged_decode_dims(16, 4096, 32, 8, 128, 16);  // 256 pages a request
  const ad::DecodePlan p = ad::plan_paged_decode(d, 0, 0, kH200Sms, 2);
  EXPECT_EQ(p.split_tokens, 0);  // each request splits its own length on the device
  EXPECT_GT(p.num_splits, 1);
  EXPECT_EQ(p.ctas, 16 * 8 * p.num_splits);
  EXPECT_GE(p.ctas, kH200Sms);
  // The same plan as the contiguous decode's for the same length.
  EXPECT_EQ(p.num_splits, ad::plan_decode(decode_dims(16, 4096, 32, 8, 128), 0, kH200Sms, 2).num_splits);
  // A hint overrides the average; a request is exact.
  EXPECT_EQ(ad::plan_paged_decode(d, 0, 64, kH200Sms, 2).num_splits, 1);
  const ad::DecodePlan forced = ad::plan_paged_decode(d, 7, 0, kH200Sms, 2);
  EXPECT_EQ(forced.num_splits, 7);
  const size_t rows = 16 * 32 * 7;
  EXPECT_EQ(forced.o_part_bytes, rows * 128 * 4);
  EXPECT_GE(forced.workspace_bytes, forced.o_part_bytes + rows * 4);
  const ad::DecodePlan one = ad::plan_paged_decode(d, 1, 0, kH200Sms, 2);
  EXPECT_EQ(one.workspace_bytes, 0u);
  // Group 32: two 16-row M tiles.
  d.q_heads = 256;
  d.group = 32;
  const ad::DecodePlan m = ad::plan_paged_decode(d, 2, 0, kH200Sms, 2);
  EXPECT_EQ(m.heads_per_cta, 16);
  EXPECT_EQ(m.m_tiles, 2);
  EXPECT_EQ(m.ctas, 16 * 8 * 2 * 2);
  // No pages at all.
  d.cache.nnz = 0;
  EXPECT_EQ(ad::plan_paged_decode(d, 0, 0, kH200Sms, 2).num_splits, 1);
}

TEST(AttentionPagedPlan, RaggedBatchesSplitTheLongestRequests) {
  // 32 requests of 4096 tokens on average (the pages' count) whose longest has 8191 (the hint):
  // each request splits its own length, so ceil(2 · 8191 / 4096) = 4 splits keep the longest
  // requests' CTAs near half the mean, where the waves' plan for equal CTAs would take 1.
  ad::PagedDecodeDims d = paged_decode_dims(32, 4096, 64, 8, 128, 16);
  ad::DecodeDims even = decode_dims(32, 8191, 64, 8, 128);
  ASSERT_EQ(ad::plan_decode(even, 0, kH200Sms, 2).num_splits, 1);
  EXPECT_EQ(ad::plan_paged_decode(d, 0, 8191, kH200Sms, 2).num_splits, 4);
  // Within 1.5× of the mean: the waves' plan.
  even.max_kv_len = 6000;
  EXPECT_EQ(ad::plan_paged_decode(d, 0, 6000, kH200Sms, 2).num_splits, ad::plan_decode(even, 0, kH200Sms, 2).num_splits);
  // Far longer than the mean: at most kDecodeMaxClusterSplits, so a cluster can still merge them.
  EXPECT_EQ(ad::plan_paged_decode(d, 0, 100000, kH200Sms, 2).num_splits, kjit::attention::kDecodeMaxClusterSplits);
  // A requested count is exact.
  EXPECT_EQ(ad::plan_paged_decode(d, 2, 8191, kH200Sms, 2).num_splits, 2);
}

TEST(AttentionPagedPlan, FillsEveryResidentSlotOnH200) {
  // Two decode CTAs are resident per SM at every head dim, and the paged planner counts both
  // (measured: 2 splits of B16 Hkv8 L4096 run 0.92x the contiguous kernel at page 1/16/64
  // against 0.81-0.88x with 1).
  constexpr int kH200SmemPerSm = 233472;
  for (int hd : {64, 128, 256}) EXPECT_EQ(ad::paged_ctas_per_sm(hd, kH200SmemPerSm), 2) << hd;
  EXPECT_EQ(ad::paged_ctas_per_sm(128, 10 * 1024), 1);  // never zero, even when nothing fits
  const ad::PagedDecodeDims d = paged_decode_dims(16, 4096, 32, 8, 128, 16);
  const ad::DecodePlan p =
      ad::plan_paged_decode(d, 0, 0, kH200Sms, ad::paged_ctas_per_sm(d.head_dim, kH200SmemPerSm));
  EXPECT_EQ(p.num_splits, 2);
  EXPECT_EQ(p.ctas, 256);
}

/// An H200 as the planners see it: cc 9.0, 132 SMs, 227 KiB of shared memory per CTA (opt-in),
/// 228 KiB per SM.
kjit::DeviceInfo h200() {
  kjit::DeviceInfo info;
  info.cc_major = 9;
  info.sm_count = kH200Sms;
  info.max_smem_per_block_optin = 227 * 1024;
  info.max_smem_per_sm = 228 * 1024;
  return info;
}

TEST(AttentionPagedPlan, OpPlansTheFamilyPointOnTheDevice) {
  using Op = ad::PagedDecodeOp;
  PagedDecodeArgs a = valid_decode();
  ad::PagedDecodeDims d = Op::validate(a);
  ad::DecodePlan p = Op::plan(d, h200());
  // The planner's split with every resident CTA counted, and the paged decode family's point.
  const ad::DecodePlan expected = ad::plan_paged_decode(d, 0, 0, kH200Sms, ad::paged_ctas_per_sm(kD, 228 * 1024));
  EXPECT_EQ(p.num_splits, expected.num_splits);
  EXPECT_EQ(p.ctas, expected.ctas);
  ASSERT_EQ(p.choice.family, &kjit::attention::paged_decode_family());
  EXPECT_EQ(p.choice.family->describe(p.choice.point),
            p.num_splits > 1 ? "head_dim=128 rows=8 merge=cluster" : "head_dim=128 rows=8 merge=kernel");
  // The call's num_splits and kv_len_hint reach the planner through the dims.
  a.num_splits = 5;
  a.kv_len_hint = 64;
  d = Op::validate(a);
  EXPECT_EQ(d.requested_splits, 5);
  EXPECT_EQ(d.kv_len_hint, 64);
  EXPECT_EQ(Op::plan(d, h200()).num_splits, 5);
  // An empty batch names no kernel (nothing launches) and needs no workspace.
  d.batch = 0;
  p = Op::plan(d, h200());
  EXPECT_EQ(p.choice.family, nullptr);
  EXPECT_EQ(p.workspace_bytes, 0u);
}

// The case the cluster merge is for: B16 Hq32 Hkv8 D128 L4096 at page 16 plans two splits on
// the H200 (two resident CTAs per SM), which on sm_90+ combine in clusters of 2 instead of a
// second kernel; below sm_90 (and when forced) through the merge kernel. Same splits and
// workspace either way.
TEST(AttentionPagedPlan, TwoSplitsAtPage16MergeInClustersOnSm90) {
  using Op = ad::PagedDecodeOp;
  using kjit::attention::DecodeMerge;
  ad::PagedDecodeDims d = paged_decode_dims(16, 4096, 32, 8, 128, 16);
  const kjit::DeviceInfo h100 = planner_device(9, 0);
  const kjit::DeviceInfo a100 = planner_device(8, 0);
  const ad::DecodePlan cluster = Op::plan(d, h100);
  EXPECT_EQ(cluster.num_splits, 2);
  EXPECT_EQ(cluster.merge, DecodeMerge::kCluster);
  EXPECT_EQ(cluster.choice.family->describe(cluster.choice.point), "head_dim=128 rows=8 merge=cluster");
  EXPECT_EQ(Op::second_choice(d, cluster).family, nullptr);
  const ad::DecodePlan kernel = Op::plan(d, a100);
  EXPECT_EQ(kernel.num_splits, 2);
  EXPECT_EQ(kernel.merge, DecodeMerge::kKernel);
  EXPECT_EQ(Op::second_choice(d, kernel).family, &kjit::attention::decode_merge_family());
  EXPECT_EQ(cluster.workspace_bytes, kernel.workspace_bytes);
  EXPECT_GT(cluster.workspace_bytes, 0u);
  d.requested_merge = DecodeMerge::kKernel;
  EXPECT_EQ(Op::plan(d, h100).merge, DecodeMerge::kKernel);
  // Forced cluster: every request count 2..8 clusters on sm_90, and sm_80 refuses.
  d.requested_merge = DecodeMerge::kCluster;
  for (int splits = 2; splits <= 8; ++splits) {
    d.requested_splits = splits;
    const ad::DecodePlan p = Op::plan(d, h100);
    EXPECT_EQ(p.num_splits, splits);
    EXPECT_EQ(p.merge, DecodeMerge::kCluster);
    EXPECT_EQ(p.ctas, 16 * 8 * splits);
  }
  EXPECT_THROW(Op::plan(d, a100), kjit::Unsupported);
  // A hint long enough for more than 8 splits: auto keeps the merge kernel, a forced cluster
  // merge chooses among 1..8.
  d.requested_splits = 0;
  d.batch = 1;
  d.kv_len_hint = 1 << 16;
  d.cache.nnz = 4096;
  d.requested_merge = DecodeMerge::kAuto;
  const ad::DecodePlan many = Op::plan(d, h100);
  EXPECT_GT(many.num_splits, 8);
  EXPECT_EQ(many.merge, DecodeMerge::kKernel);
  d.requested_merge = DecodeMerge::kCluster;
  const ad::DecodePlan capped = Op::plan(d, h100);
  EXPECT_EQ(capped.num_splits, 8);
  EXPECT_EQ(capped.merge, DecodeMerge::kCluster);
}

TEST(AttentionPagedPlan, AppendGridAndPoint) {
  using Op = kjit::attention::detail::AppendOp;
  AppendPagedKVArgs a = valid_append();
  ad::AppendPlan p = Op::plan(Op::validate(a), h200());
  EXPECT_EQ(p.items, 5 * kHkv * (kD / 8));
  EXPECT_EQ(p.grid, 1u);  // 160 chunks: one CTA of kPagedAppendThreads
  ASSERT_EQ(p.choice.family, &kjit::attention::paged_append_family());
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 index=indptr");
  // At most 8 CTAs per SM: the kernel strides over the rest.
  a.k.shape[0] = a.v.shape[0] = 1 << 20;
  a.append_indptr = {};
  a.batch_indices = TensorRef(fake_ptr(0x3300000), DType::kI32, {1 << 20}, {}, 0);
  a.positions = TensorRef(fake_ptr(0x3400000), DType::kI32, {1 << 20}, {}, 0);
  p = Op::plan(Op::validate(a), h200());
  EXPECT_EQ(p.grid, 8u * kH200Sms);
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 index=positions");
  // No new tokens: nothing to launch.
  a.k.shape[0] = a.v.shape[0] = 0;
  a.batch_indices.shape[0] = a.positions.shape[0] = 0;
  EXPECT_EQ(Op::plan(Op::validate(a), h200()).choice.family, nullptr);
}

TEST(AttentionPagedFamily, SpaceAndSpecs) {
  const kjit::Family& f = kjit::attention::paged_decode_family();
  EXPECT_EQ(f.name, "attention.paged_decode");
  EXPECT_EQ(f.min_sm, 80);
  const kjit::ProgramSpec spec = f.spec({{"head_dim", "128"}, {"rows", "8"}, {"merge", "kernel"}});
  // The decode kernel alone: a split plan's merge kernel is attention.decode_merge's program.
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::attention::decode_kernel<128, 8, kjit::attention::PagedKV, false>");
  EXPECT_EQ(spec.source_name, "attention/decode.cu");
  const kjit::Family& g = kjit::attention::paged_append_family();
  EXPECT_EQ(g.name, "attention.paged_append");
  const kjit::ProgramSpec app = g.spec({{"head_dim", "64"}, {"index", "positions"}});
  ASSERT_EQ(app.name_expressions.size(), 1u);
  EXPECT_EQ(app.name_expressions[0], "kjit::attention::paged_append_kernel<64, false>");
  EXPECT_THROW(g.spec({{"head_dim", "64"}, {"index", "rows"}}), kjit::InvalidArgument);
  // Registered with the runtime's family list.
  EXPECT_EQ(kjit::family("attention.paged_decode").params.size(), f.params.size());
  EXPECT_EQ(kjit::family("attention.paged_append").params.size(), g.params.size());
}

// Every specialization compiles for every CI arch; no spills on sm_80 and sm_90a.
TEST(AttentionPagedFamily, EverySpecializationCompiles) {
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  config.disk_cache = false;
  kjit::Runtime rt(config);
  struct Job {
    const kjit::Family* family;
    kjit::ParamMap params;
    const char* arch;
  };
  std::vector<Job> jobs;
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a"}) {
    for (const char* hd : {"64", "128", "256"}) {
      for (const char* rows : {"8", "16"}) {
        jobs.push_back({&kjit::attention::paged_decode_family(), {{"head_dim", hd}, {"rows", rows}, {"merge", "kernel"}}, arch});
        // The cluster merge (sm_90+ only) on the H200's arch.
        if (std::string(arch) == "sm_90a") {
          jobs.push_back(
              {&kjit::attention::paged_decode_family(), {{"head_dim", hd}, {"rows", rows}, {"merge", "cluster"}}, arch});
        }
      }
      for (const char* index : {"positions", "indptr"}) {
        jobs.push_back({&kjit::attention::paged_append_family(), {{"head_dim", hd}, {"index", index}}, arch});
      }
    }
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      const Job& j = jobs[i];
      std::string what = j.family->name + " " + j.arch;
      for (const auto& [k, v] : j.params) what += " " + k + "=" + v;
      try {
        const auto prog = rt.compile(j.family->spec(j.params), kjit::Target::parse(j.arch));
        std::lock_guard lock(mutex);
        for (const auto& k : prog->kernels) {
          std::printf("%s: %s %d registers, %d spill bytes\n", what.c_str(), k.name_expression.c_str(), k.registers,
                      k.spill_bytes);
          const bool strict = std::string(j.arch) == "sm_80" || std::string(j.arch) == "sm_90a";
          if (strict) EXPECT_LE(k.spill_bytes, 0) << what << " " << k.name_expression;
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
  for (unsigned i = 0; i < n; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

}  // namespace
