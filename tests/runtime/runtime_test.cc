// The runtime's compile path without a GPU: the key, single-flight, the cross-process lock,
// corrupt entries, an unusable cache dir, live kernel sources and compile errors.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include "cache/store.hpp"
#include "runtime/nvrtc.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const char* tag) {
  std::string pattern = (fs::temp_directory_path() / (std::string("kjit-") + tag + "-XXXXXX")).string();
  const char* made = mkdtemp(pattern.data());
  if (!made) throw std::runtime_error("mkdtemp failed");
  return made;
}

kjit::RuntimeConfig config_for(const fs::path& dir) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.cache_dir = dir.string();
  c.kernel_dir.clear();
  return c;
}

// A small host-provided kernel source, so these tests do not depend on the shipped kernels.
kjit::ProgramSpec demo_spec(int value = 3) {
  kjit::ProgramSpec s;
  s.family = "demo";
  s.template_args = "value=" + std::to_string(value);
  s.source_name = "demo.cu";
  s.source_text = R"(#include "kjit/config.cuh"
#include "demo_params.h"
template <int N> __global__ void fill(KJIT_PARAMS DemoParams p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out[i] = N * p.scale;
}
)";
  s.headers = {{"demo_params.h", "#pragma once\nstruct DemoParams { float* out; int n; float scale; };\n"}};
  s.name_expressions = {"fill<" + std::to_string(value) + ">"};
  return s;
}

const kjit::Target kSm90a = kjit::Target::parse("sm_90a");

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir("rt"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RuntimeTest, KeyIsStableAcrossRuntimes) {
  kjit::Runtime a(config_for(dir_)), b(config_for(dir_));
  EXPECT_EQ(a.key(demo_spec(), kSm90a), b.key(demo_spec(), kSm90a));
  EXPECT_EQ(a.key(demo_spec(), kSm90a).size(), 32u);
}

TEST_F(RuntimeTest, KeyChangesWithEveryInput) {
  kjit::Runtime rt(config_for(dir_));
  const std::string base = rt.key(demo_spec(), kSm90a);
  auto changed = [&](const kjit::ProgramSpec& s, const kjit::Target& t = kSm90a) { return rt.key(s, t) != base; };

  kjit::ProgramSpec s = demo_spec();
  s.source_text += "\n// a comment changes the bytes\n";
  EXPECT_TRUE(changed(s)) << "source text";
  s = demo_spec();
  s.headers[0].second += "\n";
  EXPECT_TRUE(changed(s)) << "included header text";
  s = demo_spec();
  s.source_name = "other.cu";
  EXPECT_TRUE(changed(s)) << "source name";
  EXPECT_TRUE(changed(demo_spec(4))) << "name expression";
  s = demo_spec();
  s.options = {"-DKJIT_EXTRA=1"};
  EXPECT_TRUE(changed(s)) << "options";
  EXPECT_TRUE(changed(demo_spec(), kjit::Target::parse("sm_89"))) << "target";
  EXPECT_TRUE(changed(demo_spec(), kjit::Target::parse("sm_90"))) << "arch-specific suffix";
  EXPECT_TRUE(changed(demo_spec(), kjit::Target::parse("compute_90a"))) << "PTX vs cubin";

  // Metadata is not part of the key, and options are normalized (order, whitespace, duplicates).
  s = demo_spec();
  s.family = "renamed";
  s.template_args = "whatever";
  EXPECT_FALSE(changed(s));
  kjit::ProgramSpec o1 = demo_spec(), o2 = demo_spec();
  o1.options = {"-DA=1", "-DB=2"};
  o2.options = {" -DB=2", "-DA=1", "-DA=1 "};
  EXPECT_EQ(rt.key(o1, kSm90a), rt.key(o2, kSm90a));
}

