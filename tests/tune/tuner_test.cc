// The tuner's host side without a GPU: the noise rule and its deterministic tie-break, the early
// rejection of screened candidates, shapes (and every shipped shapes file), the sweep's JSON and
// its report.
#include "tools/tune/tuner.hpp"

#include "runtime/ops/tuned.hpp"
#include "tests/cli/process.hpp"
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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

TEST(TuneScreen, KeepsTheLeaderAndTheDefaultAndDropsClearLosers) {
  // Candidate 0 is the default; 1 leads; 2 is 50% slower; 3 is 10% slower; 4 is slower than the
  // margin on median but had one fast run; 5 has no samples (it was wrong).
  const std::vector<std::vector<double>> samples = {
      {10.0, 10.1, 9.9, 10.2, 10.0}, {8.0, 8.1, 7.9, 8.2, 8.0}, {12.0, 12.3, 11.9, 12.1, 12.2},
      {8.8, 8.9, 8.7, 9.0, 8.8},     {9.5, 9.6, 9.0, 9.7, 9.8}, {}};
  const std::vector<bool> always = {true, false, false, false, false, false};
  const kjit::tune::Screen s = kjit::tune::screen_candidates(samples, always, 0.15);
  EXPECT_EQ(s.leader, 1);
  EXPECT_DOUBLE_EQ(s.leader_us, 8.0);
  // Kept: the default (always), the leader, 3 (best 8.7 <= 9.2) and 4 (best 9.0 <= 9.2, so not
  // clearly slower). Dropped: 2 (best 11.9 > 9.2) and 5 (nothing measured).
  EXPECT_EQ(s.keep, (std::vector<bool>{true, true, false, true, true, false}));
  // A default that is itself clearly slow is still measured in full.
  EXPECT_TRUE(kjit::tune::screen_candidates({{20.0, 20.0, 20.0}, {8.0, 8.0, 8.0}}, {true, false}, 0.15).keep[0]);
  EXPECT_FALSE(kjit::tune::screen_candidates({{20.0, 20.0, 20.0}, {8.0, 8.0, 8.0}}, {false, false}, 0.15).keep[0]);
  // Nothing screened: no leader, nothing kept.
  const kjit::tune::Screen none = kjit::tune::screen_candidates({{}, {}}, {false, false}, 0.15);
  EXPECT_EQ(none.leader, -1);
  EXPECT_EQ(none.keep, (std::vector<bool>{false, false}));
}

TEST(TuneScreen, NearTiesAreNeverDroppedWhateverTheNoise) {
  // Every candidate within 5% of the fastest, each sample off by up to ±3% (graph replays on the
  // H200 spread far less): the rule keeps them all on every one of 500 simulated hosts.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> jitter(-0.03, 0.03);
  std::uniform_real_distribution<double> slower(0.0, 0.05);
  for (int host = 0; host < 500; ++host) {
    std::vector<std::vector<double>> samples(12);
    for (auto& c : samples) {
      const double t = 10.0 * (1 + slower(rng));
      for (int k = 0; k < 5; ++k) c.push_back(t * (1 + jitter(rng)));
    }
    const kjit::tune::Screen s = kjit::tune::screen_candidates(samples, std::vector<bool>(12, false), 0.15);
    for (size_t i = 0; i < samples.size(); ++i) ASSERT_TRUE(s.keep[i]) << "host " << host << " candidate " << i;
  }
}

TEST(TuneScreen, IsDeterministic) {
  // The same samples in any order give the same verdict; two equal medians lead by candidate order.
  std::vector<std::vector<double>> a = {{9.0, 9.2, 9.1}, {8.0, 8.4, 8.2}, {8.2, 8.0, 8.4}, {10.0, 9.9, 10.1}};
  const kjit::tune::Screen first = kjit::tune::screen_candidates(a, {true, false, false, false}, 0.15);
  EXPECT_EQ(first.leader, 1);
  std::mt19937 rng(5);
  for (int i = 0; i < 50; ++i) {
    for (auto& c : a) std::shuffle(c.begin(), c.end(), rng);
    const kjit::tune::Screen again = kjit::tune::screen_candidates(a, {true, false, false, false}, 0.15);
    ASSERT_EQ(again.leader, first.leader);
    ASSERT_EQ(again.keep, first.keep);
    ASSERT_DOUBLE_EQ(again.leader_us, first.leader_us);
  }
  EXPECT_EQ(first.keep, (std::vector<bool>{true, true, true, false}));
}

