// The family declarations and what is derived from them (host only): ParamMap parsing and
// printing, points from codes, name expressions, target support and the enumeration of each
// space. The name expressions are pinned: they enter the cache key, so a change here orphans every
// cached entry and must be deliberate.
#include <kjit/error.hpp>
#include <kjit/families.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_append.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
#include "runtime/ops/rotary/rotary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace {

using kjit::Family;
using kjit::ParamMap;
using kjit::Point;
using kjit::Target;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kjit::InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

TEST(Families, EveryDefaultRoundTripsThroughItsPoint) {
  for (const Family& f : kjit::families()) {
    ASSERT_FALSE(f.defaults.empty()) << f.name;
    ASSERT_LE(f.params.size(), static_cast<size_t>(kjit::kMaxFamilyParams)) << f.name;
    std::set<std::string> seen;
    for (const ParamMap& d : f.defaults) {
      const Point pt = f.parse(d);
      EXPECT_EQ(f.params_of(pt), d) << f.name;
      EXPECT_TRUE(seen.insert(f.describe(pt)).second) << f.name << ": duplicate default " << f.describe(pt);
      // The codes the ops plan with name the same point.
      std::vector<int64_t> codes;
      for (size_t i = 0; i < f.params.size(); ++i) codes.push_back(f.value(pt, static_cast<int>(i)).code);
      Point again;
      switch (codes.size()) {  // point() takes an initializer list, as the planners write it
        case 1: again = f.point({codes[0]}); break;
        case 2: again = f.point({codes[0], codes[1]}); break;
        case 3: again = f.point({codes[0], codes[1], codes[2]}); break;
        case 4: again = f.point({codes[0], codes[1], codes[2], codes[3]}); break;
        case 5: again = f.point({codes[0], codes[1], codes[2], codes[3], codes[4]}); break;
        case 6: again = f.point({codes[0], codes[1], codes[2], codes[3], codes[4], codes[5]}); break;
        case 9:
          again = f.point({codes[0], codes[1], codes[2], codes[3], codes[4], codes[5], codes[6], codes[7], codes[8]});
          break;
        default: FAIL() << f.name << " has " << codes.size() << " parameters: extend this switch";
      }
      EXPECT_EQ(again, pt) << f.name;
      const kjit::ProgramSpec spec = f.spec(pt);
      EXPECT_EQ(spec.family, f.name);
      EXPECT_EQ(spec.template_args, f.describe(pt));
      EXPECT_FALSE(spec.name_expressions.empty()) << f.name;
      for (const std::string& e : spec.name_expressions) EXPECT_EQ(e.find('{'), std::string::npos) << e;
    }
  }
}

