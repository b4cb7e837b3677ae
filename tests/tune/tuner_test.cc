// The tuner's host side without a GPU: the noise rule and its deterministic tie-break, shapes
// (and every shipped shapes file), the sweep's JSON and its report.
#include "tools/tune/tuner.hpp"

#include "runtime/ops/tuned.hpp"
#include "tests/cli/process.hpp"

#include <kjit/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

namespace {

using kjit::tune::Measurement;

std::vector<Measurement> times(std::vector<double> us) {
  std::vector<Measurement> m;
  for (size_t i = 0; i < us.size(); ++i) {
    Measurement x;
    x.index = static_cast<int>(i);
    x.is_default = i == 0;
    x.status = "ok";
    x.us = us[i];
    m.push_back(x);
  }
  return m;
}

TEST(TuneSelect, TheDefaultWinsWithinNoise) {
  int runner = -2;
  EXPECT_EQ(kjit::tune::select_winner(times({10.0, 9.9, 10.5}), 0.02, &runner), 0);
  EXPECT_EQ(runner, 1);
  EXPECT_EQ(kjit::tune::select_winner(times({10.0, 9.7}), 0.02, &runner), 1);
  EXPECT_EQ(kjit::tune::select_winner(times({10.0}), 0.02, &runner), 0);
  EXPECT_EQ(runner, -1);
}

TEST(TuneSelect, WrongAndFailedCandidatesNeverWin) {
  std::vector<Measurement> m = times({10.0, 1.0, 2.0, 9.0});
  m[1].status = "wrong";
  m[2].status = "failed";
  int runner = -2;
  EXPECT_EQ(kjit::tune::select_winner(m, 0.02, &runner), 3);
  EXPECT_EQ(runner, 0);
  m[0].status = "failed";  // without a measured default there is nothing to compare with
  EXPECT_EQ(kjit::tune::select_winner(m, 0.02, &runner), -1);
}

TEST(TuneSelect, TieBreakIsDeterministicAcrossNoisyHosts) {
  // Candidates 2 and 4 are equally fast; hosts see them within 1% of each other in either
  // order. Every host picks the first in candidate order, whatever the jitter.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(-0.004, 0.004);
  for (int host = 0; host < 200; ++host) {
    std::vector<Measurement> m = times({10.0, 9.0, 8.0, 9.5, 8.0});
    for (Measurement& x : m) x.us *= 1 + jitter(rng);
    int runner = 0;
    ASSERT_EQ(kjit::tune::select_winner(m, 0.02, &runner), 2) << "host " << host;
  }
}

TEST(TuneShapes, ParseWithDefaultsAndClearErrors) {
  const kjit::tune::Shape d = {{"batch", "1"}, {"kv_len", "4096"}};
  const kjit::tune::Shape s = kjit::tune::parse_shape({"batch=8,kv_len=128"}, d);
  EXPECT_EQ(kjit::tune::shape_text(s), "batch=8 kv_len=128");
  EXPECT_EQ(kjit::tune::shape_int(s, "batch"), 8);
  EXPECT_THROW(kjit::tune::parse_shape({"batch"}, d), kjit::InvalidArgument);
  EXPECT_THROW(kjit::tune::parse_shape({"heads=3"}, d), kjit::InvalidArgument);
  EXPECT_THROW(kjit::tune::shape_int(kjit::tune::parse_shape({"batch=x"}, d), "batch"), kjit::InvalidArgument);
  EXPECT_THROW(kjit::tune::read_shapes_file("/nonexistent/shapes", d), kjit::InvalidArgument);
  EXPECT_NO_THROW(kjit::tune::op("decode"));
  EXPECT_NO_THROW(kjit::tune::op("fp8_gemm"));
  EXPECT_THROW(kjit::tune::op("nope"), kjit::InvalidArgument);
}

TEST(TuneReport, JsonRoundTripsAndTheTableMarksTheWinner) {
  kjit::tune::SweepResult r;
  r.op = "decode";
  r.device = "Test GPU";
  kjit::tune::ShapeResult s;
  s.shape = {{"batch", "1"}};
  s.bucket = {128, 4, 8, 4096};
  s.candidates = times({10.0, 8.0});
  s.candidates[0].label = "default: attention.decode head_dim=128 rows=8 splits=8";
  s.candidates[1].label = "attention.decode head_dim=128 rows=8 splits=16";
  s.winner = 1;
  s.runner_up = 0;
  s.gain = 0.25;
  r.shapes.push_back(s);
  const kjit::tune::SweepResult back = kjit::tune::from_json(kjit::tune::to_json(r));
  ASSERT_EQ(back.shapes.size(), 1u);
  EXPECT_EQ(back.shapes[0].winner, 1);
  EXPECT_EQ(back.shapes[0].candidates[1].label, s.candidates[1].label);
  const std::string table = kjit::tune::report_table(back);
  EXPECT_NE(table.find("splits=16 <- winner"), std::string::npos) << table;
  EXPECT_NE(table.find("25.0% faster"), std::string::npos) << table;
  EXPECT_THROW(kjit::tune::from_json("[]"), kjit::InvalidArgument);
}

TEST(TuneOps, EveryTunableOpHasAHarnessAndTheRestSayWhyNot) {
  for (const kjit::detail::TuneOpSpec* spec : kjit::detail::tune_ops()) {
    const kjit::tune::TuneOp& op = kjit::tune::op(spec->name);
    EXPECT_TRUE(op.only_default.empty()) << spec->name;
    ASSERT_TRUE(op.make) << spec->name;
    // The default shape builds its harness (host-side validation, no GPU).
    EXPECT_NO_THROW(op.make(op.defaults)) << spec->name;
  }
  for (const char* name : {"rotary", "fp8_quantize"}) {
    const kjit::tune::TuneOp& op = kjit::tune::op(name);
    EXPECT_NE(op.only_default.find("fixed by the call"), std::string::npos) << name;
    EXPECT_EQ(kjit::detail::find_tune_op(name), nullptr) << name;
    // A sweep says so before it looks for a device.
    try {
      kjit::tune::sweep(name, {{}}, kjit::tune::Options{});
      ADD_FAILURE() << name << " swept";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the default plan is the only candidate"), std::string::npos) << e.what();
    }
  }
}

TEST(TuneShapes, EveryShippedShapesFileParsesAndBuildsItsHarnesses) {
  // tools/tune/shapes/<op>[_suffix].txt: the op is the longest registered name the file starts with.
  const std::string source = kjit::test::cmake_cache_value("kjit_SOURCE_DIR");
  ASSERT_FALSE(source.empty()) << "no kjit_SOURCE_DIR in the build tree's CMakeCache.txt";
  const std::filesystem::path dir = std::filesystem::path(source) / "tools" / "tune" / "shapes";
  std::set<std::string> covered;
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".txt") continue;
    ++files;
    const std::string name = entry.path().filename().string();
    std::string op;
    for (const auto& [n, o] : kjit::tune::ops()) {
      if (name.rfind(n + "_", 0) == 0 && n.size() > op.size()) op = n;
    }
    ASSERT_FALSE(op.empty()) << name << " names no op kjit tune covers";
    SCOPED_TRACE(name);
    const kjit::tune::TuneOp& top = kjit::tune::op(op);
    const std::vector<kjit::tune::Shape> shapes = kjit::tune::read_shapes_file(entry.path().string(), top.defaults);
    for (const kjit::tune::Shape& s : shapes) {
      EXPECT_NO_THROW(top.make(s)) << kjit::tune::shape_text(s);  // host-side validation, no GPU
    }
    if (name == "fp8_gemm_msweep_h200.txt") EXPECT_EQ(shapes.size(), 26u);
    covered.insert(op);
  }
  EXPECT_GT(files, 0u) << dir;
  EXPECT_TRUE(covered.count("paged_prefill"));
}

}  // namespace
