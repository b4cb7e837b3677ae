// Tuned plans without a GPU: the device fingerprint, candidate enumeration and pruning on
// simulated devices (an sm_80 with 164 KiB of shared memory, an sm_89 with 100 KiB, an H100 PCIe
// with 114 SMs, the H200), the bucket rules, stored tables checked against the device (foreign
// ops, over-limit and invalid choices dropped) and the plan path taking a stored choice.
#include "runtime/ops/tuned.hpp"

#include "cache/tune_table.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/pipeline.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace fd = kjit::fp8::detail;
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

ad::DecodeDims decode_dims(int64_t batch, int64_t len, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  ad::DecodeDims d;
  d.batch = batch;
  d.max_kv_len = len;
  d.q_heads = q_heads;
  d.kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.group = q_heads / kv_heads;
  return d;
}

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
  TunedChoice win = c.back();
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

TEST(TunedTable, ThePlanPathTakesAStoredChoiceForItsBucketOnly) {
  DeviceInfo info = h200();
  info.ordinal = 7;  // a slot no real device of this machine has
  const ad::DecodeDims d = decode_dims(1, 4096, 32, 8, 128);
  const ad::DecodePlan def = ad::DecodeOp::plan(d, info);
  TunedChoice pick;
  for (const TunedChoice& c : ad::DecodeOp::tune_candidates(d, info)) {
    if (c.knobs[0] != def.num_splits && c.family->value(c.point, "rows").code == 16) pick = c;
  }
  ASSERT_NE(pick.family, nullptr);
  TunedKey key{};
  ASSERT_TRUE(ad::DecodeOp::tune_key(d, &key));
  kjit::detail::TunedTable table;
  table.set(key, pick);
  kjit::detail::install_tuned_table(info.ordinal, table);
  const ad::DecodePlan tuned = kjit::detail::choose_plan<ad::DecodeOp>(d, info);
  EXPECT_EQ(tuned.num_splits, pick.knobs[0]);
  EXPECT_EQ(tuned.rows, 16);
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

}  // namespace