// One point per program of every family, spelled as the kernels' templates expect.
TEST(Families, NameExpressionsArePinned) {
  struct Case {
    const char* family;
    ParamMap params;
    const char* source;
    std::vector<std::string> kernels;
  };
  const std::vector<Case> cases = {
      {"rotary", {{"style", "gptj"}, {"head_dim", "80"}, {"pos", "i32"}}, "rotary/rotary.cu",
       {"kjit::rope::rotary_kernel<80, 1, int>", "kjit::rope::rotary_scalar_kernel<80, 1, int>"}},
      {"rotary", {{"style", "neox"}, {"head_dim", "128"}, {"pos", "i64"}}, "rotary/rotary.cu",
       {"kjit::rope::rotary_kernel<128, 0, long long>", "kjit::rope::rotary_scalar_kernel<128, 0, long long>"}},
      {"attention.decode", {{"head_dim", "128"}, {"rows", "16"}, {"merge", "kernel"}}, "attention/decode.cu",
       {"kjit::attention::decode_kernel<128, 16, kjit::attention::ContigKV, false>"}},
      {"attention.paged_decode", {{"head_dim", "64"}, {"rows", "8"}, {"merge", "cluster"}}, "attention/decode.cu",
       {"kjit::attention::decode_kernel<64, 8, kjit::attention::PagedKV, true>"}},
      {"attention.decode_merge", {{"head_dim", "256"}}, "attention/decode_merge.cu",
       {"kjit::attention::decode_merge_kernel<256>"}},
      {"attention.paged_append", {{"head_dim", "256"}, {"index", "indptr"}}, "attention/paged_append.cu",
       {"kjit::attention::paged_append_kernel<256, true>"}},
      {"attention.prefill", {{"head_dim", "128"}, {"block_m", "64"}, {"mask", "bool"}}, "attention/prefill.cu",
       {"kjit::attention::prefill_kernel<128, 64, true, kjit::attention::DenseQSchedule, kjit::attention::ContigKV>"}},
      {"attention.prefill_sm90", {{"head_dim", "64"}}, "attention/prefill_sm90.cu",
       {"kjit::attention::prefill_sm90_kernel<64>"}},
      {"attention.paged_prefill", {{"head_dim", "128"}, {"block_m", "128"}}, "attention/prefill.cu",
       {"kjit::attention::prefill_kernel<128, 128, false, kjit::attention::PackedQSchedule, kjit::attention::PagedKV>"}},
      {"attention.paged_prefill_sm90", {{"head_dim", "128"}, {"block_m", "128"}, {"page_load", "tma"}},
       "attention/prefill_sm90.cu", {"kjit::attention::paged_prefill_sm90_kernel<128, 128, true>"}},
      {"attention.paged_prefill_sm90", {{"head_dim", "64"}, {"block_m", "192"}, {"page_load", "gather"}},
       "attention/prefill_sm90.cu", {"kjit::attention::paged_prefill_sm90_kernel<64, 192, false>"}},
      {"fp8.quantize", {{"in", "f16"}, {"fmt", "e5m2"}, {"granularity", "tensor"}, {"pow2", "1"}}, "fp8/quantize.cu",
       {"kjit::fp8::quantize_tensor_kernel<1, 1, false, true>", "kjit::fp8::quantize_tensor_kernel<1, 1, true, true>",
        "kjit::fp8::amax_kernel<1>", "kjit::fp8::delayed_scaling_kernel<1>"}},
      {"fp8.quantize", {{"in", "f32"}, {"fmt", "e4m3"}, {"granularity", "row"}, {"pow2", "0"}}, "fp8/quantize.cu",
       {"kjit::fp8::quantize_row_kernel<2, 0, false>"}},
      {"fp8.quantize", {{"in", "bf16"}, {"fmt", "e4m3"}, {"granularity", "block1x128"}, {"pow2", "0"}},
       "fp8/quantize.cu", {"kjit::fp8::quantize_block_kernel<0, 0, false>"}},
      {"fp8.quantize", {{"in", "bf16"}, {"fmt", "e4m3"}, {"granularity", "block128x128"}, {"pow2", "1"}},
       "fp8/quantize.cu", {"kjit::fp8::quantize_tile_kernel<0, 0, true>"}},
      {"fp8.gemm",
       {{"impl", "mma"}, {"a", "e4m3"}, {"b", "e5m2"}, {"out", "f32"}, {"scale", "block"}, {"tile", "128x64"},
        {"stages", "3"}, {"a_major", "m"}, {"b_major", "k"}},
       "fp8/gemm.cu", {"kjit::fp8::gemm_kernel<0, 1, true, true, 128, 64, 3, true, false>"}},
      {"fp8.gemm",
       {{"impl", "wgmma"}, {"a", "e4m3"}, {"b", "e4m3"}, {"out", "bf16"}, {"scale", "tensor"}, {"tile", "128x256"},
        {"stages", "3"}, {"a_major", "k"}, {"b_major", "k"}},
       "fp8/gemm_sm90.cu", {"kjit::fp8::gemm_sm90_kernel<0, 0, false, 128, 256, 3>"}},
      {"mla.swa_decode",
       {{"head_dim", "512"}, {"group", "32"}, {"kv_tile", "64"}, {"window", "256"}, {"cache", "e5m2"}, {"cluster_split", "1"}},
       "mla/swa_decode.cu",
       {"kjit::mla::swa_decode_kernel<512, 32, 64, 256, 1, 1>", "kjit::mla::swa_merge_kernel<512>"}},
      {"mla.swa_decode",
       {{"head_dim", "512"}, {"group", "16"}, {"kv_tile", "64"}, {"window", "128"}, {"cache", "e4m3"}, {"cluster_split", "8"}},
       "mla/swa_decode.cu",
       {"kjit::mla::swa_decode_kernel<512, 16, 64, 128, 0, 8>", "kjit::mla::swa_merge_kernel<512>"}},
      {"mla.swa_decode",
       {{"head_dim", "512"}, {"group", "64"}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}, {"cluster_split", "1"}},
       "mla/swa_decode_sm90.cu", {"kjit::mla::swa_decode_wgmma_kernel<512, 128, 0>"}},
  };
  for (const Case& c : cases) {
    const kjit::ProgramSpec spec = kjit::family(c.family).spec(c.params);
    EXPECT_EQ(spec.source_name, c.source) << c.family;
    EXPECT_EQ(spec.name_expressions, c.kernels) << c.family;
  }
}

