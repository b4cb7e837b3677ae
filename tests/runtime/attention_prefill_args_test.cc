// Host-only checks of kjit::attention::prefill, plan_paged_prefill (both overloads) and paged_prefill: every
// validation rule fires with a message naming the op and the tensor (before any driver call), the
// tile and kernel choice (mma.sync or, on sm_90a, wgmma; the tuner's candidates), the ragged plan
// (q lengths 70, 10, 130), the family specs, and that every
// specialization compiles for sm_80/89/90a/100a (no spills on sm_80/sm_90a). No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "attention/prefill_params.h"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::attention::PagedPrefillArgs;
using kjit::attention::PagedPrefillPlan;
using kjit::attention::PrefillArgs;
namespace ad = kjit::attention::detail;

constexpr int64_t kB = 2, kLq = 100, kL = 300, kHq = 8, kHkv = 2, kD = 128;

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

PrefillArgs valid_prefill() {
  PrefillArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, kLq, kHq, kD}, {}, 0);
  a.k = TensorRef(fake_ptr(0x1000000), DType::kBF16, {kB, kL, kHkv, kD}, {}, 0);
  a.v = TensorRef(fake_ptr(0x2000000), DType::kBF16, {kB, kL, kHkv, kD}, {}, 0);
  a.kv_lens = TensorRef(fake_ptr(0x3000000), DType::kI32, {kB}, {}, 0);
  a.mask = TensorRef(fake_ptr(0x3100000), DType::kBool, {kB, kLq, kL}, {}, 0);
  a.out = TensorRef(fake_ptr(0x4000000), DType::kBF16, {kB, kLq, kHq, kD}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x5000000), DType::kF32, {kB, kHq, kLq}, {}, 0);
  a.causal = true;
  return a;
}

void prefill_invalid(const std::function<void(PrefillArgs&)>& edit, std::initializer_list<const char*> needles) {
  PrefillArgs a = valid_prefill();
  edit(a);
  for (int via_op = 0; via_op < 2; ++via_op) {
    try {
      if (via_op) {
        kjit::attention::prefill(a, nullptr);
      } else {
        ad::validate_prefill(a);
      }
      ADD_FAILURE() << "no error (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("kjit::attention::prefill"), std::string::npos) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

TEST(AttentionPrefillArgs, ValidArgsPass) {
  const ad::PrefillDims d = ad::validate_prefill(valid_prefill());
  EXPECT_EQ(d.batch, kB);
  EXPECT_EQ(d.q_len, kLq);
  EXPECT_EQ(d.max_kv_len, kL);
  EXPECT_EQ(d.group, kHq / kHkv);
  EXPECT_EQ(d.mask_rank, 3);
  EXPECT_TRUE(d.has_kv_lens && d.has_lse);
  PrefillArgs a = valid_prefill();
  a.mask = TensorRef(fake_ptr(0x3100000), DType::kU8, {kB, kL}, {}, 0);
  EXPECT_EQ(ad::validate_prefill(a).mask_rank, 2);
  a.mask = {};
  a.kv_lens = {};
  a.lse = {};
  const ad::PrefillDims e = ad::validate_prefill(a);
  EXPECT_FALSE(e.has_kv_lens || e.has_lse || e.mask_rank);
  // q_len 0 and an empty KV are fine (nothing to launch / zeros).
  a.q.shape[1] = 0;
  a.out.shape[1] = 0;
  EXPECT_NO_THROW(ad::validate_prefill(a));
  a = valid_prefill();
  a.mask = {};
  a.k.shape[1] = 0;
  a.v.shape[1] = 0;
  EXPECT_NO_THROW(ad::validate_prefill(a));
  // Any GQA ratio.
  a = valid_prefill();
  a.q.shape[2] = 6;
  a.out.shape[2] = 6;
  a.lse.shape[1] = 6;
  EXPECT_EQ(ad::validate_prefill(a).group, 3);
}

TEST(AttentionPrefillArgs, TensorRules) {
  prefill_invalid([](PrefillArgs& a) { a.q = {}; }, {"q is required"});
  prefill_invalid([](PrefillArgs& a) { a.q.dtype = DType::kF16; }, {"q must be bf16"});
  prefill_invalid([](PrefillArgs& a) { a.q.device = -1; }, {"q must be on a CUDA device"});
  prefill_invalid([](PrefillArgs& a) { a.q.shape[3] = 96; a.k.shape[3] = 96; a.v.shape[3] = 96; a.out.shape[3] = 96; },
                  {"head_dim", "64, 128 or 256"});
  prefill_invalid([](PrefillArgs& a) { a.q.data = fake_ptr(2); }, {"q data pointer", "16-byte aligned"});
  prefill_invalid([](PrefillArgs& a) { a.q.strides[3] = 2; }, {"q must have a contiguous last dimension"});
  prefill_invalid([](PrefillArgs& a) { a.k.shape[0] = 3; }, {"k dim 0", "batch"});
  prefill_invalid([](PrefillArgs& a) { a.k.shape[2] = 3; a.v.shape[2] = 3; }, {"q_heads (8", "multiple of kv_heads (3"});
  prefill_invalid([](PrefillArgs& a) { a.v.shape[1] = kL - 1; }, {"v dim 1", "max_kv_len"});
  prefill_invalid([](PrefillArgs& a) { a.v.dtype = DType::kF32; }, {"v must be bf16"});
  prefill_invalid([](PrefillArgs& a) { a.k.strides[1] = kHkv * kD + 4; a.k.strides[0] = kL * a.k.strides[1]; },
                  {"k stride of dim 1", "multiple of 16 bytes"});
  prefill_invalid([](PrefillArgs& a) { a.out.shape[1] = kLq + 1; }, {"out dim 1", "q_len"});
  prefill_invalid([](PrefillArgs& a) { a.out.device = 1; }, {"out is on CUDA device 1"});
  prefill_invalid([](PrefillArgs& a) { a.kv_lens.shape[0] = kB + 1; }, {"kv_lens must have 2 elements"});
  prefill_invalid([](PrefillArgs& a) { a.kv_lens.dtype = DType::kI64; }, {"kv_lens must be i32"});
  prefill_invalid([](PrefillArgs& a) { a.mask.dtype = DType::kF32; }, {"mask must be bool or u8"});
  prefill_invalid([](PrefillArgs& a) { a.mask.shape[1] = kLq + 1; }, {"mask dim 1", "q_len"});
  prefill_invalid([](PrefillArgs& a) { a.mask.shape[2] = kL + 1; }, {"mask dim 2", "max_kv_len"});
  prefill_invalid([](PrefillArgs& a) { a.mask = TensorRef(fake_ptr(0x3100000), DType::kBool, {kL}, {}, 0); },
                  {"mask must be 2-d", "or 3-d"});
  prefill_invalid([](PrefillArgs& a) { a.lse.shape[2] = kLq - 1; }, {"lse dim 2", "q_len"});
  prefill_invalid([](PrefillArgs& a) { a.lse = TensorRef(fake_ptr(0x5000000), DType::kF32, {kB, kHq}, {}, 0); },
                  {"lse must be 3-d"});
  prefill_invalid([](PrefillArgs& a) { a.scale = -1.f; }, {"scale must be >= 0"});
  prefill_invalid([](PrefillArgs& a) { a.scale = INFINITY; }, {"scale must be finite"});
  prefill_invalid([](PrefillArgs& a) { a.block_m = 32; }, {"block_m must be 0 (choose), 64 or 128"});
  prefill_invalid([](PrefillArgs& a) { a.q.shape[2] = 70000; a.out.shape[2] = 70000; a.lse.shape[1] = 70000; a.k.shape[2] = 1; a.v.shape[2] = 1; },
                  {"sizes out of range"});
}

TEST(AttentionPrefillPlan, TileChoiceAndShapes) {
  ad::PrefillDims d;
  d.batch = 4;
  d.q_len = 4096;
  d.q_heads = 32;
  d.head_dim = 128;
  EXPECT_EQ(ad::choose_prefill_block_m(d, 132, 2), 128);
  d.q_len = 64;
  EXPECT_EQ(ad::choose_prefill_block_m(d, 132, 2), 64);  // short queries
  d.batch = 1;
  d.q_len = 500;
  d.q_heads = 8;
  EXPECT_EQ(ad::choose_prefill_block_m(d, 132, 2), 64);  // 128-row tiles would leave SMs idle
  constexpr int kSmem = 233472;  // H200
  EXPECT_EQ(ad::prefill_ctas_per_sm(128, 128, kSmem), 2);
  EXPECT_EQ(ad::prefill_ctas_per_sm(64, 128, kSmem), 2);
  EXPECT_EQ(ad::prefill_ctas_per_sm(256, 128, kSmem), 1);
  // Every shape fits the 227 KiB a CTA may opt into and matches its template.
  for (int hd : {64, 128, 256}) {
    for (int bm : {64, 128}) {
      const auto s = kjit::attention::prefill_launch_shape(hd, bm);
      EXPECT_EQ(s.block_m, bm);
      EXPECT_LE(s.smem_bytes, 227 * 1024) << hd << " " << bm;
      EXPECT_EQ(s.threads % 128, 0);
    }
  }
  EXPECT_EQ(kjit::attention::prefill_launch_shape(96, 128).threads, 0);
  // The sm_90a kernel: three consumer warpgroups (192 rows) at hd64, two (128 rows) at hd128.
  const auto s64 = kjit::attention::prefill_sm90_launch_shape(64);
  const auto s128 = kjit::attention::prefill_sm90_launch_shape(128);
  EXPECT_EQ(s64.threads, 512);
  EXPECT_EQ(s64.block_m, 192);
  EXPECT_EQ(s128.threads, 384);
  EXPECT_EQ(s128.block_m, 128);
  EXPECT_LE(s128.smem_bytes, 227 * 1024);
  EXPECT_EQ(kjit::attention::prefill_sm90_launch_shape(256).threads, 0);
  EXPECT_EQ(kjit::attention::prefill_launch_shape(128, 32).threads, 0);
}

TEST(AttentionPrefillPlan, HeadGroupKeepsTheKvOfTheCtasInFlightSmall) {
  using kjit::attention::AttentionVariant;
  constexpr AttentionVariant kWgmma = AttentionVariant::kWgmma, kMma = AttentionVariant::kMma;
  ad::PrefillDims d;
  d.q_heads = 32;
  d.group = 1;
  d.head_dim = 128;
  d.max_kv_len = 4096;  // 2 MiB of K + V per head
  // No mask: one head's q tiles after another's, on both kernels.
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 1);
  EXPECT_EQ(ad::prefill_head_group(d, kMma), 1);
  d.causal = true;
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 2);
  EXPECT_EQ(ad::prefill_head_group(d, kMma), 32);  // mma.sync: heaviest tiles of every head first
  d.max_kv_len = 8192;
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 2);  // never below 2 under causal
  d.head_dim = 64;
  d.max_kv_len = 2048;  // 0.5 MiB
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 8);
  d.group = 8;  // GQA: 8 q heads share one K/V
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 32);  // capped at q_heads
  d.max_kv_len = 0;
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 32);
  d.q_heads = 1;
  d.group = 1;
  EXPECT_EQ(ad::prefill_head_group(d, kWgmma), 1);
  EXPECT_EQ(ad::prefill_head_group(d, kMma), 1);
}

