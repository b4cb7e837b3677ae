// kjit::attention::prefill (dense) and kjit::attention::paged_prefill (ragged, paged) on the GPU
// against the float64 reference (tools/testing/reference_attention.hpp), plus the attention()
// entry. Every case uses fresh random data (the random seed is printed on failure); outputs and LSE are
// 0xFF-poisoned (NaN) before the run, K/V rows past each request's length, padding of strided
// views and unused pool slots/pages hold NaN, so an unwritten output, a read past the live cache
// or a write into padding fails the case. Skips without a GPU.
//
// Every dense case runs on each variant that can take it on this device: the mma.sync kernel
// always, the Hopper wgmma kernel on sm_90 for head_dim 64/128 without a mask or kv_lens (see
// wgmma_capable); every ragged paged case likewise on mma.sync and, on sm_90 for head_dim
// 64/128, on the Hopper paged kernel at 128-row tiles (and at hd64 also at 192-row tiles, its
// three-consumer shape); the case names the variant on failure.
//
// Tolerances: out is bf16 (rounding alone costs up to 2^-9 relative per element) and P is rounded
// to bf16 before P·V as FlashAttention does: expected relative L2 ~2–3e-3 (the emulator of these
// kernels measures 2.2e-3). 1e-2 leaves margin while an indexing, masking or pipeline bug gives
// O(1) errors. LSE is f32 from exact bf16 products accumulated in f32 plus ex2/lg2.approx
// (~1e-6 relative): 1e-4.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace {

using kjit::attention::AttentionVariant;
using kjit::testing::PagedPrefillCase;
using kjit::testing::PrefillCase;

constexpr double kOutTol = 1e-2;
constexpr double kLseTol = 1e-4;
const int kHeadDims[] = {64, 128, 256};

class AttentionPrefillGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kjit::testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

bool is_sm90() {
  const kjit::DeviceInfo& info = kjit::device_info(0);
  return info.cc_major == 9 && info.cc_minor == 0;
}

/// Whether the Hopper kernel takes case `c` on this device (the rule of variant_rejects).
bool wgmma_capable(const PrefillCase& c) {
  return is_sm90() && (c.head_dim == 64 || c.head_dim == 128) && c.mask == 0 && !c.ragged_kv;
}