TEST(TuneSelect, DroppedCandidatesNeverWinButCanBeTheRunnerUp) {
  std::vector<Measurement> m = times({10.0, 13.0, 14.0});
  m[1].status = "dropped";
  m[2].status = "dropped";
  int runner = -2;
  EXPECT_EQ(kjit::tune::select_winner(m, 0.02, &runner), 0);
  EXPECT_EQ(runner, 1);  // by its screening median: the margin the table records
  m[1].us = 5.0;         // even a (mis)recorded fast figure cannot make a dropped one win
  EXPECT_EQ(kjit::tune::select_winner(m, 0.02, &runner), 0);
}

TEST(TuneWorkerProtocol, DeathsAndHangsCostTheCandidateInFlightAndAFreshWorkerTakesTheRest) {
  // A scripted worker (no GPU): the first dies while candidate 2 of shape 0 runs; the second
  // reports candidate 3 failed (as a worker does for a driver error) and exits; the third
  // finishes shape 0 (4 dropped, 0 measured) and hangs on candidate 0 of shape 1; the fourth
  // dies while preparing shape 1.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kjit-fake-worker-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path script = dir / "worker.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nd='" << dir.string() << "'\n"
        << R"(n=$(cat "$d/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$d/count"
cat > "$d/job$n.json"
case $n in
0) printf '%s\n' '{"preparing":0}' '{"ready":0,"copies":4}' '{"start":0,"shape":0}' '{"start":1,"shape":0}' \
     '{"index":1,"shape":0,"status":"wrong","why":"wrong output: half"}' '{"start":2,"shape":0}'
   exit 3 ;;
1) printf '%s\n' '{"preparing":0}' '{"ready":0,"copies":4}' '{"start":0,"shape":0}' '{"start":3,"shape":0}' \
     '{"index":3,"shape":0,"status":"failed","why":"CUDA_ERROR_ILLEGAL_ADDRESS"}'
   exit 3 ;;
2) printf '%s\n' '{"preparing":0}' '{"ready":0,"copies":4}' '{"start":0,"shape":0}' '{"start":4,"shape":0}' \
     '{"index":4,"shape":0,"status":"dropped","us":14.0,"samples":5,"leader":0,"leader_us":10.0,"screen_best_us":13.5}' \
     '{"start":0,"shape":0}' '{"index":0,"shape":0,"status":"ok","us":10.0,"eager_us":12.0,"samples":20}' \
     '{"preparing":1}' '{"ready":1,"copies":2}' '{"start":0,"shape":1}'
   exec sleep 30 ;;
*) printf '%s\n' '{"preparing":1}'
   exit 1 ;;