/// A device as the planners see it, with an H200's SMs and shared memory (227 KiB per CTA
/// opt-in, 228 KiB per SM) and compute capability `major`.`minor` (9.0: the H200 itself).
kjit::DeviceInfo h200(int major = 9, int minor = 0) {
  kjit::DeviceInfo info;
  info.cc_major = major;
  info.cc_minor = minor;
  info.sm_count = 132;
  info.max_smem_per_block_optin = 227 * 1024;
  info.max_smem_per_sm = 228 * 1024;
  return info;
}

TEST(AttentionPrefillPlan, VariantFamilyAndTileOnTheDevice) {
  using Op = ad::PrefillOp;
  using kjit::attention::AttentionVariant;
  PrefillArgs a = valid_prefill();
  // A mask and kv_lens keep the call on the mma.sync kernel; the tile is the planner's choice.
  ad::PrefillDims d = Op::validate(a);
  ad::PrefillPlan p = Op::plan(d, h200());
  EXPECT_EQ(p.variant, AttentionVariant::kMma);
  ASSERT_EQ(p.choice.family, &kjit::attention::prefill_family());
  const int block_m = ad::choose_prefill_block_m(d, 132, ad::prefill_ctas_per_sm(kD, 128, 228 * 1024));
  EXPECT_EQ(p.block_m, block_m);
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 block_m=" + std::to_string(block_m) + " mask=bool");
  EXPECT_EQ(p.q_tiles, (kLq + block_m - 1) / block_m);
  EXPECT_EQ(p.workspace_bytes, 0u);
  a.block_m = 128;
  EXPECT_EQ(Op::plan(Op::validate(a), h200()).block_m, 128);
  a.block_m = 0;
  // Without them the H200 runs the wgmma kernel (128-row tiles); an sm_89 device the mma one.
  a.mask = {};
  a.kv_lens = {};
  d = Op::validate(a);
  p = Op::plan(d, h200());
  EXPECT_EQ(p.variant, AttentionVariant::kWgmma);
  ASSERT_EQ(p.choice.family, &kjit::attention::prefill_sm90_family());
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128");
  EXPECT_EQ(p.block_m, 128);
  EXPECT_EQ(p.q_tiles, 1);
  p = Op::plan(d, h200(8, 9));
  EXPECT_EQ(p.variant, AttentionVariant::kMma);
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 block_m=64 mask=none");
  // A layout TMA cannot address falls back to mma, unless wgmma is requested: then Unsupported.
  a.k.strides[1] = -a.k.strides[1];
  d = Op::validate(a);
  EXPECT_NE(d.tma_layout.find("k stride of dim 1"), std::string::npos);
  EXPECT_EQ(Op::plan(d, h200()).variant, AttentionVariant::kMma);
  d.variant = AttentionVariant::kWgmma;
  EXPECT_THROW(Op::plan(d, h200()), kjit::Unsupported);
  // An empty call names no kernel, but a strict request is still checked against the device.
  a = valid_prefill();
  a.q.shape[1] = a.out.shape[1] = a.mask.shape[1] = a.lse.shape[2] = 0;
  a.variant = AttentionVariant::kMma;
  d = Op::validate(a);
  EXPECT_EQ(Op::plan(d, h200()).choice.family, nullptr);
  d.variant = AttentionVariant::kWgmma;
  EXPECT_THROW(Op::plan(d, h200(8, 9)), kjit::Unsupported);
}

