// Deployment without a GPU: KJIT_RECORD through Runtime::compile (family points vs a host
// application's own kernel, deduplication within a process and across Runtimes), KJIT_JIT
// (parsing, off refusing a miss with JitDisabled naming the command that builds it and
// compiling nothing, off serving a cached entry, warn warning once per key), and a GPU newer
// than NVRTC on simulated devices (the PTX target choice, KJIT_ARCH, its own cache key, the
// planners and family checks on such a device).
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include "cache/manifest.hpp"
#include "runtime/record.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/target_choice.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::vector<int> kNvrtc13 = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};

class Deploy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kjit-deploy-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  kjit::RuntimeConfig config(kjit::JitMode jit = kjit::JitMode::kOn, std::string record = {}) const {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.cache_dir = (dir_ / "cache").string();
    c.kernel_dir.clear();
    c.jit = jit;
    c.record_path = std::move(record);
    return c;
  }

  std::vector<kjit::cache::ManifestLine> manifest(const fs::path& path) const {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return kjit::cache::parse_manifest(s.str());
  }

  fs::path dir_;
};

/// The rotary point the tests compile (rotary compiles fastest).
kjit::ProgramSpec rotary_spec(const char* head_dim = "64") {
  return kjit::family("rotary").spec(kjit::ParamMap{{"style", "neox"}, {"head_dim", head_dim}, {"pos", "i32"}});
}

kjit::ProgramSpec user_spec() {
  kjit::ProgramSpec s;
  s.family = "myapp.fill";
  s.template_args = "value=3";
  s.source_name = "fill.cu";
  s.source_text = "template <int N> __global__ void fill(float* out) { out[threadIdx.x] = N; }\n";
  s.name_expressions = {"fill<3>"};
  return s;
}

const kjit::Target kSm90a = kjit::Target::parse("sm_90a");

