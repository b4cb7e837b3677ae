#pragma once
// A ragged paged prefill case and a pushed tuning table naming a kernel its built-in plan does
// not take, as the KJIT_JIT=async tests build them (tests/gpu/async_jit_paged_test.cc on the GPU,
// tests/runtime/async_jit_paged_prefill_test.cc on the stand-in driver): on sm_90a the built-in
// plan packs the group's q heads onto the wgmma kernel's 128-row tiles, and the table names the
// mma.sync kernel at 128 rows, unpacked (pack_gqa 0).
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "tests/runtime/tuned_table.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

/// Two requests (150 and 90 query rows over 200 and 150 keys), Hq8/Hkv2 (group 4), D128, pages
/// of 16, causal, with lse, planned by the overload that knows the KV heads (pack_gqa auto: the
/// tuned one). The mean request is longer than 64 rows: the built-in tile is 128 rows.
inline kjit::testing::PagedPrefillCase async_paged_prefill_case() {
  kjit::testing::PagedPrefillCase c;
  c.q_lens = {150, 90};
  c.kv_lens = {200, 150};
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.layout.page_size = 16;
  c.causal = true;
  c.lse = true;
  c.pack_gqa = kjit::attention::PackGqa::kAuto;
  return c;
}

/// What the plan step reads of `c` (run_paged_prefill_case's PagedPrefillPlanArgs).
inline kjit::attention::detail::PagedPrefillPlanDims paged_prefill_case_dims(const kjit::testing::PagedPrefillCase& c) {
  kjit::attention::detail::PagedPrefillPlanDims d;
  d.batch = static_cast<int64_t>(c.q_lens.size());
  for (size_t b = 0; b < c.q_lens.size(); ++b) {
    d.total_q += c.q_lens[b];
    d.nonempty += c.q_lens[b] > 0;
    d.max_kv_len = std::max<int64_t>(d.max_kv_len, c.kv_lens[b]);
  }
  d.head_dim = c.head_dim;
  d.q_heads = c.q_heads;
  d.page_size = c.layout.page_size;
  d.causal = c.causal;
  d.tile_rows = c.tile_rows;
  d.group = c.q_heads / c.kv_heads;
  d.pack_gqa = c.pack_gqa;
  return d;
}

/// Checks that `c`'s built-in plan on `device` (sm_90a) is the packed wgmma kernel at 128 rows,
/// then installs a tuning table for `device` naming the mma.sync kernel at 128 rows, unpacked,
/// for `c`'s bucket. Call through ASSERT_NO_FATAL_FAILURE.
inline void push_paged_prefill_mma(const kjit::testing::PagedPrefillCase& c, int device) {
  namespace ad = kjit::attention::detail;
  const ad::PagedPrefillPlanDims d = paged_prefill_case_dims(c);
  const kjit::DeviceInfo& info = kjit::device_info(device);
  const ad::PagedPrefillOpPlan builtin = ad::PagedPrefillPlanner::plan(d, info);
  ASSERT_EQ(builtin.choice.family, &kjit::attention::paged_prefill_sm90_family());
  ASSERT_EQ(builtin.tile_rows, 128);
  ASSERT_EQ(builtin.pack_group, c.q_heads / c.kv_heads) << "the built-in plan packs the group";
  kjit::detail::TunedChoice choice;
  choice.family = &kjit::attention::paged_prefill_family();
  choice.point = choice.family->point({c.head_dim, 128});
  choice.knobs[0] = 0;
  ASSERT_EQ(ad::PagedPrefillPlanner::tune_spec().fits(choice, info), "");
  ad::PagedPrefillOpPlan tuned;
  ASSERT_NO_FATAL_FAILURE(push_tuned_choice<ad::PagedPrefillPlanner>(device, d, choice, &tuned));
  ASSERT_EQ(tuned.variant, kjit::attention::AttentionVariant::kMma);
  ASSERT_EQ(tuned.pack_group, 1);
}