void check_one(const PrefillCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  try {
    const kjit::testing::AttentionCaseResult r = kjit::testing::run_prefill_case(c, seed);
    EXPECT_TRUE(r.ok(kOutTol, kLseTol)) << r.describe();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
}

/// Runs `c` on every capable variant (an entry case runs once, with its own variant).
void check(const PrefillCase& c) {
  if (c.use_entry) {
    check_one(c);
    return;
  }
  PrefillCase v = c;
  v.variant = AttentionVariant::kMma;
  check_one(v);
  if (wgmma_capable(c)) {
    v.variant = AttentionVariant::kWgmma;
    check_one(v);
  }
}

void check_one(const PagedPrefillCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  try {
    const kjit::testing::AttentionCaseResult r = kjit::testing::run_paged_prefill_case(c, seed);
    EXPECT_TRUE(r.ok(kOutTol, kLseTol)) << r.describe();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
}

/// Whether the Hopper paged kernel can take case `c` at 128-row tiles (and 192 at hd64) on this
/// device.
bool wgmma_capable(const PagedPrefillCase& c) {
  return is_sm90() && (c.head_dim == 64 || c.head_dim == 128) && c.tile_rows != 64;
}

/// Runs `c` on every capable kernel: mma.sync (strict) and, where it can run, the Hopper kernel
/// (strict, 128-row tiles, and 192-row tiles at hd64), unpacked and with the group's q heads
/// packed (pack_gqa on where the group is > 1, else auto: a no-op), each with the persistent
/// schedule and with a CTA per work item and head; then the plan's own choice for the device with
/// the KV heads known (pack_gqa auto, persistent). An entry case runs once, with the plan's own
/// choice.
void check(const PagedPrefillCase& c) {
  if (c.use_entry || c.variant != AttentionVariant::kAuto || c.pack_gqa != kjit::attention::PackGqa::kOff) {
    check_one(c);
    return;
  }
  PagedPrefillCase v = c;
  v.variant = AttentionVariant::kMma;
  check_one(v);
  if (wgmma_capable(c)) {
    v.variant = AttentionVariant::kWgmma;
    for (kjit::attention::PackGqa pack : {kjit::attention::PackGqa::kOff,
                                          c.q_heads > c.kv_heads ? kjit::attention::PackGqa::kOn
                                                                 : kjit::attention::PackGqa::kAuto}) {
      for (bool persistent : {true, false}) {
        v.pack_gqa = pack;
        v.persistent = persistent;
        // Pages of a multiple of 16 load by TMA (auto) and by gather; others gather. 128-row
        // tiles, and at hd64 the 192-row tile too.
        const bool tma = c.layout.page_size % 16 == 0;
        for (int rows : {128, 192}) {
          if (rows == 192 && c.head_dim != 64) continue;
          v.tile_rows = rows;
          for (kjit::attention::PageLoad load :
               {tma ? kjit::attention::PageLoad::kTma : kjit::attention::PageLoad::kAuto,
                kjit::attention::PageLoad::kGather}) {
            v.page_load = load;
            check_one(v);
            if (!tma) break;
          }
        }
        v.page_load = kjit::attention::PageLoad::kAuto;
      }
    }
  }
  v = c;
  v.pack_gqa = kjit::attention::PackGqa::kAuto;
  v.persistent = true;
  check_one(v);
}

PrefillCase dense(int batch, int q_len, int kv_len, int q_heads, int kv_heads, int head_dim, bool causal) {
  return kjit::testing::prefill_case(batch, q_len, kv_len, q_heads, kv_heads, head_dim, causal);
}

// ---- Dense prefill --------------------------------------------------------------------------

TEST_F(AttentionPrefillGpu, EdgeLengthsEveryHeadDimAndTile) {
  // Lengths around the 64/128-row q tiles, the 64-token KV tiles and the 32-key softmax steps.
  for (int hd : kHeadDims) {
    for (int block_m : {64, 128}) {
      for (int len : {1, 17, 63, 64, 65, 129, 200}) {
        for (bool causal : {false, true}) {
          PrefillCase c = dense(2, len, len, 4, 2, hd, causal);
          c.block_m = block_m;
          check(c);
        }
      }
    }
  }
}

TEST_F(AttentionPrefillGpu, ChunkedCausalQueriesAlignToTheEndOfTheKv) {
  for (int hd : kHeadDims) {
    for (int block_m : {64, 128}) {
      for (auto [q, kv] : {std::pair{37, 300}, {130, 1000}, {1, 77}, {64, 65}, {129, 1030}}) {
        PrefillCase c = dense(2, q, kv, 4, 2, hd, true);
        c.block_m = block_m;
        check(c);
      }
    }
  }
  // More queries than keys: the first rows see nothing (zeros, lse = −inf).
  for (int block_m : {64, 128}) {
    PrefillCase c = dense(2, 100, 30, 4, 1, 128, true);
    c.block_m = block_m;
    check(c);
  }
}

TEST_F(AttentionPrefillGpu, MasksTwoAndThreeDIncludingRowsKeepingNothing) {
  for (int hd : kHeadDims) {
    for (int mask : {2, 3}) {
      for (bool causal : {false, true}) {
        PrefillCase c = dense(3, 70, 150, 4, 2, hd, causal);
        c.mask = mask;
        c.block_m = hd == 128 ? 128 : 0;
        check(c);
      }
    }
  }
  // Everything masked in every row of a request, and a 3-D mask with q_len < kv_len.
  PrefillCase c = dense(2, 33, 65, 8, 8, 128, false);
  c.mask = 2;
  check(c);
  c = dense(1, 20, 300, 8, 2, 64, true);
  c.mask = 3;
  check(c);
}

TEST_F(AttentionPrefillGpu, GqaRatios) {
  for (int ratio : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
    PrefillCase c = dense(2, 150, 150, 2 * ratio, 2, 128, true);
    c.block_m = ratio % 2 ? 64 : 128;
    check(c);
  }
  for (int hd : {64, 256}) {
    PrefillCase c = dense(1, 100, 180, 16, 1, hd, false);
    check(c);
  }
}

TEST_F(AttentionPrefillGpu, RaggedKvLensAndStridedViews) {
  for (int hd : kHeadDims) {
    for (bool causal : {false, true}) {
      PrefillCase c = dense(4, 90, 200, 4, 2, hd, causal);
      c.ragged_kv = true;
      c.strided = true;
      c.mask = hd == 128 ? 3 : 0;
      check(c);
    }
  }
}

TEST_F(AttentionPrefillGpu, ScaleAndPeakySoftmax) {
  for (float scale : {0.5f, 0.02f}) {
    PrefillCase c = dense(2, 100, 100, 4, 2, 128, false);
    c.scale = scale;
    check(c);
  }
  // A wide q range makes a few keys dominate: exercises the running-max rescale (and the skip of
  // the rescale once the max settles).
  for (int hd : kHeadDims) {
    PrefillCase c = dense(1, 256, 700, 4, 2, hd, true);
    c.q_range = 12.f;
    c.block_m = 128;
    check(c);
  }
}

TEST_F(AttentionPrefillGpu, ChosenTileOnAFullDevice) {
  // Large enough that the planner picks 128-row tiles (≥ one wave of CTAs), with the LPT walk.
  PrefillCase c = dense(2, 1100, 1100, 64, 8, 128, true);
  c.lse = false;
  check(c);
  c = dense(1, 600, 600, 64, 64, 64, false);
  check(c);
}

TEST_F(AttentionPrefillGpu, NoQueriesOrNoKeys) {
  check(dense(2, 0, 50, 4, 2, 128, true));  // launches nothing
  PrefillCase c = dense(2, 40, 0, 4, 2, 128, false);  // zeros, lse = −inf
  check(c);
  c.causal = true;
  check(c);
}

TEST_F(AttentionPrefillGpu, LongerSequencesAcrossManyKvTiles) {
  // Several 128-token KV tiles and 128-row q tiles: the wgmma kernel's stage ring wraps (2 or 3
  // stages) and its unmasked steady state runs; chunked rows and GQA 16 on the same shapes.
  for (int hd : {64, 128}) {
    for (bool causal : {false, true}) {
      check(dense(2, 520, 520, 4, 2, hd, causal));
      check(dense(1, 300, 1337, 16, 1, hd, causal));
    }
  }
  PrefillCase c = dense(1, 640, 1000, 8, 8, 128, true);
  c.q_range = 12.f;  // peaky softmax: many running-max rescales across tiles
  check(c);
  c = dense(2, 513, 513, 4, 4, 64, false);
  c.strided = true;
  check(c);
  // More CTAs than SMs, with CTAs that attend nothing (q_len > kv_len under causal: the first
  // 700 rows see no key) between CTAs that do.
  check(dense(2, 1000, 300, 64, 8, 64, true));
  check(dense(3, 260, 260, 40, 8, 128, false));
}

// ---- Ragged paged prefill ----------------------------------------------------------------------

PagedPrefillCase ragged(std::vector<int> q_lens, std::vector<int> kv_lens, int q_heads, int kv_heads, int head_dim,
                        int page_size, bool causal) {
  return kjit::testing::paged_prefill_case(std::move(q_lens), std::move(kv_lens), q_heads, kv_heads, head_dim,
                                           page_size, causal);
}

TEST_F(AttentionPrefillGpu, PlanOfThreeRaggedRequests) {
  const std::vector<int32_t> indptr = {0, 70, 80, 210};
  const kjit::attention::PagedPrefillPlan p64 = kjit::attention::plan_paged_prefill(indptr.data(), 3, 128, 64);
  EXPECT_EQ(p64.q_tile_to_batch, (std::vector<int32_t>{0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(p64.q_tile_to_index, (std::vector<int32_t>{0, 1, 0, 0, 1, 2}));
  for (int tile_rows : {64, 128}) {
    for (bool causal : {false, true}) {
      PagedPrefillCase c = ragged({70, 10, 130}, {70, 60, 130}, 8, 2, 128, 16, causal);
      c.tile_rows = tile_rows;
      check(c);
    }
  }
}

TEST_F(AttentionPrefillGpu, PagedPageSizesAndLengthsAroundPages) {
  for (int ps : {1, 16, 64, 7}) {
    for (bool causal : {false, true}) {
      // kv lengths 1, page − 1, page, page + 1 and a long one; q lengths at most the kv length
      // for causal chunked prefill, and a q_len 0 / kv_len 0 request.
      const std::vector<int> kv = {1, std::max(ps - 1, 1), ps, ps + 1, 300, 0, 40};
      const std::vector<int> q = {1, std::max(ps - 1, 1), ps, 1, 200, 5, 0};
      check(ragged(q, kv, 8, 2, 128, ps, causal));
    }
  }
}

TEST_F(AttentionPrefillGpu, PagedEveryHeadDimAndLayouts) {
  for (int hd : kHeadDims) {
    for (int tile_rows : {64, 128}) {
      PagedPrefillCase c = ragged({129, 3, 64}, {200, 3, 64}, 4, 2, hd, 16, true);
      c.tile_rows = tile_rows;
      check(c);
    }
    PagedPrefillCase c = ragged({50, 90}, {80, 90}, 4, 1, hd, 32, false);
    c.layout.interleaved = true;
    check(c);
    c.layout.via_append = true;
    c.causal = true;
    check(c);
  }
}

TEST_F(AttentionPrefillGpu, PagedBatchShapes) {
  check(ragged({300}, {300}, 8, 2, 128, 16, true));                            // batch of one
  check(ragged({1000, 3, 7, 1}, {1500, 3, 20, 1}, 8, 2, 128, 16, true));       // one far longer request
  check(ragged({0, 0, 0}, {10, 0, 5}, 4, 2, 64, 16, false));                   // no queries at all
  check(ragged({16, 16, 16, 16, 16, 16, 16, 16}, {16, 32, 48, 64, 80, 96, 112, 128}, 8, 8, 256, 16, true));
  for (int ratio : {1, 2, 3, 4, 8, 16}) {
    check(ragged({70, 10, 130}, {100, 10, 130}, 2 * ratio, 2, 128, 16, ratio % 2 == 0));
  }
}

TEST_F(AttentionPrefillGpu, PagedHopperKernelPagesGqaAndEdges) {
  // Each case on both kernels (check): every page size from 1 to 128 with lengths around pages
  // and tiles (kv 1000 wraps the 3-stage ring twice; q 300 spans three 128-row tiles), GQA 1..8,
  // causal rows that see no key (q_len > kv_len), empty requests, both head dims.
  for (int ps : {1, 2, 3, 8, 16, 32, 64, 128}) {
    for (bool causal : {false, true}) {
      check(ragged({300, 1, 0, 129, 40}, {1000, 1, 17, 129, 0}, 8, 2, 128, ps, causal));
    }
  }
  for (int ratio : {1, 2, 3, 4, 8}) {
    for (int hd : {64, 128}) {
      check(ragged({200, 130, 7}, {260, 130, 300}, 2 * ratio, 2, hd, 16, ratio % 2 == 1));
    }
  }
  check(ragged({256, 100}, {50, 100}, 4, 4, 128, 16, true));  // causal: 206 rows see nothing
  check(ragged({0, 0, 128}, {0, 64, 128}, 4, 1, 64, 16, false));
  // Explicitly requested where it cannot run: Unsupported, never a wrong answer.
  PagedPrefillCase c = ragged({70, 10, 130}, {70, 60, 130}, 8, 2, 256, 16, true);
  c.variant = AttentionVariant::kWgmma;
  c.tile_rows = 128;
  EXPECT_THROW(kjit::testing::run_paged_prefill_case(c, fresh_seed()), kjit::Unsupported);
  c.head_dim = 128;
  c.tile_rows = 64;
  EXPECT_THROW(kjit::testing::run_paged_prefill_case(c, fresh_seed()), kjit::Unsupported);
  c.tile_rows = 128;
  if (!is_sm90()) EXPECT_THROW(kjit::testing::run_paged_prefill_case(c, fresh_seed()), kjit::Unsupported);
}

TEST_F(AttentionPrefillGpu, PagedHopperWideTileAtHd64) {
  // The 192-row work items of hd64 (three consumer warpgroups; check runs every case on mma.sync
  // at the case's tile, and on sm_90 on the Hopper kernel at 128 and 192 rows): request lengths
  // around the tile (1, 191, 192, 193, 385) with empty requests between them, pages 1/16/64, GQA
  // 1/4/8, causal (chunked: kv ≥ q) and not, LSE.
  const std::vector<int> q = {1, 0, 191, 192, 0, 193, 385};
  const std::vector<int> kv = {1, 40, 300, 192, 0, 193, 700};
  for (int ps : {1, 16, 64}) {
    for (int ratio : {1, 4, 8}) {
      for (bool causal : {false, true}) check(ragged(q, kv, 2 * ratio, 2, 64, ps, causal));
    }
  }
  // Causal rows that see no key (q_len > kv_len) in the third consumer's rows.
  check(ragged({192, 150}, {20, 150}, 4, 4, 64, 16, true));
  // 192-row plans where no kernel of this device runs them: Unsupported, never a wrong answer.
  PagedPrefillCase c = ragged({200, 10}, {200, 60}, 8, 2, 64, 16, true);
  c.tile_rows = 192;
  c.variant = AttentionVariant::kMma;
  EXPECT_THROW(kjit::testing::run_paged_prefill_case(c, fresh_seed()), kjit::Unsupported);
  if (!is_sm90()) {
    c.variant = AttentionVariant::kAuto;
    EXPECT_THROW(kjit::testing::run_paged_prefill_case(c, fresh_seed()), kjit::Unsupported);
  }
}

TEST_F(AttentionPrefillGpu, PagedPackedGqaUnevenGroupsAndOneTokenRequests) {
  // Packed rows where a token's group straddles a tile edge (groups 3 and 6: 128 and 192 are not
  // multiples), one-token requests (a group's rows only), empty requests between them, a long
  // request over many tiles, causal rows that see no key (q 43 > kv 40); check runs each on
  // mma.sync and, on sm_90, on the Hopper kernel unpacked and packed at 128 and (hd64) 192 rows.
  for (int ratio : {3, 6, 8}) {
    for (int hd : {64, 128}) {
      for (bool causal : {false, true}) {
        check(ragged({1, 1, 0, 1, 5, 43, 200}, {1, 90, 7, 300, 5, 40, 260}, 2 * ratio, 2, hd, 16, causal));
      }
    }
  }
}

TEST_F(AttentionPrefillGpu, PagedHopperMoreItemsThanSms) {
  // More work items (plan tiles × q heads: 17 × 32 = 544) than an H100/H200 has SMs: several
  // waves of CTAs, heaviest first, or several units per persistent CTA (each unit's Q gathered
  // while the unit before finishes, the K/V ring carried across units); both kernels, both masks.
  const std::vector<int> q = {384, 300, 200, 129, 256, 50, 384, 1}, kv = {500, 300, 700, 129, 256, 80, 384, 1};
  for (bool causal : {true, false}) check(ragged(q, kv, 32, 8, 64, 16, causal));
  if (!is_sm90()) return;
  // The Hopper plan here has the persistent schedule: every SM a CTA, every unit once.
  std::vector<int32_t> qo{0}, kv_indptr{0}, last;
  for (size_t b = 0; b < q.size(); ++b) {
    qo.push_back(qo.back() + q[b]);
    kv_indptr.push_back(kv_indptr.back() + (kv[b] + 15) / 16);
    last.push_back(kv[b] - (kv[b] - 1) / 16 * 16);
  }
  kjit::attention::PagedPrefillPlanArgs pa;
  pa.qo_indptr_host = qo.data();
  pa.kv_indptr_host = kv_indptr.data();
  pa.last_page_len_host = last.data();
  pa.batch = static_cast<int64_t>(q.size());
  pa.q_heads = 32;
  pa.kv_heads = 8;
  pa.head_dim = 64;
  pa.page_size = 16;
  pa.causal = true;
  pa.tile_rows = 128;
  pa.pack_gqa = kjit::attention::PackGqa::kOff;
  const kjit::attention::PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(pa);
  EXPECT_EQ(plan.num_work(), 17);
  EXPECT_EQ(plan.schedule_heads, 32);
  EXPECT_EQ(plan.ctas(), std::min<int64_t>(kjit::device_info(0).sm_count, 17 * 32));
  EXPECT_EQ(plan.cta_work.size(), 17u * 32);
}

TEST_F(AttentionPrefillGpu, PagedHopperPersistentFewCtasManyUnits) {
  // The persistent schedule on 1, 3 and 7 CTAs: each CTA runs many units back to back, so the
  // K/V ring's phases, the Q buffer's handover and the pingpong turns carry across units, among
  // them units that attend no key (q_len > kv_len under causal, an empty KV) and one-token
  // requests; packed and not, both head dims, both masks, LSE.
  if (!is_sm90()) GTEST_SKIP() << "the persistent schedule is the sm_90a kernel's";
  const std::vector<int> q = {1, 300, 0, 40, 129, 7, 1};
  const std::vector<int> kv = {1, 400, 9, 20, 129, 0, 300};
  for (int ctas : {1, 3, 7}) {
    for (int hd : {64, 128}) {
      for (bool causal : {false, true}) {
        for (kjit::attention::PackGqa pack : {kjit::attention::PackGqa::kOff, kjit::attention::PackGqa::kOn}) {
          PagedPrefillCase c = ragged(q, kv, 8, 2, hd, 16, causal);
          c.lse = true;
          c.pack_gqa = pack;
          c.max_ctas = ctas;
          check_one(c);
        }
      }
    }
  }
}

TEST_F(AttentionPrefillGpu, PagedHopperTmaPagesEveryPageSizeAndTail) {
  // TMA page loads (16-slot boxes) against the gather, on 2 and 5 persistent CTAs and a CTA per
  // unit: pages of 16, 32, 64 and 128 tokens (the pools' unused slots hold NaN), requests whose
  // KV ends on a tile (no gathered tail), on a page but not a tile, inside a page, and a request
  // with one key or none; every unit's tail tile gathered, the rest by TMA; packed and not, both
  // masks, LSE.
  if (!is_sm90()) GTEST_SKIP() << "TMA page loads are the sm_90a kernel's";
  const std::vector<int> q = {64, 300, 1, 77, 5, 129};
  const std::vector<int> kv = {256, 400, 1, 333, 0, 129};
  for (int page : {16, 32, 64, 128}) {
    for (int ctas : {2, 5, -1}) {
      for (bool causal : {false, true}) {
        PagedPrefillCase c = ragged(q, kv, 8, 2, 128, page, causal);
        c.lse = true;
        c.tile_rows = 128;
        c.pack_gqa = causal ? kjit::attention::PackGqa::kOn : kjit::attention::PackGqa::kOff;
        c.persistent = ctas > 0;
        c.max_ctas = ctas > 0 ? ctas : 0;
        c.page_load = kjit::attention::PageLoad::kTma;
        check_one(c);
      }
    }
  }
  // hd64 at 128- and 192-row tiles (three consumer warpgroups), persistent and not; an
  // interleaved [num_pages, 2, page_size, ...] pool.
  for (int rows : {128, 192}) {
    for (bool persistent : {true, false}) {
      PagedPrefillCase h = ragged(q, kv, 8, 2, 64, rows == 128 ? 32 : 16, true);
      h.lse = true;
      h.tile_rows = rows;
      h.pack_gqa = kjit::attention::PackGqa::kOn;
      h.persistent = persistent;
      h.max_ctas = persistent ? 3 : 0;
      h.page_load = kjit::attention::PageLoad::kTma;
      check_one(h);
    }
  }
  PagedPrefillCase c = ragged(q, kv, 8, 2, 128, 16, true);
  c.layout.interleaved = true;
  c.tile_rows = 128;
  c.page_load = kjit::attention::PageLoad::kTma;
  check_one(c);
}

// ---- The attention() entry ---------------------------------------------------------------------

TEST_F(AttentionPrefillGpu, EntryRunsPrefillAndRaggedCalls) {
  for (AttentionVariant variant : {AttentionVariant::kAuto, AttentionVariant::kMma}) {
    PrefillCase c = dense(2, 90, 120, 8, 2, 128, true);
    c.use_entry = true;
    c.variant = variant;
    c.mask = 3;
    check(c);
  }
  // Without a mask the automatic choice is the wgmma kernel on sm_90; explicitly requested it
  // runs there and is Unsupported elsewhere, and on a masked call everywhere (strict).
  for (AttentionVariant variant : {AttentionVariant::kAuto, AttentionVariant::kWgmma}) {
    PrefillCase c = dense(2, 200, 260, 8, 2, 64, true);
    c.use_entry = true;
    c.variant = variant;
    if (variant == AttentionVariant::kWgmma && !is_sm90()) {
      EXPECT_THROW(kjit::testing::run_prefill_case(c, fresh_seed()), kjit::Unsupported);
    } else {
      check(c);
    }
    c.mask = 2;
    if (variant == AttentionVariant::kWgmma) {
      EXPECT_THROW(kjit::testing::run_prefill_case(c, fresh_seed()), kjit::Unsupported);
    } else {
      check(c);
    }
  }
  // prefill() itself is strict about an explicit variant too.
  PrefillCase strict = dense(1, 70, 70, 4, 2, 256, false);
  strict.variant = AttentionVariant::kWgmma;
  EXPECT_THROW(kjit::testing::run_prefill_case(strict, fresh_seed()), kjit::Unsupported);
  // q_len 1 through the entry runs the decode kernel (causal is moot: the one query sees all).
  PrefillCase d = dense(3, 1, 300, 8, 2, 64, true);
  d.use_entry = true;
  d.ragged_kv = true;
  check(d);
  PagedPrefillCase r = ragged({70, 10, 130}, {70, 60, 130}, 8, 2, 128, 16, true);
  r.use_entry = true;
  check(r);
}

}  // namespace