// A companion (the program the ops load along with a point) is a registered family whose point
// every point of its owner names; precompile compiles it with each point.
TEST(Families, CompanionsNameAPointOfARegisteredFamily) {
  int with = 0;
  for (const Family& f : kjit::families()) {
    if (f.companion.empty()) {
      EXPECT_THROW(f.companion_params(f.default_points().front()), kjit::InvalidArgument) << f.name;
      continue;
    }
    ++with;
    const Family& other = kjit::family(f.companion);
    for (const Point& pt : f.enumerate()) {
      const ParamMap params = f.companion_params(pt);
      EXPECT_NO_THROW(other.parse(params)) << f.name << " " << f.describe(pt);
      for (const auto& [name, text] : params) EXPECT_EQ(f.value(pt, name).text, text) << f.name;
    }
  }
  EXPECT_EQ(with, 2);
  EXPECT_EQ(kjit::family("attention.decode").companion, "attention.decode_merge");
  EXPECT_EQ(kjit::family("attention.paged_decode").companion, "attention.decode_merge");
  const Family& d = kjit::family("attention.paged_decode");
  EXPECT_EQ(d.companion_params(d.parse({{"head_dim", "256"}, {"rows", "16"}, {"merge", "cluster"}})),
            (ParamMap{{"head_dim", "256"}}));
}

TEST(Families, ParseNamesWhatIsWrong) {
  const Family& f = kjit::family("attention.prefill");
  std::string e = error_of([&] { f.parse({{"head_dim", "128"}, {"block_m", "64"}, {"mask", "none"}, {"x", "1"}}); });
  EXPECT_NE(e.find("unknown parameter 'x'"), std::string::npos) << e;
  e = error_of([&] { f.parse({{"head_dim", "100"}}); });
  EXPECT_NE(e.find("head_dim=100 is not in the specialization space (64, 128, 256)"), std::string::npos) << e;
  e = error_of([&] { f.parse({{"head_dim", "128"}}); });
  EXPECT_NE(e.find("missing parameters block_m (one of 64, 128); mask (one of none, bool)"), std::string::npos) << e;
  // A constraint between parameters names the point and the rule.
  const Family& g = kjit::family("fp8.gemm");
  e = error_of([&] {
    g.parse({{"impl", "wgmma"}, {"a", "e4m3"}, {"b", "e4m3"}, {"out", "bf16"}, {"scale", "block"}, {"tile", "128x128"},
             {"stages", "4"}, {"a_major", "k"}, {"b_major", "k"}});
  });
  EXPECT_NE(e.find("fp8.gemm: impl=wgmma"), std::string::npos) << e;
  EXPECT_NE(e.find("tensorwise scales only"), std::string::npos) << e;
}

