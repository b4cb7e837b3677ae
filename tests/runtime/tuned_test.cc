// Tuned plans without a GPU: the device fingerprint, candidate enumeration and pruning on
// simulated devices (an sm_80 with 164 KiB of shared memory, an sm_89 with 100 KiB, an H100 PCIe
// with 114 SMs, the H200), the bucket rules, stored tables checked against the device (foreign
// ops, over-limit and invalid choices dropped) and the plan path taking a stored choice.
#include "tests/runtime/decode_dims.hpp"
#include "runtime/ops/tuned.hpp"

#include <kjit/error.hpp>

#include "cache/tune_table.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
#include "runtime/ops/pipeline.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace fd = kjit::fp8::detail;
namespace md = kjit::mla::detail;
using kjit::DeviceInfo;
using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

DeviceInfo device(const char* name, int major, int minor, int sms, int optin, int per_sm) {
  DeviceInfo d;
  d.name = name;
  d.cc_major = major;
  d.cc_minor = minor;
  d.sm_count = sms;
  d.max_smem_per_block_optin = optin;
  d.max_smem_per_sm = per_sm;
  d.max_threads_per_block = 1024;
  d.regs_per_block = 65536;
  d.regs_per_sm = 65536;
  d.l2_bytes = 50 << 20;
  d.driver_version = 13000;
  d.nvrtc_version = "13.0";
  return d;
}
DeviceInfo a100() { return device("NVIDIA A100-SXM4-80GB", 8, 0, 108, 164 * 1024, 164 * 1024 + 1024); }
DeviceInfo l40s() { return device("NVIDIA L40S", 8, 9, 142, 100 * 1024, 100 * 1024 + 1024); }
DeviceInfo h100_pcie() { return device("NVIDIA H100 PCIe", 9, 0, 114, 232448, 233472); }
DeviceInfo h200() { return device("NVIDIA H200", 9, 0, 132, 232448, 233472); }

fd::GemmDims gemm_dims(int64_t m, int64_t n, int64_t k) {
  fd::GemmDims g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.fmt_a = kjit::fp8::kFormatE4M3;
  g.fmt_b = kjit::fp8::kFormatE4M3;
  return g;
}

TEST(DeviceFingerprint, IsShortStableAndSeesWhatMovesAWinner) {
  const DeviceInfo a = h200();
  EXPECT_EQ(a.fingerprint_id().size(), 12u);
  EXPECT_EQ(a.fingerprint_id(), h200().fingerprint_id());
  EXPECT_NE(a.fingerprint().find("name=NVIDIA H200;cc=9.0;sms=132;"), std::string::npos) << a.fingerprint();
  DeviceInfo other = a;
  other.ordinal = 3;  // another slot of the same kind: the same tuning
  other.global_mem_bytes = 1;
  EXPECT_EQ(other.fingerprint_id(), a.fingerprint_id());
  for (auto change : std::vector<void (*)(DeviceInfo&)>{
           [](DeviceInfo& d) { d.driver_version = 13010; }, [](DeviceInfo& d) { d.nvrtc_version = "13.1"; },
           [](DeviceInfo& d) { d.sm_count = 114; }, [](DeviceInfo& d) { d.mig_slice = "1g.18gb"; },
           [](DeviceInfo& d) { d.mem_clock_khz = 2619000; }, [](DeviceInfo& d) { d.max_sm_clock_khz = 1755000; }}) {
    DeviceInfo d = a;
    change(d);
    EXPECT_NE(d.fingerprint_id(), a.fingerprint_id()) << d.fingerprint();
  }
}

TEST(TuneCandidates, DecodeEnumeratesRowsAndSplitsWithinTheKvLength) {
  for (const DeviceInfo& info : {a100(), l40s(), h100_pcie(), h200()}) {
    SCOPED_TRACE(info.name);
    const ad::DecodeDims d = decode_dims(1, 4096, 32, 8, 128);
    const std::vector<TunedChoice> c = ad::DecodeOp::tune_candidates(d, info);
    ASSERT_FALSE(c.empty());
    std::set<int> rows, splits;
    for (const TunedChoice& x : c) {
      EXPECT_EQ(ad::DecodeOp::tune_spec().fits(x, info), "");
      EXPECT_EQ(x.family->value(x.point, "head_dim").code, 128);
      rows.insert(static_cast<int>(x.family->value(x.point, "rows").code));
      splits.insert(x.knobs[0]);
      ad::DecodePlan p;
      ASSERT_TRUE(ad::DecodeOp::apply_tuned(d, info, x, &p));
      EXPECT_EQ(p.num_splits, x.knobs[0]);  // what the table stores is what runs
    }
    EXPECT_EQ(rows, (std::set<int>{8, 16}));
    EXPECT_TRUE(splits.count(1) && splits.count(16));
    // The default plan is among the candidates.
    const ad::DecodePlan def = ad::DecodeOp::plan(d, info);
    EXPECT_TRUE(splits.count(def.num_splits));
  }
  // A KV length of one tile leaves nothing to split.
  const std::vector<TunedChoice> short_kv = ad::DecodeOp::tune_candidates(decode_dims(4, 30, 8, 8, 64), h200());
  for (const TunedChoice& x : short_kv) EXPECT_EQ(x.knobs[0], 1);
}

TEST(TuneCandidates, GemmIsPrunedByEachDevicesLimits) {
  const fd::GemmDims g = gemm_dims(64, 7168, 2048);
  // sm_80 has no FP8 tensor cores: nothing to tune.
  EXPECT_TRUE(fd::GemmOp::tune_candidates(g, a100()).empty());
  // sm_89 with 100 KiB: mma.sync only, and only the stage counts that fit.
  const std::vector<TunedChoice> ada = fd::GemmOp::tune_candidates(g, l40s());
  ASSERT_FALSE(ada.empty());
  size_t deepest_big_tile = 0;
  for (const TunedChoice& c : ada) {
    const fd::GemmForce f = fd::GemmOp::force_of(c);
    EXPECT_EQ(f.kernel, kjit::fp8::GemmKernel::kMmaSync);
    EXPECT_EQ(f.splits, 1);
    fd::GemmDims forced = g;
    forced.force = f;
    EXPECT_LE(fd::plan_gemm(forced, l40s()).smem_bytes, l40s().max_smem_per_block_optin);
    deepest_big_tile += f.tile == kjit::fp8::GemmTile::k128x128 && f.stages == 4;
  }
  EXPECT_EQ(deepest_big_tile, 0u) << "4 stages of 128x128 need 128 KiB";
  // Both Hoppers: wgmma with split-K 1..4 and CTA pairs, mma.sync too, all fitting.
  for (const DeviceInfo& info : {h100_pcie(), h200()}) {
    const std::vector<TunedChoice> hop = fd::GemmOp::tune_candidates(g, info);
    std::set<int> splits;
    bool pairs = false, mma = false;
    for (const TunedChoice& c : hop) {
      const fd::GemmForce f = fd::GemmOp::force_of(c);
      if (f.kernel == kjit::fp8::GemmKernel::kWgmma) {
        splits.insert(f.splits);
        pairs = pairs || f.multicast == 2;
      } else {
        mma = true;
      }
      fd::GemmPlan p;
      ASSERT_TRUE(fd::GemmOp::apply_tuned(g, info, c, &p)) << fd::GemmOp::tune_spec().describe(c);
      EXPECT_EQ(p.choice.point, c.point);
      EXPECT_EQ(p.wgmma ? p.splits : 1, c.knobs[0]);
    }
    EXPECT_EQ(splits, (std::set<int>{1, 2, 3, 4}));
    EXPECT_TRUE(pairs && mma);
    EXPECT_GT(hop.size(), ada.size());
  }
  // K = 256 has two 128-k tiles: at most two splits.
  for (const TunedChoice& c : fd::GemmOp::tune_candidates(gemm_dims(64, 7168, 256), h200())) EXPECT_LE(c.knobs[0], 2);
  // The 64-row tiles of N side 80..256: at one 128-row tile row only, paired, at the deepest ring.
  auto half_rows = [](const fd::GemmForce& f) {
    const fd::GemmTileShape t = fd::gemm_tile_shape(f.tile);
    return t.bm == 64 && t.bn >= 80;
  };
  size_t paired_halves = 0;
  for (const TunedChoice& c : fd::GemmOp::tune_candidates(gemm_dims(128, 8192, 8192), h200())) {
    const fd::GemmForce f = fd::GemmOp::force_of(c);
    if (!half_rows(f)) continue;
    ++paired_halves;
    EXPECT_EQ(f.multicast, 2);
    EXPECT_EQ(f.splits, 1);
    const int bn = fd::gemm_tile_shape(f.tile).bn;
    EXPECT_TRUE(f.stages == 6 || kjit::fp8::sm90_smem_bytes(64, bn, f.stages + 1) > h200().max_smem_per_block_optin)
        << fd::GemmOp::tune_spec().describe(c);
  }
  EXPECT_EQ(paired_halves, 8u * 1);  // 64x80 ... 64x256, one format pair and output per dims
  for (const TunedChoice& c : fd::GemmOp::tune_candidates(gemm_dims(256, 8192, 8192), h200())) {
    EXPECT_FALSE(half_rows(fd::GemmOp::force_of(c))) << fd::GemmOp::tune_spec().describe(c);
  }
}

