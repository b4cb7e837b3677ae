// Host-only checks of the kernel Params the attention ops fill (decode, paged decode, prefill,
// paged prefill, append): every pointer, stride and size lands in its field, from views whose
// batch, token and head strides all differ (a swapped stride fails), with and without the optional
// tensors and split partials. The shared fields come from one place (runtime/ops/attention/
// params.hpp, runtime/ops/softmax_params.hpp); these tests pin what each op gets from it. No GPU.
#include <kjit/ops/attention.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_append.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using kjit::DType;
using kjit::TensorRef;
namespace ka = kjit::attention;
namespace ad = kjit::attention::detail;

constexpr int64_t kB = 3, kL = 100, kHq = 8, kHkv = 2, kD = 128;
constexpr int64_t kPages = 40, kPs = 16, kNnz = 30;
constexpr float kLog2e = 1.4426950408889634f;

void* fake_ptr(uintptr_t offset) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }
const char* bytes(const void* p) { return static_cast<const char*>(p); }

// Query / output views [batch, q_len, heads, D] with padded head and token strides.
TensorRef bhld(uintptr_t at, int64_t batch, int64_t len, int64_t heads, int64_t head_stride) {
  return TensorRef(fake_ptr(at), DType::kBF16, {batch, len, heads, kD},
                   {len * heads * head_stride + 64, heads * head_stride, head_stride, 1}, 0);
}

// K/V [batch, kL, kHkv, D] halves of one [batch, kL, 2, kHkv, D] buffer: token stride 2·Hkv·D.
TensorRef kv_half(int half) {
  return TensorRef(fake_ptr(0x1000000 + static_cast<uintptr_t>(half) * kHkv * kD * 2), DType::kBF16,
                   {kB, kL, kHkv, kD}, {kL * 2 * kHkv * kD + 512, 2 * kHkv * kD, kD, 1}, 0);
}

// Page pools [kPages, kPs, kHkv, D], K and V interleaved per page ([pages, 2, ps, H, D]): the page
// stride is two pages of slots, so page_rows = 2·ps.
ka::PagedKVCache paged_cache(int64_t batch) {
  const std::initializer_list<int64_t> strides = {2 * kPs * kHkv * kD, kHkv * kD, kD, 1};
  ka::PagedKVCache c;
  c.k = TensorRef(fake_ptr(0x2000000), DType::kBF16, {kPages, kPs, kHkv, kD}, strides, 0);
  c.v = TensorRef(fake_ptr(0x2000000 + kPs * kHkv * kD * 2), DType::kBF16, {kPages, kPs, kHkv, kD}, strides, 0);
  c.indptr = TensorRef(fake_ptr(0x3000000), DType::kI32, {batch + 1}, {}, 0);
  c.page_indices = TensorRef(fake_ptr(0x3001000), DType::kI32, {kNnz}, {}, 0);
  c.last_page_len = TensorRef(fake_ptr(0x3002000), DType::kI32, {batch}, {}, 0);
  return c;
}

template <class Params>
void expect_paged_source(const Params& p, const ka::PagedKVCache& c) {
  EXPECT_EQ(p.k, c.k.data);
  EXPECT_EQ(p.v, c.v.data);
  EXPECT_EQ(p.kv_indptr, c.indptr.data);
  EXPECT_EQ(p.kv_page_indices, c.page_indices.data);
  EXPECT_EQ(p.kv_last_page_len, c.last_page_len.data);
  EXPECT_EQ(p.kv_lens, nullptr);
  EXPECT_EQ(p.k_stride_b, 2 * kPs * kHkv * kD);
  EXPECT_EQ(p.v_stride_b, 2 * kPs * kHkv * kD);
  EXPECT_EQ(p.k_stride_l, kHkv * kD);
  EXPECT_EQ(p.v_stride_l, kHkv * kD);
  EXPECT_EQ(p.k_stride_h, kD);
  EXPECT_EQ(p.v_stride_h, kD);
  EXPECT_EQ(p.page_size, kPs);
  EXPECT_EQ(p.page_rows, 2 * kPs);
  EXPECT_EQ(kjit::fast_quotient(35, p.page_div), 35u / kPs);
  EXPECT_EQ(p.max_kv_len, 0);
}