TEST(AttentionPrefillPlan, RaggedWorkMapOfThreeRequests) {
  const std::vector<int32_t> indptr = {0, 70, 80, 210};
  const PagedPrefillPlan p64 = kjit::attention::plan_paged_prefill(indptr.data(), 3, 128, 64);
  EXPECT_EQ(p64.q_tile_to_batch, (std::vector<int32_t>{0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(p64.q_tile_to_index, (std::vector<int32_t>{0, 1, 0, 0, 1, 2}));
  EXPECT_EQ(p64.num_work(), 6);
  EXPECT_EQ(p64.total_q, 210);
  EXPECT_EQ(p64.tile_rows, 64);
  EXPECT_EQ(p64.map_index_offset % 16, 0u);
  EXPECT_GE(p64.map_index_offset, 6 * sizeof(int32_t));
  EXPECT_GE(p64.workspace_bytes, p64.map_index_offset + 6 * sizeof(int32_t));
  const PagedPrefillPlan p128 = kjit::attention::plan_paged_prefill(indptr.data(), 3, 128, 128);
  EXPECT_EQ(p128.q_tile_to_batch, (std::vector<int32_t>{0, 1, 2, 2}));
  EXPECT_EQ(p128.q_tile_to_index, (std::vector<int32_t>{0, 0, 0, 1}));
  // The automatic choice: 128 rows for these lengths, 64 for decode-like short ones.
  EXPECT_EQ(kjit::attention::plan_paged_prefill(indptr.data(), 3, 128).tile_rows, 128);
  const std::vector<int32_t> short_q = {0, 1, 2, 10, 10};
  const PagedPrefillPlan s = kjit::attention::plan_paged_prefill(short_q.data(), 4, 64);
  EXPECT_EQ(s.tile_rows, 64);
  EXPECT_EQ(s.q_tile_to_batch, (std::vector<int32_t>{0, 1, 2}));  // request 3 has no queries
  // 192-row tiles (hd64, the sm_90a kernel's three-consumer tile) over a ragged batch with empty
  // requests: lengths 0, 1, 191, 0, 192, 193, 0 take 0, 1, 1, 0, 1, 2, 0 tiles.
  const std::vector<int32_t> ragged = {0, 0, 1, 192, 192, 384, 577, 577};
  const PagedPrefillPlan p192 = kjit::attention::plan_paged_prefill(ragged.data(), 7, 64, 192);
  EXPECT_EQ(p192.tile_rows, 192);
  EXPECT_EQ(p192.total_q, 577);
  EXPECT_EQ(p192.q_tile_to_batch, (std::vector<int32_t>{1, 2, 4, 5, 5}));
  EXPECT_EQ(p192.q_tile_to_index, (std::vector<int32_t>{0, 0, 0, 0, 1}));
  EXPECT_GE(p192.map_index_offset, 5 * sizeof(int32_t));
  EXPECT_GE(p192.workspace_bytes, p192.map_index_offset + 5 * sizeof(int32_t));
  // The same batch at 128 rows: 191, 192 and 193 rows take two tiles each.
  EXPECT_EQ(kjit::attention::plan_paged_prefill(ragged.data(), 7, 64, 128).q_tile_to_batch,
            (std::vector<int32_t>{1, 2, 2, 4, 4, 5, 5}));
  // No queries at all: no work, no workspace.
  const std::vector<int32_t> none = {0, 0, 0};
  const PagedPrefillPlan z = kjit::attention::plan_paged_prefill(none.data(), 2, 128);
  EXPECT_EQ(z.num_work(), 0);
  EXPECT_EQ(z.workspace_bytes, 0u);
  EXPECT_NO_THROW(kjit::attention::upload_paged_prefill_plan(z, nullptr, 0));
}

TEST(AttentionPrefillPlan, PlanRules) {
  const std::vector<int32_t> bad_start = {1, 5};
  EXPECT_THROW(kjit::attention::plan_paged_prefill(bad_start.data(), 1, 128), kjit::InvalidArgument);
  const std::vector<int32_t> decreasing = {0, 5, 3};
  try {
    kjit::attention::plan_paged_prefill(decreasing.data(), 2, 128);
    ADD_FAILURE() << "no error for a decreasing qo_indptr";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("non-decreasing"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> ok = {0, 5};
  EXPECT_THROW(kjit::attention::plan_paged_prefill(ok.data(), 1, 96), kjit::InvalidArgument);
  EXPECT_THROW(kjit::attention::plan_paged_prefill(ok.data(), 1, 128, 32), kjit::InvalidArgument);
  EXPECT_THROW(kjit::attention::plan_paged_prefill(nullptr, 1, 128), kjit::InvalidArgument);
  // 192-row tiles exist at head_dim 64 only (the sm_90a kernel's); the message names the rule.
  for (int64_t hd : {128, 256}) {
    try {
      kjit::attention::plan_paged_prefill(ok.data(), 1, hd, 192);
      ADD_FAILURE() << "no error for tile_rows 192 at head_dim " << hd;
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("plan_paged_prefill: tile_rows 192 runs only at head_dim 64"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(kjit::attention::plan_paged_prefill(ok.data(), 1, 64, 192).tile_rows, 192);
  try {
    kjit::attention::plan_paged_prefill(ok.data(), 1, 64, 256);
    ADD_FAILURE() << "no error for tile_rows 256";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tile_rows must be 0 (choose), 64, 128 or 192, got 256"), std::string::npos)
        << e.what();
  }
  // A short workspace is named before any driver call.
  const PagedPrefillPlan p = kjit::attention::plan_paged_prefill(ok.data(), 1, 128);
  try {
    kjit::attention::upload_paged_prefill_plan(p, fake_ptr(), p.workspace_bytes - 1);
    ADD_FAILURE() << "no error for a short workspace";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs " + std::to_string(p.workspace_bytes) + " bytes"), std::string::npos)
        << e.what();
  }
}

/// The tuned plan step's arguments over host arrays that outlive them: hd128, pages of 16, causal.
kjit::attention::PagedPrefillPlanArgs tuned_plan_args(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv,
                                                      const std::vector<int32_t>& last, int64_t q_heads) {
  kjit::attention::PagedPrefillPlanArgs a;
  a.qo_indptr_host = qo.data();
  a.kv_indptr_host = kv.data();
  a.last_page_len_host = last.data();
  a.batch = static_cast<int64_t>(last.size());
  a.q_heads = q_heads;
  a.head_dim = 128;
  a.page_size = 16;
  a.causal = true;
  return a;
}

/// plan_paged_prefill of `a` changed by `edit` throws InvalidArgument naming the op and `needle`.
void expect_plan_refused(const kjit::attention::PagedPrefillPlanArgs& a,
                         const std::function<void(kjit::attention::PagedPrefillPlanArgs&)>& edit, const char* needle) {
  kjit::attention::PagedPrefillPlanArgs b = a;
  edit(b);
  try {
    kjit::attention::plan_paged_prefill(b);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("plan_paged_prefill"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AttentionPrefillPlan, AForcedKernelGetsATileItRuns) {
  using kjit::attention::AttentionVariant;
  // Short requests (10 rows each): the rule takes 64-row tiles, which the Hopper kernel lacks.
  const std::vector<int32_t> qo = {0, 10, 20}, kv = {0, 1, 2}, last = {10, 10};
  kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, 8);
  const PagedPrefillPlan automatic = kjit::attention::plan_paged_prefill(a);
  EXPECT_EQ(automatic.tile_rows, 64);
  EXPECT_EQ(automatic.variant, AttentionVariant::kAuto);
  a.variant = AttentionVariant::kMma;
  const PagedPrefillPlan mma = kjit::attention::plan_paged_prefill(a);
  EXPECT_EQ(mma.tile_rows, 64);
  EXPECT_EQ(mma.variant, AttentionVariant::kMma);
  a.variant = AttentionVariant::kWgmma;
  const PagedPrefillPlan wgmma = kjit::attention::plan_paged_prefill(a);
  EXPECT_EQ(wgmma.tile_rows, 128) << "the Hopper kernel runs 128 rows, or 192 at head_dim 64";
  EXPECT_EQ(wgmma.variant, AttentionVariant::kWgmma);
  a.tile_rows = 64;  // a forced tile stays the caller's, and the run step refuses what cannot run
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).tile_rows, 64);
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).variant, AttentionVariant::kWgmma);
}

TEST(AttentionPrefillPlan, TunedOverloadRulesAndItsKvLengths) {
  const std::vector<int32_t> qo = {0, 70, 80, 210};
  // Pages of 16: 40, 16 and 1 tokens (the last request: one page holding one token).
  const std::vector<int32_t> kv = {0, 3, 4, 5}, last = {8, 16, 1};
  kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, 8);
  const ad::PagedPrefillPlanDims d = ad::paged_prefill_plan_dims(a);
  EXPECT_EQ(d.total_q, 210);
  EXPECT_EQ(d.nonempty, 3);
  EXPECT_EQ(d.max_kv_len, 40);
  EXPECT_EQ(d.q_heads, 8);
  // Without a tuning table (no driver here, or none stored) it plans as the host-only overload.
  const PagedPrefillPlan tuned = kjit::attention::plan_paged_prefill(a);
  const PagedPrefillPlan legacy = kjit::attention::plan_paged_prefill(qo.data(), 3, 128);
  EXPECT_EQ(tuned.tile_rows, legacy.tile_rows);
  EXPECT_EQ(tuned.q_tile_to_batch, legacy.q_tile_to_batch);
  EXPECT_EQ(tuned.workspace_bytes, legacy.workspace_bytes);
  a.tile_rows = 64;
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).tile_rows, 64);
  a.tile_rows = 0;
  // A last_page_len past the page is clamped as the device clamps it.
  const std::vector<int32_t> long_last = {99, 16, 1};
  a.last_page_len_host = long_last.data();
  EXPECT_EQ(ad::paged_prefill_plan_dims(a).max_kv_len, 48);
  a.last_page_len_host = last.data();

  auto invalid = [&](const std::function<void(kjit::attention::PagedPrefillPlanArgs&)>& edit, const char* needle) {
    expect_plan_refused(a, edit, needle);
  };
  invalid([](auto& b) { b.q_heads = 0; }, "q_heads");
  invalid([](auto& b) { b.page_size = 0; }, "page_size");
  invalid([](auto& b) { b.kv_indptr_host = nullptr; }, "kv_indptr_host is null");
  invalid([](auto& b) { b.last_page_len_host = nullptr; }, "last_page_len_host is null");
  const std::vector<int32_t> kv_down = {0, 3, 2, 5};
  invalid([&](auto& b) { b.kv_indptr_host = kv_down.data(); }, "kv_indptr must be non-decreasing");
  const std::vector<int32_t> kv_start = {1, 3, 4, 5};
  invalid([&](auto& b) { b.kv_indptr_host = kv_start.data(); }, "kv_indptr[0] must be 0");
  invalid([](auto& b) { b.tile_rows = 96; }, "tile_rows");
  invalid([](auto& b) { b.tile_rows = 192; }, "tile_rows 192 runs only at head_dim 64");
  invalid([](auto& b) { b.head_dim = 96; }, "head_dim");
  invalid([](auto& b) { b.qo_indptr_host = nullptr; }, "qo_indptr_host is null");
  invalid([](auto& b) { b.device = -2; }, "device");
  invalid([](auto& b) { b.max_ctas = -1; }, "max_ctas must be >= 0");
}

PagedPrefillArgs valid_paged(const PagedPrefillPlan& plan) {
  PagedPrefillArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {plan.total_q, kHq, kD}, {}, 0);
  a.qo_indptr = TensorRef(fake_ptr(0x800000), DType::kI32, {plan.batch + 1}, {}, 0);
  a.cache.k = TensorRef(fake_ptr(0x1000000), DType::kBF16, {64, 16, kHkv, kD}, {}, 0);
  a.cache.v = TensorRef(fake_ptr(0x2000000), DType::kBF16, {64, 16, kHkv, kD}, {}, 0);
  a.cache.indptr = TensorRef(fake_ptr(0x3000000), DType::kI32, {plan.batch + 1}, {}, 0);
  a.cache.page_indices = TensorRef(fake_ptr(0x3001000), DType::kI32, {64}, {}, 0);
  a.cache.last_page_len = TensorRef(fake_ptr(0x3002000), DType::kI32, {plan.batch}, {}, 0);
  a.out = TensorRef(fake_ptr(0x4000000), DType::kBF16, {plan.total_q, kHq, kD}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x5000000), DType::kF32, {kHq, plan.total_q}, {}, 0);
  a.causal = true;
  return a;
}