// CTA pairs sharing A (multicast 3) are not offered, but a stored one is taken under multicast
// 2's rules (a pair tile, splits 1, clusters), as check_gemm_force takes a caller's, and a plan
// with them is described as 3.
TEST(TuneCandidates, GemmPairsSharingAAreAppliedNotOffered) {
  const fd::GemmDims g = gemm_dims(256, 8192, 8192);
  const std::vector<TunedChoice> cands = fd::GemmOp::tune_candidates(g, h200());
  const kjit::detail::TuneOpSpec& spec = fd::GemmOp::tune_spec();
  const TunedChoice* b_pairs = nullptr;
  const TunedChoice* small = nullptr;
  for (const TunedChoice& c : cands) {
    EXPECT_NE(c.knobs[1], 3) << spec.describe(c);
    const fd::GemmForce f = fd::GemmOp::force_of(c);
    if (f.tile == kjit::fp8::GemmTile::k128x128 && f.multicast == 2 && b_pairs == nullptr) b_pairs = &c;
  }
  ASSERT_NE(b_pairs, nullptr);
  TunedChoice a_pairs = *b_pairs;
  a_pairs.knobs[1] = 3;
  EXPECT_EQ(spec.fits(a_pairs, h200()), "");
  fd::GemmPlan p;
  ASSERT_TRUE(fd::GemmOp::apply_tuned(g, h200(), a_pairs, &p));
  EXPECT_EQ(p.cluster_n, 2);
  EXPECT_EQ(p.cluster_m, 1);
  EXPECT_EQ(p.splits, 1);
  const TunedChoice back = fd::GemmOp::tuned_choice(g, p);
  EXPECT_EQ(back.knobs[1], 3);
  EXPECT_EQ(back.knobs[0], 1);
  EXPECT_EQ(back.point, a_pairs.point);
  TunedChoice split = a_pairs;
  split.knobs[0] = 2;
  EXPECT_NE(spec.fits(split, h200()).find("multicast 3 is the persistent kernel's"), std::string::npos);
  TunedChoice four = a_pairs;
  four.knobs[1] = 4;
  EXPECT_NE(spec.fits(four, h200()).find("multicast=4 is outside 1..3"), std::string::npos);
  // A small tile (M ≤ 64 offers them) takes no pairs of either kind.
  const std::vector<TunedChoice> skinny = fd::GemmOp::tune_candidates(gemm_dims(16, 7168, 2048), h200());
  for (const TunedChoice& c : skinny) {
    if (kjit::fp8::sm90_small_tile(fd::gemm_tile_shape(fd::GemmOp::force_of(c).tile).bn)) small = &c;
  }
  ASSERT_NE(small, nullptr);
  TunedChoice small_pairs = *small;
  small_pairs.knobs[0] = 1;
  small_pairs.knobs[1] = 3;
  EXPECT_NE(spec.fits(small_pairs, h200()).find("multicast 3 is the wgmma tiles' of N side 80 ... 256"),
            std::string::npos);
}

TEST(TuneBuckets, FollowTheDocumentedRules) {
  TunedKey k{};
  ASSERT_TRUE(ad::DecodeOp::tune_key(decode_dims(3, 1000, 32, 8, 128), &k));
  EXPECT_EQ(k.op, static_cast<int32_t>(kjit::detail::TuneOpId::kDecode));
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 4), (std::vector<int32_t>{128, 4, 32, 1024}));
  ASSERT_TRUE(ad::DecodeOp::tune_key(decode_dims(1, 5, 8, 8, 64), &k));
  EXPECT_EQ(k.bucket[3], 64);  // short caches share one band
  ad::DecodeDims forced = decode_dims(1, 1000, 8, 8, 64);
  forced.requested_splits = 3;
  EXPECT_FALSE(ad::DecodeOp::tune_key(forced, &k));  // the caller chose

  TunedKey g{};
  ASSERT_TRUE(fd::GemmOp::tune_key(gemm_dims(100, 7168, 2048), &g));
  EXPECT_EQ(std::vector<int32_t>(g.bucket, g.bucket + 5), (std::vector<int32_t>{128, 7168, 2048, 0, 0}));
  TunedKey g2{};
  ASSERT_TRUE(fd::GemmOp::tune_key(gemm_dims(65, 7168, 2048), &g2));
  EXPECT_EQ(std::memcmp(&g, &g2, sizeof g), 0);
  fd::GemmDims over = gemm_dims(100, 7168, 2048);
  over.force.stages = 3;
  EXPECT_FALSE(fd::GemmOp::tune_key(over, &g));
  EXPECT_EQ(kjit::detail::bucket_pow2(0), 1);
  EXPECT_EQ(kjit::detail::bucket_pow2(4097), 8192);
}

kjit::cache::TuneChoice stored(const TunedChoice& c, const kjit::detail::TuneOpSpec& op, int threads, int smem,
                               int registers = 64) {
  kjit::cache::TuneChoice s = kjit::detail::stored_choice_of(op, c);
  s.us = 10;
  s.threads = threads;
  s.smem = smem;
  s.registers = registers;
  return s;
}

kjit::cache::TuneEntry decode_entry(const TunedChoice& winner, const TunedChoice& def, std::vector<int64_t> bucket) {
  const auto& op = ad::DecodeOp::tune_spec();
  kjit::cache::TuneEntry e;
  e.op = "decode";
  e.planner = op.planner;
  e.bucket = std::move(bucket);
  e.winner = stored(winner, op, 128, 40000);
  e.default_choice = stored(def, op, 128, 40000);
  return e;
}

