// kjit tune on the GPU: small sweeps of decode, of the FP8 GEMM, of paged decode, prefill, paged
// prefill (and its tuned plan step reading the table) and SWA decode, and a test-only op whose
// candidates are a correct copy kernel, one that writes half its output (must be reported wrong
// and never chosen), one that traps and one that writes far out of bounds (each must be marked
// failed without ending the sweep: the candidate after them is still measured). Skips without a
// GPU. This binary is its own tune worker (main below).
#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>
#include <kjit/launch.hpp>
#include <kjit/ops/attention.hpp>

#include "cache/tune_table.hpp"
#include "runtime/internal/driver.hpp"
#include "runtime/internal/tuning.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <vector>

namespace {

namespace tune = kjit::tune;
using kjit::testing::DeviceBuffer;

constexpr const char* kSource = R"(
struct CopyParams { const float* x; float* y; int n; };
__global__ void copy_full(const __grid_constant__ CopyParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i] = p.x[i];
}
__global__ void copy_half(const __grid_constant__ CopyParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n / 2) p.y[i] = p.x[i];
}
__global__ void copy_trap(const __grid_constant__ CopyParams p) {
  if (threadIdx.x == 0 && blockIdx.x == 0) __trap();
}
__global__ void copy_out_of_bounds(const __grid_constant__ CopyParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i + (1ll << 36)] = p.x[i];
}
)";

struct CopyParams {
  const float* x;
  float* y;
  int n;
};

const char* const kKernels[] = {"copy_full", "copy_half", "copy_trap", "copy_out_of_bounds", "copy_full"};

/// The test-only op: candidate i launches kKernels[i]; candidate 0 is the default.
class CopyHarness : public tune::Harness {
 public:
  std::vector<tune::Candidate> candidates(const kjit::DeviceInfo&) override {
    std::vector<tune::Candidate> out;
    for (int i = 0; i < 5; ++i) {
      tune::Candidate c;
      c.label = fmt::format("{} #{}", kKernels[i], i);
      c.is_default = i == 0;
      c.programs = {spec()};
      out.push_back(c);
    }
    return out;
  }
  bool bucket(std::vector<int64_t>* out) const override {
    *out = {kN};
    return false;  // not an op of the tables
  }
  size_t input_bytes() const override { return kN * 4; }
  void prepare(int copies, uint64_t) override {
    std::vector<float> x(kN);
    for (int i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 977) * 0.5f;
    ref_.assign(x.begin(), x.end());
    for (int c = 0; c < copies; ++c) x_.push_back(kjit::testing::to_device(x));
    y_ = DeviceBuffer(kN * 4);
  }
  tune::Runner runner(const tune::Candidate& c, kjit::Runtime& runtime) override {
    const kjit::LoadedProgram& program = runtime.load(spec());
    const int index = c.label.back() - '0';
    const kjit::Kernel* kernel = &program.kernel(kKernels[index]);
    tune::Runner r;
    r.threads = 256;
    for (const DeviceBuffer& x : x_) {
      CopyParams p{static_cast<const float*>(x.get()), static_cast<float*>(y_.get()), kN};
      r.per_copy.push_back([kernel, p](CUstream s) {
        kjit::LaunchConfig config;
        config.grid[0] = (kN + 255) / 256;
        config.block[0] = 256;
        config.stream = s;
        kjit::launch(*kernel, config, p);
      });
    }
    return r;
  }
  std::string check(const tune::Runner& r, CUstream stream) override {
    y_.fill(0xFF);
    r.per_copy[0](stream);
    KJIT_CU(cuStreamSynchronize(stream));
    std::vector<float> y = y_.download<float>(kN);
    const kjit::testing::Comparison cmp = kjit::testing::compare(y, ref_);
    return cmp.ok(1e-6) ? std::string() : "wrong output: " + cmp.describe();
  }

 private:
  static constexpr int kN = 1 << 20;
  static kjit::ProgramSpec spec() {
    kjit::ProgramSpec s;
    s.family = "test.copy";
    s.source_name = "tune_test_copy.cu";
    s.source_text = kSource;
    s.name_expressions = {"copy_full", "copy_half", "copy_trap", "copy_out_of_bounds"};
    return s;
  }
  std::vector<double> ref_;
  std::vector<DeviceBuffer> x_;
  DeviceBuffer y_;
};

const bool kRegistered = [] {
  tune::register_op({"test.copy", "test only", {{"n", "1"}},
                     [](const tune::Shape&) { return std::unique_ptr<tune::Harness>(new CopyHarness); }});
  return true;
}();

class TuneGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kjit::testing::has_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