TEST(AttentionPrefillArgs, PagedRulesAgainstThePlan) {
  const std::vector<int32_t> indptr = {0, 70, 80, 210};
  const PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(indptr.data(), 3, kD, 64);
  EXPECT_NO_THROW(ad::validate_paged_prefill(valid_paged(plan), plan));
  auto invalid = [&](const std::function<void(PagedPrefillArgs&)>& edit, const char* needle) {
    PagedPrefillArgs a = valid_paged(plan);
    edit(a);
    for (int via_op = 0; via_op < 2; ++via_op) {
      try {
        if (via_op) {
          kjit::attention::paged_prefill(a, plan, fake_ptr(), plan.workspace_bytes, nullptr);
        } else {
          ad::validate_paged_prefill(a, plan);
        }
        ADD_FAILURE() << "no error (expected: " << needle << ")";
      } catch (const kjit::InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("kjit::attention::paged_prefill"), std::string::npos) << what;
        EXPECT_NE(what.find(needle), std::string::npos) << "missing '" << needle << "' in: " << what;
      }
    }
  };
  invalid([](PagedPrefillArgs& a) { a.q.shape[0] = 209; a.out.shape[0] = 209; }, "total_q = qo_indptr[batch] = 210");
  invalid([](PagedPrefillArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {210, kHq, 64}, {}, 0); },
          "plan was built for head_dim 128");
  invalid([](PagedPrefillArgs& a) { a.qo_indptr.shape[0] = 3; }, "qo_indptr must have 4 elements");
  invalid([](PagedPrefillArgs& a) { a.cache.indptr.shape[0] = 5; }, "cache.indptr must have batch + 1 = 4");
  invalid([](PagedPrefillArgs& a) { a.out.shape[1] = kHq / 2; }, "out dim 1");
  invalid([](PagedPrefillArgs& a) { a.lse = TensorRef(fake_ptr(0x5000000), DType::kF32, {210, kHq}, {}, 0); },
          "lse dim 0");
  invalid([](PagedPrefillArgs& a) { a.scale = -0.5f; }, "scale must be >= 0");
  invalid([](PagedPrefillArgs& a) { a.q.dtype = DType::kF16; }, "q must be bf16");
  // The run step names a short workspace.
  try {
    kjit::attention::paged_prefill(valid_paged(plan), plan, fake_ptr(), plan.workspace_bytes - 4, nullptr);
    ADD_FAILURE() << "no error for a short workspace";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("workspace too small"), std::string::npos) << e.what();
  }
  // A plan that did not come from plan_paged_prefill.
  PagedPrefillPlan forged = plan;
  forged.tile_rows = 96;
  EXPECT_THROW(ad::validate_paged_prefill(valid_paged(plan), forged), kjit::InvalidArgument);
  // A persistent schedule must be this call's: its heads (q heads, unpacked) and every unit.
  const std::vector<int64_t> kv_lens = {100, 20, 300};
  PagedPrefillPlan scheduled = plan;
  ad::paged_prefill_schedule(scheduled, indptr.data(), kv_lens, true, kHq, 132);
  ASSERT_EQ(scheduled.ctas(), 6 * kHq);
  EXPECT_NO_THROW(ad::validate_paged_prefill(valid_paged(plan), scheduled));
  auto bad_schedule = [&](const std::function<void(PagedPrefillPlan&)>& edit, const char* needle) {
    PagedPrefillPlan p = scheduled;
    edit(p);
    try {
      ad::validate_paged_prefill(valid_paged(plan), p);
      ADD_FAILURE() << "no error (expected: " << needle << ")";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad_schedule([](PagedPrefillPlan& p) { p.schedule_heads = kHkv; },
               "persistent schedule was made for 2 heads per work item, the call has 8 (q_heads");
  bad_schedule([](PagedPrefillPlan& p) { p.cta_work.pop_back(); }, "persistent schedule is inconsistent");
  bad_schedule([](PagedPrefillPlan& p) { p.cta_work_indptr.back() -= 1; }, "persistent schedule is inconsistent");
  bad_schedule([](PagedPrefillPlan& p) { p.cta_work_indptr.clear(); }, "persistent schedule is inconsistent");
}

TEST(AttentionPrefillPlan, PersistentScheduleByHand) {
  // Query rows 70, 10, 130 over 40, 16 and 1 keys (pages of 16) in 64-row tiles: under causal
  // the six work items attend 1, 1, 1, 0, 0 and 1 KV tiles, costing 2, 2, 2, 1, 1, 2. Walked from
  // the last item, each to the CTA with the least cost so far (the lower index on a tie):
  // item 5 → CTA 0 (2), 4 → 1 (1), 3 → 1 (2), 2 → 0 (4), 1 → 1 (4), 0 → 0 (6).
  const std::vector<int32_t> qo = {0, 70, 80, 210}, kv = {0, 3, 4, 5}, last = {8, 16, 1};
  kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, 1);
  EXPECT_EQ(ad::paged_kv_lens(a), (std::vector<int64_t>{40, 16, 1}));
  const ad::PagedPrefillPlanDims d = ad::paged_prefill_plan_dims(a);
  PagedPrefillPlan plan = ad::paged_prefill_work_map(qo.data(), d, 64);
  const size_t map_bytes = plan.workspace_bytes;
  ad::paged_prefill_schedule(plan, qo.data(), ad::paged_kv_lens(a), true, 1, 2);
  EXPECT_EQ(plan.ctas(), 2);
  EXPECT_EQ(plan.schedule_heads, 1);
  EXPECT_EQ(plan.cta_work_indptr, (std::vector<int32_t>{0, 3, 6}));
  EXPECT_EQ(plan.cta_work, (std::vector<int32_t>{5, 2, 0, 4, 3, 1}));
  // Not causal every item attends its request's single KV tile (cost 2): the CTAs alternate.
  // Two heads: unit = item · 2 + head, heads fastest.
  PagedPrefillPlan full = ad::paged_prefill_work_map(qo.data(), d, 64);
  ad::paged_prefill_schedule(full, qo.data(), ad::paged_kv_lens(a), false, 1, 2);
  EXPECT_EQ(full.cta_work, (std::vector<int32_t>{5, 3, 1, 4, 2, 0}));
  PagedPrefillPlan two = ad::paged_prefill_work_map(qo.data(), d, 64);
  ad::paged_prefill_schedule(two, qo.data(), ad::paged_kv_lens(a), false, 2, 3);
  EXPECT_EQ(two.cta_work_indptr, (std::vector<int32_t>{0, 4, 8, 12}));
  // In order 10, 11 (item 5, heads 0 and 1), 8, 9, 6, 7, ... dealt round robin over three CTAs.
  EXPECT_EQ(two.cta_work, (std::vector<int32_t>{10, 9, 4, 3, 11, 6, 5, 0, 8, 7, 2, 1}));
  // The workspace: the map, then the indptr and the lists, each 256-byte aligned.
  EXPECT_EQ(plan.schedule_indptr_offset, map_bytes);
  EXPECT_EQ(plan.schedule_work_offset, map_bytes + 256);
  EXPECT_EQ(plan.workspace_bytes, map_bytes + 512);
  // More SMs than units: a CTA per unit. No work or no SMs: no schedule.
  PagedPrefillPlan wide = ad::paged_prefill_work_map(qo.data(), d, 64);
  ad::paged_prefill_schedule(wide, qo.data(), ad::paged_kv_lens(a), true, 1, 132);
  EXPECT_EQ(wide.ctas(), 6);
  const std::vector<int32_t> none = {0, 0, 0, 0};
  PagedPrefillPlan empty = ad::paged_prefill_work_map(none.data(), d, 64);
  ad::paged_prefill_schedule(empty, none.data(), ad::paged_kv_lens(a), true, 8, 132);
  EXPECT_EQ(empty.ctas(), 0);
  EXPECT_EQ(empty.workspace_bytes, ad::paged_prefill_work_map(none.data(), d, 64).workspace_bytes);
}

TEST(AttentionPrefillPlan, PersistentScheduleCoversEveryUnitOnceAndBalances) {
  // The decoder layer's prefill chunk (8 requests of 512 new tokens on 2048 cached, GQA 32/8
  // packed, 128-row tiles) and a ragged batch, on 132 SMs.
  struct Batch {
    std::vector<int32_t> q_lens, kv_lens;
    int64_t pack, heads;
    int rows;
    bool causal;
  };
  const std::vector<Batch> batches = {
      {std::vector<int32_t>(8, 512), std::vector<int32_t>(8, 2560), 4, 8, 128, true},
      {{1, 700, 0, 33, 129, 2000, 5}, {1, 900, 17, 33, 4000, 2000, 5}, 1, 32, 128, true},
      {{1, 700, 0, 33, 129, 2000, 5}, {1, 900, 17, 33, 4000, 2000, 5}, 1, 16, 192, false},
  };
  for (const Batch& batch : batches) {
    std::vector<int32_t> qo{0}, kv{0}, last;
    for (size_t b = 0; b < batch.q_lens.size(); ++b) {
      qo.push_back(qo.back() + batch.q_lens[b]);
      kv.push_back(kv.back() + (batch.kv_lens[b] + 15) / 16);
      last.push_back(batch.kv_lens[b] % 16 == 0 ? 16 : batch.kv_lens[b] % 16);
    }
    kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, batch.heads * batch.pack);
    a.head_dim = batch.rows == 192 ? 64 : 128;
    const ad::PagedPrefillPlanDims d = ad::paged_prefill_plan_dims(a);
    PagedPrefillPlan plan = ad::paged_prefill_work_map(qo.data(), d, batch.rows, static_cast<int>(batch.pack));
    ad::paged_prefill_schedule(plan, qo.data(), ad::paged_kv_lens(a), batch.causal, batch.heads, 132);
    const int64_t units = plan.num_work() * batch.heads;
    ASSERT_EQ(plan.ctas(), std::min<int64_t>(132, units));
    ASSERT_EQ(plan.cta_work.size(), static_cast<size_t>(units));
    // Each unit's cost, computed here from its rows: KV tiles of 128 keys up to the causal limit
    // of its last row, plus one.
    auto cost = [&](int32_t unit) {
      const int64_t item = unit / batch.heads;
      const int64_t b = plan.q_tile_to_batch[item];
      const int64_t rows = int64_t{batch.q_lens[b]} * batch.pack;
      const int64_t last_row = std::min<int64_t>(rows, (plan.q_tile_to_index[item] + 1) * batch.rows) - 1;
      int64_t keys = batch.kv_lens[b];
      if (batch.causal) keys = std::clamp<int64_t>(last_row / batch.pack + 1 + keys - batch.q_lens[b], 0, keys);
      return (keys + 127) / 128 + 1;
    };
    std::vector<int> seen(static_cast<size_t>(units), 0);
    int64_t most = 0, least = INT64_MAX, biggest = 0;
    for (int64_t c = 0; c < plan.ctas(); ++c) {
      ASSERT_LE(plan.cta_work_indptr[c], plan.cta_work_indptr[c + 1]);
      int64_t load = 0;
      for (int32_t i = plan.cta_work_indptr[c]; i < plan.cta_work_indptr[c + 1]; ++i) {
        const int32_t unit = plan.cta_work[i];
        ASSERT_GE(unit, 0);
        ASSERT_LT(unit, units);
        ++seen[unit];
        load += cost(unit);
        biggest = std::max(biggest, cost(unit));
        // A CTA's list follows the grid's order: work items from the last, heads fastest.
        if (i > plan.cta_work_indptr[c]) {
          const int32_t prev = plan.cta_work[i - 1];
          EXPECT_TRUE(prev / batch.heads > unit / batch.heads ||
                      (prev / batch.heads == unit / batch.heads && prev % batch.heads < unit % batch.heads));
        }
      }
      most = std::max(most, load);
      least = std::min(least, load);
    }
    for (int64_t u = 0; u < units; ++u) EXPECT_EQ(seen[u], 1) << "unit " << u;
    // The least-loaded-first rule ends every CTA within one unit's cost of the others.
    EXPECT_LE(most - least, biggest);
  }
}