TEST(TunedTable, StoredChoicesAreCheckedAgainstTheDevice) {
  const DeviceInfo info = h200();
  const ad::DecodeDims d = decode_dims(1, 4096, 32, 8, 128);
  const std::vector<TunedChoice> c = ad::DecodeOp::tune_candidates(d, info);
  const TunedChoice def = ad::DecodeOp::tuned_choice(d, ad::DecodeOp::plan(d, info));
  // The last merge-kernel candidate: a cluster one would be dropped on the sm_80 below for its
  // clusters before its shared memory.
  TunedChoice win;
  for (const TunedChoice& x : c) {
    if (ad::merge_of(x) == kjit::attention::DecodeMerge::kKernel) win = x;
  }
  ASSERT_NE(win.family, nullptr);
  kjit::cache::TuneTable file;
  file.entries.push_back(decode_entry(win, def, {128, 4, 8, 4096}));
  // Where the default won there is nothing to load.
  file.entries.push_back(decode_entry(def, def, {128, 4, 8, 8192}));
  kjit::cache::TuneEntry unknown = decode_entry(win, def, {1});
  unknown.op = "frobnicate";
  file.entries.push_back(unknown);
  kjit::cache::TuneEntry big = decode_entry(win, def, {128, 4, 8, 2048});
  big.winner.smem = 300000;  // tuned on a device with more shared memory
  file.entries.push_back(big);
  kjit::cache::TuneEntry regs = decode_entry(win, def, {128, 4, 8, 1024});
  regs.winner.registers = 255;
  regs.winner.threads = 1024;  // 255 × 1024 registers do not fit a CTA
  regs.winner.smem = 0;
  file.entries.push_back(regs);
  kjit::cache::TuneEntry bad_point = decode_entry(win, def, {128, 4, 8, 512});
  bad_point.winner.point = "head_dim=96 rows=8";
  file.entries.push_back(bad_point);
  kjit::cache::TuneEntry bad_knob = decode_entry(win, def, {128, 4, 8, 256});
  bad_knob.winner.knobs = {{"split", 4}};
  file.entries.push_back(bad_knob);
  kjit::cache::TuneEntry cluster = decode_entry(win, def, {128, 4, 8, 128});
  cluster.winner.cluster = 16;
  file.entries.push_back(cluster);

  std::vector<std::string> dropped;
  const kjit::detail::TunedTable t = kjit::detail::tuned_table_from(file, info, &dropped);
  EXPECT_EQ(t.size(), 1u);
  ASSERT_EQ(dropped.size(), 6u);
  auto said = [&](const char* what) {
    for (const std::string& s : dropped) {
      if (s.find(what) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(said("unknown op"));
  EXPECT_TRUE(said("300000 bytes of shared memory"));
  EXPECT_TRUE(said("255 registers × 1024 threads"));
  EXPECT_TRUE(said("head_dim=96"));
  EXPECT_TRUE(said("no knob 'split'"));
  EXPECT_TRUE(said("clusters of 16"));

  // The same stored winner on an sm_80 with too little shared memory for its kernel is dropped.
  DeviceInfo tiny = a100();
  tiny.max_smem_per_block_optin = 16 * 1024;
  dropped.clear();
  kjit::cache::TuneTable one;
  one.entries.push_back(decode_entry(win, def, {128, 4, 8, 4096}));
  one.entries[0].winner.smem = 0;
  EXPECT_TRUE(kjit::detail::tuned_table_from(one, tiny, &dropped).empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("shared memory"), std::string::npos) << dropped[0];
}

// Installs in `info`'s table slot one entry, for `d`'s bucket: a decode candidate whose split
// count differs from the default plan's (with `rows` query heads per CTA when rows > 0). Returns
// it; its family is null when there is none (nothing is installed then).
TunedChoice install_other_decode_split(const DeviceInfo& info, const ad::DecodeDims& d, int rows = 0) {
  const ad::DecodePlan def = ad::DecodeOp::plan(d, info);
  TunedChoice pick;
  for (const TunedChoice& c : ad::DecodeOp::tune_candidates(d, info)) {
    if (c.knobs[0] != def.num_splits && (rows == 0 || c.family->value(c.point, "rows").code == rows)) pick = c;
  }
  TunedKey key{};
  if (pick.family == nullptr || !ad::DecodeOp::tune_key(d, &key)) return TunedChoice{};
  kjit::detail::TunedTable table;
  table.set(key, pick);
  kjit::detail::install_tuned_table(info.ordinal, table);
  return pick;
}

TEST(TunedTable, ThePlanPathTakesAStoredChoiceForItsBucketOnly) {
  DeviceInfo info = h200();
  info.ordinal = 7;  // a slot no real device of this machine has
  const ad::DecodeDims d = decode_dims(1, 4096, 32, 8, 128);
  const ad::DecodePlan def = ad::DecodeOp::plan(d, info);
  const TunedChoice pick = install_other_decode_split(info, d, 16);
  ASSERT_NE(pick.family, nullptr);
  const ad::DecodePlan tuned = kjit::detail::choose_plan<ad::DecodeOp>(d, info);
  EXPECT_EQ(tuned.num_splits, pick.knobs[0]);
  EXPECT_EQ(tuned.heads_per_cta, 16);
  EXPECT_EQ(tuned.choice.point, pick.point);
  // The workspace follows the plan that runs.
  EXPECT_EQ(tuned.workspace_bytes, ad::plan_decode(d, pick.knobs[0], info.sm_count, 1, 16).workspace_bytes);
  // Another bucket, or a call that chose its split count, plans as before.
  const ad::DecodeDims other = decode_dims(1, 100000, 32, 8, 128);
  EXPECT_EQ(kjit::detail::choose_plan<ad::DecodeOp>(other, info).num_splits, ad::DecodeOp::plan(other, info).num_splits);
  ad::DecodeDims asked = d;
  asked.requested_splits = 2;
  EXPECT_EQ(kjit::detail::choose_plan<ad::DecodeOp>(asked, info).num_splits, 2);
  // A choice for another head_dim under a key that collides is refused, not run.
  ad::DecodePlan p;
  EXPECT_FALSE(ad::DecodeOp::apply_tuned(decode_dims(1, 4096, 32, 8, 64), info, pick, &p));
  kjit::detail::install_tuned_table(info.ordinal, {});
  EXPECT_EQ(kjit::detail::choose_plan<ad::DecodeOp>(d, info).num_splits, def.num_splits);
}

TEST(TunedTable, ReloadDropsAnInstalledTableAndReadsTheDevicesFileAgain) {
  DeviceInfo info = h200();
  info.ordinal = 63;  // the last slot: no device of this machine has it, so it has no table file
  const ad::DecodeDims d = decode_dims(1, 4096, 32, 8, 128);
  const ad::DecodePlan def = ad::DecodeOp::plan(d, info);
  const TunedChoice pick = install_other_decode_split(info, d);
  ASSERT_NE(pick.family, nullptr);
  EXPECT_EQ(kjit::detail::choose_plan<ad::DecodeOp>(d, info).num_splits, pick.knobs[0]);
  kjit::detail::reload_tuned_table(info.ordinal);
  // The next plan reads the slot's file afresh: there is none (the device does not exist), so
  // the default plan runs, with a warning naming the device.
  testing::internal::CaptureStderr();
  EXPECT_EQ(kjit::detail::choose_plan<ad::DecodeOp>(d, info).num_splits, def.num_splits);
  testing::internal::GetCapturedStderr();
  EXPECT_THROW(kjit::detail::reload_tuned_table(-1), kjit::InvalidArgument);
  EXPECT_THROW(kjit::detail::reload_tuned_table(64), kjit::InvalidArgument);
}

TEST(TunedTable, GemmStoredChoiceSurvivesRefinement) {
  DeviceInfo info = h200();
  info.ordinal = 8;
  const fd::GemmDims g = gemm_dims(128, 4096, 7168);
  TunedChoice pick;
  for (const TunedChoice& c : fd::GemmOp::tune_candidates(g, info)) {
    if (c.knobs[0] == 2) pick = c;
  }
  ASSERT_NE(pick.family, nullptr);
  TunedKey key{};
  ASSERT_TRUE(fd::GemmOp::tune_key(g, &key));
  kjit::detail::TunedTable table;
  table.set(key, pick);
  kjit::detail::install_tuned_table(info.ordinal, table);
  const fd::GemmPlan p = kjit::detail::choose_plan<fd::GemmOp>(g, info);
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.force.splits, 2);  // refine plans again under the tuned overrides
  EXPECT_EQ(fd::gemm_assumed_cluster_size(p, p.force), 0);
  kjit::detail::install_tuned_table(info.ordinal, {});
}

// A table entry records the planner revision it was measured against; the FP8 GEMM planner is at
// revision 3 (the 64-row small wgmma tiles), so its entries from revisions 1 and 2, or from files
// that do not say (revision 1), are dropped with a warning naming the re-tune, and current ones
// load.
TEST(TunedTable, EntriesOfAnotherPlannerRevisionAreDropped) {
  const DeviceInfo info = h200();
  const auto& op = fd::GemmOp::tune_spec();
  EXPECT_EQ(op.planner, 3);
  // decode and paged_decode 2: the cluster merge on sm_90+ (and points name merge).
  EXPECT_EQ(ad::DecodeOp::tune_spec().planner, 2);
  EXPECT_EQ(ad::PagedDecodeOp::tune_spec().planner, 2);
  // paged_prefill 2: the built-in rule takes the 192-row wgmma tile at hd64; 3: the pack_gqa knob
  // and the GQA group in the bucket; 4: wgmma points name page_load.
  EXPECT_EQ(ad::PagedPrefillPlanner::tune_spec().planner, 4);
  // swa_decode 2: cluster splits at small T on sm_90+.
  EXPECT_EQ(md::SwaDecodeOp::tune_spec().planner, 2);
  const fd::GemmDims g = gemm_dims(1, 4096, 7168);
  const TunedChoice def = fd::GemmOp::tuned_choice(g, fd::plan_gemm(g, info));
  TunedChoice win;
  for (const TunedChoice& c : fd::GemmOp::tune_candidates(g, info)) {
    if (!(c.point == def.point && c.knobs == def.knobs)) win = c;
  }
  ASSERT_NE(win.family, nullptr);
  TunedKey key{};
  ASSERT_TRUE(fd::GemmOp::tune_key(g, &key));
  kjit::cache::TuneEntry e;
  e.op = "fp8_gemm";
  e.bucket.assign(key.bucket, key.bucket + 5);
  e.winner = stored(win, op, 384, 100000);
  e.default_choice = stored(def, op, 384, 100000);
  kjit::cache::TuneTable file;
  file.entries.push_back(e);  // planner 1: what a table without the field decodes to
  std::vector<std::string> dropped;
  EXPECT_TRUE(kjit::detail::tuned_table_from(file, info, &dropped).empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("revision 1 of the fp8_gemm planner"), std::string::npos) << dropped[0];
  EXPECT_NE(dropped[0].find("re-run kjit tune fp8_gemm"), std::string::npos) << dropped[0];
  file.entries[0].planner = 2;
  dropped.clear();
  EXPECT_TRUE(kjit::detail::tuned_table_from(file, info, &dropped).empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("revision 2 of the fp8_gemm planner"), std::string::npos) << dropped[0];
  file.entries[0].planner = 3;
  dropped.clear();
  const kjit::detail::TunedTable t = kjit::detail::tuned_table_from(file, info, &dropped);
  EXPECT_TRUE(dropped.empty());
  ASSERT_NE(t.find(key), nullptr);
  // The revision survives the file format, and a file without it reads as revision 1.
  file.fingerprint_id = "aaaaaaaaaaaa";
  const std::string text = kjit::cache::encode_table(file);
  EXPECT_EQ(kjit::cache::decode_table(text).entries.at(0).planner, 3);
  std::string old = text;
  const size_t at = old.find("\"planner\"");
  ASSERT_NE(at, std::string::npos);
  old.replace(at, std::string("\"planner\": 3").size(), "\"spare\": 0");
  EXPECT_EQ(kjit::cache::decode_table(old).entries.at(0).planner, 1);
}

// ---- paged decode, prefill, SWA decode ---------------------------------------------------------

ad::PrefillDims prefill_dims(int64_t batch, int64_t q_len, int64_t kv_len, int64_t q_heads, int64_t kv_heads,
                             int64_t head_dim) {
  ad::PrefillDims d;
  d.batch = batch;
  d.q_len = q_len;
  d.max_kv_len = kv_len;
  d.q_heads = q_heads;
  d.kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.group = q_heads / kv_heads;
  d.causal = true;
  return d;
}

md::SwaDims swa_dims(int64_t tokens, int64_t heads, int64_t window) {
  md::SwaDims d;
  d.tokens = tokens;
  d.heads = heads;
  d.head_dim = kjit::mla::kSwaHeadDim;
  d.window = window;
  d.num_blocks = 64;
  d.block_size = 256;
  d.cache = kjit::mla::kSwaCacheE4M3;
  return d;
}

TEST(TuneCandidates, PagedDecodeEnumeratesRowsAndSplitsOfThePagedFamily) {
  for (const DeviceInfo& info : {a100(), l40s(), h100_pcie(), h200()}) {
    SCOPED_TRACE(info.name);
    const ad::PagedDecodeDims d = paged_decode_dims(4, 4096, 32, 8, 128, 16);
    const std::vector<TunedChoice> c = ad::PagedDecodeOp::tune_candidates(d, info);
    ASSERT_FALSE(c.empty());
    std::set<int> rows, splits;
    for (const TunedChoice& x : c) {
      EXPECT_EQ(x.family, &kjit::attention::paged_decode_family());
      EXPECT_EQ(ad::PagedDecodeOp::tune_spec().fits(x, info), "");
      rows.insert(static_cast<int>(x.family->value(x.point, "rows").code));
      splits.insert(x.knobs[0]);
      ad::DecodePlan p;
      ASSERT_TRUE(ad::PagedDecodeOp::apply_tuned(d, info, x, &p));
      EXPECT_EQ(p.num_splits, x.knobs[0]);
      EXPECT_EQ(p.split_tokens, 0);  // each request splits its own length on the device
      EXPECT_EQ(p.workspace_bytes > 0, x.knobs[0] > 1);
    }
    EXPECT_EQ(rows, (std::set<int>{8, 16}));
    EXPECT_TRUE(splits.count(ad::PagedDecodeOp::plan(d, info).num_splits));
    // 4096 tokens are 64 KV tiles at head_dim 128: the grid stops at 64 splits.
    EXPECT_EQ(*splits.rbegin(), 64);
  }
  // A contiguous-decode choice is not a paged one.
  const ad::DecodeDims cd = decode_dims(1, 4096, 32, 8, 128);
  const TunedChoice contiguous = ad::DecodeOp::tune_candidates(cd, h200()).front();
  EXPECT_NE(ad::PagedDecodeOp::tune_spec().fits(contiguous, h200()), "");
  ad::DecodePlan p;
  EXPECT_FALSE(ad::PagedDecodeOp::apply_tuned(paged_decode_dims(1, 4096, 32, 8, 128, 16), h200(), contiguous, &p));
}

TEST(TuneCandidates, PrefillOffersTheWgmmaKernelOnlyWhereItRuns) {
  const ad::PrefillDims d = prefill_dims(1, 2048, 2048, 32, 8, 128);
  auto families = [](const std::vector<TunedChoice>& c) {
    std::set<std::string> f;
    for (const TunedChoice& x : c) f.insert(x.family->name + " " + x.family->describe(x.point));
    return f;
  };
  // sm_80 and sm_89: the mma.sync kernel at both tiles (both fit 100 KiB at head_dim 128).
  for (const DeviceInfo& info : {a100(), l40s()}) {
    EXPECT_EQ(families(ad::PrefillOp::tune_candidates(d, info)),
              (std::set<std::string>{"attention.prefill head_dim=128 block_m=64 mask=none",
                                     "attention.prefill head_dim=128 block_m=128 mask=none"}))
        << info.name;
  }
  // Hopper: the wgmma kernel too; the default (wgmma) is among them.
  for (const DeviceInfo& info : {h100_pcie(), h200()}) {
    const std::vector<TunedChoice> c = ad::PrefillOp::tune_candidates(d, info);
    EXPECT_EQ(c.size(), 3u) << info.name;
    const TunedChoice def = ad::PrefillOp::tuned_choice(d, ad::PrefillOp::plan(d, info));
    EXPECT_EQ(def.family, &kjit::attention::prefill_sm90_family());
    bool found = false;
    for (const TunedChoice& x : c) {
      found = found || (x.family == def.family && x.point == def.point);
      ad::PrefillPlan p;
      ASSERT_TRUE(ad::PrefillOp::apply_tuned(d, info, x, &p));
      EXPECT_EQ(p.variant == kjit::attention::AttentionVariant::kWgmma, x.family == &kjit::attention::prefill_sm90_family());
      EXPECT_EQ(p.q_tiles, (2048 + p.block_m - 1) / p.block_m);
    }
    EXPECT_TRUE(found);
  }
  // A mask: only the masked mma.sync points; head_dim 256: no wgmma kernel.
  ad::PrefillDims masked = d;
  masked.mask_rank = 2;
  for (const TunedChoice& x : ad::PrefillOp::tune_candidates(masked, h200())) {
    EXPECT_EQ(x.family, &kjit::attention::prefill_family());
    EXPECT_EQ(x.family->value(x.point, "mask").code, 1);
  }
  for (const TunedChoice& x : ad::PrefillOp::tune_candidates(prefill_dims(1, 512, 512, 8, 8, 256), h200())) {
    EXPECT_EQ(x.family, &kjit::attention::prefill_family());
  }
  // A device whose shared memory holds no 128-row tile at head_dim 256 is offered only 64 rows.
  DeviceInfo small = l40s();
  const int big = kjit::attention::prefill_launch_shape(256, 128).smem_bytes;
  const int little = kjit::attention::prefill_launch_shape(256, 64).smem_bytes;
  ASSERT_LT(little, big);
  small.max_smem_per_block_optin = little;
  for (const TunedChoice& x : ad::PrefillOp::tune_candidates(prefill_dims(1, 512, 512, 8, 8, 256), small)) {
    EXPECT_EQ(x.family->value(x.point, "block_m").code, 64);
  }
}

TEST(TuneCandidates, SwaDecodeGroupsTilesAndSplitsPrunedPerDevice) {
  for (int64_t tokens : {64, 1}) {
  const md::SwaDims d = swa_dims(tokens, 128, 128);
  for (const DeviceInfo& info : {a100(), l40s(), h100_pcie(), h200()}) {
    SCOPED_TRACE(testing::Message() << info.name << " T" << tokens);
    const std::vector<TunedChoice> c = md::SwaDecodeOp::tune_candidates(d, info);
    ASSERT_FALSE(c.empty());
    std::set<int> groups, clusters;
    for (const TunedChoice& x : c) {
      const int group = static_cast<int>(x.family->value(x.point, "group").code);
      const int tile = static_cast<int>(x.family->value(x.point, "kv_tile").code);
      const int cluster = static_cast<int>(x.family->value(x.point, "cluster_split").code);
      groups.insert(group);
      clusters.insert(cluster);
      EXPECT_EQ(md::SwaDecodeOp::tune_spec().fits(x, info), "");
      EXPECT_LE(kjit::mla::swa_launch_shape(group, tile, cluster).smem_bytes, info.max_smem_per_block_optin);
      md::SwaPlan p;
      ASSERT_TRUE(md::SwaDecodeOp::apply_tuned(d, info, x, &p));
      EXPECT_EQ(p.num_splits, x.knobs[0]);
      EXPECT_EQ(p.cluster_split, cluster);
      if (cluster == 1) EXPECT_GE(p.num_splits, (128 + tile - 1) / tile);
      EXPECT_LE(p.num_splits, 8);  // W / 16
      if (group == 64 || cluster > 1) EXPECT_EQ(p.num_splits, 1);
      if (cluster > 1) {
        EXPECT_EQ(p.split_len, 128 / cluster);
        EXPECT_EQ(p.workspace_bytes, 0u);
        EXPECT_EQ(p.ctas, tokens * (128 / group) * cluster);
      }
    }
    EXPECT_EQ(groups.count(64), info.sm() == 90 ? 1u : 0u);
    EXPECT_TRUE(groups.count(16));
    // Cluster splits of 2, 4 and 8 CTAs where there are clusters (sm_90).
    EXPECT_EQ(clusters, info.sm() >= 90 ? (std::set<int>{1, 2, 4, 8}) : (std::set<int>{1}));
    // The default is among the candidates.
    const TunedChoice def = md::SwaDecodeOp::tuned_choice(d, md::SwaDecodeOp::plan(d, info));
    bool found = false;
    for (const TunedChoice& x : c) found = found || (x.point == def.point && x.knobs[0] == def.knobs[0]);
    EXPECT_TRUE(found);
  }
  }
  // A stored cluster split with a split count, or on a device without clusters, is refused.
  const kjit::Family& f = kjit::mla::swa_decode_family();
  TunedChoice clustered;
  clustered.family = &f;
  clustered.point = f.point({kjit::mla::kSwaHeadDim, 16, 64, 128, kjit::mla::kSwaCacheE4M3, 8});
  clustered.knobs[0] = 1;
  EXPECT_EQ(md::SwaDecodeOp::tune_spec().fits(clustered, h200()), "");
  EXPECT_NE(md::SwaDecodeOp::tune_spec().fits(clustered, a100()).find("needs thread-block clusters"), std::string::npos);
  clustered.knobs[0] = 2;
  EXPECT_NE(md::SwaDecodeOp::tune_spec().fits(clustered, h200()).find("splits=2 is outside 1..1"), std::string::npos);
  // NH = 48: neither 32 nor 64 divides it.
  for (const TunedChoice& x : md::SwaDecodeOp::tune_candidates(swa_dims(8, 48, 128), h200())) {
    EXPECT_EQ(x.family->value(x.point, "group").code, 16);
  }
  // W = 256: no wgmma kernel; a group-64 choice stored for another window is refused.
  for (const TunedChoice& x : md::SwaDecodeOp::tune_candidates(swa_dims(8, 128, 256), h200())) {
    EXPECT_NE(x.family->value(x.point, "group").code, 64);
  }
}

TEST(TuneBuckets, NewOpsFollowTheDocumentedRules) {
  TunedKey k{};
  ASSERT_TRUE(ad::PagedDecodeOp::tune_key(paged_decode_dims(3, 1000, 32, 8, 128, 16), &k));
  EXPECT_EQ(k.op, static_cast<int32_t>(kjit::detail::TuneOpId::kPagedDecode));
  // 3 requests of 63 pages of 16: 1008 tokens each planned.
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 6), (std::vector<int32_t>{128, 4, 32, 1024, 16, 0}));
  ad::PagedDecodeDims hinted = paged_decode_dims(3, 1000, 32, 8, 128, 16);
  hinted.kv_len_hint = 3000;
  ASSERT_TRUE(ad::PagedDecodeOp::tune_key(hinted, &k));
  EXPECT_EQ(k.bucket[3], 4096);
  hinted.requested_splits = 2;
  EXPECT_FALSE(ad::PagedDecodeOp::tune_key(hinted, &k));

  ASSERT_TRUE(ad::PrefillOp::tune_key(prefill_dims(2, 1000, 3000, 32, 8, 128), &k));
  EXPECT_EQ(k.op, static_cast<int32_t>(kjit::detail::TuneOpId::kPrefill));
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 6), (std::vector<int32_t>{128, 0, 1, 1024, 4096, 64}));
  ad::PrefillDims short_q = prefill_dims(1, 7, 20, 8, 8, 64);
  short_q.causal = false;
  short_q.mask_rank = 3;
  ASSERT_TRUE(ad::PrefillOp::tune_key(short_q, &k));
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 6), (std::vector<int32_t>{64, 1, 0, 64, 64, 8}));
  ad::PrefillDims asked = prefill_dims(1, 1000, 1000, 8, 8, 128);
  asked.block_m = 64;
  EXPECT_FALSE(ad::PrefillOp::tune_key(asked, &k));
  asked.block_m = 0;
  asked.variant = kjit::attention::AttentionVariant::kMma;
  EXPECT_FALSE(ad::PrefillOp::tune_key(asked, &k));

  k = TunedKey{};
  ASSERT_TRUE(md::SwaDecodeOp::tune_key(swa_dims(5, 128, 128), &k));
  EXPECT_EQ(k.op, static_cast<int32_t>(kjit::detail::TuneOpId::kSwaDecode));
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 5), (std::vector<int32_t>{128, 0, 8, 128, 0}));
  md::SwaDims forced = swa_dims(5, 128, 128);
  forced.requested_heads_per_cta = 16;
  EXPECT_FALSE(md::SwaDecodeOp::tune_key(forced, &k));
  forced = swa_dims(5, 128, 128);
  forced.requested_splits = 2;
  EXPECT_FALSE(md::SwaDecodeOp::tune_key(forced, &k));
  forced = swa_dims(5, 128, 128);
  forced.requested_cluster_split = 1;
  EXPECT_FALSE(md::SwaDecodeOp::tune_key(forced, &k));
}