template <class Params>
void expect_contiguous_source(const Params& p, const TensorRef& k, const TensorRef& v, const void* kv_lens) {
  EXPECT_EQ(p.k, k.data);
  EXPECT_EQ(p.v, v.data);
  EXPECT_EQ(p.kv_lens, kv_lens);
  EXPECT_EQ(p.kv_indptr, nullptr);
  EXPECT_EQ(p.k_stride_b, kL * 2 * kHkv * kD + 512);
  EXPECT_EQ(p.k_stride_l, 2 * kHkv * kD);
  EXPECT_EQ(p.k_stride_h, kD);
  EXPECT_EQ(p.v_stride_b, p.k_stride_b);
  EXPECT_EQ(p.v_stride_l, p.k_stride_l);
  EXPECT_EQ(p.v_stride_h, p.k_stride_h);
  EXPECT_EQ(p.max_kv_len, kL);
  EXPECT_EQ(p.page_size, 0);
}

template <class Params>
void expect_heads(const Params& p, float scale) {
  EXPECT_EQ(p.q_heads, kHq);
  EXPECT_EQ(p.kv_heads, kHkv);
  EXPECT_EQ(p.group, kHq / kHkv);
  EXPECT_FLOAT_EQ(p.scale_log2, (scale != 0.f ? scale : 1.f / std::sqrt(float{kD})) * kLog2e);
}

// The query side both decode ops share (decode_query_params): q, out, lse of the views the
// tests build, and the split partials in `ws`.
void expect_decode_query(const ka::DecodeParams& p, const TensorRef& q, const TensorRef& out, const TensorRef& lse,
                         const ad::DecodePlan& plan, void* ws) {
  EXPECT_EQ(p.q, q.data);
  EXPECT_EQ(p.out, out.data);
  EXPECT_EQ(p.lse, lse.data);
  EXPECT_EQ(static_cast<void*>(p.o_part), ws);
  EXPECT_EQ(bytes(p.lse_part), bytes(ws) + plan.o_part_bytes);
  EXPECT_EQ(p.q_stride_b, q.strides[0]);
  EXPECT_EQ(p.q_stride_h, 2 * kD);
  EXPECT_EQ(p.out_stride_b, out.strides[0]);
  EXPECT_EQ(p.out_stride_h, 3 * kD);
  EXPECT_EQ(p.lse_stride_b, kHq + 4);
  EXPECT_EQ(p.lse_stride_h, 1);
  EXPECT_EQ(p.batch, kB);
  EXPECT_EQ(p.num_splits, plan.num_splits);
  EXPECT_EQ(p.m_tiles, plan.m_tiles);
}