TEST(AttentionPrefillPlan, PagedOpNamesTheHostPlansKernel) {
  using Op = ad::PagedPrefillOp;
  const std::vector<int32_t> indptr = {0, 70, 80, 210};
  const PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(indptr.data(), 3, kD, 64);
  const PagedPrefillArgs a = valid_paged(plan);
  const ad::PagedPrefillDims d = Op::validate({a, plan, fake_ptr(), plan.workspace_bytes});
  EXPECT_EQ(d.tile_rows, 64);
  EXPECT_EQ(d.num_work, 6);
  const ad::PagedPrefillOpPlan p = Op::plan(d, h200());
  ASSERT_EQ(p.choice.family, &kjit::attention::paged_prefill_family());
  EXPECT_EQ(p.choice.family->describe(p.choice.point), "head_dim=128 block_m=64");
  // The work map's workspace is checked with the arguments.
  EXPECT_THROW(Op::validate({a, plan, nullptr, 0}), kjit::InvalidArgument);
  // No queries: nothing to launch.
  const std::vector<int32_t> none = {0, 0, 0, 0};
  const PagedPrefillPlan z = kjit::attention::plan_paged_prefill(none.data(), 3, kD);
  EXPECT_EQ(Op::plan(Op::validate({valid_paged(z), z, nullptr, 0}), h200()).choice.family, nullptr);
}

TEST(AttentionPrefillFamily, SpaceAndSpecs) {
  const kjit::Family& f = kjit::attention::prefill_family();
  EXPECT_EQ(f.name, "attention.prefill");
  EXPECT_EQ(f.min_sm, 80);
  const kjit::ProgramSpec spec = f.spec({{"head_dim", "128"}, {"block_m", "128"}, {"mask", "bool"}});
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0],
            "kjit::attention::prefill_kernel<128, 128, true, kjit::attention::DenseQSchedule, kjit::attention::ContigKV>");
  EXPECT_EQ(spec.source_name, "attention/prefill.cu");
  const kjit::Family& g = kjit::attention::paged_prefill_family();
  const kjit::ProgramSpec paged = g.spec({{"head_dim", "64"}, {"block_m", "64"}});
  EXPECT_EQ(paged.name_expressions[0],
            "kjit::attention::prefill_kernel<64, 64, false, kjit::attention::PackedQSchedule, kjit::attention::PagedKV>");
  EXPECT_EQ(paged.source_name, spec.source_name);  // one kernel body
  EXPECT_THROW(f.spec({{"head_dim", "128"}, {"block_m", "32"}, {"mask", "none"}}), kjit::InvalidArgument);
  EXPECT_EQ(kjit::family("attention.prefill").params.size(), f.params.size());
  EXPECT_EQ(kjit::family("attention.paged_prefill").params.size(), g.params.size());

  const kjit::Family& h = kjit::attention::prefill_sm90_family();
  EXPECT_EQ(kjit::family("attention.prefill_sm90").name, h.name);
  const kjit::ProgramSpec hopper = h.spec({{"head_dim", "64"}});
  EXPECT_EQ(hopper.name_expressions[0], "kjit::attention::prefill_sm90_kernel<64>");
  EXPECT_EQ(hopper.source_name, "attention/prefill_sm90.cu");
  EXPECT_THROW(h.spec({{"head_dim", "256"}}), kjit::InvalidArgument);
  EXPECT_EQ(h.unsupported_reason(h.defaults[0], kjit::Target::parse("sm_90a")), "");
  for (const char* t : {"sm_80", "sm_89", "sm_90", "sm_100a"}) {
    EXPECT_NE(h.unsupported_reason(h.defaults[0], kjit::Target::parse(t)), "") << t;
  }
  const kjit::Family& hp = kjit::attention::paged_prefill_sm90_family();
  EXPECT_EQ(kjit::family("attention.paged_prefill_sm90").name, hp.name);
  const kjit::ProgramSpec paged_hopper = hp.spec({{"head_dim", "128"}, {"block_m", "128"}, {"page_load", "tma"}});
  EXPECT_EQ(paged_hopper.name_expressions[0], "kjit::attention::paged_prefill_sm90_kernel<128, 128, true>");
  EXPECT_EQ(paged_hopper.source_name, hopper.source_name);  // one kernel body
  EXPECT_EQ(hp.spec({{"head_dim", "64"}, {"block_m", "192"}, {"page_load", "gather"}}).name_expressions[0],
            "kjit::attention::paged_prefill_sm90_kernel<64, 192, false>");
  EXPECT_THROW(hp.spec({{"head_dim", "256"}, {"block_m", "128"}, {"page_load", "tma"}}), kjit::InvalidArgument);
  EXPECT_THROW(hp.spec({{"head_dim", "128"}, {"block_m", "192"}, {"page_load", "tma"}}), kjit::InvalidArgument);
  EXPECT_THROW(hp.spec({{"head_dim", "128"}, {"block_m", "128"}, {"page_load", "auto"}}), kjit::InvalidArgument);
  EXPECT_EQ(hp.unsupported_reason(hp.defaults[0], kjit::Target::parse("sm_90a")), "");
  EXPECT_NE(hp.unsupported_reason(hp.defaults[0], kjit::Target::parse("sm_89")), "");
}

TEST(AttentionPrefillPlan, PagedRunsTheWgmmaKernelOnHopperWhereItCan) {
  using Op = ad::PagedPrefillOp;
  using kjit::attention::AttentionVariant;
  const std::vector<int32_t> indptr = {0, 70, 80, 210};
  for (int64_t hd : {64, 128, 256}) {
    for (int tile_rows : {64, 128, 192}) {
      if (tile_rows == 192 && hd != 64) continue;  // PlanRules: no plan
      const PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(indptr.data(), 3, hd, tile_rows);
      EXPECT_EQ(plan.variant, AttentionVariant::kAuto);  // the legacy overload leaves it to the run step
      PagedPrefillArgs a = valid_paged(plan);
      a.q = TensorRef(a.q.data, DType::kBF16, {210, kHq, hd}, {}, 0);
      a.out = TensorRef(a.out.data, DType::kBF16, {210, kHq, hd}, {}, 0);
      a.cache.k = TensorRef(a.cache.k.data, DType::kBF16, {64, 16, kHkv, hd}, {}, 0);
      a.cache.v = TensorRef(a.cache.v.data, DType::kBF16, {64, 16, kHkv, hd}, {}, 0);
      ad::PagedPrefillDims d = Op::validate({a, plan, fake_ptr(), plan.workspace_bytes});
      const bool hopper = (hd != 256 && tile_rows == 128) || (hd == 64 && tile_rows == 192);
      const bool wide = tile_rows == 192;  // no mma.sync kernel runs 192-row tiles
      // sm_90a: the wgmma kernel for hd64/128 at 128-row tiles and hd64 at 192; every other case
      // and device mma.
      ad::PagedPrefillOpPlan p = Op::plan(d, h200());
      EXPECT_EQ(p.variant, hopper ? AttentionVariant::kWgmma : AttentionVariant::kMma) << hd << " " << tile_rows;
      if (hopper) {
        ASSERT_EQ(p.choice.family, &kjit::attention::paged_prefill_sm90_family());
        // Pages of 16: TMA page loads at every tile.
        EXPECT_EQ(p.choice.family->describe(p.choice.point),
                  "head_dim=" + std::to_string(hd) + " block_m=" + std::to_string(tile_rows) + " page_load=tma");
      } else {
        EXPECT_EQ(p.choice.family, &kjit::attention::paged_prefill_family());
      }
      if (wide) {
        // A 192-row plan on a device without wgmma: Unsupported naming both kernels' rules, never
        // the mma.sync kernel with 192-row tiles.
        try {
          Op::plan(d, h200(8, 9));
          ADD_FAILURE() << "a 192-row plan planned on sm_89";
        } catch (const kjit::Unsupported& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("mma runs paged prefill plans with tile_rows 64 or 128, the plan has 192"),
                    std::string::npos)
              << what;
          EXPECT_NE(what.find("wgmma needs sm_90a"), std::string::npos) << what;
        }
      } else {
        EXPECT_EQ(Op::plan(d, h200(8, 9)).variant, AttentionVariant::kMma);
      }
      // The plan's variant is strict: forcing mma keeps mma on the H200 (and fails for 192-row
      // tiles); forcing wgmma where it cannot run raises Unsupported naming why, also without work.
      d.variant = AttentionVariant::kMma;
      if (wide) {
        EXPECT_THROW(Op::plan(d, h200()), kjit::Unsupported);
      } else {
        EXPECT_EQ(Op::plan(d, h200()).choice.family, &kjit::attention::paged_prefill_family());
      }
      d.variant = AttentionVariant::kWgmma;
      if (hopper) {
        EXPECT_EQ(Op::plan(d, h200()).variant, AttentionVariant::kWgmma);
      } else {
        EXPECT_THROW(Op::plan(d, h200()), kjit::Unsupported);
      }
      EXPECT_THROW(Op::plan(d, h200(8, 9)), kjit::Unsupported);
    }
  }
  // The launch shape of the paged kernel: 128-row tiles (two consumer warpgroups) at both head
  // dims, 192-row tiles (three) at hd64, in the shared memory a CTA may opt into.
  for (int hd : {64, 128}) {
    const auto s = kjit::attention::prefill_sm90_launch_shape(hd, true);
    EXPECT_EQ(s.block_m, 128) << hd;
    EXPECT_EQ(s.threads, 384) << hd;
    EXPECT_LE(s.smem_bytes, 227 * 1024) << hd;
  }
  const auto wide = kjit::attention::prefill_sm90_launch_shape(64, true, 192);
  EXPECT_EQ(wide.block_m, 192);
  EXPECT_EQ(wide.threads, 512);
  // Q 24 KiB + 3 stages of K and V (16 KiB each) + align, barriers and the two row tables.
  EXPECT_EQ(wide.smem_bytes, 24 * 1024 + 6 * 16 * 1024 + 1024 + 256 + 1024);
  EXPECT_EQ(kjit::attention::prefill_sm90_launch_shape(128, true, 192).threads, 0);
  EXPECT_EQ(kjit::attention::prefill_sm90_launch_shape(64, true, 64).threads, 0);
  EXPECT_EQ(kjit::attention::prefill_sm90_launch_shape(256, true).threads, 0);
}