/// Installs `pick` for `dims`' bucket on device slot `ordinal` and returns choose_plan's answer.
template <class Op>
typename Op::Plan plan_with(const typename Op::Dims& dims, DeviceInfo info, const TunedChoice& pick) {
  TunedKey key{};
  EXPECT_TRUE(Op::tune_key(dims, &key));
  kjit::detail::TunedTable table;
  table.set(key, pick);
  kjit::detail::install_tuned_table(info.ordinal, table);
  const typename Op::Plan p = kjit::detail::choose_plan<Op>(dims, info);
  kjit::detail::install_tuned_table(info.ordinal, {});
  return p;
}

TEST(TunedTable, NewOpsPlanPathsTakeAStoredChoice) {
  DeviceInfo info = h200();
  info.ordinal = 9;
  // Paged decode: rows 16 and 6 splits where the planner picks otherwise.
  const ad::PagedDecodeDims pd = paged_decode_dims(2, 4096, 32, 8, 128, 16);
  TunedChoice paged;
  for (const TunedChoice& c : ad::PagedDecodeOp::tune_candidates(pd, info)) {
    if (c.knobs[0] == 6 && c.family->value(c.point, "rows").code == 16) paged = c;
  }
  ASSERT_NE(paged.family, nullptr);
  const ad::DecodePlan pp = plan_with<ad::PagedDecodeOp>(pd, info, paged);
  EXPECT_EQ(pp.num_splits, 6);
  EXPECT_EQ(pp.heads_per_cta, 16);
  EXPECT_EQ(pp.workspace_bytes, ad::plan_paged_decode(pd, 6, 0, info.sm_count, 2, 16).workspace_bytes);

  // Prefill: the mma.sync kernel at 64 rows instead of the wgmma default.
  const ad::PrefillDims fd = prefill_dims(1, 4096, 4096, 32, 8, 128);
  TunedChoice mma;
  for (const TunedChoice& c : ad::PrefillOp::tune_candidates(fd, info)) {
    if (c.family == &kjit::attention::prefill_family() && c.family->value(c.point, "block_m").code == 64) mma = c;
  }
  ASSERT_NE(mma.family, nullptr);
  const ad::PrefillPlan fp = plan_with<ad::PrefillOp>(fd, info, mma);
  EXPECT_EQ(fp.variant, kjit::attention::AttentionVariant::kMma);
  EXPECT_EQ(fp.block_m, 64);
  EXPECT_EQ(fp.q_tiles, 64);
  // A stored wgmma choice is not taken for a call the wgmma kernel cannot run (kv_lens).
  TunedChoice wg;
  for (const TunedChoice& c : ad::PrefillOp::tune_candidates(fd, info)) {
    if (c.family == &kjit::attention::prefill_sm90_family()) wg = c;
  }
  ASSERT_NE(wg.family, nullptr);
  ad::PrefillDims ragged = fd;
  ragged.has_kv_lens = true;
  ad::PrefillPlan rp;
  EXPECT_FALSE(ad::PrefillOp::apply_tuned(ragged, info, wg, &rp));
  EXPECT_EQ(plan_with<ad::PrefillOp>(ragged, info, wg).variant, kjit::attention::AttentionVariant::kMma);

  // SWA decode: group 16 in 4 splits where the planner takes the wgmma kernel.
  const md::SwaDims sd = swa_dims(512, 128, 128);
  ASSERT_EQ(md::SwaDecodeOp::plan(sd, info).heads_per_cta, 64);
  TunedChoice split;
  for (const TunedChoice& c : md::SwaDecodeOp::tune_candidates(sd, info)) {
    if (c.family->value(c.point, "group").code == 16 && c.knobs[0] == 4) split = c;
  }
  ASSERT_NE(split.family, nullptr);
  const md::SwaPlan sp = plan_with<md::SwaDecodeOp>(sd, info, split);
  EXPECT_EQ(sp.heads_per_cta, 16);
  EXPECT_EQ(sp.num_splits, 4);
  EXPECT_EQ(sp.split_len, 32);
  EXPECT_GT(sp.workspace_bytes, 0u);  // the partials of the plan that runs
  EXPECT_EQ(sp.choice.point, split.point);

  // SWA decode at T = 1: a stored cluster of 2 where the planner takes 4, and the unsplit
  // kernel stored where it takes a cluster.
  const md::SwaDims one = swa_dims(1, 128, 128);
  ASSERT_EQ(md::SwaDecodeOp::plan(one, info).cluster_split, 4);
  TunedChoice two, none;
  for (const TunedChoice& c : md::SwaDecodeOp::tune_candidates(one, info)) {
    const int64_t cluster = c.family->value(c.point, "cluster_split").code;
    if (cluster == 2 && c.family->value(c.point, "group").code == 16) two = c;
    if (cluster == 1 && c.family->value(c.point, "group").code == 16 && c.knobs[0] == 1) none = c;
  }
  ASSERT_NE(two.family, nullptr);
  ASSERT_NE(none.family, nullptr);
  const md::SwaPlan cp = plan_with<md::SwaDecodeOp>(one, info, two);
  EXPECT_EQ(cp.cluster_split, 2);
  EXPECT_EQ(cp.split_len, 64);
  EXPECT_EQ(cp.ctas, 16);
  EXPECT_EQ(cp.workspace_bytes, 0u);
  const md::SwaPlan np = plan_with<md::SwaDecodeOp>(one, info, none);
  EXPECT_EQ(np.cluster_split, 1);
  EXPECT_EQ(np.ctas, 8);
}

