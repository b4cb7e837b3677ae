// The target choice as the ops and the CLI see it, on a simulated device (tests/support's stand-in
// libcuda.so.1, so no GPU is needed): KJIT_ARCH, else the device's own target, else PTX for the
// highest arch NVRTC lists when the device is newer than NVRTC. `kjit devices` (which reads the
// device's identity) and `kjit compile`'s default target (what the ops load, device_info) must
// give the same answer.
#include "tests/cli/process.hpp"

#include <kjit/families.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace kjit::test {
namespace {

using nlohmann::json;

class SimulatedDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path driver = test_binary_dir() / "simulated_driver" / "libcuda.so.1";
    ASSERT_TRUE(fs::exists(driver)) << driver << " is missing (build kjit_simulated_driver)";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    work_ = fresh_dir(std::string("SimulatedDevice.") + info->name());
    const char* path = std::getenv("LD_LIBRARY_PATH");
    library_path_ = driver.parent_path().string() + (path && *path ? ":" + std::string(path) : "");
  }

  /// `kjit args...` on a simulated device of compute capability `cc`, KJIT_ARCH=`arch` when set.
  ProcessResult kjit(const std::vector<std::string>& args, const std::string& cc, const std::string& arch = "") {
    std::map<std::string, std::string> env = {{"LD_LIBRARY_PATH", library_path_},
                                              {"KJIT_SIM_CC", cc},
                                              {"KJIT_CACHE_DIR", (work_ / "cache").string()}};
    if (!arch.empty()) env["KJIT_ARCH"] = arch;
    std::vector<std::string> argv = {(build_dir() / "tools" / "kjit").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env, work_ / "io");
  }

  /// The target `kjit devices --json` reports for device 0.
  std::string devices_target(const std::string& cc, const std::string& arch = "") {
    const ProcessResult r = kjit({"devices", "--json"}, cc, arch);
    EXPECT_EQ(r.code, 0) << r.describe();
    const json j = json::parse(r.out);
    EXPECT_EQ(j["devices"].size(), 1u) << r.out;
    return j["devices"][0]["target"].get<std::string>();
  }

  /// The target `kjit compile` builds for a point by default: what the op loads on device 0.
  ProcessResult compile(const std::vector<std::string>& point, const std::string& cc, const std::string& arch = "",
                        const std::string& emit = "cubin") {
    std::vector<std::string> args = {"compile"};
    args.insert(args.end(), point.begin(), point.end());
    args.insert(args.end(), {"--emit", emit, "--json"});
    return kjit(args, cc, arch);
  }

  static std::string target_of(const ProcessResult& r) {
    EXPECT_EQ(r.code, 0) << r.describe();
    return json::parse(r.out).value("target", "");
  }

  /// A default point of fp8.gemm whose program is arch-specific (the wgmma kernel).
  static std::vector<std::string> wgmma_gemm_point() {
    const Family& gemm = family("fp8.gemm");
    for (const ParamMap& p : gemm.defaults) {
      if (p.at("impl") != "wgmma") continue;
      std::vector<std::string> out = {"fp8.gemm"};
      for (const auto& [name, value] : p) out.push_back(name + "=" + value);
      return out;
    }
    ADD_FAILURE() << "fp8.gemm has no wgmma default";
    return {};
  }

  fs::path work_;
  std::string library_path_;
};

const std::vector<std::string> kRotary = {"rotary", "style=neox", "head_dim=128", "pos=i32"};

TEST_F(SimulatedDevice, OwnTargetWhereNvrtcHasIt) {
  EXPECT_EQ(devices_target("9.0"), "sm_90a");
  // Rotary is not arch-specific: sm_90. The wgmma GEMM is: sm_90a.
  EXPECT_EQ(target_of(compile(kRotary, "9.0", "", "source")), "sm_90");
  EXPECT_EQ(target_of(compile(wgmma_gemm_point(), "9.0", "", "source")), "sm_90a");
}

TEST_F(SimulatedDevice, NewerThanNvrtcGetsPtxAndNvrtcCompilesIt) {
  const std::string target = devices_target("13.0");
  ASSERT_EQ(target.rfind("compute_", 0), 0u) << target;
  const ProcessResult r = compile(kRotary, "13.0");
  EXPECT_EQ(target_of(r), target);
  EXPECT_EQ(json::parse(r.out).value("compiled", 0), 1) << r.describe();
  // The arch-specific wgmma GEMM is not offered on a PTX target.
  const ProcessResult gemm = compile(wgmma_gemm_point(), "13.0", "", "source");
  EXPECT_NE(gemm.code, 0) << gemm.describe();
}

TEST_F(SimulatedDevice, KjitArchIsWhatTheOpsLoad) {
  // PTX for compute_90: every op, arch-specific or not, loads compute_90; wgmma is not offered.
  EXPECT_EQ(devices_target("9.0", "compute_90"), "compute_90");
  const ProcessResult r = compile(kRotary, "9.0", "compute_90", "ptx");
  EXPECT_EQ(target_of(r), "compute_90");
  EXPECT_EQ(json::parse(r.out).value("compiled", 0), 1) << r.describe();
  // A cubin (the default --emit) is not what a PTX KJIT_ARCH builds: the rule and the message
  // of --arch compute_90, not PTX emitted silently.
  const ProcessResult cubin = compile(kRotary, "9.0", "compute_90");
  EXPECT_EQ(cubin.code, 2) << cubin.describe();
  EXPECT_NE(cubin.err.find("KJIT_ARCH=compute_90 is a PTX target; add --emit ptx"), std::string::npos)
      << cubin.describe();
  ProcessResult gemm = compile(wgmma_gemm_point(), "9.0", "compute_90", "source");
  EXPECT_NE(gemm.code, 0) << gemm.describe();
  EXPECT_NE(gemm.err.find("sm_90a"), std::string::npos) << gemm.describe();
  // sm_90: cubins for sm_90, never sm_90a.
  EXPECT_EQ(devices_target("9.0", "sm_90"), "sm_90");
  EXPECT_EQ(target_of(compile(kRotary, "9.0", "sm_90", "source")), "sm_90");
  gemm = compile(wgmma_gemm_point(), "9.0", "sm_90", "source");
  EXPECT_NE(gemm.code, 0) << gemm.describe();
  // A KJIT_ARCH that cannot run on the device is an error naming it.
  const ProcessResult bad = compile(kRotary, "9.0", "sm_100a", "source");
  EXPECT_EQ(bad.code, 2) << bad.describe();
  EXPECT_NE(bad.err.find("KJIT_ARCH=sm_100a"), std::string::npos) << bad.describe();
}

}  // namespace
}  // namespace kjit::test
