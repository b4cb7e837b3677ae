// Deployment on a GPU (skips without one):
//   - a decode loop recorded with KJIT_RECORD, the manifest replayed by `kjit precompile
//     --manifest` into an empty cache, the loop run again there under KJIT_JIT=off: zero
//     compiles, bit-identical outputs, both checked against the float64 reference; and the loop
//     in an empty cache under KJIT_JIT=off fails naming the `kjit compile` command;
//   - a miss while the op's stream is being captured into a CUDA graph (global, thread-local
//     and relaxed modes): CaptureMiss naming the specialization, nothing compiled or loaded,
//     the capture still ends cleanly; after one run outside the capture the op captures, and
//     the graph's launch gives the reference's answer.
// The loop runs in child processes (this binary re-run with a gtest filter), since KJIT_RECORD,
// KJIT_JIT and KJIT_CACHE_DIR are read once per process.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "runtime/driver.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "tests/cli/process.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/random.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace kt = kjit::testing;
using kjit::DType;
using kjit::TensorRef;

constexpr double kOutTol = 1e-2;  // bf16 output (see attention_decode_test.cc)

/// One decode problem on the device: inputs from a fixed seed, a poisoned output.
struct DecodeSetup {
  kt::DecodeProblem problem;
  kt::DeviceBuffer q, k, v, out, ws;
  kjit::attention::DecodeArgs args;
  size_t ws_bytes = 0;

  DecodeSetup(int batch, int len, int q_heads, int kv_heads, int head_dim, int splits, uint64_t seed) {
    problem = kt::random_decode_problem(batch, len, q_heads, kv_heads, head_dim, seed, 1.f);
    const kt::DecodeProblem& p = problem;
    q = kt::to_device(kt::bf16_bits(p.q));
    k = kt::to_device(kt::bf16_bits(p.k));
    v = kt::to_device(kt::bf16_bits(p.v));
    out = kt::DeviceBuffer(p.q.size() * 2);
    args.q = TensorRef(q.get(), DType::kBF16, {batch, 1, q_heads, head_dim}, {}, 0);
    args.k = TensorRef(k.get(), DType::kBF16, {batch, len, kv_heads, head_dim}, {}, 0);
    args.v = TensorRef(v.get(), DType::kBF16, {batch, len, kv_heads, head_dim}, {}, 0);
    args.out = TensorRef(out.get(), DType::kBF16, {batch, 1, q_heads, head_dim}, {}, 0);
    args.num_splits = splits;
    ws_bytes = kjit::attention::decode_workspace_bytes(args);
    ws = kt::DeviceBuffer(std::max<size_t>(ws_bytes, 16));
    out.fill(0xFF);
  }

  /// The output bits, checked against the float64 reference (adds a failure when off).
  std::vector<uint16_t> check(const std::string& what) const {
    kt::synchronize();
    std::vector<uint16_t> bits = out.download<uint16_t>(problem.q.size());
    std::vector<float> values(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) values[i] = kt::bf16_to_float(bits[i]);
    const kt::Comparison c = kt::compare(values, kt::decode_reference(problem).out);
    EXPECT_TRUE(c.ok(kOutTol)) << what << ": " << c.describe();
    return bits;
  }
};