TEST(Families, PointFromCodesRejectsUndeclaredValues) {
  const Family& f = kjit::family("rotary");
  EXPECT_EQ(f.describe(f.point({1, 128, 0})), "style=gptj head_dim=128 pos=i32");
  const std::string e = error_of([&] { f.point({0, 100, 0}); });
  EXPECT_NE(e.find("rotary: no kernel for head_dim=100"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { f.point({0, 128}); }), "(no InvalidArgument)");
}

TEST(Families, EnumerationCoversTheValidSpace) {
  for (const Family& f : kjit::families()) {
    const std::vector<Point> all = f.enumerate();
    size_t product = 1;
    for (const auto& p : f.params) product *= p.values.size();
    EXPECT_LE(all.size(), product) << f.name;
    if (!f.constraint) EXPECT_EQ(all.size(), product) << f.name;
    std::set<std::string> distinct;
    for (const Point& pt : all) {
      EXPECT_EQ(f.invalid_reason(pt), "") << f.name;
      distinct.insert(f.describe(pt));
    }
    EXPECT_EQ(distinct.size(), all.size()) << f.name;
    // Every default is a point of the space.
    for (const Point& d : f.default_points()) EXPECT_TRUE(distinct.count(f.describe(d))) << f.name;
  }
  // fp8.gemm: mma takes 3 tiles x 3 stages x 4 majors x 2 scales less 128x128 with block scales
  // (3 stages x 4 majors), wgmma 2 tiles x 7 stages (2..8), 6 small tiles (BN 16/32/64, 128 or
  // 64 rows) x 11 stages, 6 wave-fitting tiles (BN 80..224) x 7 stages and the 8 64-row pair
  // tiles (BN 80..256) x 7 stages, each for 2 x 2 formats x 2 outputs.
  EXPECT_EQ(kjit::family("fp8.gemm").enumerate().size(),
            size_t{8} * ((3 * 3 * 4 * 2 - 3 * 4) + 2 * 7 + 6 * 11 + 6 * 7 + 8 * 7));
  // attention.paged_prefill_sm90: 128-row tiles at hd64 and hd128, 192-row tiles at hd64 only,
  // each gathering its pages or loading them with TMA.
  const Family& paged = kjit::family("attention.paged_prefill_sm90");
  EXPECT_EQ(paged.enumerate().size(), 6u);
  try {
    paged.parse({{"head_dim", "128"}, {"block_m", "192"}, {"page_load", "tma"}});
    ADD_FAILURE() << "hd128 with 192-row tiles parsed";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("block_m=192 runs only at head_dim=64"), std::string::npos) << e.what();
  }
  // mla.swa_decode: without a cluster split groups 16 and 32 take any tile and window, 64 only
  // tile 128 with window <= 128; cluster splits (groups 16 and 32, the tile that holds a CTA's
  // slice of whole steps <= 128) take W 64 in 2 or 4, W 128 and 256 in 2, 4 or 8, W 512 in 4
  // or 8: each for both formats.
  EXPECT_EQ(kjit::family("mla.swa_decode").enumerate().size(), size_t{2} * (2 * 2 * 4 + 2) + 2 * 2 * (2 + 3 + 3 + 2));
}

TEST(Families, TargetsFilterTheEnumeration) {
  const Target sm90a = Target::parse("sm_90a"), sm89 = Target::parse("sm_89"), sm80 = Target::parse("sm_80");
  const Family& hopper = kjit::family("attention.prefill_sm90");
  EXPECT_EQ(hopper.enumerate(&sm90a).size(), 2u);
  EXPECT_TRUE(hopper.enumerate(&sm89).empty());
  EXPECT_NE(hopper.unsupported_reason(hopper.default_points()[0], Target::parse("sm_100a")).find("needs sm_90a"),
            std::string::npos);
  const Family& gemm = kjit::family("fp8.gemm");
  for (const Point& pt : gemm.enumerate(&sm89)) EXPECT_EQ(gemm.value(pt, "impl").text, "mma");
  EXPECT_GT(gemm.enumerate(&sm90a).size(), gemm.enumerate(&sm89).size());
  EXPECT_TRUE(gemm.enumerate(&sm80).empty());  // below the family's min_sm 89
}