TEST(DeployConfig, JitModeFromTheEnvironment) {
  auto with = [](const char* value) {
    ::setenv("KJIT_JIT", value, 1);
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    ::unsetenv("KJIT_JIT");
    return c.jit;
  };
  EXPECT_EQ(with("on"), kjit::JitMode::kOn);
  EXPECT_EQ(with("warn"), kjit::JitMode::kWarn);
  EXPECT_EQ(with("off"), kjit::JitMode::kOff);
  EXPECT_EQ(with("0"), kjit::JitMode::kOff);
  EXPECT_EQ(with("async"), kjit::JitMode::kAsync);
  EXPECT_STREQ(kjit::jit_mode_name(kjit::JitMode::kAsync), "async");
  EXPECT_EQ(kjit::RuntimeConfig::from_env().jit, kjit::JitMode::kOn);
  ::setenv("KJIT_JIT", "of", 1);
  try {
    kjit::RuntimeConfig::from_env();
    ADD_FAILURE() << "KJIT_JIT=of was accepted";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KJIT_JIT='of'"), std::string::npos) << e.what();
  }
  ::unsetenv("KJIT_JIT");
  // The background pool's size: whole numbers in range, else an error naming the variable.
  EXPECT_EQ(kjit::RuntimeConfig::from_env().background_threads, 1);
  EXPECT_EQ(kjit::RuntimeConfig::from_env().background_queue, 64);
  ::setenv("KJIT_JIT_THREADS", "2", 1);
  ::setenv("KJIT_JIT_QUEUE", "8", 1);
  EXPECT_EQ(kjit::RuntimeConfig::from_env().background_threads, 2);
  EXPECT_EQ(kjit::RuntimeConfig::from_env().background_queue, 8);
  for (const char* bad : {"0", "17", "two", "-1", "1.5"}) {
    ::setenv("KJIT_JIT_THREADS", bad, 1);
    try {
      kjit::RuntimeConfig::from_env();
      ADD_FAILURE() << "KJIT_JIT_THREADS=" << bad << " was accepted";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("KJIT_JIT_THREADS='" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("KJIT_JIT_THREADS");
  ::setenv("KJIT_JIT_QUEUE", "0", 1);
  EXPECT_THROW(kjit::RuntimeConfig::from_env(), kjit::InvalidArgument);
  ::unsetenv("KJIT_JIT_QUEUE");
  ::setenv("KJIT_RECORD", "/tmp/x.jsonl", 1);
  EXPECT_EQ(kjit::RuntimeConfig::from_env().record_path, "/tmp/x.jsonl");
  ::unsetenv("KJIT_RECORD");
}

TEST_F(Deploy, RecordsFamilyPointsAndUserKernelsOncePerProcess) {
  const fs::path m = dir_ / "m.jsonl";
  {
    kjit::Runtime rt(config(kjit::JitMode::kOn, m.string()));
    rt.compile(rotary_spec(), kSm90a);
    rt.compile(rotary_spec(), kSm90a);  // a memory hit: not recorded again
    rt.compile(user_spec(), kSm90a);
  }
  {
    kjit::Runtime again(config(kjit::JitMode::kOn, m.string()));
    again.compile(rotary_spec(), kSm90a);  // a disk hit in another Runtime: already in the file
  }
  const auto lines = manifest(m);
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_TRUE(lines[0].entry && lines[1].entry);
  const kjit::cache::ManifestEntry& f = *lines[0].entry;
  EXPECT_FALSE(f.user);
  EXPECT_EQ(f.family, "rotary");
  EXPECT_EQ(f.params, (std::map<std::string, std::string>{{"style", "neox"}, {"head_dim", "64"}, {"pos", "i32"}}));
  EXPECT_EQ(f.target, "sm_90a");
  const kjit::cache::ManifestEntry& u = *lines[1].entry;
  EXPECT_TRUE(u.user);
  EXPECT_EQ(u.family, "myapp.fill");
  EXPECT_EQ(u.template_args, "value=3");
  EXPECT_EQ(u.key, kjit::Runtime(config()).key(user_spec(), kSm90a));
  // A spec that borrows a family's name but not its program is the application's own.
  kjit::ProgramSpec fake = rotary_spec();
  fake.options = {"-DEXTRA=1"};
  {
    kjit::Runtime rt(config(kjit::JitMode::kOn, m.string()));
    rt.compile(fake, kSm90a);
  }
  const auto after = manifest(m);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_TRUE(after[2].entry && after[2].entry->user);
}

TEST_F(Deploy, OffRefusesAMissNamingTheCommandAndCompilesNothing) {
  kjit::Runtime off(config(kjit::JitMode::kOff, (dir_ / "m.jsonl").string()));
  try {
    off.compile(rotary_spec(), kSm90a);
    FAIL() << "a miss under KJIT_JIT=off compiled";
  } catch (const kjit::JitDisabled& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.family(), "rotary");
    EXPECT_EQ(e.params(), "style=neox head_dim=64 pos=i32");
    EXPECT_EQ(e.target(), "sm_90a");
    EXPECT_EQ(e.command(), "KJIT_CACHE_DIR=" + kjit::detail::shell_word((dir_ / "cache").string()) +
                               " KJIT_JIT=on kjit compile rotary head_dim=64 pos=i32 style=neox --arch sm_90a");
    EXPECT_NE(what.find(e.command()), std::string::npos) << what;
    EXPECT_NE(what.find("KJIT_JIT=off"), std::string::npos) << what;
  }
  // The command would build exactly that point: its words parse back to the same spec.
  EXPECT_EQ(off.stats().compiles, 0u);
  EXPECT_EQ(off.stats().refused, 1u);
  // What production needed but lacked is recorded too, so the next precompile includes it.
  EXPECT_EQ(manifest(dir_ / "m.jsonl").size(), 1u);
  // A host kernel has no command; the message says what to do instead.
  try {
    off.compile(user_spec(), kSm90a);
    FAIL();
  } catch (const kjit::JitDisabled& e) {
    EXPECT_EQ(e.command(), "");
    EXPECT_NE(std::string(e.what()).find("KJIT_JIT=on"), std::string::npos) << e.what();
  }
  // Once the cache has it, off serves it from disk; still nothing compiled.
  kjit::Runtime(config()).compile(rotary_spec(), kSm90a);
  kjit::Runtime off2(config(kjit::JitMode::kOff));
  auto p = off2.compile(rotary_spec(), kSm90a);
  EXPECT_EQ(p->origin, kjit::CompiledProgram::Origin::kDisk);
  EXPECT_EQ(off2.stats().compiles, 0u);
  // PTX targets name --emit ptx in their command.
  try {
    off2.compile(rotary_spec(), kjit::Target::parse("compute_120"));
    FAIL();
  } catch (const kjit::JitDisabled& e) {
    EXPECT_NE(e.command().find(" KJIT_JIT=on kjit compile rotary head_dim=64 pos=i32 style=neox --arch compute_120 --emit ptx"),
              std::string::npos) << e.command();
  }
}

TEST_F(Deploy, WarnCompilesAndWarnsOncePerKey) {
  kjit::Runtime warn(config(kjit::JitMode::kWarn));
  ::testing::internal::CaptureStderr();
  warn.compile(rotary_spec(), kSm90a);
  warn.compile(rotary_spec(), kSm90a);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(warn.stats().compiles, 1u);
  size_t count = 0;
  for (size_t at = err.find("KJIT_JIT=warn"); at != std::string::npos; at = err.find("KJIT_JIT=warn", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_NE(err.find("kjit compile rotary"), std::string::npos) << err;
}

// --- GPUs newer than NVRTC --------------------------------------------------------------------

TEST(TargetChoice, OwnTargetWhereNvrtcHasIt) {
  using kjit::detail::choose_target;
  EXPECT_EQ(choose_target(9, 0, kNvrtc13, "", "H200").target.str(), "sm_90a");
  EXPECT_EQ(choose_target(8, 9, kNvrtc13, "", "L40S").target.str(), "sm_89");
  EXPECT_EQ(choose_target(10, 0, kNvrtc13, "", "B200").target.str(), "sm_100a");
  EXPECT_TRUE(choose_target(9, 0, kNvrtc13, "", "H200").note.empty());
  EXPECT_EQ(choose_target(9, 0, {}, "", "H200").target.str(), "sm_90a");  // NVRTC could not say
}

TEST(TargetChoice, NewerThanNvrtcGetsPtxOfTheHighestListedArch) {
  using kjit::detail::choose_target;
  const kjit::detail::TargetChoice c = choose_target(13, 0, kNvrtc13, "", "device 0 (future GPU)");
  EXPECT_EQ(c.target.str(), "compute_121");
  EXPECT_TRUE(c.target.ptx);
  EXPECT_FALSE(c.target.arch_specific);
  EXPECT_NE(c.note.find("newer than NVRTC"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("compute_121"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("arch-specific"), std::string::npos) << c.note;
  // Between listed archs (an arch this NVRTC skipped): the highest one below it.
  EXPECT_EQ(choose_target(10, 5, kNvrtc13, "", "x").target.str(), "compute_103");
  // Older than anything listed: its own target (NVRTC then refuses it by name).
  EXPECT_EQ(choose_target(7, 0, kNvrtc13, "", "V100").target.str(), "sm_70");
}

TEST(TargetChoice, KjitArchOverridesWhenItCanRun) {
  using kjit::detail::choose_target;
  EXPECT_EQ(choose_target(9, 0, kNvrtc13, "sm_90", "H200").target.str(), "sm_90");
  EXPECT_EQ(choose_target(9, 0, kNvrtc13, "compute_80", "H200").target.str(), "compute_80");
  EXPECT_EQ(choose_target(13, 0, kNvrtc13, "compute_90", "x").target.str(), "compute_90");
  EXPECT_EQ(choose_target(8, 9, kNvrtc13, "sm_86", "L40S").target.str(), "sm_86");
  EXPECT_TRUE(choose_target(13, 0, kNvrtc13, "compute_90", "x").note.empty());
  for (const char* bad : {"sm_80", "sm_100a", "compute_100", "sm_89", "nonsense"}) {
    try {
      choose_target(9, 0, kNvrtc13, bad, "device 0 (H200)");
      ADD_FAILURE() << "KJIT_ARCH=" << bad << " was accepted on sm_90";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("KJIT_ARCH=") + bad), std::string::npos) << e.what();
    }
  }
}

/// A simulated GPU newer than NVRTC, as device_info() would describe it.
kjit::DeviceInfo future_gpu() {
  kjit::DeviceInfo d;
  d.cc_major = 13;
  d.cc_minor = 0;
  d.sm_count = 160;
  d.max_threads_per_block = 1024;
  d.max_smem_per_block_optin = 232448;
  d.max_smem_per_sm = 233472;
  d.compile_target = kjit::detail::choose_target(13, 0, kNvrtc13, "", "future").target;
  return d;
}

TEST(NewerThanNvrtc, PlannersAndFamiliesSeeThePtxTarget) {
  const kjit::DeviceInfo d = future_gpu();
  EXPECT_EQ(d.target().str(), "compute_121");
  EXPECT_FALSE(d.target().has_wgmma());
  // A hand-built DeviceInfo without a compile target keeps its own.
  kjit::DeviceInfo h200 = d;
  h200.cc_major = 9;
  h200.compile_target = {};
  EXPECT_EQ(h200.target().str(), "sm_90a");

  // The arch-specific family points are not offered there, and say why.
  const kjit::Family& gemm = kjit::family("fp8.gemm");
  const kjit::ParamMap wgmma = gemm.defaults.front();
  ASSERT_EQ(wgmma.at("impl"), "wgmma");
  const std::string why = gemm.unsupported_reason(wgmma, d.target());
  EXPECT_NE(why.find("sm_90a"), std::string::npos) << why;
  EXPECT_NE(why.find("PTX target"), std::string::npos) << why;
  const kjit::Target target = d.target();
  const std::vector<kjit::Point> offered = gemm.enumerate(&target);
  EXPECT_FALSE(offered.empty());
  for (const kjit::Point& p : offered) {
    EXPECT_EQ(gemm.value(p, "impl").text, "mma");
  }
  EXPECT_FALSE(kjit::family("attention.prefill_sm90").unsupported_reason(
                   kjit::family("attention.prefill_sm90").defaults.front(), d.target()).empty());
  // A forced wgmma plan is refused with that reason; the planner picks the mma kernel.
  kjit::detail::Choice choice;
  choice.family = &gemm;
  choice.point = gemm.parse(wgmma);
  try {
    kjit::detail::check_choice(kjit::fp8::detail::GemmOp::kInfo, choice, d.target());
    ADD_FAILURE() << "a wgmma plan was accepted for a PTX target";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("PTX target"), std::string::npos) << e.what();
  }
}

TEST_F(Deploy, PtxForTheNewerGpuHasItsOwnKeyAndCompiles) {
  kjit::Runtime rt(config());
  const kjit::Target ptx = future_gpu().target();
  const kjit::Target cubin = kjit::Target::parse("sm_121");
  EXPECT_NE(rt.key(rotary_spec(), ptx), rt.key(rotary_spec(), cubin));
  auto p = rt.compile(rotary_spec(), ptx);
  EXPECT_EQ(p->target.str(), "compute_121");
  EXPECT_NE(p->binary.find(".target sm_121"), std::string::npos) << "PTX text for the driver JIT";
}

TEST(CompileCommand, WordsAreShellQuotedOnlyWhereNeeded) {
  using kjit::detail::shell_word;
  EXPECT_EQ(shell_word("head_dim=128"), "head_dim=128");
  EXPECT_EQ(shell_word("/var/cache/kjit"), "/var/cache/kjit");
  EXPECT_EQ(shell_word("/tmp/my cache"), "'/tmp/my cache'");
  EXPECT_EQ(shell_word("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_word("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_word(""), "''");
}

}  // namespace