/// Every candidate was timed: fully ("ok"), or screened out clearly slower than the leader
/// ("dropped", with the figures that show it). The winner, and the default, in full.
void all_timed(const tune::ShapeResult& s, const tune::Options& o, const std::string& all) {
  for (const tune::Measurement& m : s.candidates) {
    if (m.status == "dropped") {
      EXPECT_FALSE(m.is_default) << all;
      EXPECT_GE(m.leader, 0) << all;
      EXPECT_GT(m.screen_best_us, (1 + o.screen_margin) * m.leader_us) << m.label << "\n" << all;
      EXPECT_EQ(m.samples, o.screen_samples) << all;
      EXPECT_NE(m.why.find("dropped early"), std::string::npos) << m.why;
    } else {
      EXPECT_EQ(m.status, "ok") << m.label << ": " << m.why;
      EXPECT_GE(m.samples, 20) << m.label;
      EXPECT_GT(m.eager_us, 0) << m.label;
    }
  }
  ASSERT_GE(s.winner, 0) << all;
  EXPECT_EQ(s.candidates[static_cast<size_t>(s.winner)].status, "ok") << all;
}

tune::Options quick() {
  tune::Options o;
  o.samples = 20;
  o.timeout_s = 60;
  o.progress = false;
  return o;
}

TEST_F(TuneGpu, WrongAndFaultingCandidatesAreReportedAndTheSweepGoesOn) {
  ASSERT_TRUE(kRegistered);
  tune::Options o = quick();
  o.publish = false;
  const tune::SweepResult r = tune::sweep("test.copy", {{{"n", "1"}}}, o);
  ASSERT_EQ(r.shapes.size(), 1u);
  const auto& c = r.shapes[0].candidates;
  ASSERT_EQ(c.size(), 5u);
  std::string all = tune::report_table(r);
  EXPECT_EQ(c[0].status, "ok") << all;
  EXPECT_EQ(c[1].status, "wrong") << all;
  EXPECT_NE(c[1].why.find("non-finite"), std::string::npos) << all;
  EXPECT_EQ(c[2].status, "failed") << all;
  EXPECT_EQ(c[3].status, "failed") << all;
  EXPECT_EQ(c[4].status, "ok") << "the sweep did not go on after the faults\n" << all;
  EXPECT_TRUE(r.shapes[0].winner == 0 || r.shapes[0].winner == 4) << all;
  EXPECT_GT(c[0].us, 0);
  EXPECT_GT(c[0].eager_us, 0);
  EXPECT_EQ(c[0].samples, 20);
}

TEST_F(TuneGpu, DecodeSweepPublishesACheckedTable) {
  const tune::TuneOp& op = tune::op("decode");
  const tune::SweepResult r =
      tune::sweep("decode", {tune::parse_shape({"batch=1 kv_len=8192 head_dim=64"}, op.defaults)}, quick());
  const tune::ShapeResult& s = r.shapes.at(0);
  const std::string all = tune::report_table(r);
  std::printf("%s", all.c_str());
  all_timed(s, quick(), all);
  kjit::cache::TuneTable t;
  ASSERT_TRUE(kjit::cache::read_table(
      kjit::cache::table_path(kjit::RuntimeConfig::from_env().cache_dir, r.fingerprint_id), &t));
  const kjit::cache::TuneEntry* e = t.find("decode", s.bucket);
  ASSERT_NE(e, nullptr);
  std::string label = s.candidates[static_cast<size_t>(s.winner)].label;
  if (label.rfind("default: ", 0) == 0) label = label.substr(9);
  EXPECT_EQ(e->winner.describe(), label);
  // The table reads back on this device with nothing dropped.
  std::vector<std::string> dropped;
  kjit::detail::tuned_table_from(t, kjit::device_info(0), &dropped);
  EXPECT_TRUE(dropped.empty()) << dropped.front();
}

TEST_F(TuneGpu, WithoutScreeningEveryCandidateIsMeasuredInFull) {
  const tune::TuneOp& op = tune::op("decode");
  tune::Options o = quick();
  o.screen_samples = 0;
  o.publish = false;
  const tune::SweepResult r =
      tune::sweep("decode", {tune::parse_shape({"batch=2 kv_len=4096 head_dim=128"}, op.defaults)}, o);
  const std::string all = tune::report_table(r);
  for (const tune::Measurement& m : r.shapes.at(0).candidates) {
    EXPECT_EQ(m.status, "ok") << m.label << ": " << m.why;
    EXPECT_EQ(m.samples, 20) << m.label;
  }
  EXPECT_GE(r.shapes.at(0).winner, 0) << all;
}

TEST_F(TuneGpu, Fp8GemmSweepFindsNoWrongCandidate) {
  if (kjit::device_info(0).sm() < 89) GTEST_SKIP() << "FP8 GEMM needs sm_89+";
  const tune::TuneOp& op = tune::op("fp8_gemm");
  const tune::SweepResult r = tune::sweep(
      "fp8_gemm", {tune::parse_shape({"m=64 n=7168 k=2048"}, op.defaults), tune::parse_shape({"m=1024 n=4096 k=7168"}, op.defaults)},
      quick());
  for (const tune::ShapeResult& s : r.shapes) {
    const std::string all = tune::report_table(r);
    EXPECT_GE(s.winner, 0) << all;
    for (const tune::Measurement& m : s.candidates) {
      EXPECT_NE(m.status, "wrong") << m.label << ": " << m.why;
    }
  }
  std::printf("%s", tune::report_table(r).c_str());
}