// A family's min_sm is the lowest SM any of its points has a kernel for (its target rules, which
// ask Target's feature queries, agree with the declaration): an sm_90a-only family declares
// Target::kWgmmaSm, never a literal that could drift from has_wgmma.
/// The lowest SM of a target any point of `f` has a kernel for (0: none of those tried), and
/// whether every target with a kernel has wgmma.
std::pair<int, bool> lowest_sm_with_a_kernel(const Family& f) {
  int lowest = 0;
  bool wgmma_only = true;
  for (const char* name : {"sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a",
                           "sm_103a", "sm_120", "sm_120a"}) {
    const Target t = Target::parse(name);
    if (f.enumerate(&t).empty()) continue;
    if (lowest == 0) lowest = t.sm();
    wgmma_only = wgmma_only && t.has_wgmma();
  }
  return {lowest, wgmma_only};
}

TEST(Families, MinSmIsTheLowestTargetWithAKernel) {
  for (const Family& f : kjit::families()) {
    const auto [lowest, wgmma_only] = lowest_sm_with_a_kernel(f);
    EXPECT_EQ(f.min_sm, lowest) << f.name << " declares min_sm " << f.min_sm << "; its first kernel is for sm_" << lowest;
    if (wgmma_only) EXPECT_EQ(f.min_sm, Target::kWgmmaSm) << f.name;
  }
  EXPECT_EQ(kjit::family("attention.prefill_sm90").min_sm, Target::kWgmmaSm);
  EXPECT_EQ(kjit::family("attention.paged_prefill_sm90").min_sm, Target::kWgmmaSm);
  // A declaration that drifts from its rules is caught: an sm_90a-only family saying 89 still
  // has its first kernel on sm_90a.
  Family drifted = kjit::family("attention.prefill_sm90");
  drifted.min_sm = 89;
  EXPECT_NE(drifted.min_sm, lowest_sm_with_a_kernel(drifted).first);
}

// Each op's arch check (OpInfo::min_sm, what check_arch refuses below) is its families' lowest
// min_sm: an op never refuses a device one of its families has a kernel for, nor loads a family
// below that family's floor.
TEST(Families, EachOpsFloorIsItsFamiliesLowest) {
  const kjit::detail::OpInfo* ops[] = {
      &kjit::attention::detail::DecodeOp::kInfo,      &kjit::attention::detail::PagedDecodeOp::kInfo,
      &kjit::attention::detail::PrefillOp::kInfo,     &kjit::attention::detail::PagedPrefillOp::kInfo,
      &kjit::attention::detail::AppendOp::kInfo,      &kjit::mla::detail::SwaDecodeOp::kInfo,
      &kjit::fp8::detail::GemmOp::kInfo,              &kjit::fp8::detail::QuantizeOp::kInfo,
      &kjit::detail::RotaryOp::kInfo};
  for (const kjit::detail::OpInfo* op : ops) {
    int lowest = 0;
    for (const auto family : op->families) {
      if (family != nullptr) lowest = lowest == 0 ? family().min_sm : std::min(lowest, family().min_sm);
    }
    EXPECT_EQ(op->min_sm, lowest) << op->name;
  }
}

// Below its floor a wgmma family says what it needs (sm_90a), not "sm_90 or newer", which would be
// false on sm_100a; a family without a target rule keeps the floor's wording.
TEST(Families, BelowTheFloorTheReasonNamesTheFeature) {
  for (const char* name : {"attention.prefill_sm90", "attention.paged_prefill_sm90"}) {
    const Family& f = kjit::family(name);
    for (const char* target : {"sm_80", "sm_89", "sm_90", "sm_100a"}) {
      const std::string why = f.unsupported_reason(f.defaults.front(), Target::parse(target));
      EXPECT_NE(why.find("needs sm_90a"), std::string::npos) << name << " on " << target << ": " << why;
      EXPECT_EQ(why.find("or newer"), std::string::npos) << name << " on " << target << ": " << why;
    }
  }
  const Family& rotary = kjit::family("rotary");
  EXPECT_NE(rotary.unsupported_reason(rotary.defaults.front(), Target::parse("sm_75")).find("or newer"),
            std::string::npos);
}