uint64_t fnv(const std::vector<uint16_t>& bits) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(bits.data());
  for (size_t i = 0; i < bits.size() * 2; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// --- the child: a decode loop -------------------------------------------------------------------

/// What the loop covers: every head_dim, both CTA row counts (GQA 4 and 16), one split and
/// several (the merge kernel): each a different specialization.
struct LoopCase {
  int batch, len, q_heads, kv_heads, head_dim, splits;
};
const LoopCase kLoop[] = {
    {2, 300, 8, 2, 64, 1},   {2, 300, 8, 2, 128, 1},  {2, 300, 8, 2, 256, 1},
    {1, 2000, 32, 2, 128, 0}, {4, 700, 16, 4, 64, 0},  {1, 1000, 16, 1, 256, 4},
};

TEST(DeployGpuChild, DecodeLoop) {
  const char* out_path = std::getenv("KJIT_DEPLOY_CHILD_OUT");
  if (out_path == nullptr) GTEST_SKIP() << "runs only as the child of DeployGpu.RecordReplayThenFailClosed";
  if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
  std::ofstream out(out_path);
  int i = 0;
  for (const LoopCase& c : kLoop) {
    DecodeSetup s(c.batch, c.len, c.q_heads, c.kv_heads, c.head_dim, c.splits, 1000 + i);
    // A serving loop calls the op over and over: only the first call of each may miss.
    for (int step = 0; step < 3; ++step) {
      try {
        kjit::attention::decode(s.args, s.ws.get(), s.ws_bytes, nullptr);
      } catch (const kjit::JitDisabled& e) {
        out << "jit_disabled " << e.what() << "\n";
        FAIL() << e.what();
      }
    }
    out << "case " << i++ << " " << fnv(s.check("case " + std::to_string(i))) << "\n";
  }
  const kjit::RuntimeStats st = kjit::Runtime::global().stats();
  out << "compiles " << st.compiles << "\nrefused " << st.refused << "\n";
}

// --- the parent ---------------------------------------------------------------------------------

fs::path self_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

class DeployGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
    work_ = fs::temp_directory_path() / ("kjit-deploy-gpu-" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override {
    if (!work_.empty()) fs::remove_all(work_);
  }

  /// Runs the decode loop in a child with `env`; returns its report's lines.
  std::vector<std::string> loop(std::map<std::string, std::string> env, int* code) {
    const fs::path report = work_ / "report.txt";
    fs::remove(report);
    env["KJIT_DEPLOY_CHILD_OUT"] = report.string();
    const kjit::test::ProcessResult r = kjit::test::run_process(
        {(self_dir() / "gpu_deploy_test").string(), "--gtest_filter=DeployGpuChild.DecodeLoop", "--gtest_brief=1"},
        env, work_ / "io");
    *code = r.code;
    if (r.code != 0) std::cerr << r.describe() << "\n";
    std::vector<std::string> lines;
    std::ifstream in(report);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  fs::path work_;
};

TEST_F(DeployGpu, RecordReplayThenFailClosed) {
  const fs::path kjit_cli = self_dir().parent_path() / "tools" / "kjit";
  ASSERT_TRUE(fs::exists(kjit_cli)) << kjit_cli << " (build kjit_cli)";
  const fs::path manifest = work_ / "manifest.jsonl";
  int code = 0;
  // 1. Record: a fresh cache, so everything compiles, and every specialization lands in the file.
  const std::vector<std::string> recorded =
      loop({{"KJIT_CACHE_DIR", (work_ / "dev").string()}, {"KJIT_RECORD", manifest.string()}}, &code);
  ASSERT_EQ(code, 0);
  ASSERT_GE(recorded.size(), 3u);
  EXPECT_NE(recorded[recorded.size() - 2], "compiles 0") << "the recording run compiled nothing?";
  const std::string text = kjit::test::read_file(manifest);
  EXPECT_NE(text.find("\"attention.decode\""), std::string::npos) << text;

  // 2. Replay into an empty cache.
  const fs::path image = work_ / "image";
  kjit::test::ProcessResult r = kjit::test::run_process(
      {kjit_cli.string(), "precompile", "--manifest", manifest.string(), "--json"},
      {{"KJIT_CACHE_DIR", image.string()}}, work_ / "io");
  ASSERT_EQ(r.code, 0) << r.describe();
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["invalid"].size(), 0u);
  EXPECT_EQ(j["compiled"].get<size_t>(), j["items"].size());
  std::printf("manifest: %zu specializations, precompiled in %.2f s\n", j["items"].size(), j["seconds"].get<double>());

  // 3. Run again there, fail-closed: nothing compiles, every output bit is the same.
  const std::vector<std::string> replayed =
      loop({{"KJIT_CACHE_DIR", image.string()}, {"KJIT_JIT", "off"}}, &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(replayed.size(), recorded.size());
  for (size_t i = 0; i + 2 < recorded.size(); ++i) EXPECT_EQ(replayed[i], recorded[i]) << "case " << i;
  EXPECT_EQ(replayed[replayed.size() - 2], "compiles 0");
  EXPECT_EQ(replayed.back(), "refused 0");

  // 4. And fail-closed in an empty cache refuses, naming the command that builds the kernel.
  const std::vector<std::string> refused =
      loop({{"KJIT_CACHE_DIR", (work_ / "empty").string()}, {"KJIT_JIT", "off"}}, &code);
  EXPECT_NE(code, 0);
  ASSERT_FALSE(refused.empty());
  EXPECT_NE(refused[0].find("kjit compile attention.decode"), std::string::npos) << refused[0];
}

// --- KJIT_ARCH reaches every op ------------------------------------------------------------------

// `kjit selftest` under KJIT_ARCH in an empty cache: every op passes, and every entry it leaves is
// for that target, none for the device's own (sm_90a on an H200). For compute_XY the driver
// JIT-compiles the PTX at load, as it would on a GPU newer than NVRTC.
TEST_F(DeployGpu, KjitArchIsTheTargetOfEveryEntryASelftestLeaves) {
  const fs::path kjit_cli = self_dir().parent_path() / "tools" / "kjit";
  ASSERT_TRUE(fs::exists(kjit_cli)) << kjit_cli << " (build kjit_cli)";
  const kjit::DeviceInfo& info = kjit::device_info(0);
  const std::string sm = std::to_string(info.cc_major) + std::to_string(info.cc_minor);
  for (const std::string arch : {"compute_" + sm, "sm_" + sm}) {
    const fs::path cache = work_ / ("cache-" + arch);
    const std::map<std::string, std::string> env = {{"KJIT_CACHE_DIR", cache.string()}, {"KJIT_ARCH", arch}};
    kjit::test::ProcessResult r = kjit::test::run_process({kjit_cli.string(), "selftest", "--json"}, env, work_ / "io");
    EXPECT_EQ(r.code, 0) << r.describe();
    const nlohmann::json results = nlohmann::json::parse(r.out)["results"];
    EXPECT_FALSE(results.empty()) << r.out;
    for (const nlohmann::json& t : results) EXPECT_TRUE(t["passed"].get<bool>()) << arch << ": " << t.dump();
    r = kjit::test::run_process({kjit_cli.string(), "cache", "ls", "--json"}, env, work_ / "io");
    ASSERT_EQ(r.code, 0) << r.describe();
    const nlohmann::json entries = nlohmann::json::parse(r.out)["entries"];
    EXPECT_FALSE(entries.empty()) << r.out;
    for (const nlohmann::json& e : entries) {
      EXPECT_EQ(e["target"], arch) << e["family"] << " " << e["template_args"];
    }
    std::printf("KJIT_ARCH=%s: %zu selftest checks passed, %zu entries all for %s\n", arch.c_str(), results.size(),
                entries.size(), arch.c_str());
  }
}

// --- a miss during stream capture ---------------------------------------------------------------

class Stream {
 public:
  Stream() { KJIT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }
  ~Stream() { kjit::detail::driver().cuStreamDestroy(stream_); }
  CUstream get() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

kjit::RuntimeConfig fresh_config(const fs::path& dir) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.cache_dir = dir.string();
  c.record_path.clear();
  c.jit = kjit::JitMode::kOn;
  return c;
}

TEST_F(DeployGpu, MissDuringCaptureIsAnErrorAndLeavesTheCaptureIntact) {
  const kjit::detail::Driver& d = kjit::detail::driver();
  Stream stream;
  DecodeSetup s(2, 500, 16, 2, 128, 0, 7);
  const std::pair<CUstreamCaptureMode, const char*> modes[] = {{CU_STREAM_CAPTURE_MODE_GLOBAL, "global"},
                                                                {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, "thread-local"},
                                                                {CU_STREAM_CAPTURE_MODE_RELAXED, "relaxed"}};
  for (const auto& [mode, name] : modes) {
    SCOPED_TRACE(name);
    // A fresh Runtime: its kernel tables and modules are empty, so the call must miss.
    kjit::Runtime rt(fresh_config(work_ / name));
    ASSERT_EQ(d.cuStreamBeginCapture(stream.get(), mode), CUDA_SUCCESS);
    try {
      kjit::attention::decode(s.args, s.ws.get(), s.ws_bytes, stream.get(), rt);
      ADD_FAILURE() << "a miss during capture was served";
    } catch (const kjit::CaptureMiss& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("attention.decode"), std::string::npos) << what;
      EXPECT_NE(what.find("head_dim=128"), std::string::npos) << what;
      EXPECT_NE(what.find("sm_"), std::string::npos) << what;
    }
    CUgraph graph = nullptr;
    EXPECT_EQ(d.cuStreamEndCapture(stream.get(), &graph), CUDA_SUCCESS) << "the capture was invalidated";
    if (graph) d.cuGraphDestroy(graph);
    const kjit::RuntimeStats st = rt.stats();
    EXPECT_EQ(st.compiles + st.disk_hits + st.loads, 0u) << "something was compiled or loaded during the capture";
    EXPECT_EQ(st.refused, 1u);
  }

  // Warmed up outside the capture, the same call captures, and the graph computes the answer.
  kjit::Runtime rt(fresh_config(work_ / "warm"));
  kjit::attention::decode(s.args, s.ws.get(), s.ws_bytes, stream.get(), rt);
  KJIT_CU(cuStreamSynchronize(stream.get()));
  s.out.fill(0xFF);
  ASSERT_EQ(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  kjit::attention::decode(s.args, s.ws.get(), s.ws_bytes, stream.get(), rt);
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(stream.get(), &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuGraphLaunch(exec, stream.get()), CUDA_SUCCESS);
  KJIT_CU(cuStreamSynchronize(stream.get()));
  s.check("graph launch");
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
}

}  // namespace