/// Sweeps `op` over `shapes` (quick options, published) and checks no candidate is wrong or
/// failed, the winner is ok and the table reads back on this device with nothing dropped.
void sweep_is_clean(const std::string& name, const std::vector<std::string>& shapes) {
  const tune::TuneOp& op = tune::op(name);
  std::vector<tune::Shape> parsed;
  for (const std::string& s : shapes) parsed.push_back(tune::parse_shape({s}, op.defaults));
  const tune::SweepResult r = tune::sweep(name, parsed, quick());
  const std::string all = tune::report_table(r);
  std::printf("%s", all.c_str());
  ASSERT_EQ(r.shapes.size(), shapes.size());
  for (const tune::ShapeResult& s : r.shapes) {
    EXPECT_GE(s.winner, 0) << all;
    EXPECT_GE(s.candidates.size(), 2u) << "nothing to choose from\n" << all;
    all_timed(s, quick(), all);
  }
  kjit::cache::TuneTable t;
  ASSERT_TRUE(kjit::cache::read_table(
      kjit::cache::table_path(kjit::RuntimeConfig::from_env().cache_dir, r.fingerprint_id), &t));
  for (const tune::ShapeResult& s : r.shapes) EXPECT_NE(t.find(name, s.bucket), nullptr) << tune::shape_text(s.shape);
  std::vector<std::string> dropped;
  kjit::detail::tuned_table_from(t, kjit::device_info(0), &dropped);
  EXPECT_TRUE(dropped.empty()) << dropped.front();
}

TEST_F(TuneGpu, PagedDecodeSweepIsClean) {
  sweep_is_clean("paged_decode", {"batch=1 kv_len=8192 head_dim=64 page_size=16", "batch=16 kv_len=2048 page_size=1"});
}

TEST_F(TuneGpu, PrefillSweepIsClean) {
  sweep_is_clean("prefill", {"batch=1 q_len=512 kv_len=512 q_heads=16 kv_heads=4 head_dim=128 causal=1",
                             "batch=2 q_len=256 kv_len=1024 q_heads=8 kv_heads=8 head_dim=64 causal=0"});
}

TEST_F(TuneGpu, PagedPrefillSweepIsCleanAndThePlanStepFollowsTheTable) {
  sweep_is_clean("paged_prefill", {"batch=4 q_len=200 kv_len=700 q_heads=16 kv_heads=4 head_dim=128 page_size=16",
                                   "batch=6 q_len=40 kv_len=300 q_heads=8 kv_heads=8 head_dim=64 page_size=1 causal=0"});
  // The tuned overload reads device 0's table: store the tile the built-in rule would not take
  // for this bucket and plan with tile_rows 0.
  const std::vector<int32_t> qo = {0, 300, 600}, kv = {0, 50, 100}, last = {16, 16};
  kjit::attention::PagedPrefillPlanArgs a;
  a.qo_indptr_host = qo.data();
  a.kv_indptr_host = kv.data();
  a.last_page_len_host = last.data();
  a.batch = 2;
  a.q_heads = 8;
  a.head_dim = 128;
  a.page_size = 16;
  a.device = 0;
  namespace ad = kjit::attention::detail;
  const ad::PagedPrefillPlanDims d = ad::paged_prefill_plan_dims(a);
  const kjit::DeviceInfo& info = kjit::device_info(0);
  ASSERT_EQ(ad::PagedPrefillPlanner::plan(d, info).tile_rows, 128);
  kjit::detail::TunedChoice t64;
  for (const kjit::detail::TunedChoice& c : ad::PagedPrefillPlanner::tune_candidates(d, info)) {
    if (c.family == &kjit::attention::paged_prefill_family() && c.family->value(c.point, "block_m").code == 64) t64 = c;
  }
  ASSERT_NE(t64.family, nullptr);
  kjit::detail::TunedKey key{};
  ASSERT_TRUE(ad::PagedPrefillPlanner::tune_key(d, &key));
  kjit::detail::TunedTable table;
  table.set(key, t64);
  kjit::detail::install_tuned_table(0, table);
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).tile_rows, 64);
  a.device = -1;  // the current context's device, or device 0 when none is: device 0 here either way
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).tile_rows, 64);
  a.tile_rows = 128;  // a forced tile is never tuned
  EXPECT_EQ(kjit::attention::plan_paged_prefill(a).tile_rows, 128);
  EXPECT_EQ(kjit::attention::plan_paged_prefill(qo.data(), 2, 128).tile_rows, 128);  // the host-only overload
  a.tile_rows = 0;
  a.device = kjit::device_count();
  EXPECT_THROW(kjit::attention::plan_paged_prefill(a), kjit::InvalidArgument);
  kjit::detail::install_tuned_table(0, {});
}

TEST_F(TuneGpu, SwaDecodeSweepIsClean) {
  sweep_is_clean("swa_decode", {"tokens=1 heads=128 window=128", "tokens=64 heads=128 window=128"});
}

}  // namespace

int main(int argc, char** argv) {
  tune::run_worker_if_requested();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