TEST(Families, ArchFeaturesLiveOnTheTarget) {
  EXPECT_TRUE(Target::parse("sm_90a").has_wgmma());
  EXPECT_FALSE(Target::parse("sm_90").has_wgmma());
  EXPECT_FALSE(Target::parse("sm_100a").has_wgmma());
  EXPECT_TRUE(Target::parse("sm_90").has_pdl());
  EXPECT_FALSE(Target::parse("sm_89").has_clusters());
  EXPECT_TRUE(Target::parse("sm_80").has_bf16_mma());
}

}  // namespace

namespace {

TEST(Families, EveryShippedDeclarationIsWellFormed) {
  for (const kjit::Family& f : kjit::families()) EXPECT_EQ(f.check(), "") << f.name;
}

TEST(Families, CheckNamesWhatIsWrongInADeclaration) {
  kjit::Family f = kjit::family("rotary");
  f.programs[0].kernels = {"k<{head_dim}, {nope}>"};
  EXPECT_NE(f.check().find("undeclared parameter nope"), std::string::npos) << f.check();
  f = kjit::family("rotary");
  f.programs[0].kernels = {"k<{head_dim:3}>"};
  EXPECT_NE(f.check().find("has no part 3"), std::string::npos) << f.check();
  f = kjit::family("rotary");
  f.programs.insert(f.programs.begin(), kjit::FamilyProgram{"style", "neo", "x.cu", {"k"}});
  EXPECT_NE(f.check().find("style has no value neo"), std::string::npos) << f.check();
  f = kjit::family("rotary");
  f.programs[0].when_param = "style";
  f.programs[0].when_value = "neox";
  EXPECT_NE(f.check().find("last program"), std::string::npos) << f.check();
  f = kjit::family("rotary");
  while (f.params.size() <= static_cast<size_t>(kjit::kMaxFamilyParams)) f.params.push_back({"p", {{"0", 0, ""}}, ""});
  EXPECT_NE(f.check().find("at most 16"), std::string::npos) << f.check();
  f = kjit::family("rotary");
  f.params[0].values.push_back({"neox", 7, ""});
  EXPECT_NE(f.check().find("repeats a value"), std::string::npos) << f.check();
  f = kjit::family("rotary");
  f.params[0].absent_value = "nope";
  EXPECT_NE(f.check().find("absent_value nope is not one of its values"), std::string::npos) << f.check();
}

// A parameter added after points were written down (manifests, tuning tables) declares the value
// such a point takes; the points that name it parse as before, and no other parameter may be left out.
TEST(Families, APointWrittenBeforeAParameterExistedTakesItsAbsentValue) {
  const Family& f = kjit::family("mla.swa_decode");
  const ParamMap old{{"head_dim", "512"}, {"group", "16"}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}};
  const kjit::Point pt = f.parse(old);
  EXPECT_EQ(f.value(pt, "cluster_split").text, "1");
  ParamMap named = old;
  named["cluster_split"] = "1";
  EXPECT_EQ(f.parse(named), pt);
  ParamMap other = old;
  other.erase("group");
  EXPECT_NE(error_of([&] { f.parse(other); }).find("missing parameter group"), std::string::npos);
}

TEST(Families, APointWithJunkBeyondItsParametersIsInvalid) {
  const kjit::Family& f = kjit::family("attention.decode");
  kjit::Point pt = f.default_points()[0];
  EXPECT_EQ(f.invalid_reason(pt), "");
  pt.index[5] = 1;  // decode has three parameters
  EXPECT_NE(f.invalid_reason(pt), "");
}