esac
)";
  }
  fs::permissions(script, fs::perms::owner_all);
  std::vector<kjit::tune::ShapeResult> shapes(2);
  shapes[0].shape = {{"n", "1"}};
  shapes[0].candidates = times({0, 0, 0, 0, 0});
  shapes[1].shape = {{"n", "2"}};
  shapes[1].candidates = times({0, 0});
  for (auto& sr : shapes) {
    for (Measurement& m : sr.candidates) m.status = "failed";
  }
  kjit::tune::Options o;
  o.timeout_s = 1;
  int ticks = 0;
  kjit::tune::detail::measure("test.fake", shapes, {{0, {0, 1, 2, 3, 4}}, {1, {0, 1}}}, o, script.string(),
                              [&] { ++ticks; });
  const auto& a = shapes[0].candidates;
  const auto& b = shapes[1].candidates;
  EXPECT_EQ(a[0].status, "ok");
  EXPECT_DOUBLE_EQ(a[0].us, 10.0);
  EXPECT_EQ(a[0].samples, 20);
  EXPECT_EQ(a[1].status, "wrong");
  EXPECT_EQ(a[2].status, "failed");
  EXPECT_NE(a[2].why.find("the worker died: exit 3"), std::string::npos) << a[2].why;
  EXPECT_EQ(a[3].status, "failed");
  EXPECT_EQ(a[3].why, "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(a[4].status, "dropped");
  EXPECT_EQ(a[4].leader, 0);
  EXPECT_DOUBLE_EQ(a[4].screen_best_us, 13.5);
  EXPECT_EQ(b[0].status, "failed");
  EXPECT_NE(b[0].why.find("no result within 1 s (killed)"), std::string::npos) << b[0].why;
  EXPECT_EQ(b[1].status, "failed");
  EXPECT_NE(b[1].why.find("died setting this shape up: exit 1"), std::string::npos) << b[1].why;
  EXPECT_EQ(ticks, 7);
  // Each fresh worker got exactly what was left, every shape in one job.
  auto job = [&](int n) {
    std::ifstream in(dir / ("job" + std::to_string(n) + ".json"));
    return nlohmann::json::parse(in);
  };
  EXPECT_EQ(job(0)["shapes"].size(), 2u);
  EXPECT_EQ(job(0)["screen_samples"], 5);
  EXPECT_EQ(job(1)["shapes"][0]["indices"], nlohmann::json({0, 3, 4}));
  EXPECT_EQ(job(1)["shapes"][1]["indices"], nlohmann::json({0, 1}));
  EXPECT_EQ(job(2)["shapes"][0]["indices"], nlohmann::json({0, 4}));
  EXPECT_EQ(job(2)["shapes"][1]["indices"], nlohmann::json({0, 1}));
  ASSERT_EQ(job(3)["shapes"].size(), 1u);
  EXPECT_EQ(job(3)["shapes"][0]["id"], 1);
  EXPECT_EQ(job(3)["shapes"][0]["indices"], nlohmann::json({1}));
  fs::remove_all(dir);
}

