// The `kjit` command-line tool, run as a separate process the way users and scripts run it:
// exit statuses, the one-line error rule, --json printing exactly one object on stdout, the
// cache commands against a real cache folder (including a corrupted entry and an unusable
// folder), compile/precompile landing in the cache, and selftest's behaviour with and without
// a GPU. Each test works in its own cache folder.
#include "tests/cli/process.hpp"

#include "cache/entry.hpp"
#include "cache/fallback_log.hpp"
#include "tools/testing/prometheus_text.hpp"

#include <kjit/device.hpp>
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::test {
namespace {

using nlohmann::json;

fs::path kjit_binary() {
#ifdef KJIT_CLI_PATH
  return fs::path(KJIT_CLI_PATH);
#else
  return build_dir() / "tools" / "kjit";
#endif
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kjit_binary()))
        << "the kjit binary is not at " << kjit_binary() << " (build the kjit_cli target)";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    work_ = fresh_dir(std::string(info->test_suite_name()) + "." + info->name());
    cache_dir_ = work_ / "cache";
  }

  /// Runs kjit with `args`, KJIT_CACHE_DIR set to this test's cache (unless `env` sets it).
  ProcessResult kjit(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
    env.emplace("KJIT_CACHE_DIR", cache_dir_.string());
    std::vector<std::string> argv = {kjit_binary().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env, work_ / "io");
  }

  /// Parses stdout as exactly one JSON object (nothing before or after it).
  static json parse_object(const ProcessResult& r) {
    json j;
    try {
      j = json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "stdout is not one JSON value: " << e.what() << '\n' << r.describe();
      return json::object();
    }
    EXPECT_TRUE(j.is_object()) << r.describe();
    return j;
  }

  /// The failure contract: non-zero exit, and stderr is one line "kjit: error: ...".
  static void expect_one_line_error(const ProcessResult& r, const std::string& must_contain) {
    EXPECT_NE(r.code, 0) << r.describe();
    const std::vector<std::string> lines = r.err_lines();
    ASSERT_EQ(lines.size(), 1u) << r.describe();
    EXPECT_EQ(lines[0].rfind("kjit: error: ", 0), 0u) << r.describe();
    EXPECT_NE(lines[0].find(must_contain), std::string::npos)
        << "expected '" << must_contain << "' in the error\n" << r.describe();
  }

  fs::path work_;
  fs::path cache_dir_;
};

/// The family the compile tests use: rotary when shipped (it compiles fastest), else the first.
const Family& test_family() {
  for (const Family& f : families()) {
    if (f.name == "rotary" && !f.defaults.empty()) return f;
  }
  for (const Family& f : families()) {
    if (!f.defaults.empty()) return f;
  }
  throw std::runtime_error("no family has default specializations");
}

/// A cubin target the family compiles for.
std::string test_arch(const Family& f) { return f.min_sm <= 90 ? "sm_90a" : "sm_100a"; }

std::vector<std::string> param_words(const ParamMap& params) {
  std::vector<std::string> words;
  for (const auto& [k, v] : params) words.push_back(k + "=" + v);
  return words;
}

std::vector<std::string> compile_args(const Family& f, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"compile", f.name};
  for (const std::string& w : param_words(f.defaults.front())) args.push_back(w);
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

bool is_hex32(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

/// Where the cache under `cache_dir` keeps the entry of `key` (32 hex digits).
fs::path entry_path(const fs::path& cache_dir, const std::string& key) {
  return cache_dir / "v1" / key.substr(0, 2) / (key + ".kjit");
}

/// The entry in the file at `path`, or nullopt when it does not decode.
std::optional<cache::Entry> read_entry(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  return cache::decode(bytes, nullptr, nullptr);
}

// --- general ----------------------------------------------------------------------------------

TEST_F(CliTest, VersionAndHelp) {
  ProcessResult r = kjit({"--version"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out.rfind("kjit ", 0), 0u) << r.describe();
  EXPECT_NE(r.out.find_first_of("0123456789"), std::string::npos) << r.describe();

  r = kjit({"--help"});
  EXPECT_EQ(r.code, 0) << r.describe();
  for (const char* command : {"devices", "kernels", "compile", "precompile", "cache", "selftest"}) {
    EXPECT_NE(r.out.find(command), std::string::npos) << command << '\n' << r.describe();
  }
}

TEST_F(CliTest, UsageErrorsAreOneLine) {
  expect_one_line_error(kjit({}), "subcommand");
  expect_one_line_error(kjit({"frobnicate"}), "frobnicate");
  expect_one_line_error(kjit({"cache", "frob"}), "frob");
  expect_one_line_error(kjit({"devices", "--bogus"}), "--bogus");
  expect_one_line_error(kjit({"cache"}), "subcommand");
  expect_one_line_error(kjit({"precompile", "-j", "0"}), "-j");
  expect_one_line_error(kjit({"compile", "rotary", "--emit", "sass"}), "sass");
  // Usage errors keep the --json contract too.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"compile", "rotary", "--emit", "sass", "--json"}, {"frobnicate", "--json"},
           {"cache", "ls", "--bogus", "--json"}}) {
    const ProcessResult r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_TRUE(parse_object(r).contains("error")) << r.describe();
  }
}