TEST(AttentionPrefillPlan, PagedPlannerNamesTheKernelAndTunesBoth) {
  using kjit::attention::AttentionVariant;
  using Planner = ad::PagedPrefillPlanner;
  const std::vector<int32_t> qo = {0, 300, 600};
  const std::vector<int32_t> kv = {0, 40, 80};
  const std::vector<int32_t> last = {16, 16};
  const ad::PagedPrefillPlanDims d = ad::paged_prefill_plan_dims(tuned_plan_args(qo, kv, last, 32));
  // The built-in rule names the kernel the run step will take on the device planned on.
  ad::PagedPrefillOpPlan t = Planner::plan(d, h200());
  EXPECT_EQ(t.tile_rows, 128);
  EXPECT_EQ(t.variant, AttentionVariant::kAuto);
  EXPECT_EQ(t.choice.family, &kjit::attention::paged_prefill_sm90_family());
  EXPECT_EQ(Planner::plan(d, h200(8, 0)).choice.family, &kjit::attention::paged_prefill_family());
  EXPECT_EQ(Planner::plan(d, kjit::DeviceInfo{}).choice.family, &kjit::attention::paged_prefill_family());
  // The tuner measures both kernels on sm_90a (mma at 64 and 128 rows, wgmma gathering its pages
  // or loading them with TMA), mma only below.
  const auto on_hopper = Planner::tune_candidates(d, h200());
  int sm90 = 0;
  for (const auto& c : on_hopper) sm90 += c.family == &kjit::attention::paged_prefill_sm90_family();
  EXPECT_EQ(sm90, 2);
  EXPECT_EQ(on_hopper.size(), 4u);
  for (const auto& c : Planner::tune_candidates(d, h200(8, 9))) {
    EXPECT_EQ(c.family, &kjit::attention::paged_prefill_family());
  }
  // A stored choice is strict: the plan runs the kernel that was measured.
  for (const auto& c : on_hopper) {
    ad::PagedPrefillOpPlan got;
    ASSERT_TRUE(Planner::apply_tuned(d, h200(), c, &got));
    const bool wg = c.family == &kjit::attention::paged_prefill_sm90_family();
    EXPECT_EQ(got.variant, wg ? AttentionVariant::kWgmma : AttentionVariant::kMma);
    if (wg) EXPECT_EQ(got.tile_rows, 128);
    EXPECT_EQ(Planner::tuned_choice(d, got).family, c.family);
  }
}

TEST(AttentionPrefillPlan, PagedPlannerTakesTheWideHopperTileAtHd64) {
  using kjit::attention::AttentionVariant;
  using Planner = ad::PagedPrefillPlanner;
  const std::vector<int32_t> kv = {0, 40, 80, 80}, last = {16, 16, 0};
  auto dims = [&](const std::vector<int32_t>& qo, int64_t hd) {
    kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, 32);
    a.head_dim = hd;
    return ad::paged_prefill_plan_dims(a);
  };
  // Non-empty requests averaging 300 rows (the empty third one does not count): 192 rows on sm_90a
  // at hd64, the kernel named with its tile.
  const std::vector<int32_t> long_q = {0, 300, 600, 600};
  ad::PagedPrefillOpPlan t = Planner::plan(dims(long_q, 64), h200());
  EXPECT_EQ(t.tile_rows, 192);
  EXPECT_EQ(t.variant, AttentionVariant::kAuto);
  ASSERT_EQ(t.choice.family, &kjit::attention::paged_prefill_sm90_family());
  EXPECT_EQ(t.choice.family->describe(t.choice.point), "head_dim=64 block_m=192 page_load=tma");
  // hd128, a device without wgmma, or no device at all (the legacy overload): 128.
  EXPECT_EQ(Planner::plan(dims(long_q, 128), h200()).tile_rows, 128);
  EXPECT_EQ(Planner::plan(dims(long_q, 64), h200(8, 9)).tile_rows, 128);
  EXPECT_EQ(Planner::plan(dims(long_q, 64), kjit::DeviceInfo{}).tile_rows, 128);
  EXPECT_EQ(kjit::attention::plan_paged_prefill(long_q.data(), 3, 64).tile_rows, 128);
  // Averaging 65..128 rows: one 128-row tile holds a request; exactly 128 stays 128, 129 goes wide.
  const std::vector<int32_t> mid_q = {0, 100, 256, 256};
  EXPECT_EQ(Planner::plan(dims(mid_q, 64), h200()).tile_rows, 128);
  const std::vector<int32_t> at_128 = {0, 128, 256, 256};
  EXPECT_EQ(Planner::plan(dims(at_128, 64), h200()).tile_rows, 128);
  const std::vector<int32_t> past_128 = {0, 129, 258, 258};
  EXPECT_EQ(Planner::plan(dims(past_128, 64), h200()).tile_rows, 192);
  // Short chunks: 64 as before.
  const std::vector<int32_t> short_q = {0, 30, 60, 60};
  EXPECT_EQ(Planner::plan(dims(short_q, 64), h200()).tile_rows, 64);
  // A forced tile is kept.
  kjit::attention::PagedPrefillPlanArgs forced = tuned_plan_args(mid_q, kv, last, 32);
  forced.head_dim = 64;
  forced.tile_rows = 192;
  EXPECT_EQ(Planner::plan(ad::paged_prefill_plan_dims(forced), h200()).tile_rows, 192);
  // The tuner measures both wgmma tiles at hd64 (and both mma tiles); a stored 192 runs 192 rows
  // on the wgmma kernel, strictly.
  const ad::PagedPrefillPlanDims d = dims(long_q, 64);
  std::set<int> wgmma_tiles;
  for (const auto& c : Planner::tune_candidates(d, h200())) {
    ad::PagedPrefillOpPlan got;
    ASSERT_TRUE(Planner::apply_tuned(d, h200(), c, &got));
    if (c.family != &kjit::attention::paged_prefill_sm90_family()) continue;
    EXPECT_EQ(got.variant, AttentionVariant::kWgmma);
    wgmma_tiles.insert(got.tile_rows);
  }
  EXPECT_EQ(wgmma_tiles, (std::set<int>{128, 192}));
  for (const auto& c : Planner::tune_candidates(d, h200(8, 9))) {
    EXPECT_EQ(c.family, &kjit::attention::paged_prefill_family());
  }
}

// One rule, one place: the paged prefill's tile rows are what its two kernel families declare
// (attention.paged_prefill's block_m, attention.paged_prefill_sm90's block_m within its
// constraint), and the planner, the kernel choice, the Hopper kernel's launch shapes
// (kernel_sources/attention/prefill_sm90_params.h) and the messages follow exactly that. A tile
// value added to (or dropped from) a family without teaching one of them fails here.
std::set<int> declared_rows(const kjit::Family& f) {
  std::set<int> out;
  for (const kjit::ParamValue& v : f.params[f.param_index("block_m")].values) out.insert(static_cast<int>(v.code));
  return out;
}

TEST(AttentionPrefillFamily, PagedTileRowsFollowTheDeclaredTiles) {
  namespace at = kjit::attention;
  using kjit::attention::AttentionVariant;
  const kjit::Family& mma = at::paged_prefill_family();
  const kjit::Family& wgmma = at::paged_prefill_sm90_family();
  const std::set<int> mma_rows = declared_rows(mma), wgmma_rows = declared_rows(wgmma);
  const std::set<int64_t> mma_dims(std::begin(at::kHeadDims), std::end(at::kHeadDims));
  const std::set<int64_t> wgmma_dims(std::begin(at::kSm90HeadDims), std::end(at::kSm90HeadDims));
  // The wide tile is the sm_90a family's alone.
  EXPECT_EQ(wgmma_rows.count(at::kWideTileRows), 1u);
  EXPECT_EQ(mma_rows.count(at::kWideTileRows), 0u);
  const kjit::Target sm80 = kjit::Target::for_compute_capability(8, 0);
  const kjit::Target sm90a = h200().target();
  const std::string text = at::paged_tile_rows_text();
  for (int64_t hd : mma_dims) {
    for (int m = 0; m <= 512; ++m) {
      const bool by_mma = mma_rows.count(m) == 1;
      const bool by_wgmma = wgmma_dims.count(hd) == 1 && wgmma_rows.count(m) == 1 &&
                            wgmma.invalid_reason(wgmma.point({hd, m, 0})).empty();
      const std::string where = "head_dim " + std::to_string(hd) + " tile_rows " + std::to_string(m);
      // The planner's rule and the planner itself.
      EXPECT_EQ(at::paged_tile_rows_fit(hd, m), by_mma || by_wgmma) << where;
      const int32_t qo_indptr[] = {0, 100};
      bool planned = true;
      try {
        at::plan_paged_prefill(qo_indptr, 1, hd, m);
      } catch (const kjit::InvalidArgument&) {
        planned = false;
      }
      EXPECT_EQ(planned, m == 0 || by_mma || by_wgmma) << where;
      // The kernel choice: each kernel runs exactly its family's tiles.
      EXPECT_EQ(ad::variant_runs(AttentionVariant::kMma, ad::paged_prefill_variant_call(sm80, hd, m)), by_mma) << where;
      EXPECT_EQ(ad::variant_runs(AttentionVariant::kWgmma, ad::paged_prefill_variant_call(sm90a, hd, m)), by_wgmma)
          << where;
      // The kernel sources: the Hopper kernel has a launch shape for exactly the sm_90a family's tiles.
      EXPECT_EQ(kjit::attention::prefill_sm90_launch_shape(static_cast<int>(hd), true, m).threads > 0, by_wgmma)
          << where;
      if (by_mma || by_wgmma) EXPECT_NE(text.find(std::to_string(m)), std::string::npos) << text << ": " << where;
    }
  }
}