TEST(TuneHarness, LargePrefillReferencesCoverARotatingSampleOfEveryTile) {
  kjit::testing::PrefillProblem p;
  p.q_heads = 32;
  p.kv_heads = 32;
  p.head_dim = 128;
  p.causal = true;
  p.q_lens = {512};
  p.kv_lens = {512};
  EXPECT_TRUE(kjit::tune::detail::sampled_rows(p).empty());  // cheap: every row
  // The B4 H32 L4096 D128 peer prompt: 5.5e11 operations causal, 1.1e12 full.
  p.q_lens = {4096, 4096, 4096, 4096};
  p.kv_lens = p.q_lens;
  for (bool causal : {true, false}) {
    p.causal = causal;
    const std::vector<int64_t> rows = kjit::tune::detail::sampled_rows(p);
    const size_t stride = causal ? 32 : 64;
    ASSERT_EQ(rows.size(), 4 * 4096 / stride);
    std::set<int64_t> positions;
    std::vector<int> per_tile(4 * 4096 / 64, 0);
    for (int64_t r : rows) {
      ASSERT_LT(r, 4 * 4096);
      positions.insert(r % 64);
      ++per_tile[static_cast<size_t>(r / 64)];
    }
    EXPECT_EQ(positions.size(), 64u) << "every row position of a tile is checked somewhere";
    for (int n : per_tile) ASSERT_EQ(n, static_cast<int>(64 / stride));
    EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
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
  s.candidates = times({10.0, 8.0, 12.0});
  s.candidates[0].label = "default: attention.decode head_dim=128 rows=8 splits=8";
  s.candidates[1].label = "attention.decode head_dim=128 rows=8 splits=16";
  s.candidates[2].label = "attention.decode head_dim=128 rows=8 splits=64";
  s.candidates[2].status = "dropped";
  s.candidates[2].screen_best_us = 11.5;
  s.candidates[2].screen_median_us = 12.0;
  s.candidates[2].leader = 1;
  s.candidates[2].leader_us = 8.0;
  s.candidates[2].why = "dropped early: best of 5 graph samples 11.50 µs > 1.15 × leader #1's median 8.00 µs";
  r.screen_samples = 5;
  r.screen_margin = 0.15;
  s.winner = 1;
  s.runner_up = 0;
  s.gain = 0.25;
  r.shapes.push_back(s);
  const kjit::tune::SweepResult back = kjit::tune::from_json(kjit::tune::to_json(r));
  ASSERT_EQ(back.shapes.size(), 1u);
  EXPECT_EQ(back.shapes[0].winner, 1);
  EXPECT_EQ(back.shapes[0].candidates[1].label, s.candidates[1].label);
  EXPECT_EQ(back.screen_samples, 5);
  EXPECT_EQ(back.shapes[0].candidates[2].status, "dropped");
  EXPECT_DOUBLE_EQ(back.shapes[0].candidates[2].screen_best_us, 11.5);
  EXPECT_EQ(back.shapes[0].candidates[2].leader, 1);
  EXPECT_DOUBLE_EQ(back.shapes[0].candidates[2].leader_us, 8.0);
  const std::string table = kjit::tune::report_table(back);
  EXPECT_NE(table.find("splits=16 <- winner"), std::string::npos) << table;
  EXPECT_NE(table.find("dropped early"), std::string::npos) << table;
  EXPECT_NE(table.find("screened with 5 graph samples"), std::string::npos) << table;
  EXPECT_NE(table.find("25.0% faster"), std::string::npos) << table;
  EXPECT_THROW(kjit::tune::from_json("[]"), kjit::InvalidArgument);
}

/// The message of the InvalidArgument from_json throws for `text` ("" when it accepts it).
std::string report_error(const std::string& text) {
  try {
    kjit::tune::from_json(text);
  } catch (const kjit::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(TuneReport, EveryIndexAndTypeIsCheckedAndTheErrorNamesTheField) {
  // `kjit tune report` and the summary index the candidates by winner and runner-up: a report
  // whose winner names no candidate crashed them (rc 139).
  EXPECT_NE(report_error(R"({"op":"decode","shapes":[{"shape":{"batch":"8"},"winner":7,"candidates":[]}]})")
                .find("shapes[0].winner = 7 names no candidate"),
            std::string::npos);
  const std::string two = R"("candidates":[{"index":0,"us":1},{"index":1,"us":2}])";
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"winner":0,"runner_up":2,)" + two + "}]}").find("shapes[0].runner_up"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"winner":-2,)" + two + "}]}").find("shapes[0].winner"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"winner":4294967297,)" + two + "}]}").find("shapes[0].winner"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"winner":"1",)" + two + "}]}").find("shapes[0].winner is not an integer"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"candidates":[{"index":1}]}]})").find("shapes[0].candidates[0].index"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"candidates":[{"us":"fast"}]}]})").find("shapes[0].candidates[0].us"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{"batch":8},"candidates":[]}]})").find("shapes[0].shape.batch"),
            std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"candidates":[]}],"compiled":-1})").find("compiled"), std::string::npos);
  EXPECT_NE(report_error(R"({"shapes":[{"shape":{},"candidates":[{"us":1e999}]}]})").find("not JSON"), std::string::npos);
  EXPECT_NE(report_error(std::string(100, '[') + std::string(100, ']')).find("nested deeper"), std::string::npos);
  // In range, it reads, and the winner indexes its candidate.
  const kjit::tune::SweepResult ok = kjit::tune::from_json(R"({"shapes":[{"shape":{},"winner":1,)" + two + "}]}");
  ASSERT_EQ(ok.shapes.size(), 1u);
  EXPECT_EQ(ok.shapes[0].winner, 1);
  EXPECT_EQ(ok.shapes[0].runner_up, -1);
  EXPECT_EQ(ok.shapes[0].candidates[1].us, 2.0);
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
  // Every op with candidates has shapes for the H200 run (tools/bench/h200_tune_sweep.sh).
  for (const kjit::detail::TuneOpSpec* spec : kjit::detail::tune_ops()) EXPECT_TRUE(covered.count(spec->name)) << spec->name;
}

}  // namespace