TEST_F(CliTest, UsageErrorsNameEverythingAndStayShort) {
  // --version keeps the --json contract.
  ProcessResult r = kjit({"--version", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(r)["version"].get<std::string>().find_first_of("0123456789"), 0u) << r.describe();
  // The -j range reads as a range.
  expect_one_line_error(kjit({"precompile", "-j", "0"}), "not in range 1 to 4096");
  // An empty value is refused, not read as the default.
  expect_one_line_error(kjit({"cache", "prune", "--max-bytes", ""}), "--max-bytes");
  expect_one_line_error(kjit({"precompile", "--arch", ""}), "--arch");
  expect_one_line_error(kjit({"compile", "rotary", "-o", ""}), "--output");
  // Every missing parameter is named at once.
  const Family& f = test_family();
  ASSERT_GE(f.params.size(), 2u);
  r = kjit({"compile", f.name});
  expect_one_line_error(r, "missing parameters");
  for (const FamilyParam& p : f.params) EXPECT_NE(r.err.find(p.name), std::string::npos) << p.name << '\n' << r.describe();
  // A huge argument quoted back is cut.
  r = kjit({"compile", f.name, f.params.front().name + "=" + std::string(5000, '9')});
  expect_one_line_error(r, "more characters)");
  EXPECT_LT(r.err.size(), 1400u) << r.describe();
}

// --- devices, kernels ---------------------------------------------------------------------------

TEST_F(CliTest, DevicesReportsTheDriverOrItsAbsence) {
  ProcessResult r = kjit({"devices"});
  EXPECT_EQ(r.code, 0) << r.describe();
  if (!driver_available()) {
    EXPECT_NE(r.out.find("no CUDA driver"), std::string::npos) << r.describe();
  } else {
    EXPECT_NE(r.out.find("CUDA driver"), std::string::npos) << r.describe();
    for (int i = 0; i < device_count(); ++i) {
      EXPECT_NE(r.out.find(device_info(i).name), std::string::npos) << r.describe();
      EXPECT_NE(r.out.find(device_info(i).target().str()), std::string::npos) << r.describe();
    }
  }

  r = kjit({"devices", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  const json j = parse_object(r);
  ASSERT_TRUE(j.contains("devices")) << r.describe();
  ASSERT_EQ(j["devices"].size(), static_cast<size_t>(device_count())) << r.describe();
  for (int i = 0; i < device_count(); ++i) {
    EXPECT_EQ(j["devices"][i]["name"], device_info(i).name);
    EXPECT_EQ(j["devices"][i]["target"], device_info(i).target().str());
    EXPECT_EQ(j["devices"][i]["sm_count"], device_info(i).sm_count);
  }
  if (!driver_available()) {
    EXPECT_TRUE(j["driver"].is_null()) << r.describe();
  }
}

TEST_F(CliTest, KernelsListsEveryFamily) {
  ProcessResult r = kjit({"kernels"});
  EXPECT_EQ(r.code, 0) << r.describe();
  for (const Family& f : families()) {
    EXPECT_NE(r.out.find(f.name), std::string::npos) << f.name << '\n' << r.describe();
    for (const FamilyParam& p : f.params) {
      EXPECT_NE(r.out.find(p.name), std::string::npos) << p.name << '\n' << r.describe();
    }
  }

  r = kjit({"kernels", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  const json j = parse_object(r);
  ASSERT_EQ(j["families"].size(), families().size()) << r.describe();
  for (size_t i = 0; i < families().size(); ++i) {
    const Family& f = families()[i];
    const json& jf = j["families"][i];
    EXPECT_EQ(jf["name"], f.name);
    EXPECT_EQ(jf["min_sm"], f.min_sm);
    EXPECT_EQ(jf["default_count"], f.defaults.size());
    ASSERT_EQ(jf["params"].size(), f.params.size());
    for (size_t p = 0; p < f.params.size(); ++p) {
      EXPECT_EQ(jf["params"][p]["name"], f.params[p].name);
      EXPECT_EQ(jf["params"][p]["values"].get<std::vector<std::string>>(), f.params[p].texts());
      EXPECT_EQ(jf["params"][p]["performance_only"].get<bool>(), f.params[p].performance_only);
    }
    EXPECT_EQ(jf["points"], f.enumerate().size());
  }
}

TEST_F(CliTest, KernelsPointsListTheSpaceForATarget) {
  const Family& gemm = family("fp8.gemm");
  const Target sm89 = Target::parse("sm_89");
  ProcessResult r = kjit({"kernels", "--points", "--family", "fp8.gemm", "--arch", "sm_89", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  const json j = parse_object(r);
  ASSERT_EQ(j["points"].size(), gemm.enumerate(&sm89).size()) << r.describe();
  for (const json& p : j["points"]) {
    EXPECT_EQ(p["target"], "sm_89");
    EXPECT_EQ(p["params"]["impl"], "mma");  // the wgmma kernel needs sm_90a
    EXPECT_NO_THROW(gemm.parse(p["params"].get<ParamMap>()));
  }
  r = kjit({"kernels", "--points", "--family", "attention.prefill_sm90", "--arch", "sm_90a"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "sm_90a attention.prefill_sm90 head_dim=64\nsm_90a attention.prefill_sm90 head_dim=128\n");
  // --family and --arch select points; --defaults belongs to the family listing.
  r = kjit({"kernels", "--family", "rotary"});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("add --points"), std::string::npos) << r.describe();
  r = kjit({"kernels", "--points", "--defaults"});
  EXPECT_EQ(r.code, 2) << r.describe();
  r = kjit({"kernels", "--points", "--family", "no.such"});
  EXPECT_NE(r.code, 0) << r.describe();
  EXPECT_NE(r.err.find("unknown kernel family 'no.such'"), std::string::npos) << r.describe();
}

// --- compile ------------------------------------------------------------------------------------

TEST_F(CliTest, CompileLandsInTheCacheAndTheSecondRunIsCached) {
  const Family& f = test_family();
  const std::string arch = test_arch(f);
  const ProgramSpec spec = f.spec(f.defaults.front());
  // The key the library computes for the same specialization, in this process.
  const std::string expected_key = Runtime::global().key(spec, Target::parse(arch));

  ProcessResult r = kjit(compile_args(f, {"--arch", arch, "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["compiled"], 1) << r.describe();
  EXPECT_EQ(j["cached"], 0) << r.describe();
  EXPECT_EQ(j["failed"], 0) << r.describe();
  EXPECT_EQ(j["key"], expected_key) << r.describe();
  EXPECT_EQ(j["target"], arch);
  ASSERT_EQ(j["kernels"].size(), spec.name_expressions.size()) << r.describe();
  for (size_t i = 0; i < spec.name_expressions.size(); ++i) {
    const json& k = j["kernels"][i];
    EXPECT_EQ(k["name_expression"], spec.name_expressions[i]);
    EXPECT_FALSE(k["lowered_name"].get<std::string>().empty());
    // ptxas reports registers for every kernel it compiled; -1 would mean the log was lost.
    EXPECT_GT(k["registers"].get<int>(), 0) << r.describe();
    EXPECT_GE(k["spill_bytes"].get<int>(), 0) << r.describe();
    EXPECT_GE(k["static_smem"].get<int>(), 0) << r.describe();
  }

  r = kjit(compile_args(f, {"--arch", arch, "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["compiled"], 0) << r.describe();
  EXPECT_EQ(j["cached"], 1) << r.describe();
  EXPECT_EQ(j["key"], expected_key);
  EXPECT_EQ(j["origin"], "disk");

  // Human output names the key and says it was cached.
  r = kjit(compile_args(f, {"--arch", arch}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find(expected_key), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("cached"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find(spec.name_expressions.front()), std::string::npos) << r.describe();

  r = kjit({"cache", "ls", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  ASSERT_EQ(j["entries"].size(), 1u) << r.describe();
  EXPECT_EQ(j["entries"][0]["key"], expected_key);
  EXPECT_EQ(j["entries"][0]["family"], spec.family);
  EXPECT_EQ(j["entries"][0]["target"], arch);
}

TEST_F(CliTest, CompileEmitsCubinPtxAndSource) {
  const Family& f = test_family();
  const std::string arch = test_arch(f);
  const ProgramSpec spec = f.spec(f.defaults.front());

  const fs::path cubin = work_ / "out.cubin";
  ProcessResult r = kjit(compile_args(f, {"--arch", arch, "-o", cubin.string()}));
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string cubin_bytes = read_file(cubin);
  ASSERT_GT(cubin_bytes.size(), 4u);
  EXPECT_EQ(cubin_bytes.substr(0, 4), std::string("\x7f" "ELF")) << "a cubin is an ELF file";

  const fs::path ptx = work_ / "out.ptx";
  r = kjit(compile_args(f, {"--arch", arch, "--emit", "ptx", "-o", ptx.string(), "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["compiled"], 1) << r.describe();
  const std::string ptx_text = read_file(ptx);
  EXPECT_NE(ptx_text.find(".version"), std::string::npos);
  EXPECT_NE(ptx_text.find(".entry"), std::string::npos);
  EXPECT_EQ(ptx_text.find('\0'), std::string::npos) << "PTX text holds no NUL (ptxas rejects it)";
  EXPECT_EQ(j["target"].get<std::string>().rfind("compute_", 0), 0u) << r.describe();
  EXPECT_NE(j["key"], Runtime::global().key(spec, Target::parse(arch)))
      << "PTX and cubin of one spec must not share a key";

  // PTX without -o goes to stdout (alone); the report moves to stderr.
  r = kjit(compile_args(f, {"--arch", arch, "--emit", "ptx"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, ptx_text);
  EXPECT_NE(r.err.find("cached"), std::string::npos) << r.describe();

  // Source: the kernel text itself, and nothing compiled.
  r = kjit(compile_args(f, {"--arch", arch, "--emit", "source"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("__global__"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("#include"), std::string::npos) << r.describe();
  r = kjit(compile_args(f, {"--arch", arch, "--emit", "source", "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["compiled"], 0);
  EXPECT_EQ(j["key"], Runtime::global().key(spec, Target::parse(arch)));
  EXPECT_NE(j["source"].get<std::string>().find("__global__"), std::string::npos);

  r = kjit({"cache", "stats", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(r)["entries"], 2) << "one cubin and one PTX entry\n" << r.describe();
}

TEST_F(CliTest, CompileErrorsNameTheProblem) {
  const Family& f = test_family();
  expect_one_line_error(kjit({"compile", "no_such_family"}), "no_such_family");
  expect_one_line_error(kjit({"compile", f.name, "not_a_pair"}), "not_a_pair");
  expect_one_line_error(kjit({"compile", f.name, "bogus_param=1"}), "bogus_param");
  expect_one_line_error(kjit({"compile", f.name, "--arch", "sm_9x"}), "sm_9x");

  ParamMap bad = f.defaults.front();
  const std::string param = f.params.front().name;
  bad[param] = "12345";
  std::vector<std::string> args = {"compile", f.name};
  for (const std::string& w : param_words(bad)) args.push_back(w);
  expect_one_line_error(kjit(args), param);

  const std::string unwritable = (work_ / "no-such-dir" / "out.cubin").string();
  expect_one_line_error(kjit(compile_args(f, {"-o", unwritable})), unwritable);
  expect_one_line_error(kjit(compile_args(f, {"--arch", "compute_90"})), "--emit ptx");

  // Below the family's minimum SM.
  expect_one_line_error(kjit(compile_args(f, {"--arch", "sm_75"})), "sm_75");

  // With --json the failure is still one object on stdout.
  ProcessResult r = kjit({"compile", "no_such_family", "--json"});
  EXPECT_NE(r.code, 0);
  const json j = parse_object(r);
  EXPECT_NE(j["error"].get<std::string>().find("no_such_family"), std::string::npos);
}

TEST_F(CliTest, CompileFailuresReportTheNvrtcLog) {
  // A live kernel folder (KJIT_KERNEL_DIR) whose copy of the family's source does not compile.
  const Family& f = test_family();
  const ProgramSpec spec = f.spec(f.defaults.front());
  const std::string source_dir = cmake_cache_value("kjit_SOURCE_DIR");
  ASSERT_FALSE(source_dir.empty());
  const fs::path kernels = work_ / "kernel_sources";
  fs::copy(fs::path(source_dir) / "kernel_sources", kernels, fs::copy_options::recursive);
  std::ofstream(kernels / spec.source_name, std::ios::app) << "\nthis is not C++;\n";
  const std::map<std::string, std::string> env = {{"KJIT_KERNEL_DIR", kernels.string()}};
  const std::string arch = test_arch(f);

  ProcessResult r = kjit(compile_args(f, {"--arch", arch}), env);
  EXPECT_EQ(r.code, 1) << r.describe();
  const std::vector<std::string> lines = r.err_lines();
  ASSERT_GE(lines.size(), 2u) << "the error line, then the log\n" << r.describe();
  EXPECT_EQ(lines[0].rfind("kjit: error: ", 0), 0u) << r.describe();
  EXPECT_EQ(lines[0].find("kjit: error: kjit:"), std::string::npos) << "no doubled prefix\n" << r.describe();
  EXPECT_NE(lines[0].find(spec.source_name), std::string::npos) << r.describe();
  for (size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].rfind("  ", 0), 0u) << r.describe();
  EXPECT_NE(r.err.find("this is not C++"), std::string::npos) << "the NVRTC log\n" << r.describe();

  r = kjit(compile_args(f, {"--arch", arch, "--json"}), env);
  EXPECT_EQ(r.code, 1) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["failed"], 1) << r.describe();
  EXPECT_EQ(j["compiled"], 0) << r.describe();
  EXPECT_NE(j["log"].get<std::string>().find("this is not C++"), std::string::npos) << r.describe();

  r = kjit({"precompile", "--family", f.name, "--arch", "sm_89", "-j", "2", "--json"}, env);
  EXPECT_EQ(r.code, 1) << "precompile fails when any compile fails\n" << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["failed"], f.defaults.size()) << r.describe();
  EXPECT_EQ(j["compiled"], 0) << r.describe();
  for (const json& item : j["items"]) {
    EXPECT_EQ(item["status"], "failed") << item.dump();
    EXPECT_NE(item["error"].get<std::string>().find(spec.source_name), std::string::npos) << item.dump();
  }
  EXPECT_NE(r.err.find("this is not C++"), std::string::npos) << "the first failure's log\n" << r.describe();

  // Nothing failed was published; the embedded sources still compile into the same cache.
  EXPECT_EQ(parse_object(kjit({"cache", "stats", "--json"}))["entries"], 0);
  r = kjit(compile_args(f, {"--arch", arch, "--json"}));
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(r)["compiled"], 1) << r.describe();
}

// --- precompile ---------------------------------------------------------------------------------

TEST_F(CliTest, PrecompileTwiceCompilesNothingTheSecondTime) {
  // The family with the fewest defaults keeps this quick; no --arch: the machine's default set.
  const Family* f = &families().front().get();
  for (const Family& g : families()) {
    if (!g.defaults.empty() && (f->defaults.empty() || g.defaults.size() < f->defaults.size())) f = &g;
  }
  std::vector<std::string> expected_targets;
  for (int i = 0; i < device_count(); ++i) {
    const std::string t = device_info(i).target().str();
    if (std::find(expected_targets.begin(), expected_targets.end(), t) == expected_targets.end()) {
      expected_targets.push_back(t);
    }
  }
  if (expected_targets.empty()) expected_targets = {"sm_90a", "sm_89"};
  size_t expected_items = 0;
  for (const std::string& t : expected_targets) {
    if (Target::parse(t).sm() >= f->min_sm) expected_items += f->defaults.size();
  }

  ProcessResult r = kjit({"precompile", "--family", f->name, "-j", "2", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["targets"].get<std::vector<std::string>>(), expected_targets) << r.describe();
  EXPECT_EQ(j["compiled"], expected_items) << r.describe();
  EXPECT_EQ(j["cached"], 0) << r.describe();
  EXPECT_EQ(j["failed"], 0) << r.describe();
  ASSERT_EQ(j["items"].size(), expected_items) << r.describe();
  std::set<std::string> keys;
  for (const json& item : j["items"]) {
    EXPECT_EQ(item["status"], "compiled") << item.dump();
    EXPECT_TRUE(is_hex32(item["key"])) << item.dump();
    keys.insert(item["key"]);
    // Each item's key is the key of the family's spec, as the ops would ask for it.
    ParamMap params;
    for (const auto& [k, v] : item["params"].items()) params[k] = v.get<std::string>();
    EXPECT_EQ(item["key"], Runtime::global().key(f->spec(params), Target::parse(item["target"].get<std::string>())));
  }
  EXPECT_EQ(keys.size(), expected_items) << "every default specialization is distinct";
  // stderr is not a terminal here: one progress line per item.
  size_t progress_lines = 0;
  for (const std::string& line : r.err_lines()) progress_lines += line.rfind("[", 0) == 0 ? 1 : 0;
  EXPECT_EQ(progress_lines, expected_items) << r.describe();

  r = kjit({"precompile", "--family", f->name, "-j", "2", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["compiled"], 0) << r.describe();
  EXPECT_EQ(j["cached"], expected_items) << r.describe();
  EXPECT_EQ(j["failed"], 0) << r.describe();

  // Human summary.
  r = kjit({"precompile", "--family", f->name});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("0 compiled, " + std::to_string(expected_items) + " cached, 0 failed"),
            std::string::npos)
      << r.describe();

  r = kjit({"cache", "stats", "--json"});
  EXPECT_EQ(parse_object(r)["entries"], expected_items) << r.describe();
}

TEST_F(CliTest, PrecompileSkipsFamiliesAboveTheTarget) {
  // sm_75 is below every shipped family's minimum (sm_80 at the lowest): nothing to compile.
  ProcessResult r = kjit({"precompile", "--arch", "sm_75", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const json j = parse_object(r);
  // Every default point of a family above the target is counted under its own reason, once per
  // distinct reason (fp8.gemm: its wgmma points need sm_90a, its mma.sync points sm_89).
  size_t left_out = 0, items = 0;
  std::set<std::string> reasons;
  const kjit::Target sm75 = kjit::Target::parse("sm_75");
  for (const Family& f : families()) {
    if (f.min_sm <= 75) {
      items += f.defaults.size();
      continue;
    }
    left_out += f.defaults.size();
    for (const kjit::ParamMap& d : f.defaults) reasons.insert(f.name + ": " + f.unsupported_reason(d, sm75));
  }
  size_t counted = 0;
  for (const json& s : j["skipped"]) counted += s["count"].get<size_t>();
  EXPECT_EQ(counted, left_out) << r.describe();
  EXPECT_EQ(j["skipped"].size(), reasons.size()) << r.describe();
  EXPECT_EQ(j["items"].size(), items) << r.describe();
  EXPECT_EQ(j["failed"], 0) << r.describe();
  expect_one_line_error(kjit({"precompile", "--family", "no_such_family"}), "no_such_family");
}

TEST_F(CliTest, PrecompileNamesEachSkipReasonOnceWithItsCount) {
  // Off sm_90a every default point of a wgmma family is left out for the same reason: one line
  // (and one --json entry) with the count, not one per point.
  const Family& f = family("attention.prefill_sm90");
  ASSERT_GT(f.defaults.size(), 1u);
  ProcessResult r = kjit({"precompile", "--arch", "sm_90", "--family", f.name, "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const json j = parse_object(r);
  ASSERT_EQ(j["skipped"].size(), 1u) << r.describe();
  EXPECT_EQ(j["skipped"][0]["count"], f.defaults.size()) << r.describe();
  EXPECT_EQ(j["items"].size(), 0u) << r.describe();
  size_t lines = 0;
  for (const std::string& line : r.err_lines()) lines += line.rfind("skipping ", 0) == 0;
  EXPECT_EQ(lines, 1u) << r.describe();
  EXPECT_NE(r.err.find("skipping " + f.name + " (" + std::to_string(f.defaults.size()) + " points) for sm_90: "),
            std::string::npos)
      << r.describe();
  // Below a family's floor each default still counts under its own reason: fp8.gemm on sm_80
  // leaves out its wgmma points (sm_90a) and its mma.sync points (its sm_89 floor).
  const Family& gemm = family("fp8.gemm");
  r = kjit({"precompile", "--arch", "sm_80", "--family", gemm.name, "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const json g = parse_object(r);
  size_t counted = 0;
  for (const json& s : g["skipped"]) counted += s["count"].get<size_t>();
  EXPECT_EQ(counted, gemm.defaults.size()) << r.describe();
  EXPECT_NE(r.err.find("fp8.gemm needs sm_89 or newer"), std::string::npos) << r.describe();
}

// --- cache --------------------------------------------------------------------------------------

TEST_F(CliTest, CacheCommandsSeeACorruptEntryAndPruneIt) {
  const Family& f = test_family();
  const std::string arch = test_arch(f);
  ProcessResult r = kjit(compile_args(f, {"--arch", arch}));
  ASSERT_EQ(r.code, 0) << r.describe();
  r = kjit(compile_args(f, {"--arch", arch, "--emit", "ptx", "-o", (work_ / "x.ptx").string()}));
  ASSERT_EQ(r.code, 0) << r.describe();

  r = kjit({"cache", "ls", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  ASSERT_EQ(j["entries"].size(), 2u) << r.describe();
  for (const json& e : j["entries"]) EXPECT_TRUE(e["ok"].get<bool>()) << e.dump();
  r = kjit({"cache", "ls"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find(f.spec(f.defaults.front()).family), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("2 entries"), std::string::npos) << r.describe();

  r = kjit({"cache", "verify", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["ok"], 2);
  EXPECT_EQ(j["bad"], 0);

  // Flip one payload byte of the first entry: its checksum no longer matches.
  r = kjit({"cache", "ls", "--json"});
  const std::string victim = parse_object(r)["entries"][0]["path"];
  {
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file) << victim;
    file.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(file.tellg());
    ASSERT_GT(size, 64);
    file.seekg(size - 8);
    char c = 0;
    file.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    file.seekp(size - 8);
    file.write(&c, 1);
  }
  r = kjit({"cache", "verify", "--json"});
  EXPECT_EQ(r.code, 1) << "verify fails when an entry is bad\n" << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["ok"], 1) << r.describe();
  EXPECT_EQ(j["bad"], 1) << r.describe();
  ASSERT_EQ(j["bad_paths"].size(), 1u) << r.describe();
  EXPECT_NE(j["bad_paths"][0].get<std::string>().find(victim), std::string::npos) << r.describe();
  r = kjit({"cache", "verify"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(victim), std::string::npos) << r.describe();
  r = kjit({"cache", "ls", "--json"});
  j = parse_object(r);
  size_t bad_listed = 0;
  for (const json& e : j["entries"]) bad_listed += e["ok"].get<bool>() ? 0 : 1;
  EXPECT_EQ(bad_listed, 1u) << r.describe();
  r = kjit({"cache", "stats", "--json"});
  EXPECT_EQ(parse_object(r)["bad"], 1) << r.describe();

  r = kjit({"cache", "prune", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["removed"], 1) << r.describe();
  EXPECT_EQ(j["entries"], 1) << r.describe();
  EXPECT_FALSE(fs::exists(victim));
  r = kjit({"cache", "verify", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(r)["bad"], 0);

  // The corrupt entry was a miss: compiling its spec again rebuilds it.
  r = kjit(compile_args(f, {"--arch", arch, "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  r = kjit(compile_args(f, {"--arch", arch, "--emit", "ptx", "-o", (work_ / "x.ptx").string(), "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(kjit({"cache", "stats", "--json"}))["entries"], 2);

  // A cap below two entries: LRU eviction leaves at most the cap.
  r = kjit({"cache", "stats", "--json"});
  const uint64_t total = parse_object(r)["bytes"];
  const uint64_t cap = total - 1;
  r = kjit({"cache", "prune", "--max-bytes", std::to_string(cap), "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_GE(j["removed"].get<int>(), 1) << r.describe();
  EXPECT_LE(j["bytes"].get<uint64_t>(), cap) << r.describe();
  expect_one_line_error(kjit({"cache", "prune", "--max-bytes", "lots"}), "lots");

  r = kjit({"cache", "clear", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_GE(parse_object(r)["removed"].get<int>(), 1);
  r = kjit({"cache", "ls", "--json"});
  EXPECT_EQ(parse_object(r)["entries"].size(), 0u) << r.describe();
  r = kjit({"cache", "stats"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find(cache_dir_.string()), std::string::npos) << r.describe();
}

TEST_F(CliTest, CacheStatsAlignsItsCountColumn) {
  // A family name longer than any fixed column (attention.decode_merge: 22 characters) beside a
  // short one: every count of the family and target breakdowns starts in one column.
  for (const char* name : {"attention.decode_merge", "rotary"}) {
    const ProcessResult r = kjit(compile_args(family(name), {"--arch", "sm_80", "--json"}));
    ASSERT_EQ(r.code, 0) << r.describe();
  }
  const ProcessResult r = kjit({"cache", "stats"});
  ASSERT_EQ(r.code, 0) << r.describe();
  std::istringstream in(r.out);
  std::set<size_t> count_columns;
  size_t rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("family ", 0) != 0 && line.rfind("target ", 0) != 0) continue;
    ++rows;
    count_columns.insert(line.find_last_of(' ') + 1);
  }
  EXPECT_EQ(rows, 3u) << r.out;  // two families, one target
  EXPECT_EQ(count_columns.size(), 1u) << r.out;
}

TEST_F(CliTest, PrecompileFailsWhenTheCapCannotHoldTheSet) {
  const Family& f = test_family();
  const std::vector<std::string> args = {"precompile", "--family", f.name, "--arch", test_arch(f)};
  ProcessResult r = kjit(args, {{"KJIT_CACHE_MAX_BYTES", "4K"}});
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_NE(r.err.find("KJIT_CACHE_MAX_BYTES"), std::string::npos) << r.describe();
  // A warm cache (filled without a cap): nothing is published, so nothing is evicted, but the set
  // still does not fit the cap and the next publish would evict it: the same failure.
  ASSERT_EQ(kjit(args).code, 0);
  r = kjit(args, {{"KJIT_CACHE_MAX_BYTES", "4K"}});
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_NE(r.err.find("more than the cache's byte cap"), std::string::npos) << r.describe();
}

TEST_F(CliTest, JsonSurvivesArgumentsThatAreNotUtf8) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"compile", "\xff", "--json"}, {"precompile", "--family", "\xfe\xff", "--json"},
           {"compile", "rotary", "--arch", "\xff", "--json"}}) {
    const ProcessResult r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_TRUE(parse_object(r).contains("error")) << r.describe();
  }
}

TEST_F(CliTest, CacheExportAndImportShipACompiledCache) {
  const Family& f = test_family();
  ASSERT_EQ(kjit(compile_args(f, {"--arch", test_arch(f)})).code, 0);
  const std::string bundle = (work_ / "cache.kjb").string();
  ProcessResult r = kjit({"cache", "export", bundle, "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(r)["entries"], 1);
  // Into an empty cache: imported, then found; a second import finds it present.
  const std::map<std::string, std::string> other = {{"KJIT_CACHE_DIR", (work_ / "other").string()}};
  r = kjit({"cache", "import", bundle, "--json"}, other);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(parse_object(r)["imported"], 1);
  r = kjit({"cache", "import", bundle, "--json"}, other);
  EXPECT_EQ(parse_object(r)["present"], 1) << r.describe();
  r = kjit(compile_args(f, {"--arch", test_arch(f), "--json"}), other);
  EXPECT_EQ(parse_object(r)["cached"], 1) << r.describe();  // served from the imported entry
  // A bundle filtered to another target holds nothing of it.
  r = kjit({"cache", "export", (work_ / "none.kjb").string(), "--arch", "sm_80", "--family", "attention.decode", "--json"});
  EXPECT_EQ(parse_object(r)["entries"], 0) << r.describe();
  // Damaged: the entry is refused (exit 1, a warning); truncated or foreign: one-line error.
  std::string bytes;
  {
    std::ifstream in(bundle, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string damaged = bytes;
  damaged[damaged.size() - 5] ^= 0x40;
  std::ofstream((work_ / "damaged.kjb").string(), std::ios::binary) << damaged;
  r = kjit({"cache", "import", (work_ / "damaged.kjb").string()}, {{"KJIT_CACHE_DIR", (work_ / "third").string()}});
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_NE(r.err.find("checksum"), std::string::npos) << r.describe();
  std::ofstream((work_ / "short.kjb").string(), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_one_line_error(kjit({"cache", "import", (work_ / "short.kjb").string()}), "truncated");
  expect_one_line_error(kjit({"cache", "import", (work_ / "nope.kjb").string()}), "nope.kjb");
}

TEST_F(CliTest, TuneReportRefusesAWinnerThatNamesNoCandidate) {
  // Issue 26, item 3: this report crashed `kjit tune report` (rc 139).
  const fs::path report = work_ / "report.json";
  std::ofstream(report) << R"({"op":"decode","shapes":[{"shape":{"batch":"8"},"winner":7,"candidates":[]}]})";
  for (const bool as_json : {false, true}) {
    std::vector<std::string> args = {"tune", "report", report.string()};
    if (as_json) args.push_back("--json");
    const ProcessResult r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    if (as_json) {
      EXPECT_NE(parse_object(r).value("error", "").find("shapes[0].winner"), std::string::npos) << r.describe();
    } else {
      expect_one_line_error(r, report.string() + ": shapes[0].winner = 7 names no candidate");
    }
  }
}

TEST_F(CliTest, TuneReportRefusesAnOpKjitTuneDoesNotCover) {
  // A report naming an unknown op (or none) was printed as if kjit tune had measured it.
  const fs::path report = work_ / "report.json";
  const std::string shapes = R"("shapes":[{"shape":{"batch":"8"},"winner":0,"candidates":[{"index":0,"us":1}]}])";
  std::ofstream(report) << R"({"op":"banana",)" + shapes + "}";
  ProcessResult r = kjit({"tune", "report", report.string()});
  EXPECT_EQ(r.code, 2) << r.describe();
  expect_one_line_error(r, report.string() + ": unknown op 'banana' (kjit tune covers: ");
  for (const char* known : {"decode", "fp8_gemm", "swa_decode"}) EXPECT_NE(r.err.find(known), std::string::npos) << r.describe();
  std::ofstream(report, std::ios::trunc) << "{" + shapes + "}";
  r = kjit({"tune", "report", report.string()});
  EXPECT_EQ(r.code, 2) << r.describe();
  expect_one_line_error(r, report.string() + ": unknown op '' (kjit tune covers: ");
  // A known op's report still prints.
  std::ofstream(report, std::ios::trunc) << R"({"op":"decode",)" + shapes + "}";
  r = kjit({"tune", "report", report.string()});
  EXPECT_EQ(r.code, 0) << r.describe();
}

TEST_F(CliTest, TuneFilesThatAreNoRegularFilesAreRefusedNotRead) {
  // Reading a FIFO blocks until a writer comes: `tune report` and `tune --shapes` waited forever.
  const fs::path fifo = work_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  expect_one_line_error(kjit({"tune", "report", fifo.string()}),
                        "tune report " + fifo.string() + " is not a regular file (a FIFO, socket or device)");
  expect_one_line_error(kjit({"tune", "decode", "--shapes", fifo.string()}),
                        "shapes file " + fifo.string() + " is not a regular file (a FIFO, socket or device)");
  expect_one_line_error(kjit({"tune", "report", work_.string()}), "tune report " + work_.string() + " is a folder");
  expect_one_line_error(kjit({"tune", "report", (work_ / "nope.json").string()}),
                        "cannot read tune report " + (work_ / "nope.json").string() + ": ");
}

/// Writes a copy of `e` under a key of its own, as if built by NVRTC `nvrtc` with CUDA headers
/// `headers`, into the cache at `cache_dir`. Returns the file's path.
fs::path plant_entry(const fs::path& cache_dir, cache::Entry e, uint64_t salt, const std::string& nvrtc,
                     const std::string& headers) {
  e.key.lo ^= salt;
  e.meta.nvrtc_version = nvrtc;
  e.meta.cuda_headers_version = headers;
  const std::string hex = e.key.hex();
  const fs::path path = cache_dir / ("v" + std::to_string(cache::kFormatVersion)) / hex.substr(0, 2) / (hex + ".kjit");
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << cache::encode(e);
  return path;
}

TEST_F(CliTest, CachePruneRemovesEntriesOfOtherToolkits) {
  const Family& f = test_family();
  ProcessResult r = kjit(compile_args(f, {"--arch", test_arch(f), "--json"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string key = parse_object(r)["key"];
  const fs::path current = entry_path(cache_dir_, key);
  std::optional<cache::Entry> e = read_entry(current);
  ASSERT_TRUE(e.has_value()) << current;
  const std::string nvrtc = e->meta.nvrtc_version;
  const std::string headers = e->meta.cuda_headers_version;

  // Plain prune: bad entries and other toolkits' entries go, this toolkit's stay.
  const fs::path old_nvrtc = plant_entry(cache_dir_, *e, 1, "12.4", headers);
  const fs::path old_headers = plant_entry(cache_dir_, *e, 2, nvrtc, "12040");
  const fs::path garbage = plant_entry(cache_dir_, *e, 3, nvrtc, headers);
  std::ofstream(garbage, std::ios::binary | std::ios::trunc) << "garbage";
  r = kjit({"cache", "prune", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["removed"], 3) << r.describe();
  EXPECT_EQ(j["removed_stale"], 2) << r.describe();
  EXPECT_EQ(j["removed_bad"], 1) << r.describe();
  EXPECT_EQ(j["toolkit"]["nvrtc_version"], nvrtc) << r.describe();
  EXPECT_EQ(j["toolkit"]["cuda_headers_version"], headers) << r.describe();
  EXPECT_TRUE(fs::exists(current));
  EXPECT_FALSE(fs::exists(old_nvrtc));
  EXPECT_FALSE(fs::exists(old_headers));
  EXPECT_FALSE(fs::exists(garbage));

  // --stale: only other toolkits' entries, never a bad one; the count is said in words too.
  plant_entry(cache_dir_, *e, 4, "12.4", headers);
  std::ofstream(plant_entry(cache_dir_, *e, 5, nvrtc, headers), std::ios::binary | std::ios::trunc) << "garbage";
  r = kjit({"cache", "prune", "--stale"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("removed 1 entry (0 bad, 1 of other toolkits"), std::string::npos) << r.describe();
  r = kjit({"cache", "verify", "--json"});
  EXPECT_EQ(parse_object(r)["bad"], 1) << r.describe();
  EXPECT_EQ(parse_object(r)["ok"], 1) << r.describe();
  expect_one_line_error(kjit({"cache", "prune", "--stale", "--max-bytes", "1M"}), "--stale");
}

TEST_F(CliTest, InspectingAMissingCacheCreatesNothing) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"cache", "ls"}, {"cache", "stats"}, {"cache", "verify"}, {"cache", "stats", "--json"},
           {"cache", "prune"}, {"cache", "clear"}}) {
    const ProcessResult r = kjit(args);
    EXPECT_EQ(r.code, 0) << r.describe();
    EXPECT_FALSE(fs::exists(cache_dir_)) << r.describe();
  }
  const json j = parse_object(kjit({"cache", "stats", "--json"}));
  EXPECT_EQ(j["entries"], 0);
  EXPECT_EQ(j["exists"], false);
}

TEST_F(CliTest, UnusableCacheDirFailsLoudlyNamingThePath) {
  // Tests run as root, so permissions do not stop writes: a folder below a regular file can
  // never be created.
  const fs::path file = work_ / "regular-file";
  std::ofstream(file) << "not a folder";
  const std::string bad = (file / "cache").string();
  const std::map<std::string, std::string> env = {{"KJIT_CACHE_DIR", bad}};
  const Family& f = test_family();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"cache", "ls"}, {"cache", "stats"}, {"cache", "verify"}, {"cache", "prune"},
           {"cache", "clear"}, {"precompile", "--family", f.name}}) {
    const ProcessResult r = kjit(args, env);
    SCOPED_TRACE(r.command);
    expect_one_line_error(r, file.string());
    EXPECT_TRUE(r.out.empty()) << r.describe();
  }
  ProcessResult r = kjit({"cache", "ls", "--json"}, env);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(parse_object(r)["error"].get<std::string>().find(file.string()), std::string::npos);
  r = kjit({"precompile", "--family", f.name, "--json"}, env);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(parse_object(r)["error"].get<std::string>().find(file.string()), std::string::npos);

  // An unparsable cap is an error too, not a silent default.
  expect_one_line_error(kjit({"cache", "stats"}, {{"KJIT_CACHE_MAX_BYTES", "plenty"}}), "KJIT_CACHE_MAX_BYTES");
}

// --- selftest -----------------------------------------------------------------------------------

// Every command that needs a GPU refuses in one wording and with one exit code where there is none.
TEST_F(CliTest, CommandsThatNeedAGpuRefuseAlike) {
  if (device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"selftest"}, "kjit selftest"},
      {{"tune", "decode"}, "kjit tune"},
      {{"tune", "--check"}, "kjit tune --check"},
  };
  for (const auto& [args, command] : cases) {
    ProcessResult r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    expect_one_line_error(r, "no CUDA device: " + command + " needs a GPU");
  }
}

TEST_F(CliTest, SelftestNeedsAGpuAndPassesOnOne) {
  if (device_count() == 0) {
    ProcessResult r = kjit({"selftest"});
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_NE(r.err.find("no CUDA device: kjit selftest needs a GPU"), std::string::npos) << r.describe();
    r = kjit({"selftest", "--json"});
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_EQ(parse_object(r)["passed"], false);
    r = kjit({"selftest", "--skip-without-gpu"});
    EXPECT_EQ(r.code, 0) << r.describe();
    EXPECT_NE(r.out.find("skipped"), std::string::npos) << r.describe();
    return;
  }
  ProcessResult r = kjit({"selftest"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.describe();
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.describe();
  // Every device of the machine, each row naming its device.
  r = kjit({"selftest", "--all-devices", "--json"});
  EXPECT_EQ(r.code, 0) << r.describe();
  const json j = parse_object(r);
  EXPECT_EQ(j["passed"], true) << r.describe();
  ASSERT_EQ(j["devices"].size(), static_cast<size_t>(device_count())) << r.describe();
  std::set<std::string> ops;
  std::set<int> devices;
  for (const json& check : j["results"]) {
    ops.insert(check["op"]);
    devices.insert(check["device"].get<int>());
    EXPECT_TRUE(check["passed"].get<bool>()) << check.dump();
    EXPECT_LE(check["rel_l2"].get<double>(), check["tolerance"].get<double>()) << check.dump();
    EXPECT_GE(check["tolerance"].get<double>(), 0.0) << check.dump();  // 0: a bit-exact check
  }
  EXPECT_EQ(devices.size(), static_cast<size_t>(device_count())) << r.describe();
  EXPECT_TRUE(ops.count("rotary")) << r.describe();
  EXPECT_TRUE(ops.count("attention.decode")) << r.describe();
  EXPECT_TRUE(ops.count("mla.swa_decode")) << r.describe();
  EXPECT_TRUE(ops.count("fp8.quantize")) << r.describe();
  EXPECT_TRUE(ops.count("fp8.gemm")) << r.describe();
}

TEST_F(CliTest, SelftestDeviceArgumentsAreCheckedBeforeAnythingRuns) {
  // Not an ordinal, or both ways of naming devices: usage errors on any machine.
  expect_one_line_error(kjit({"selftest", "--device", "-1"}), "a device ordinal is a number from 0, got '-1'");
  expect_one_line_error(kjit({"selftest", "--device", "one"}), "got 'one'");
  expect_one_line_error(kjit({"selftest", "--device", "0", "--all-devices"}), "excludes");
  ProcessResult r = kjit({"selftest", "--device", "x", "--json"});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_TRUE(parse_object(r).contains("error")) << r.describe();

  // An ordinal the machine does not have names the device count; --skip-without-gpu does not
  // excuse it where GPUs exist.
  const int count = device_count();
  const std::string past = std::to_string(count + 3);
  const std::string count_text = "this machine has " + std::to_string(count) + " CUDA device";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"selftest", "--device", past}, {"selftest", "--device", "0", "--device", past}}) {
    r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    if (count > 0 || args.size() == 3) {
      expect_one_line_error(r, "--device " + past + " is out of range");
      expect_one_line_error(r, count_text);
    }
  }
  r = kjit({"selftest", "--device", past, "--json"});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(parse_object(r).value("error", "").find(count_text), std::string::npos) << r.describe();
  if (count > 0) {
    expect_one_line_error(kjit({"selftest", "--device", past, "--skip-without-gpu"}), count_text);
    return;
  }

  // No driver or no device: --device and --all-devices fail like a plain selftest (exit 2, no
  // results), or skip with --skip-without-gpu.
  for (const char* flag : {"--all-devices", "--device"}) {
    std::vector<std::string> args = {"selftest", flag};
    if (std::string(flag) == "--device") args.push_back("0");
    r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_NE(r.err.find("no CUDA device: kjit selftest needs a GPU"), std::string::npos) << r.describe();
    args.push_back("--json");
    r = kjit(args);
    EXPECT_EQ(r.code, 2) << r.describe();
    const json j = parse_object(r);
    EXPECT_EQ(j["passed"], false) << r.describe();
    EXPECT_TRUE(j["results"].empty()) << r.describe();
    args.push_back("--skip-without-gpu");
    r = kjit(args);
    EXPECT_EQ(r.code, 0) << r.describe();
    EXPECT_EQ(parse_object(r)["skipped"], true) << r.describe();
  }
}

// --- operating: explain and metrics ------------------------------------------------------------

TEST_F(CliTest, CacheExplainNamesEveryInputAndTheOneThatDiffers) {
  const std::vector<std::string> point = {"rotary", "head_dim=64", "pos=i32", "style=neox", "--arch", "sm_90a"};
  auto explain = [&](std::vector<std::string> extra, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> args = {"cache", "explain"};
    args.insert(args.end(), point.begin(), point.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return kjit(args, std::move(env));
  };
  // An empty cache: a miss with nothing to compare with, and no cache folder created.
  ProcessResult r = explain({"--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["hit"], false);
  EXPECT_TRUE(j["nearest"].is_null()) << r.describe();
  EXPECT_FALSE(fs::exists(cache_dir_));
  const std::string key = j["key"];
  EXPECT_EQ(key, Runtime(RuntimeConfig::from_env()).key(family("rotary").spec(ParamMap{{"head_dim", "64"}, {"pos", "i32"}, {"style", "neox"}}),
                                                       Target::parse("sm_90a")));
  const json inputs = j["inputs"];
  EXPECT_EQ(inputs["target"], "sm_90a");
  EXPECT_EQ(inputs["format_version"], 1);
  EXPECT_FALSE(inputs["nvrtc_version"].get<std::string>().empty());
  EXPECT_FALSE(inputs["cuda_headers_version"].get<std::string>().empty());
  ASSERT_FALSE(inputs["options"].empty());
  EXPECT_EQ(inputs["options"][0], "-std=c++17");  // kjit's own options first, as NVRTC gets them
  ASSERT_FALSE(inputs["files"].empty());
  EXPECT_EQ(inputs["files"][0]["kind"], "source");
  EXPECT_EQ(inputs["files"][0]["name"], "rotary/rotary.cu");
  bool params_header = false;
  for (const json& f : inputs["files"]) {
    EXPECT_TRUE(is_hex32(f["digest"])) << f;
    params_header |= f["name"] == "rotary/rotary_params.h";
  }
  EXPECT_TRUE(params_header) << inputs["files"];

  ASSERT_EQ(kjit({"compile", "rotary", "head_dim=64", "pos=i32", "style=neox", "--arch", "sm_90a"}).code, 0);
  r = explain({"--json"});
  j = parse_object(r);
  EXPECT_EQ(j["hit"], true) << r.describe();
  EXPECT_EQ(j["key"], key);

  // One header edited (a live kernel folder): a miss whose nearest entry differs in that file only.
  const fs::path kernels = work_ / "kernel_sources";
  fs::copy(fs::path(cmake_cache_value("kjit_SOURCE_DIR")) / "kernel_sources", kernels, fs::copy_options::recursive);
  std::ofstream(kernels / "rotary" / "rotary_params.h", std::ios::app) << "\n// an edit\n";
  r = explain({"--json"}, {{"KJIT_KERNEL_DIR", kernels.string()}});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["hit"], false) << r.describe();
  ASSERT_TRUE(j["nearest"].is_object()) << r.describe();
  EXPECT_EQ(j["nearest"]["key"], key);
  EXPECT_EQ(j["nearest"]["files_compared"], true);
  ASSERT_EQ(j["nearest"]["differences"].size(), 1u) << r.describe();
  EXPECT_EQ(j["nearest"]["differences"][0]["input"], "header rotary/rotary_params.h");
  // Human output says the same.
  r = explain({}, {{"KJIT_KERNEL_DIR", kernels.string()}});
  EXPECT_NE(r.out.find("1 input differs"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("header rotary/rotary_params.h"), std::string::npos) << r.describe();

  // Another point of the family: the nearest entry differs in its parameters and kernels.
  r = kjit({"cache", "explain", "rotary", "head_dim=128", "pos=i32", "style=neox", "--arch", "sm_90a", "--json"});
  j = parse_object(r);
  std::set<std::string> differing;
  for (const json& d : j["nearest"]["differences"]) differing.insert(d["input"]);
  EXPECT_EQ(differing, (std::set<std::string>{"params", "name_expressions"})) << r.describe();

  // --key: what the entry records, and whether this machine computes the same key.
  r = kjit({"cache", "explain", "--key", key, "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["family"], "rotary");
  EXPECT_EQ(j["current"]["same_key"], true) << r.describe();
  EXPECT_EQ(j["recorded"]["files"].size(), inputs["files"].size());
  r = kjit({"cache", "explain", "--key", key, "--json"}, {{"KJIT_KERNEL_DIR", kernels.string()}});
  j = parse_object(r);
  EXPECT_EQ(j["current"]["same_key"], false) << r.describe();
  ASSERT_EQ(j["current"]["differences"].size(), 1u) << r.describe();
  EXPECT_EQ(j["current"]["differences"][0]["input"], "header rotary/rotary_params.h");

  // The entry damaged: explain says it is there and unusable, and why, not that the key is missing.
  const fs::path entry = cache_dir_ / "v1" / key.substr(0, 2) / (key + ".kjit");
  ASSERT_TRUE(fs::exists(entry)) << entry;
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry) / 2));
    f.put('\x5a').put('\xa5');
  }
  r = explain({"--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = parse_object(r);
  EXPECT_EQ(j["hit"], false) << r.describe();
  ASSERT_TRUE(j["unusable"].is_string()) << r.describe();
  EXPECT_TRUE(j["nearest"].is_null()) << r.describe();
  r = explain({});
  EXPECT_NE(r.out.find("unusable in"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("cannot be used: " + j["unusable"].get<std::string>()), std::string::npos) << r.describe();
  EXPECT_EQ(r.err.find("recompiling"), std::string::npos) << r.describe();

  expect_one_line_error(kjit({"cache", "explain", "--key", std::string(32, '0')}), "no usable entry");
  expect_one_line_error(kjit({"cache", "explain", "--key", "xyz"}), "not 32 lower-case hex digits");
  expect_one_line_error(kjit({"cache", "explain"}), "name a FAMILY");
  expect_one_line_error(kjit({"cache", "explain", "rotary", "head_dim=64", "--key", key}), "takes no family");
}

TEST_F(CliTest, CacheExplainNamesTheFallbacksThatServedAKey) {
  // What KJIT_JIT=async logs when a fallback serves a key that is not built (the runtime side is
  // tests/runtime/async_jit_test.cc): explain names it for the key.
  ProcessResult r = kjit({"compile", "rotary", "head_dim=64", "pos=i32", "style=neox", "--arch", "sm_90a", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string served_by = parse_object(r)["key"];
  const std::string missing = Runtime(RuntimeConfig::from_env())
                                  .key(family("rotary").spec(ParamMap{{"head_dim", "128"}, {"pos", "i32"}, {"style", "neox"}}),
                                       Target::parse("sm_90a"));
  cache::Key m, f;
  ASSERT_TRUE(cache::Key::from_hex(missing, &m) && cache::Key::from_hex(served_by, &f));
  const std::string root = (cache_dir_ / "v1").string();
  cache::record_fallback(root, {m, f, 1700000000, "rotary", "style=neox head_dim=64 pos=i32"});
  cache::record_fallback(root, {m, f, 1700000100, "rotary", "style=neox head_dim=64 pos=i32"});  // another process

  r = kjit({"cache", "explain", "rotary", "head_dim=128", "pos=i32", "style=neox", "--arch", "sm_90a", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_EQ(j["key"], missing);
  ASSERT_EQ(j["fallbacks"].size(), 1u) << "one line per fallback: " << r.describe();
  EXPECT_EQ(j["fallbacks"][0]["key"], served_by);
  EXPECT_EQ(j["fallbacks"][0]["family"], "rotary");
  EXPECT_EQ(j["fallbacks"][0]["params"], "style=neox head_dim=64 pos=i32");
  EXPECT_EQ(j["fallbacks"][0]["unix"], 1700000100) << "the newest";
  r = kjit({"cache", "explain", "rotary", "head_dim=128", "pos=i32", "style=neox", "--arch", "sm_90a"});
  EXPECT_NE(r.out.find("served by a fallback"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find(served_by + "  rotary style=neox head_dim=64 pos=i32"), std::string::npos) << r.describe();
  // The fallback's own key was never missing.
  r = kjit({"cache", "explain", "--key", served_by, "--json"});
  EXPECT_TRUE(parse_object(r)["fallbacks"].empty()) << r.describe();
}

TEST_F(CliTest, CacheExplainReadsEntriesThatRecordNoFiles) {
  // An entry as kjit wrote it before entries recorded their files' digests.
  ProcessResult r = kjit({"compile", "rotary", "head_dim=64", "pos=i32", "style=neox", "--arch", "sm_90a", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string key = parse_object(r)["key"];
  const fs::path path = entry_path(cache_dir_, key);
  std::optional<cache::Entry> e = read_entry(path);
  ASSERT_TRUE(e.has_value() && !e->meta.inputs.empty());
  e->meta.inputs.clear();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << cache::encode(*e);

  r = kjit({"cache", "explain", "--key", key, "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  json j = parse_object(r);
  EXPECT_TRUE(j["recorded"]["files"].empty());
  EXPECT_EQ(j["current"]["same_key"], true) << r.describe();
  // A miss against it compares what the entry has (here: the parameters and kernels), and says
  // that the files were not compared.
  r = kjit({"cache", "explain", "rotary", "head_dim=128", "pos=i32", "style=neox", "--arch", "sm_90a", "--json"});
  j = parse_object(r);
  EXPECT_EQ(j["nearest"]["key"], key) << r.describe();
  EXPECT_EQ(j["nearest"]["files_compared"], false);
  EXPECT_EQ(j["nearest"]["differences"].size(), 2u) << r.describe();
  r = kjit({"cache", "explain", "rotary", "head_dim=128", "pos=i32", "style=neox", "--arch", "sm_90a"});
  EXPECT_NE(r.out.find("files not compared"), std::string::npos) << r.describe();
}

TEST_F(CliTest, CacheStatsPrometheusIsWellFormed) {
  ASSERT_EQ(kjit({"compile", "rotary", "head_dim=64", "pos=i32", "style=neox", "--arch", "sm_90a"}).code, 0);
  ASSERT_EQ(kjit({"compile", "rotary", "head_dim=64", "pos=i32", "style=neox", "--arch", "sm_90a"}).code, 0);
  ProcessResult r = kjit({"cache", "stats", "--prometheus"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const kjit::testing::PrometheusText t = kjit::testing::parse_prometheus(r.out);
  std::string problems;
  for (const std::string& p : t.problems) problems += p + "\n";
  EXPECT_TRUE(t.problems.empty()) << problems << r.out;
  EXPECT_EQ(t.samples.at("kjit_cache_entries"), 1.0);
  EXPECT_GT(t.samples.at("kjit_cache_bytes"), 0.0);
  EXPECT_EQ(t.samples.at("kjit_cache_bad_entries"), 0.0);
  EXPECT_EQ(t.samples.at("kjit_cache_lookup_hits_total"), 1.0);  // the second compile was a disk hit
  EXPECT_EQ(t.samples.at("kjit_cache_family_entries{family=\"rotary\",target=\"sm_90a\"}"), 1.0);
  expect_one_line_error(kjit({"cache", "stats", "--prometheus", "--json"}), "pick one");
}

TEST_F(CliTest, ACacheFolderNotCreatedYetIsWritableWhenItCanBeCreated) {
  // The first compile would create it (mkdir -p): the gauge and --json say writable, and the
  // listing created nothing.
  const fs::path fresh = work_ / "not" / "yet";
  const std::map<std::string, std::string> env{{"KJIT_CACHE_DIR", fresh.string()}};
  ProcessResult r = kjit({"cache", "stats", "--prometheus"}, env);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(kjit::testing::parse_prometheus(r.out).samples.at("kjit_cache_writable"), 1.0) << r.out;
  r = kjit({"cache", "stats", "--json"}, env);
  EXPECT_EQ(parse_object(r)["writable"], true) << r.describe();
  EXPECT_EQ(parse_object(r)["exists"], false) << r.describe();
  EXPECT_NE(kjit({"cache", "stats"}, env).out.find("(does not exist yet; the first compile creates it)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(work_ / "not"));
}

}  // namespace
}  // namespace kjit::test