TEST_F(RuntimeTest, KeyChangesWithTheCudaHeadersVersion) {
  // A fake toolkit whose cuda.h declares another CUDA_VERSION; everything else links to the real one.
  kjit::Runtime real(config_for(dir_));
  const fs::path real_include = real.cuda_include_dir();
  const fs::path fake = dir_ / "fake-cuda";
  fs::create_directories(fake / "include");
  for (const auto& e : fs::directory_iterator(real_include)) {
    if (e.path().filename() != "cuda.h") fs::create_symlink(e.path(), fake / "include" / e.path().filename());
  }
  std::ifstream in(real_include / "cuda.h");
  std::ofstream out(fake / "include" / "cuda.h");
  std::string line;
  while (std::getline(in, line)) {
    out << (line.rfind("#define CUDA_VERSION ", 0) == 0 ? std::string("#define CUDA_VERSION 99990") : line) << "\n";
  }
  out.close();
  kjit::RuntimeConfig c = config_for(dir_);
  c.cuda_home = fake.string();
  kjit::Runtime faked(c);
  EXPECT_EQ(faked.cuda_headers_version(), "99990");
  EXPECT_NE(faked.key(demo_spec(), kSm90a), real.key(demo_spec(), kSm90a));
}

TEST_F(RuntimeTest, CompilesOnceThenHitsMemoryThenDisk) {
  {
    kjit::Runtime rt(config_for(dir_));
    auto p = rt.compile(demo_spec(), kSm90a);
    ASSERT_EQ(p->kernels.size(), 1u);
    EXPECT_EQ(p->origin, kjit::CompiledProgram::Origin::kCompiled);
    EXPECT_FALSE(p->binary.empty());
    EXPECT_EQ(p->kernels[0].lowered_name.rfind("_Z", 0), 0u) << p->kernels[0].lowered_name;
    EXPECT_GT(p->kernels[0].registers, 0) << "ptxas report parsed";
    EXPECT_EQ(p->kernels[0].spill_bytes, 0);
    auto again = rt.compile(demo_spec(), kSm90a);
    EXPECT_EQ(again.get(), p.get());
    auto s = rt.stats();
    EXPECT_EQ(s.compiles, 1u);
    EXPECT_EQ(s.memory_hits, 1u);
    EXPECT_EQ(s.misses, 1u);
  }
  kjit::Runtime fresh(config_for(dir_));  // a new process, as far as the cache can tell
  auto p = fresh.compile(demo_spec(), kSm90a);
  EXPECT_EQ(p->origin, kjit::CompiledProgram::Origin::kDisk);
  EXPECT_EQ(fresh.stats().compiles, 0u);
  EXPECT_EQ(fresh.stats().disk_hits, 1u);
}

TEST_F(RuntimeTest, SixteenThreadsOnOneKeyCompileOnce) {
  kjit::Runtime rt(config_for(dir_));
  std::atomic<int> go{0};
  std::vector<std::thread> threads;
  std::vector<std::string> keys(16);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      keys[i] = rt.compile(demo_spec(7), kSm90a)->key;
    });
  }
  go = 1;
  for (auto& t : threads) t.join();
  for (const auto& k : keys) EXPECT_EQ(k, keys[0]);
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_EQ(rt.stats().memory_hits + rt.stats().misses, 16u);
}

TEST_F(RuntimeTest, EightProcessesColdStartingOnOneKeyCompileOnce) {
  constexpr int kProcesses = 8;
  int pipes[kProcesses][2];
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    ASSERT_EQ(pipe(pipes[i]), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        kjit::Runtime rt(config_for(dir_));
        auto p = rt.compile(demo_spec(11), kSm90a);
        code = p->binary.empty() ? 3 : static_cast<int>(rt.stats().compiles);  // 0 or 1
      } catch (...) {
        code = 4;
      }
      char c = static_cast<char>(code);
      (void)!write(pipes[i][1], &c, 1);
      _exit(0);
    }
    children.push_back(pid);
    close(pipes[i][1]);
  }
  int compiles = 0;
  for (int i = 0; i < kProcesses; ++i) {
    char c = 9;
    ASSERT_EQ(read(pipes[i][0], &c, 1), 1);
    close(pipes[i][0]);
    ASSERT_LE(c, 1) << "process " << i << " failed with code " << int(c);
    compiles += c;
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(compiles, 1) << "one NVRTC compile across all processes";
}

TEST_F(RuntimeTest, CorruptEntryIsRebuiltAndReplaced) {
  std::string key;
  {
    kjit::Runtime rt(config_for(dir_));
    key = rt.compile(demo_spec(), kSm90a)->key;
  }
  // Flip a byte in the middle of the entry.
  fs::path entry;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (e.path().filename() == key + ".kjit") entry = e.path();
  }
  ASSERT_FALSE(entry.empty());
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry) / 2));
    f.put('\x5a');
  }
  kjit::Runtime rt(config_for(dir_));
  testing::internal::CaptureStderr();
  auto p = rt.compile(demo_spec(), kSm90a);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(p->origin, kjit::CompiledProgram::Origin::kCompiled);
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_NE(err.find("corrupt"), std::string::npos) << err;
  EXPECT_EQ(kjit::cache::DiskCache::open_for_reading(rt.config().cache_dir, 0).verify().bad, 0u) << "the rebuilt entry replaced the corrupt one";
}