TEST(AttentionParams, DecodeFillsEveryField) {
  ka::DecodeArgs a;
  a.q = bhld(0x0, kB, 1, kHq, 2 * kD);
  a.k = kv_half(0);
  a.v = kv_half(1);
  a.kv_lens = TensorRef(fake_ptr(0x4000000), DType::kI32, {kB}, {}, 0);
  a.mask = TensorRef(fake_ptr(0x4100000), DType::kBool, {kB, kL}, {kL + 28, 1}, 0);
  a.out = bhld(0x5000000, kB, 1, kHq, 3 * kD);
  a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kB, kHq}, {kHq + 4, 1}, 0);
  a.num_splits = 4;
  const ad::DecodeDims d = ad::validate_decode(a);
  const ad::DecodePlan plan = ad::plan_decode(d, a.num_splits, 132, 1);
  ASSERT_EQ(plan.num_splits, 4);
  void* ws = fake_ptr(0x8000000);
  const ka::DecodeParams p = ad::DecodeOp::params(a, d, plan, ws);
  expect_decode_query(p, a.q, a.out, a.lse, plan, ws);
  EXPECT_EQ(p.mask, a.mask.data);
  EXPECT_EQ(p.mask_stride_b, kL + 28);
  EXPECT_EQ(p.mask_stride_l, 1);
  expect_contiguous_source(p, a.k, a.v, a.kv_lens.data);
  expect_heads(p, 0.f);
  EXPECT_EQ(p.split_tokens, plan.split_tokens);
  EXPECT_EQ(kjit::fast_quotient(7, p.m_tiles_div), 7u / static_cast<uint32_t>(plan.m_tiles));
  EXPECT_EQ(kjit::fast_quotient(9, p.kv_heads_div), 9u / kHkv);
  EXPECT_EQ(kjit::fast_quotient(9, p.num_splits_div), 9u / 4);

  // No optional tensors, one split, an explicit scale: nothing else is set.
  a.kv_lens = a.mask = a.lse = {};
  a.num_splits = 1;
  a.scale = -0.25f;
  const ad::DecodeDims d1 = ad::validate_decode(a);
  const ka::DecodeParams p1 = ad::DecodeOp::params(a, d1, ad::plan_decode(d1, 1, 132, 1), ws);
  EXPECT_EQ(p1.kv_lens, nullptr);
  EXPECT_EQ(p1.mask, nullptr);
  EXPECT_EQ(p1.lse, nullptr);
  EXPECT_EQ(p1.o_part, nullptr);
  EXPECT_EQ(p1.lse_part, nullptr);
  EXPECT_EQ(p1.lse_stride_b, 0);
  EXPECT_EQ(p1.mask_stride_b, 0);
  EXPECT_EQ(p1.num_splits, 1);
  expect_heads(p1, -0.25f);
}

TEST(AttentionParams, PagedDecodeFillsEveryField) {
  ka::PagedDecodeArgs a;
  a.q = bhld(0x0, kB, 1, kHq, 2 * kD);
  a.cache = paged_cache(kB);
  a.out = bhld(0x5000000, kB, 1, kHq, 3 * kD);
  a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kB, kHq}, {kHq + 4, 1}, 0);
  a.num_splits = 3;
  a.scale = 0.5f;
  const ad::PagedDecodeDims d = ad::validate_paged_decode(a);
  const ad::DecodePlan plan = ad::plan_paged_decode(d, a.num_splits, 0, 132, 1);
  ASSERT_EQ(plan.num_splits, 3);
  void* ws = fake_ptr(0x8000000);
  const ka::DecodeParams p = ad::PagedDecodeOp::params(a, d, plan, ws);
  expect_decode_query(p, a.q, a.out, a.lse, plan, ws);
  EXPECT_EQ(p.mask, nullptr);
  expect_paged_source(p, a.cache);
  expect_heads(p, 0.5f);
  EXPECT_EQ(p.split_tokens, 0);  // each request's own length is split on the device
  EXPECT_EQ(kjit::fast_quotient(9, p.kv_heads_div), 9u / kHkv);
  EXPECT_EQ(kjit::fast_quotient(9, p.num_splits_div), 3u);
}