TEST(TunedTable, NewOpsOverLimitChoicesAreDropped) {
  // A group-32 / 128-tile SWA winner from an H200 on an sm_89 with too little shared memory for it.
  const md::SwaDims sd = swa_dims(512, 128, 128);
  TunedChoice big;
  for (const TunedChoice& c : md::SwaDecodeOp::tune_candidates(sd, h200())) {
    if (c.family->value(c.point, "group").code == 32 && c.family->value(c.point, "kv_tile").code == 128) big = c;
  }
  ASSERT_NE(big.family, nullptr);
  const auto& op = md::SwaDecodeOp::tune_spec();
  DeviceInfo small = l40s();
  small.max_smem_per_block_optin = kjit::mla::swa_launch_shape(32, 128).smem_bytes - 1;
  kjit::cache::TuneTable file;
  kjit::cache::TuneEntry e;
  e.op = "swa_decode";
  e.planner = op.planner;
  e.bucket = {128, 0, 512, 128};
  e.winner = stored(big, op, 256, 0);
  e.default_choice = stored(md::SwaDecodeOp::tuned_choice(sd, md::SwaDecodeOp::plan(sd, small)), op, 128, 0);
  file.entries.push_back(e);
  std::vector<std::string> dropped;
  EXPECT_TRUE(kjit::detail::tuned_table_from(file, small, &dropped).empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("shared memory"), std::string::npos) << dropped[0];
  // A wgmma prefill winner read on an sm_89: no kernel for the target.
  const ad::PrefillDims fd = prefill_dims(1, 4096, 4096, 32, 8, 128);
  TunedChoice wg;
  for (const TunedChoice& c : ad::PrefillOp::tune_candidates(fd, h200())) {
    if (c.family == &kjit::attention::prefill_sm90_family()) wg = c;
  }
  ASSERT_NE(wg.family, nullptr);
  kjit::cache::TuneTable pf;
  kjit::cache::TuneEntry pe;
  pe.op = "prefill";
  pe.bucket = {128, 0, 1, 4096, 4096, 32};
  pe.winner = stored(wg, ad::PrefillOp::tune_spec(), 384, 0);
  pe.default_choice = stored(ad::PrefillOp::tuned_choice(fd, ad::PrefillOp::plan(fd, l40s())), ad::PrefillOp::tune_spec(), 128, 0);
  pf.entries.push_back(pe);
  dropped.clear();
  EXPECT_TRUE(kjit::detail::tuned_table_from(pf, l40s(), &dropped).empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("attention.prefill_sm90 needs sm_90"), std::string::npos) << dropped[0];
}