// KJIT_JIT=async may serve a point for another only where they differ in performance-only
// parameters: the declarations say which, once. Pinned, since widening it would let a fallback
// compute something else.
TEST(Families, PerformanceOnlyParametersArePinned) {
  std::set<std::string> declared;
  for (const Family& f : kjit::families()) {
    for (const kjit::FamilyParam& p : f.params) {
      if (p.performance_only) declared.insert(f.name + "." + p.name);
    }
  }
  const std::set<std::string> expected = {
      "attention.decode.rows",         "attention.paged_decode.rows",          "attention.prefill.block_m",
      "attention.decode.merge",        "attention.paged_decode.merge",
      "attention.paged_prefill.block_m", "attention.paged_prefill_sm90.block_m", "fp8.gemm.impl",
      "attention.paged_prefill_sm90.page_load",
      "fp8.gemm.tile",                 "fp8.gemm.stages",                      "mla.swa_decode.group",
      "mla.swa_decode.kv_tile",        "mla.swa_decode.cluster_split"};
  EXPECT_EQ(declared, expected);
}

TEST(Families, SameSemanticsIgnoresOnlyPerformanceOnlyParameters) {
  const Family& decode = kjit::family("attention.decode");
  auto dp = [&](const char* hd, const char* rows, const char* merge = "kernel") {
    return decode.parse({{"head_dim", hd}, {"rows", rows}, {"merge", merge}});
  };
  EXPECT_TRUE(decode.same_semantics(dp("128", "8"), decode, dp("128", "16")));
  EXPECT_TRUE(decode.same_semantics(dp("128", "8"), decode, dp("128", "16", "cluster")));
  EXPECT_FALSE(decode.same_semantics(dp("128", "8"), decode, dp("64", "8")));

  // Across the two kernels of one op: the parameters both declare are compared; the mask only the
  // mma.sync family declares is the op planner's to check against the call.
  const Family& prefill = kjit::family("attention.prefill");
  const Family& sm90 = kjit::family("attention.prefill_sm90");
  const Point mma = prefill.parse({{"head_dim", "128"}, {"block_m", "64"}, {"mask", "none"}});
  EXPECT_TRUE(prefill.same_semantics(mma, sm90, sm90.parse({{"head_dim", "128"}})));
  EXPECT_FALSE(prefill.same_semantics(mma, sm90, sm90.parse({{"head_dim", "64"}})));
  EXPECT_FALSE(prefill.same_semantics(mma, prefill,
                                      prefill.parse({{"head_dim", "128"}, {"block_m", "64"}, {"mask", "bool"}})));

  const Family& gemm = kjit::family("fp8.gemm");
  auto gp = [&](const char* impl, const char* out, const char* tile, const char* stages) {
    return gemm.parse({{"impl", impl}, {"a", "e4m3"}, {"b", "e4m3"}, {"out", out}, {"scale", "tensor"},
                       {"tile", tile}, {"stages", stages}, {"a_major", "k"}, {"b_major", "k"}});
  };
  EXPECT_TRUE(gemm.same_semantics(gp("wgmma", "bf16", "128x256", "3"), gemm, gp("mma", "bf16", "128x64", "4")));
  EXPECT_FALSE(gemm.same_semantics(gp("wgmma", "bf16", "128x256", "3"), gemm, gp("wgmma", "f32", "128x256", "3")));

  // A cluster split computes what the unsplit kernel does (a KJIT_JIT=async fallback either way).
  const Family& swa = kjit::family("mla.swa_decode");
  auto sp = [&](const char* group, const char* tile, const char* window, const char* cluster) {
    return swa.parse({{"head_dim", "512"}, {"group", group}, {"kv_tile", tile}, {"window", window}, {"cache", "e4m3"},
                      {"cluster_split", cluster}});
  };
  EXPECT_TRUE(swa.same_semantics(sp("16", "64", "128", "8"), swa, sp("16", "128", "128", "1")));
  EXPECT_TRUE(swa.same_semantics(sp("16", "64", "128", "8"), swa, sp("64", "128", "128", "1")));
  EXPECT_FALSE(swa.same_semantics(sp("16", "64", "128", "8"), swa, sp("16", "64", "64", "4")));

  const Family& rotary = kjit::family("rotary");
  const Point neox = rotary.parse({{"style", "neox"}, {"head_dim", "128"}, {"pos", "i64"}});
  EXPECT_TRUE(rotary.same_semantics(neox, rotary, neox));
  EXPECT_FALSE(rotary.same_semantics(neox, rotary, rotary.parse({{"style", "gptj"}, {"head_dim", "128"}, {"pos", "i64"}})));
}

}  // namespace