TEST(AttentionParams, PrefillFillsEveryField) {
  constexpr int64_t kLq = 70;
  ka::PrefillArgs a;
  a.q = bhld(0x0, kB, kLq, kHq, 2 * kD);
  a.k = kv_half(0);
  a.v = kv_half(1);
  a.kv_lens = TensorRef(fake_ptr(0x4000000), DType::kI32, {kB}, {}, 0);
  a.mask = TensorRef(fake_ptr(0x4100000), DType::kBool, {kB, kLq, kL}, {kLq * 128 + 64, 128, 1}, 0);
  a.out = bhld(0x5000000, kB, kLq, kHq, 3 * kD);
  a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kB, kHq, kLq}, {kHq * 80, 80, 1}, 0);
  a.causal = true;
  a.block_m = 64;
  a.variant = ka::AttentionVariant::kMma;
  const ad::PrefillDims d = ad::validate_prefill(a);
  ad::PrefillPlan plan;
  plan.block_m = 64;
  plan.q_tiles = 2;
  const ka::PrefillParams p = ad::PrefillOp::params(a, d, plan);
  EXPECT_EQ(p.q, a.q.data);
  EXPECT_EQ(p.out, a.out.data);
  EXPECT_EQ(p.lse, a.lse.data);
  EXPECT_EQ(p.mask, a.mask.data);
  EXPECT_EQ(p.q_stride_b, a.q.strides[0]);
  EXPECT_EQ(p.q_stride_l, kHq * 2 * kD);
  EXPECT_EQ(p.q_stride_h, 2 * kD);
  EXPECT_EQ(p.out_stride_b, a.out.strides[0]);
  EXPECT_EQ(p.out_stride_l, kHq * 3 * kD);
  EXPECT_EQ(p.out_stride_h, 3 * kD);
  EXPECT_EQ(p.lse_stride_b, kHq * 80);
  EXPECT_EQ(p.lse_stride_h, 80);
  EXPECT_EQ(p.lse_stride_l, 1);
  EXPECT_EQ(p.mask_stride_b, kLq * 128 + 64);
  EXPECT_EQ(p.mask_stride_q, 128);
  EXPECT_EQ(p.mask_stride_k, 1);
  expect_contiguous_source(p, a.k, a.v, a.kv_lens.data);
  expect_heads(p, 0.f);
  EXPECT_EQ(p.batch, kB);
  EXPECT_EQ(p.q_len, kLq);
  EXPECT_EQ(p.q_tiles, 2);
  EXPECT_EQ(p.causal, 1);
  EXPECT_EQ(p.head_group, ad::prefill_head_group(d, ka::AttentionVariant::kMma));
  EXPECT_EQ(p.qo_indptr, nullptr);

  // A 2-D mask is one row for every query; no lse or kv_lens; not causal.
  a.mask = TensorRef(fake_ptr(0x4100000), DType::kBool, {kB, kL}, {kL + 28, 1}, 0);
  a.kv_lens = a.lse = {};
  a.causal = false;
  a.scale = 0.125f;
  const ka::PrefillParams p2 = ad::PrefillOp::params(a, ad::validate_prefill(a), plan);
  EXPECT_EQ(p2.mask_stride_b, kL + 28);
  EXPECT_EQ(p2.mask_stride_q, 0);
  EXPECT_EQ(p2.mask_stride_k, 1);
  EXPECT_EQ(p2.lse, nullptr);
  EXPECT_EQ(p2.lse_stride_h, 0);
  EXPECT_EQ(p2.kv_lens, nullptr);
  EXPECT_EQ(p2.causal, 0);
  expect_heads(p2, 0.125f);
}