// ---- ragged paged prefill ------------------------------------------------------------------------

/// `batch` requests of `q` query rows over `kv` keys in pages of `page` (the tuned overload's dims).
ad::PagedPrefillPlanDims paged_prefill_dims(int64_t batch, int64_t q, int64_t kv, int64_t q_heads, int64_t head_dim,
                                            int64_t page, bool causal = true) {
  std::vector<int32_t> qo(1, 0), kv_indptr(1, 0), last;
  for (int64_t b = 0; b < batch; ++b) {
    qo.push_back(static_cast<int32_t>(qo.back() + q));
    const int64_t pages = (kv + page - 1) / page;
    kv_indptr.push_back(static_cast<int32_t>(kv_indptr.back() + pages));
    last.push_back(static_cast<int32_t>(kv - (pages - 1) * page));
  }
  kjit::attention::PagedPrefillPlanArgs a;
  a.qo_indptr_host = qo.data();
  a.kv_indptr_host = kv_indptr.data();
  a.last_page_len_host = last.data();
  a.batch = batch;
  a.q_heads = q_heads;
  a.head_dim = head_dim;
  a.page_size = page;
  a.causal = causal;
  return ad::paged_prefill_plan_dims(a);
}

TEST(TuneCandidates, PagedPrefillTilesPrunedPerDevice) {
  const ad::PagedPrefillPlanDims d = paged_prefill_dims(4, 200, 1000, 32, 128, 16);
  for (const DeviceInfo& info : {a100(), l40s(), h100_pcie(), h200()}) {
    SCOPED_TRACE(info.name);
    const std::vector<TunedChoice> c = ad::PagedPrefillPlanner::tune_candidates(d, info);
    std::set<int> tiles;
    int wgmma = 0;
    for (const TunedChoice& x : c) {
      EXPECT_EQ(x.family->value(x.point, "head_dim").code, 128);
      EXPECT_EQ(ad::PagedPrefillPlanner::tune_spec().fits(x, info), "");
      ad::PagedPrefillOpPlan t;
      ASSERT_TRUE(ad::PagedPrefillPlanner::apply_tuned(d, info, x, &t));
      if (x.family == &kjit::attention::paged_prefill_sm90_family()) {
        ++wgmma;  // the Hopper kernel: 128-row tiles, pages gathered or (pages of 16) loaded with TMA
        EXPECT_EQ(t.tile_rows, 128);
        continue;
      }
      EXPECT_EQ(x.family, &kjit::attention::paged_prefill_family());
      EXPECT_EQ(t.tile_rows, x.family->value(x.point, "block_m").code);  // what the table stores is what runs
      tiles.insert(t.tile_rows);
    }
    // Both mma.sync tiles fit 100 KiB at head_dim 128, and the default is one of them; the sm_90a
    // kernel is a candidate on the Hopper devices only.
    EXPECT_EQ(tiles, (std::set<int>{64, 128}));
    EXPECT_TRUE(tiles.count(ad::PagedPrefillPlanner::plan(d, info).tile_rows));
    EXPECT_EQ(wgmma, info.target().has_wgmma() ? 2 : 0);
  }
  // head_dim 256: the 128-row tile only where its shared memory fits.
  const ad::PagedPrefillPlanDims wide = paged_prefill_dims(2, 300, 600, 8, 256, 16);
  const int big = kjit::attention::prefill_launch_shape(256, 128).smem_bytes;
  const int little = kjit::attention::prefill_launch_shape(256, 64).smem_bytes;
  ASSERT_LT(little, big);
  for (const DeviceInfo& info : {a100(), l40s(), h100_pcie(), h200()}) {
    std::set<int> tiles;
    for (const TunedChoice& x : ad::PagedPrefillPlanner::tune_candidates(wide, info)) {
      tiles.insert(static_cast<int>(x.family->value(x.point, "block_m").code));
    }
    EXPECT_EQ(tiles.count(128), big <= info.max_smem_per_block_optin ? 1u : 0u) << info.name;
    EXPECT_EQ(tiles.count(64), little <= info.max_smem_per_block_optin ? 1u : 0u) << info.name;
  }
  DeviceInfo small = l40s();
  small.max_smem_per_block_optin = little;
  const std::vector<TunedChoice> only64 = ad::PagedPrefillPlanner::tune_candidates(wide, small);
  ASSERT_EQ(only64.size(), 1u);
  EXPECT_EQ(only64[0].family->value(only64[0].point, "block_m").code, 64);
  // Nothing to plan without query rows.
  EXPECT_TRUE(ad::PagedPrefillPlanner::tune_candidates(paged_prefill_dims(2, 0, 600, 8, 128, 16), h200()).empty());
}