TEST(AttentionPrefillFamily, TmaLayoutOfTheHopperKernel) {
  PrefillArgs a = valid_prefill();
  EXPECT_EQ(ad::prefill_tma_layout_reason(a), "");
  a.k.strides[1] = -a.k.strides[1];
  EXPECT_NE(ad::prefill_tma_layout_reason(a).find("k stride of dim 1"), std::string::npos);
}

TEST(AttentionPrefillFamily, EverySpecializationCompiles) {
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  config.disk_cache = false;
  kjit::Runtime rt(config);
  struct Job {
    const kjit::Family* family;
    kjit::ParamMap params;
    const char* arch;
  };
  std::vector<Job> jobs;
  for (const char* arch : {"sm_80", "sm_90a", "sm_89", "sm_100a"}) {
    for (const char* hd : {"64", "128", "256"}) {
      for (const char* bm : {"64", "128"}) {
        for (const char* mask : {"none", "bool"}) {
          jobs.push_back({&kjit::attention::prefill_family(), {{"head_dim", hd}, {"block_m", bm}, {"mask", mask}}, arch});
        }
        jobs.push_back({&kjit::attention::paged_prefill_family(), {{"head_dim", hd}, {"block_m", bm}}, arch});
      }
    }
  }
  // The sm_90a kernels, dense and paged (one source), where they build.
  for (const char* hd : {"64", "128"}) {
    jobs.push_back({&kjit::attention::prefill_sm90_family(), {{"head_dim", hd}}, "sm_90a"});
  }
  for (const auto& [hd, rows] : {std::pair{"64", "128"}, {"64", "192"}, {"128", "128"}}) {
    for (const char* load : {"gather", "tma"}) {
      jobs.push_back({&kjit::attention::paged_prefill_sm90_family(),
                      {{"head_dim", hd}, {"block_m", rows}, {"page_load", load}},
                      "sm_90a"});
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
          std::printf("%s: %d registers, %d spill bytes\n", what.c_str(), k.registers, k.spill_bytes);
          const bool strict = std::string(j.arch) == "sm_80" || std::string(j.arch) == "sm_90a";
          if (strict) EXPECT_LE(k.spill_bytes, 0) << what;
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

TEST(AttentionPrefillPlan, PackedGqaWorkItemsRuleAndKnob) {
  using kjit::attention::AttentionVariant;
  using kjit::attention::PackGqa;
  const std::vector<int32_t> qo = {0, 70, 80, 210}, kv = {0, 3, 4, 5}, last = {8, 16, 1};
  kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, 8);
  a.kv_heads = 2;
  ad::PagedPrefillPlanDims d = ad::paged_prefill_plan_dims(a);
  EXPECT_EQ(d.group, 4);
  // On sm_90a auto packs the group: 280, 40 and 520 rows in 128-row tiles.
  const ad::PagedPrefillOpPlan on_h200 = ad::PagedPrefillPlanner::plan(d, h200());
  EXPECT_EQ(on_h200.pack_group, 4);
  EXPECT_EQ(on_h200.tile_rows, 128);
  EXPECT_EQ(on_h200.choice.family, &kjit::attention::paged_prefill_sm90_family());
  const PagedPrefillPlan packed = ad::paged_prefill_work_map(qo.data(), d, 128, 4);
  EXPECT_EQ(packed.pack_group, 4);
  EXPECT_EQ(packed.q_tile_to_batch, (std::vector<int32_t>{0, 0, 0, 1, 2, 2, 2, 2, 2}));
  EXPECT_EQ(packed.q_tile_to_index, (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 2, 3, 4}));
  // A group that does not divide the tile (3): 70 · 3 = 210 rows in 192-row tiles.
  EXPECT_EQ(ad::paged_prefill_work_map(qo.data(), d, 192, 3).q_tile_to_batch,
            (std::vector<int32_t>{0, 0, 1, 2, 2, 2}));
  // Without wgmma (sm_80), off, a forced 64-row tile or group 1: never packed.
  EXPECT_EQ(ad::PagedPrefillPlanner::plan(d, h200(8, 0)).pack_group, 1);
  ad::PagedPrefillPlanDims off = d;
  off.pack_gqa = PackGqa::kOff;
  EXPECT_EQ(ad::PagedPrefillPlanner::plan(off, h200()).pack_group, 1);
  ad::PagedPrefillPlanDims t64 = d;
  t64.tile_rows = 64;
  EXPECT_EQ(ad::PagedPrefillPlanner::plan(t64, h200()).pack_group, 1);
  ad::PagedPrefillPlanDims g1 = d;
  g1.group = 1;
  EXPECT_EQ(ad::PagedPrefillPlanner::plan(g1, h200()).pack_group, 1);
  // Forced on with no device: packed, naming no kernel (the run step decides where it runs).
  ad::PagedPrefillPlanDims on = d;
  on.pack_gqa = PackGqa::kOn;
  const ad::PagedPrefillOpPlan on_nowhere = ad::PagedPrefillPlanner::plan(on, kjit::DeviceInfo{});
  EXPECT_EQ(on_nowhere.pack_group, 4);
  EXPECT_EQ(on_nowhere.choice.family, nullptr);
  // Short requests packed count q_len · group rows: 10 · 4 = 40 ≤ 64 would take 64 rows
  // unpacked; packed plans never do.
  const std::vector<int32_t> short_qo = {0, 10, 20}, short_kv = {0, 1, 2}, short_last = {10, 10};
  kjit::attention::PagedPrefillPlanArgs s = tuned_plan_args(short_qo, short_kv, short_last, 8);
  s.kv_heads = 2;
  EXPECT_EQ(ad::PagedPrefillPlanner::plan(ad::paged_prefill_plan_dims(s), h200()).tile_rows, 128);
  s.kv_heads = 0;
  EXPECT_EQ(ad::PagedPrefillPlanner::plan(ad::paged_prefill_plan_dims(s), h200()).tile_rows, 64);
  // The plan step: forced on without a device here packs; a forced mma kernel never does.
  a.pack_gqa = PackGqa::kOn;
  if (!kjit::driver_available()) {
    const PagedPrefillPlan p = kjit::attention::plan_paged_prefill(a);
    EXPECT_EQ(p.pack_group, 4);
    EXPECT_EQ(p.q_tile_to_batch, packed.q_tile_to_batch);
  }
  a.pack_gqa = PackGqa::kAuto;
  a.variant = AttentionVariant::kMma;
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).pack_group, 1);
  a.variant = AttentionVariant::kAuto;

  auto invalid = [&](const std::function<void(kjit::attention::PagedPrefillPlanArgs&)>& edit, const char* needle) {
    expect_plan_refused(a, edit, needle);
  };
  invalid([](auto& b) { b.kv_heads = 3; }, "kv_heads must be 0 (unknown) or a divisor of q_heads = 8, got 3");
  invalid([](auto& b) { b.kv_heads = -1; }, "kv_heads must be");
  invalid([](auto& b) { b.pack_gqa = static_cast<PackGqa>(7); }, "pack_gqa must be auto, on or off, got 7");
  invalid([](auto& b) { b.pack_gqa = PackGqa::kOn, b.kv_heads = 0; }, "pack_gqa on needs kv_heads");
  invalid([](auto& b) { b.pack_gqa = PackGqa::kOn, b.kv_heads = 8; }, "pack_gqa on needs kv_heads");
  invalid([](auto& b) { b.pack_gqa = PackGqa::kOn, b.tile_rows = 64; }, "tile_rows 64");
  invalid([](auto& b) { b.pack_gqa = PackGqa::kOn, b.variant = AttentionVariant::kMma; }, "variant is mma");

  // The knob's names.
  for (PackGqa p : {PackGqa::kAuto, PackGqa::kOn, PackGqa::kOff}) EXPECT_EQ(ad::parse_pack_gqa(ad::pack_gqa_name(p)), p);
  EXPECT_FALSE(ad::parse_pack_gqa("ON").has_value());
  EXPECT_FALSE(ad::parse_pack_gqa("").has_value());

  // Tuning: the group is in the bucket, packed candidates only on the sm_90a family and a group > 1,
  // a stored packed choice applies only where it can.
  kjit::detail::TunedKey k4, k1;
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(d, &k4));
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(g1, &k1));
  EXPECT_NE(k4.bucket[1], k1.bucket[1]);
  EXPECT_FALSE(ad::PagedPrefillPlanner::tune_key(on, &k1)) << "a forced pack_gqa is not tuned";
  int packed_candidates = 0;
  for (const kjit::detail::TunedChoice& c : ad::PagedPrefillPlanner::tune_candidates(d, h200())) {
    if (c.knobs[0] == 1) {
      ++packed_candidates;
      EXPECT_EQ(c.family, &kjit::attention::paged_prefill_sm90_family());
      ad::PagedPrefillOpPlan t;
      ASSERT_TRUE(ad::PagedPrefillPlanner::apply_tuned(d, h200(), c, &t));
      EXPECT_EQ(t.pack_group, 4);
      EXPECT_EQ(ad::PagedPrefillPlanner::tuned_choice(d, t).knobs[0], 1);
      EXPECT_FALSE(ad::PagedPrefillPlanner::apply_tuned(g1, h200(), c, &t));
    }
  }
  EXPECT_GT(packed_candidates, 0);
  for (const kjit::detail::TunedChoice& c : ad::PagedPrefillPlanner::tune_candidates(g1, h200())) {
    EXPECT_EQ(c.knobs[0], 0);
  }
}