TEST_F(RuntimeTest, UnwritableCacheDirFallsBackToMemory) {
  const fs::path file = dir_ / "a-file";
  std::ofstream(file) << "x";
  kjit::RuntimeConfig c = config_for(dir_);
  c.cache_dir = (file / "cache").string();  // below a regular file: cannot be created, even by root
  testing::internal::CaptureStderr();
  kjit::Runtime rt(c);
  auto p = rt.compile(demo_spec(), kSm90a);
  auto q = rt.compile(demo_spec(), kSm90a);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(rt.disk_cache().enabled);
  EXPECT_EQ(p.get(), q.get());
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_NE(err.find(c.cache_dir), std::string::npos) << "the warning names the path: " << err;
}

TEST_F(RuntimeTest, CompileErrorNamesFileLineAndOptions) {
  kjit::Runtime rt(config_for(dir_));
  kjit::ProgramSpec s = demo_spec();
  s.source_text += "__global__ void broken() { undeclared_thing = 1; }\n";
  s.options = {"-DKJIT_MARKER=1"};
  try {
    rt.compile(s, kSm90a);
    FAIL() << "expected CompileError";
  } catch (const kjit::CompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("demo.cu(7)"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_thing"), std::string::npos) << what;
    EXPECT_NE(what.find("-DKJIT_MARKER=1"), std::string::npos) << what;
    EXPECT_NE(what.find("NVRTC " + rt.nvrtc_version()), std::string::npos) << what;
    EXPECT_NE(what.find("sm_90a"), std::string::npos) << what;
  }
  EXPECT_EQ(rt.stats().compile_failures, 1u);
  EXPECT_EQ(kjit::cache::DiskCache::open_for_reading(rt.config().cache_dir, 0).stats().entries, 0u) << "a failed compile publishes nothing";
}

// kjit's device headers declare their own fixed-width types and 16-bit float helpers; a user kernel
// that also includes the CUDA headers, in either order, must still compile.
TEST_F(RuntimeTest, UserKernelsMixKjitHeadersWithTheCudaHeaders) {
  kjit::Runtime rt(config_for(dir_));
  const std::string bodies[] = {
      "#include \"kjit/config.cuh\"\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n#include <cuda/std/cstdint>\n",
      "#include <cuda_bf16.h>\n#include <cuda/std/cstdint>\n#include \"kjit/config.cuh\"\n#include \"kjit/f16_bits.cuh\"\n"};
  for (const std::string& includes : bodies) {
    kjit::ProgramSpec s;
    s.family = "mix";
    s.source_name = "mix.cu";
    s.source_text = includes +
                    "__global__ void k(int64_t* p, uint32_t u) {\n"
                    "  p[0] = static_cast<int64_t>(__bfloat162float(__float2bfloat16_rn(1.5f))) + u;\n"
                    "  p[1] = kjit::bf16_to_f32(kjit::f32_to_bf16(2.5f)) > 2.f;\n"
                    "}\n";
    if (includes.find("f16_bits") == std::string::npos) {
      s.source_text = includes + "#include \"kjit/f16_bits.cuh\"\n" + s.source_text.substr(includes.size());
    }
    s.name_expressions = {"k"};
    EXPECT_NO_THROW(rt.compile(s, kSm90a)) << includes;
  }
}

TEST_F(RuntimeTest, MissingSourceAndEmptyNameExpressionsAreInvalid) {
  kjit::Runtime rt(config_for(dir_));
  kjit::ProgramSpec s;
  s.source_name = "no/such/file.cu";
  s.name_expressions = {"k"};
  EXPECT_THROW(rt.compile(s, kSm90a), kjit::InvalidArgument);
  s = demo_spec();
  s.name_expressions.clear();
  EXPECT_THROW(rt.compile(s, kSm90a), kjit::InvalidArgument);
  s = demo_spec();
  s.options = {"-arch=sm_80"};
  EXPECT_THROW(rt.compile(s, kSm90a), kjit::InvalidArgument) << "the target is not an option";
}

TEST_F(RuntimeTest, LiveKernelDirIsReadAndKeyed) {
  const fs::path live = dir_ / "live";
  fs::create_directories(live / "kjit");
  fs::create_directories(live / "demo");
  // The live folder's own copy of kjit's config header, then a kernel that includes it.
  for (const char* f : {"kjit/config.cuh", "kjit/types.h"}) {
    std::ofstream(live / f) << "// live copy\n#pragma once\n#include <cuda_bf16.h>\n#define KJIT_DEVICE __device__\n#define KJIT_PARAMS const __grid_constant__\n";
  }
  std::ofstream(live / "demo" / "k.cu") << "#include \"kjit/config.cuh\"\nstruct P { float* o; };\n__global__ void k(KJIT_PARAMS P p) { *p.o = 1; }\n";
  kjit::RuntimeConfig c = config_for(dir_);
  c.kernel_dir = live.string();
  kjit::Runtime rt(c);
  kjit::ProgramSpec s;
  s.source_name = "demo/k.cu";
  s.name_expressions = {"k"};
  const std::string before = rt.key(s, kSm90a);
  EXPECT_FALSE(rt.compile(s, kSm90a)->binary.empty());
  std::ofstream(live / "kjit" / "config.cuh", std::ios::app) << "// edited\n";
  EXPECT_NE(rt.key(s, kSm90a), before) << "an edit to an included header changes the key";
}

TEST(ConfigTest, ByteCountsParseOneWayEverywhere) {
  using kjit::RuntimeConfig;
  EXPECT_EQ(RuntimeConfig::parse_bytes("1048576", "x"), 1048576u);
  EXPECT_EQ(RuntimeConfig::parse_bytes("512M", "x"), 512ull << 20);
  EXPECT_EQ(RuntimeConfig::parse_bytes("2GiB", "x"), 2ull << 30);
  EXPECT_EQ(RuntimeConfig::parse_bytes("64kb", "x"), 64ull << 10);
  EXPECT_EQ(RuntimeConfig::parse_bytes("1T", "x"), 1ull << 40);
  EXPECT_EQ(RuntimeConfig::parse_bytes("7B", "x"), 7u);
  for (const char* bad : {"", "-1", "2X", "G", "1.5G", "18446744073709551616", "16777216T", "2GiBs"}) {
    try {
      RuntimeConfig::parse_bytes(bad, "KJIT_CACHE_MAX_BYTES");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("KJIT_CACHE_MAX_BYTES"), std::string::npos) << e.what();
    }
  }
}