TEST(TuneBuckets, PagedPrefillFollowsTheDocumentedRule) {
  TunedKey k{};
  // 3 requests of 100 rows over 1000 keys, 32 heads: 300 · 32 = 9600 → 16384; mean 100 → 128.
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(paged_prefill_dims(3, 100, 1000, 32, 128, 16), &k));
  EXPECT_EQ(k.op, static_cast<int32_t>(kjit::detail::TuneOpId::kPagedPrefill));
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 6), (std::vector<int32_t>{128, 1, 16384, 128, 1024, 16}));
  // Decode-like rows share the floor bands; page size 1 and non-causal are their own buckets.
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(paged_prefill_dims(2, 3, 20, 4, 64, 1, false), &k));
  EXPECT_EQ(std::vector<int32_t>(k.bucket, k.bucket + 6), (std::vector<int32_t>{64, 0, 64, 16, 64, 1}));
  // Forced tiles, the host-only overload (no q_heads) and empty batches are never tuned.
  ad::PagedPrefillPlanDims forced = paged_prefill_dims(3, 100, 1000, 32, 128, 16);
  forced.tile_rows = 64;
  EXPECT_FALSE(ad::PagedPrefillPlanner::tune_key(forced, &k));
  const std::vector<int32_t> qo = {0, 100, 200};
  EXPECT_FALSE(ad::PagedPrefillPlanner::tune_key(ad::paged_prefill_plan_dims(qo.data(), 2, 128, 0), &k));
  EXPECT_FALSE(ad::PagedPrefillPlanner::tune_key(paged_prefill_dims(2, 0, 600, 8, 128, 16), &k));
}