TEST(AttentionPrefillPlan, TmaPageLoadsRulesPlanAndRun) {
  using kjit::attention::AttentionVariant;
  using kjit::attention::PageLoad;
  // Short requests (10 rows each): the rule takes 64-row tiles; forced TMA page loads get 128.
  const std::vector<int32_t> qo = {0, 10, 20}, kv = {0, 1, 2}, last = {10, 10};
  kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, kHq);
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).page_load, PageLoad::kAuto);
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).tile_rows, 64);
  a.page_load = PageLoad::kTma;
  const PagedPrefillPlan tma = kjit::attention::plan_paged_prefill(a);
  EXPECT_EQ(tma.page_load, PageLoad::kTma);
  EXPECT_EQ(tma.tile_rows, 128);
  a.page_load = PageLoad::kGather;
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).page_load, PageLoad::kGather);
  a.page_load = PageLoad::kTma;
  auto invalid = [&](const std::function<void(kjit::attention::PagedPrefillPlanArgs&)>& edit, const char* needle) {
    expect_plan_refused(a, edit, needle);
  };
  invalid([](auto& b) { b.page_size = 8; }, "page_size must be a multiple of 16, got 8");
  invalid([](auto& b) { b.page_size = 24; }, "page_size must be a multiple of 16, got 24");
  invalid([](auto& b) { b.tile_rows = 64; }, "page_load tma runs on the sm_90a wgmma kernel, whose tiles have 128 rows");
  invalid([](auto& b) { b.variant = AttentionVariant::kMma; }, "page_load tma runs on the sm_90a wgmma kernel");
  invalid([](auto& b) { b.page_load = static_cast<PageLoad>(7); }, "page_load must be auto, gather or tma, got 7");
  a.page_size = 32;
  EXPECT_NO_THROW(kjit::attention::plan_paged_prefill(a));

  // The run step: the cache (valid_paged: pages of 16) and the plan's tile decide.
  const std::vector<int32_t> rows = {0, 70, 80, 210};
  PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(rows.data(), 3, kD, 128);
  for (PageLoad load : {PageLoad::kAuto, PageLoad::kGather, PageLoad::kTma}) {
    plan.page_load = load;
    const ad::PagedPrefillDims d = ad::validate_paged_prefill(valid_paged(plan), plan);
    EXPECT_EQ(d.page_load, load);
    EXPECT_EQ(ad::plan_paged_prefill_run(d, h200()).kv_tma, load != PageLoad::kGather);
    // On sm_80 the mma.sync kernel runs: it gathers, and a plan that asks for TMA is refused.
    if (load == PageLoad::kTma) {
      try {
        ad::plan_paged_prefill_run(d, h200(8, 0));
        ADD_FAILURE() << "mma.sync ran page_load tma";
      } catch (const kjit::Unsupported& e) {
        EXPECT_NE(std::string(e.what()).find("page_load tma runs on the sm_90a wgmma kernel"), std::string::npos)
            << e.what();
      }
    } else {
      EXPECT_FALSE(ad::plan_paged_prefill_run(d, h200(8, 0)).kv_tma);
    }
    ad::PagedPrefillDims forced_mma = d;
    forced_mma.variant = AttentionVariant::kMma;
    if (load != PageLoad::kTma) EXPECT_FALSE(ad::plan_paged_prefill_run(forced_mma, h200()).kv_tma);
  }
  // Pages of 8: auto gathers, tma is an InvalidArgument naming the cache.
  plan.page_load = PageLoad::kAuto;
  PagedPrefillArgs eight = valid_paged(plan);
  eight.cache.k = TensorRef(fake_ptr(0x1000000), DType::kBF16, {128, 8, kHkv, kD}, {}, 0);
  eight.cache.v = TensorRef(fake_ptr(0x2000000), DType::kBF16, {128, 8, kHkv, kD}, {}, 0);
  eight.cache.page_indices = TensorRef(fake_ptr(0x3001000), DType::kI32, {128}, {}, 0);
  EXPECT_FALSE(ad::plan_paged_prefill_run(ad::validate_paged_prefill(eight, plan), h200()).kv_tma);
  plan.page_load = PageLoad::kTma;
  try {
    ad::validate_paged_prefill(eight, plan);
    ADD_FAILURE() << "page_load tma took pages of 8";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the page size must be a multiple of 16, got cache.k"), std::string::npos)
        << e.what();
  }
  // A 64-row plan (mma.sync only, which gathers): auto gathers, tma is refused. The 192-row tile
  // (hd64) loads pages with TMA like the 128-row one.
  {
    PagedPrefillPlan wide = kjit::attention::plan_paged_prefill(rows.data(), 3, 64, 192);
    PagedPrefillArgs w = valid_paged(wide);
    w.q = TensorRef(w.q.data, DType::kBF16, {210, kHq, 64}, {}, 0);
    w.out = TensorRef(w.out.data, DType::kBF16, {210, kHq, 64}, {}, 0);
    w.cache.k = TensorRef(w.cache.k.data, DType::kBF16, {64, 16, kHkv, 64}, {}, 0);
    w.cache.v = TensorRef(w.cache.v.data, DType::kBF16, {64, 16, kHkv, 64}, {}, 0);
    for (PageLoad load : {PageLoad::kAuto, PageLoad::kGather, PageLoad::kTma}) {
      wide.page_load = load;
      const ad::PagedPrefillOpPlan p = ad::plan_paged_prefill_run(ad::validate_paged_prefill(w, wide), h200());
      EXPECT_EQ(p.kv_tma, load != PageLoad::kGather);
      EXPECT_EQ(p.choice.family->describe(p.choice.point),
                std::string("head_dim=64 block_m=192 page_load=") + (p.kv_tma ? "tma" : "gather"));
    }
  }
  PagedPrefillPlan narrow = kjit::attention::plan_paged_prefill(rows.data(), 3, kD, 64);
  narrow.page_load = PageLoad::kAuto;
  EXPECT_FALSE(ad::plan_paged_prefill_run(ad::validate_paged_prefill(valid_paged(narrow), narrow), h200()).kv_tma);
  narrow.page_load = PageLoad::kTma;
  EXPECT_THROW(ad::validate_paged_prefill(valid_paged(narrow), narrow), kjit::InvalidArgument);
}

TEST(AttentionPrefillPlan, PackedPlanAgainstTheCallAndTheKernels) {
  using kjit::attention::AttentionVariant;
  const std::vector<int32_t> qo = {0, 70, 80, 210}, kv = {0, 3, 4, 5}, last = {8, 16, 1};
  kjit::attention::PagedPrefillPlanArgs a = tuned_plan_args(qo, kv, last, kHq);
  a.kv_heads = kHkv;
  const ad::PagedPrefillPlanDims pd = ad::paged_prefill_plan_dims(a);
  const PagedPrefillPlan plan = ad::paged_prefill_work_map(qo.data(), pd, 128, kHq / kHkv);
  const ad::PagedPrefillDims d = ad::validate_paged_prefill(valid_paged(plan), plan);
  EXPECT_EQ(d.pack_group, kHq / kHkv);
  // A plan packed for another group, or at 64 rows: InvalidArgument naming both.
  PagedPrefillPlan other = ad::paged_prefill_work_map(qo.data(), pd, 128, 2);
  try {
    ad::validate_paged_prefill(valid_paged(other), other);
    ADD_FAILURE() << "no error for a plan of another group";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("plan packs 2 q heads per KV head"), std::string::npos) << e.what();
  }
  PagedPrefillPlan narrow = ad::paged_prefill_work_map(qo.data(), pd, 64, kHq / kHkv);
  EXPECT_THROW(ad::validate_paged_prefill(valid_paged(narrow), narrow), kjit::InvalidArgument);
  // Only the sm_90a kernel runs it: mma.sync refuses, auto takes wgmma on sm_90a.
  ad::PagedPrefillDims m = d;
  m.variant = AttentionVariant::kMma;
  try {
    ad::plan_paged_prefill_run(m, h200());
    ADD_FAILURE() << "mma ran a packed plan";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("does not pack GQA heads"), std::string::npos) << e.what();
  }
  const ad::PagedPrefillOpPlan run = ad::plan_paged_prefill_run(d, h200());
  EXPECT_EQ(run.variant, AttentionVariant::kWgmma);
  EXPECT_EQ(run.pack_group, kHq / kHkv);
  EXPECT_THROW(ad::plan_paged_prefill_run(d, h200(8, 0)), kjit::Unsupported);
  // The kernel's Params: CTAs over the KV heads, the group as a FastDiv.
  const PagedPrefillArgs args = valid_paged(plan);
  const kjit::attention::PrefillParams p = ad::PagedPrefillOp::params({args, plan, fake_ptr(), plan.workspace_bytes}, d);
  EXPECT_EQ(p.pack_group, kHq / kHkv);
  EXPECT_EQ(p.head_group, kHkv);
  EXPECT_EQ(kjit::fast_quotient(13, p.pack_div), 13 / (kHq / kHkv));
  const ad::PagedPrefillDims du = ad::validate_paged_prefill(args, kjit::attention::plan_paged_prefill(qo.data(), 3, kD, 128));
  EXPECT_EQ(ad::PagedPrefillOp::params({args, plan, fake_ptr(), plan.workspace_bytes}, du).head_group, kHq);
}