// The compile target per device comes from the family declaration: sm_XYa only for programs
// that use arch-specific instructions (FamilyProgram::arch_specific), sm_XY for every other.
TEST(FamilyTargets, ArchSpecificOnlyWhereTheProgramNeedsIt) {
  const kjit::Target sm80 = kjit::Target::for_compute_capability(8, 0);   // A100, 164 KiB
  const kjit::Target sm89 = kjit::Target::for_compute_capability(8, 9);   // L40S, 100 KiB
  const kjit::Target sm90a = kjit::Target::for_compute_capability(9, 0);  // H100 PCIe, H200
  const kjit::Target sm90 = kjit::Target::parse("sm_90");
  ASSERT_TRUE(sm90a.arch_specific);
  size_t specific = 0, generic = 0;
  for (const kjit::Family& f : kjit::families()) {
    for (const kjit::Point& p : f.enumerate(&sm90a)) {
      const bool arch = f.program(p).arch_specific;
      const kjit::Target t = f.compile_target(p, sm90a);
      EXPECT_EQ(t.str(), arch ? "sm_90a" : "sm_90") << f.name << " " << f.describe(p);
      // The spec carries the same rule to Runtime::load.
      EXPECT_EQ(f.spec(p).target_on(sm90a), t) << f.name;
      // Consistent with the target rules: an arch-specific program has no kernel on plain
      // sm_90, every other one does.
      EXPECT_EQ(f.unsupported_reason(p, sm90).empty(), !arch) << f.name << " " << f.describe(p);
      (arch ? specific : generic) += 1;
    }
    for (const kjit::Target& older : {sm80, sm89}) {
      for (const kjit::Point& p : f.enumerate(&older)) EXPECT_EQ(f.compile_target(p, older), older) << f.name;
    }
  }
  EXPECT_GT(specific, 0u);
  EXPECT_GT(generic, 0u);
  // The families that declare arch-specific programs: the wgmma ones, nothing else.
  const kjit::Family& swa = kjit::family("mla.swa_decode");
  const kjit::Point g64 = swa.parse(
      {{"head_dim", "512"}, {"group", "64"}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}, {"cluster_split", "1"}});
  const kjit::Point g16 = swa.parse(
      {{"head_dim", "512"}, {"group", "16"}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}, {"cluster_split", "1"}});
  const kjit::Point c8 = swa.parse(
      {{"head_dim", "512"}, {"group", "16"}, {"kv_tile", "64"}, {"window", "128"}, {"cache", "e4m3"}, {"cluster_split", "8"}});
  EXPECT_EQ(swa.compile_target(g64, sm90a).str(), "sm_90a");
  EXPECT_EQ(swa.compile_target(g16, sm90a).str(), "sm_90");
  EXPECT_EQ(swa.compile_target(c8, sm90a).str(), "sm_90");  // clusters are not arch-specific
  const kjit::Family& prefill = kjit::family("attention.prefill_sm90");
  EXPECT_EQ(prefill.compile_target(prefill.default_points()[0], sm90a).str(), "sm_90a");
  const kjit::Family& decode = kjit::family("attention.decode");
  EXPECT_EQ(decode.compile_target(decode.default_points()[0], sm90a).str(), "sm_90");
  // A host application's own program keeps the device's target.
  kjit::ProgramSpec own;
  EXPECT_EQ(own.target_on(sm90a), sm90a);
}