TEST(TargetTest, ParsesAndPrints) {
  EXPECT_EQ(kjit::Target::parse("sm_90a").str(), "sm_90a");
  EXPECT_EQ(kjit::Target::parse("89").str(), "sm_89");
  EXPECT_EQ(kjit::Target::parse("compute_80").str(), "compute_80");
  EXPECT_EQ(kjit::Target::parse("sm_100a").sm(), 100);
  EXPECT_EQ(kjit::Target::for_compute_capability(9, 0).str(), "sm_90a");
  EXPECT_EQ(kjit::Target::for_compute_capability(8, 9).str(), "sm_89");
  EXPECT_EQ(kjit::Target::for_compute_capability(10, 0).str(), "sm_100a");
  EXPECT_EQ(kjit::Target::for_compute_capability(12, 0).str(), "sm_120");
  for (const char* bad : {"", "sm_", "sm_9x", "gfx90a", "sm_60", "compute_", "sm_99", "sm_890", "sm_89a", "sm_85"}) {
    EXPECT_THROW(kjit::Target::parse(bad), kjit::InvalidArgument) << bad;
  }
  try {
    kjit::Target::parse("sm_99");
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no such architecture"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kjit::Target::parse("sm_121a").sm(), 121);
  EXPECT_EQ(kjit::Target::parse("compute_103").str(), "compute_103");
}

TEST(DriverTest, LaunchWithoutDriverSaysSo) {
  if (kjit::driver_available()) GTEST_SKIP() << "a CUDA driver is present";
  EXPECT_EQ(kjit::device_count(), 0);
  EXPECT_NE(kjit::driver_unavailable_reason().find("libcuda.so.1"), std::string::npos);
  kjit::RuntimeConfig c = config_for(fs::temp_directory_path());
  c.disk_cache = false;
  kjit::Runtime rt(c);
  try {
    rt.load(demo_spec());
    FAIL() << "expected DriverError";
  } catch (const kjit::DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("no NVIDIA driver"), std::string::npos) << e.what();
    // The words of the CLI's refusal: what is missing, then why.
    EXPECT_NE(std::string(e.what()).find("no CUDA device: this call needs a GPU (cannot load libcuda.so.1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

// ---- issue 9: keys cover every file the compile reads; options keep their order --------------

namespace {

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// Rewrites `p` with `text` (same length expected) and puts its old mtime back, as an editor or a
// checkout that preserves times would: only the bytes tell the difference.
void edit_keeping_mtime(const fs::path& p, const std::string& text) {
  const auto mtime = fs::last_write_time(p);
  write_file(p, text);
  fs::last_write_time(p, mtime);
}

// A user kernel whose one constant comes from `#include "<header>"`; compiling checks it.
kjit::ProgramSpec const_spec(const std::string& include_line, int expected, std::vector<std::string> options = {}) {
  kjit::ProgramSpec s;
  s.family = "demo.const";
  s.source_name = "const.cu";
  s.source_text = include_line + "\nstatic_assert(KJIT_TEST_CONST == " + std::to_string(expected) +
                  ", \"wrong header\");\n__global__ void k(int* p) { *p = KJIT_TEST_CONST; }\n";
  s.name_expressions = {"k"};
  s.options = std::move(options);
  return s;
}

std::string define_const(int v) { return "#pragma once\n#define KJIT_TEST_CONST " + std::to_string(v) + "\n"; }

}  // namespace

TEST_F(RuntimeTest, KeyCoversHeadersFoundThroughUserIncludeDirs) {
  const fs::path inc = dir_ / "inc";
  write_file(inc / "myconst.h", define_const(1));
  kjit::Runtime rt(config_for(dir_));
  const auto spec = const_spec("#include \"myconst.h\"", 1, {"-I" + inc.string()});
  const auto first = rt.compile(spec, kSm90a);
  edit_keeping_mtime(inc / "myconst.h", define_const(2));
  EXPECT_NE(rt.key(spec, kSm90a), first->key) << "an edit to a header found through -I is a miss";
  // The new bytes are what NVRTC compiles: the old expectation no longer holds.
  EXPECT_THROW(rt.compile(spec, kSm90a), kjit::CompileError);
  EXPECT_NO_THROW(rt.compile(const_spec("#include \"myconst.h\"", 2, {"-I" + inc.string()}), kSm90a));

  // Angle includes, and headers that an on-disk header includes from its own directory.
  write_file(inc / "sub" / "outer.h", "#pragma once\n#include \"inner.h\"\n");
  write_file(inc / "sub" / "inner.h", define_const(5));
  const auto nested = const_spec("#include <sub/outer.h>", 5, {"-I", inc.string()});
  const std::string before = rt.key(nested, kSm90a);
  EXPECT_NO_THROW(rt.compile(nested, kSm90a));
  edit_keeping_mtime(inc / "sub" / "inner.h", define_const(6));
  EXPECT_NE(rt.key(nested, kSm90a), before) << "a header included relative to an on-disk header";
}

TEST_F(RuntimeTest, KeyCoversPreIncludesAndFilesBesideTheSource) {
  kjit::Runtime rt(config_for(dir_));
  // -include: looked for in the working directory, then on the -I path.
  const fs::path inc = dir_ / "pre";
  write_file(inc / "pre.h", define_const(3));
  const auto pre = const_spec("", 3, {"-I" + inc.string(), "-include", "pre.h"});
  const std::string before = rt.key(pre, kSm90a);
  EXPECT_NO_THROW(rt.compile(pre, kSm90a));
  edit_keeping_mtime(inc / "pre.h", define_const(4));
  EXPECT_NE(rt.key(pre, kSm90a), before) << "an edit to a -include file is a miss";

  // A quoted include resolves against the main source's own directory first.
  const fs::path src = dir_ / "src";
  write_file(src / "local.h", define_const(7));
  auto beside = const_spec("#include \"local.h\"", 7);
  beside.source_name = (src / "k.cu").string();
  const std::string b0 = rt.key(beside, kSm90a);
  EXPECT_NO_THROW(rt.compile(beside, kSm90a));
  edit_keeping_mtime(src / "local.h", define_const(8));
  EXPECT_NE(rt.key(beside, kSm90a), b0) << "a header beside the source file";

  // A file appearing earlier on the search path shadows the old one: also a new key.
  const fs::path a = dir_ / "first", b = dir_ / "second";
  write_file(b / "shadow.h", define_const(1));
  const auto shadow = const_spec("#include \"shadow.h\"", 1, {"-I" + a.string(), "-I" + b.string()});
  const std::string s0 = rt.key(shadow, kSm90a);
  write_file(a / "shadow.h", define_const(1));
  EXPECT_NE(rt.key(shadow, kSm90a), s0) << "which file is found is part of the key";
}

TEST_F(RuntimeTest, KeyIsTheSameWhenNothingChanged) {
  const fs::path inc = dir_ / "inc";
  write_file(inc / "myconst.h", define_const(1));
  kjit::Runtime a(config_for(dir_)), b(config_for(dir_));
  const auto spec = const_spec("#include \"myconst.h\"\n#include <cuda_bf16.h>", 1, {"-I" + inc.string()});
  EXPECT_EQ(a.key(spec, kSm90a), a.key(spec, kSm90a));
  EXPECT_EQ(a.key(spec, kSm90a), b.key(spec, kSm90a));
  // Touching a file without changing its bytes is no miss.
  fs::last_write_time(inc / "myconst.h", fs::last_write_time(inc / "myconst.h") + std::chrono::hours(1));
  EXPECT_EQ(a.key(spec, kSm90a), b.key(spec, kSm90a));
}

TEST_F(RuntimeTest, IncludeDirectoriesKeepTheirOrder) {
  // Contract change (issue 9): options are no longer sorted. -I zz_B -I aa_A must search zz_B first.
  write_file(dir_ / "zz_B" / "which.h", define_const(2));
  write_file(dir_ / "aa_A" / "which.h", define_const(1));
  kjit::Runtime rt(config_for(dir_));
  const std::string B = (dir_ / "zz_B").string(), A = (dir_ / "aa_A").string();
  const auto ba = const_spec("#include \"which.h\"", 2, {"-I", B, "-I", A});
  const auto ab = const_spec("#include \"which.h\"", 1, {"-I", A, "-I", B});
  EXPECT_NE(rt.key(ba, kSm90a), rt.key(ab, kSm90a));
  const auto compiled = rt.compile(ba, kSm90a);  // static_assert: zz_B's header was the one used
  const std::vector<std::string> expect_tail = {"-I" + B, "-I" + A};
  ASSERT_GE(compiled->options.size(), 2u);
  EXPECT_EQ(std::vector<std::string>(compiled->options.end() - 2, compiled->options.end()), expect_tail);
  EXPECT_NO_THROW(rt.compile(ab, kSm90a));
}

TEST_F(RuntimeTest, OptionOrderIsKeptWhereItCanMatter) {
  kjit::Runtime rt(config_for(dir_));
  auto key = [&](std::vector<std::string> options) {
    kjit::ProgramSpec s = demo_spec();
    s.options = std::move(options);
    return rt.key(s, kSm90a);
  };
  // One macro defined twice: the last wins, so the order is kept.
  EXPECT_NE(key({"-DA=1", "-DA=2"}), key({"-DA=2", "-DA=1"}));
  EXPECT_NE(key({"-DA=1", "-UA"}), key({"-UA", "-DA=1"}));
  // -include files are included in order.
  write_file(dir_ / "x.h", "\n");
  write_file(dir_ / "y.h", "\n");
  const std::string I = "-I" + dir_.string();
  EXPECT_NE(key({I, "-include", "x.h", "-include", "y.h"}), key({I, "-include", "y.h", "-include", "x.h"}));
  // What provably cannot matter is normalized: spellings NVRTC documents as one, macros of
  // different names, identical repeats of a definition or of a plain flag.
  EXPECT_EQ(key({"-I", dir_.string()}), key({I}));
  EXPECT_EQ(key({"--include-path=" + dir_.string()}), key({I}));
  EXPECT_EQ(key({I, "--pre-include=x.h"}), key({I, "-include", "x.h"}));
  EXPECT_EQ(key({"-D", "A=1"}), key({"-DA=1"}));
  EXPECT_EQ(key({"--define-macro=A=1"}), key({"-DA=1"}));
  EXPECT_EQ(key({"-DB=2", "-DA=1"}), key({"-DA=1", "-DB=2"}));
  EXPECT_EQ(key({"--use_fast_math", "-DA=1", "--use_fast_math"}), key({"--use_fast_math", "-DA=1"}));
  EXPECT_THROW(key({"-I"}), kjit::InvalidArgument) << "an option missing its argument";
}

TEST_F(RuntimeTest, NameExpressionBlanksThatCannotMatterAreOneKey) {
  kjit::Runtime rt(config_for(dir_));
  kjit::ProgramSpec a = demo_spec(), b = demo_spec();
  a.name_expressions = {"fill<3>"};
  b.name_expressions = {" fill< 3 > "};
  EXPECT_EQ(rt.key(a, kSm90a), rt.key(b, kSm90a));
  auto pa = rt.compile(a, kSm90a);
  auto pb = rt.compile(b, kSm90a);
  EXPECT_EQ(pa.get(), pb.get()) << "one compile for both spellings";
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_EQ(pb->kernels[0].name_expression, "fill<3>") << "the spelling of the compile that made it";
  kjit::Runtime fresh(config_for(dir_));
  EXPECT_EQ(fresh.compile(b, kSm90a)->origin, kjit::CompiledProgram::Origin::kDisk) << "the other spelling hits on disk";
}

TEST(NameExpressionTest, CanonicalFormDropsOnlyBlanksThatCannotMatter) {
  using kjit::detail::canonical_name_expression;
  EXPECT_EQ(canonical_name_expression("k< 128 >"), "k<128>");
  EXPECT_EQ(canonical_name_expression(" ns :: k < 64 , true > "), "ns::k<64,true>");
  EXPECT_EQ(canonical_name_expression("ns: :k<1>"), "ns: :k<1>") << "': :' is not '::'";
  EXPECT_EQ(canonical_name_expression("ns::k<64,  true>"), "ns::k<64,true>");
  EXPECT_EQ(canonical_name_expression("k<unsigned   long>"), "k<unsigned long>");
  EXPECT_EQ(canonical_name_expression("k<1 - -1>"), "k<1- -1>") << "'--' is another token";
  EXPECT_EQ(canonical_name_expression("k<0xe +1>"), "k<0xe +1>") << "'0xe+1' is one pp-number";
  EXPECT_EQ(canonical_name_expression("k<a<1> >"), "k<a<1> >");
  EXPECT_EQ(canonical_name_expression("k<sizeof(\"a  b\")>"), "k<sizeof(\"a  b\")>") << "literals are left alone";
  EXPECT_EQ(canonical_name_expression("k<1'000>"), "k<1'000>");
  EXPECT_NE(canonical_name_expression("k<size_t>"), canonical_name_expression("k<unsigned long>"))
      << "type spellings stay distinct keys";
}

TEST_F(RuntimeTest, VerboseSaysWhichCacheDirectory) {
  kjit::RuntimeConfig c = config_for(dir_);
  c.verbose = true;
  testing::internal::CaptureStderr();
  { kjit::Runtime rt(c); }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cache directory " + dir_.string()), std::string::npos) << err;
  c.verbose = false;
  testing::internal::CaptureStderr();
  { kjit::Runtime rt(c); }
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("cache directory"), std::string::npos);
}

TEST_F(RuntimeTest, HeadersOfAnotherCudaReleaseWarnOnceWithBothVersions) {
  const fs::path fake = dir_ / "cuda-12.4";
  write_file(fake / "include" / "cuda.h", "#pragma once\n#define CUDA_VERSION 12040\n");
  write_file(fake / "include" / "cuda_bf16.h", "#pragma once\n");
  kjit::RuntimeConfig c = config_for(dir_);
  c.cuda_home = fake.string();
  testing::internal::CaptureStderr();
  std::string version, again;
  {
    kjit::Runtime rt(c);
    version = rt.cuda_headers_version();
    kjit::Runtime rt2(c);
    again = rt2.cuda_headers_version();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(version, "12040");
  EXPECT_NE(err.find("CUDA 12.4"), std::string::npos) << err;
  kjit::Runtime real(config_for(dir_));
  EXPECT_NE(err.find("NVRTC is " + real.nvrtc_version()), std::string::npos) << err;
  EXPECT_EQ(err.find("CUDA 12.4"), err.rfind("CUDA 12.4")) << "one warning per directory: " << err;
  testing::internal::CaptureStderr();
  (void)real.cuda_headers_version();
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("warning"), std::string::npos) << "matching headers: quiet";
}