TEST(TunedTable, PagedPrefillPlanPathTakesAStoredTileAndDropsAnOverLimitOne) {
  DeviceInfo info = h200();
  info.ordinal = 10;
  // Long requests: the planner takes 128 rows; the table says 64.
  const ad::PagedPrefillPlanDims d = paged_prefill_dims(2, 1000, 2000, 16, 128, 16);
  ASSERT_EQ(ad::PagedPrefillPlanner::plan(d, info).tile_rows, 128);
  TunedChoice t64;
  for (const TunedChoice& c : ad::PagedPrefillPlanner::tune_candidates(d, info)) {
    if (c.family == &kjit::attention::paged_prefill_family() && c.family->value(c.point, "block_m").code == 64) t64 = c;
  }
  ASSERT_NE(t64.family, nullptr);
  const ad::PagedPrefillOpPlan tuned = plan_with<ad::PagedPrefillPlanner>(d, info, t64);
  EXPECT_EQ(tuned.tile_rows, 64);
  EXPECT_EQ(tuned.choice.point, t64.point);
  // The work map follows the tile: 2 × ceil(1000 / 64) items.
  const std::vector<int32_t> qo = {0, 1000, 2000};
  EXPECT_EQ(ad::paged_prefill_work_map(qo.data(), d, tuned.tile_rows).num_work(), 32);
  // A forced tile ignores the table; a stored choice of another head_dim is refused.
  TunedKey key64{};
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(d, &key64));
  kjit::detail::TunedTable one;
  one.set(key64, t64);
  kjit::detail::install_tuned_table(info.ordinal, one);
  ad::PagedPrefillPlanDims forced = d;
  forced.tile_rows = 128;
  EXPECT_EQ(kjit::detail::choose_plan<ad::PagedPrefillPlanner>(forced, info).tile_rows, 128);
  EXPECT_EQ(kjit::detail::choose_plan<ad::PagedPrefillPlanner>(d, info).tile_rows, 64);
  kjit::detail::install_tuned_table(info.ordinal, {});
  ad::PagedPrefillOpPlan other;
  EXPECT_FALSE(ad::PagedPrefillPlanner::apply_tuned(paged_prefill_dims(2, 1000, 2000, 16, 64, 16), info, t64, &other));

  // A 128-row head_dim-256 winner from the H200 (where short requests plan 64 rows), read on an
  // sm_89 whose shared memory holds only the 64-row tile: dropped with its reason, and the
  // default plan runs for that bucket.
  const ad::PagedPrefillPlanDims wide = paged_prefill_dims(8, 60, 2000, 16, 256, 16);
  ASSERT_EQ(ad::PagedPrefillPlanner::plan(wide, h200()).tile_rows, 64);
  TunedChoice t128;
  for (const TunedChoice& c : ad::PagedPrefillPlanner::tune_candidates(wide, h200())) {
    if (c.family->value(c.point, "block_m").code == 128) t128 = c;
  }
  ASSERT_NE(t128.family, nullptr);
  DeviceInfo small = l40s();
  small.ordinal = 11;
  small.max_smem_per_block_optin = kjit::attention::prefill_launch_shape(256, 64).smem_bytes;
  const auto& op = ad::PagedPrefillPlanner::tune_spec();
  TunedKey key{};
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(wide, &key));
  kjit::cache::TuneTable file;
  kjit::cache::TuneEntry e;
  e.op = "paged_prefill";
  e.planner = op.planner;  // as kjit tune records it
  e.bucket.assign(key.bucket, key.bucket + kjit::detail::kMaxTuneBucket);
  e.winner = stored(t128, op, 128, 0);  // resources as recorded pass; the kernel's own need does not
  e.default_choice = stored(ad::PagedPrefillPlanner::tuned_choice(wide, ad::PagedPrefillPlanner::plan(wide, small)),
                            op, 128, 0);
  file.entries.push_back(e);
  std::vector<std::string> dropped;
  const kjit::detail::TunedTable t = kjit::detail::tuned_table_from(file, small, &dropped);
  EXPECT_TRUE(t.empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped[0].find("op=paged_prefill"), std::string::npos) << dropped[0];
  EXPECT_NE(dropped[0].find("shared memory"), std::string::npos) << dropped[0];
  kjit::detail::install_tuned_table(small.ordinal, t);
  EXPECT_EQ(kjit::detail::choose_plan<ad::PagedPrefillPlanner>(wide, small).tile_rows, 64);
  kjit::detail::install_tuned_table(small.ordinal, {});
  // On the H200 the same entry loads and plans 128 rows.
  dropped.clear();
  const kjit::detail::TunedTable h = kjit::detail::tuned_table_from(file, h200(), &dropped);
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(h.size(), 1u);
}

}  // namespace

namespace {

// The split-KV ops share one candidate routine (kjit::detail::split_candidates): for each of them
// every candidate fits the device, applies to the call, runs the split count the table would
// store, and no point offers one count twice.
template <class Op>
void expect_split_candidates_run_as_stored(const typename Op::Dims& d, const DeviceInfo& info) {
  const std::vector<TunedChoice> c = Op::tune_candidates(d, info);
  ASSERT_FALSE(c.empty()) << Op::tune_spec().name << " on " << info.name;
  std::set<std::pair<std::string, int>> offered;
  for (const TunedChoice& x : c) {
    EXPECT_EQ(Op::tune_spec().fits(x, info), "");
    typename Op::Plan p;
    ASSERT_TRUE(Op::apply_tuned(d, info, x, &p)) << Op::tune_spec().describe(x);
    EXPECT_EQ(p.num_splits, x.knobs[0]) << Op::tune_spec().describe(x);
    EXPECT_TRUE(offered.insert({x.family->describe(x.point), x.knobs[0]}).second) << Op::tune_spec().describe(x);
  }
}

TEST(TuneCandidates, SplitKvOpsOfferEachCountTheyRunOnce) {
  for (const DeviceInfo& info : {a100(), l40s(), h200()}) {
    expect_split_candidates_run_as_stored<ad::DecodeOp>(decode_dims(2, 3000, 32, 8, 128), info);
    expect_split_candidates_run_as_stored<ad::PagedDecodeOp>(paged_decode_dims(2, 3000, 32, 8, 128, 16), info);
    expect_split_candidates_run_as_stored<md::SwaDecodeOp>(swa_dims(64, 128, 128), info);
  }
}

}  // namespace