TEST(AttentionParams, PagedPrefillFillsEveryField) {
  const std::vector<int32_t> qo = {0, 70, 80, 210};
  const ka::PagedPrefillPlan plan = ka::plan_paged_prefill(qo.data(), 3, kD, 64);
  ASSERT_EQ(plan.num_work(), 6);
  ka::PagedPrefillArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {plan.total_q, kHq, kD}, {kHq * 2 * kD, 2 * kD, 1}, 0);
  a.qo_indptr = TensorRef(fake_ptr(0x800000), DType::kI32, {plan.batch + 1}, {}, 0);
  a.cache = paged_cache(plan.batch);
  a.out = TensorRef(fake_ptr(0x5000000), DType::kBF16, {plan.total_q, kHq, kD}, {kHq * 3 * kD, 3 * kD, 1}, 0);
  a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kHq, plan.total_q}, {256, 1}, 0);
  a.causal = true;
  void* ws = fake_ptr(0x8000000);
  const ad::PagedPrefillOp::Args call{a, plan, ws, plan.workspace_bytes};
  const ad::PagedPrefillDims d = ad::PagedPrefillOp::validate(call);
  const ka::PrefillParams p = ad::PagedPrefillOp::params(call, d);
  EXPECT_EQ(p.q, a.q.data);
  EXPECT_EQ(p.out, a.out.data);
  EXPECT_EQ(p.lse, a.lse.data);
  EXPECT_EQ(p.mask, nullptr);
  EXPECT_EQ(p.qo_indptr, a.qo_indptr.data);
  EXPECT_EQ(static_cast<const void*>(p.q_tile_to_batch), ws);
  EXPECT_EQ(bytes(p.q_tile_to_index), bytes(ws) + plan.map_index_offset);
  EXPECT_EQ(p.q_stride_l, kHq * 2 * kD);
  EXPECT_EQ(p.q_stride_h, 2 * kD);
  EXPECT_EQ(p.out_stride_l, kHq * 3 * kD);
  EXPECT_EQ(p.out_stride_h, 3 * kD);
  EXPECT_EQ(p.lse_stride_h, 256);
  EXPECT_EQ(p.lse_stride_l, 1);
  expect_paged_source(p, a.cache);
  expect_heads(p, 0.f);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.q_tiles, 6);  // the plan's work items
  EXPECT_EQ(p.causal, 1);
  EXPECT_EQ(p.head_group, kHq);
}

TEST(AttentionParams, AppendFillsEveryField) {
  ka::AppendPagedKVArgs a;
  a.k = TensorRef(fake_ptr(0x7000000), DType::kBF16, {5, kHkv, kD}, {kHkv * 2 * kD, 2 * kD, 1}, 0);
  a.v = TensorRef(fake_ptr(0x7100000), DType::kBF16, {5, kHkv, kD}, {kHkv * 3 * kD, 3 * kD, 1}, 0);
  a.cache = paged_cache(kB);
  a.append_indptr = TensorRef(fake_ptr(0x7200000), DType::kI32, {kB + 1}, {}, 0);
  const ad::AppendDims d = ad::validate_append(a);
  ad::AppendPlan plan;
  plan.items = 5 * kHkv * kD / 8;
  const ka::PagedAppendParams p = ad::AppendOp::params(a, d, plan);
  EXPECT_EQ(p.k_new, a.k.data);
  EXPECT_EQ(p.v_new, a.v.data);
  EXPECT_EQ(p.k_pool, a.cache.k.data);
  EXPECT_EQ(p.v_pool, a.cache.v.data);
  EXPECT_EQ(p.kv_indptr, a.cache.indptr.data);
  EXPECT_EQ(p.kv_page_indices, a.cache.page_indices.data);
  EXPECT_EQ(p.kv_last_page_len, a.cache.last_page_len.data);
  EXPECT_EQ(p.append_indptr, a.append_indptr.data);
  EXPECT_EQ(p.batch_indices, nullptr);
  EXPECT_EQ(p.k_new_stride_n, kHkv * 2 * kD);
  EXPECT_EQ(p.k_new_stride_h, 2 * kD);
  EXPECT_EQ(p.v_new_stride_n, kHkv * 3 * kD);
  EXPECT_EQ(p.v_new_stride_h, 3 * kD);
  EXPECT_EQ(p.pool_stride_page, 2 * kPs * kHkv * kD);
  EXPECT_EQ(p.pool_stride_slot, kHkv * kD);
  EXPECT_EQ(p.pool_stride_h, kD);
  EXPECT_EQ(p.num_items, plan.items);
  EXPECT_EQ(p.num_new, 5);
  EXPECT_EQ(p.batch, kB);
  EXPECT_EQ(p.kv_heads, kHkv);
  EXPECT_EQ(p.page_size, kPs);
}

}  // namespace
