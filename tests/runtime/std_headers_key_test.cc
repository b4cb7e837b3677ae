// kjit's NVRTC standard headers in the cache key: the bytes of each standard header a program
// includes are key inputs, so editing one changes the key of a program that includes it and of
// no other; ProgramSpec::std_headers changes a key exactly when it changes what NVRTC reads; and
// kjit's own families, which turn it off, have keys that do not depend on the standard headers.
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

fs::path repo_kernel_sources() {
  // tests/runtime/this_file.cc → the repository's kernel_sources/.
  return fs::path(__FILE__).parent_path().parent_path().parent_path() / "kernel_sources";
}

kjit::ProgramSpec user_program(const std::string& name, const std::string& includes) {
  kjit::ProgramSpec spec;
  spec.family = "test.std_key";
  spec.source_name = name + ".cu";
  spec.source_text = includes + "__global__ void k(int* p) { p[0] = 1; }\n";
  spec.name_expressions = {"k"};
  return spec;
}

const kjit::Target kSm90a = kjit::Target::parse("sm_90a");

class StdHeadersKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kjit-std-key-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    ASSERT_TRUE(fs::exists(repo_kernel_sources() / "kjit" / "std" / "cstdint")) << repo_kernel_sources();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // A copy of kernel_sources/ to serve as KJIT_KERNEL_DIR; without kjit/std/ when `with_std` is false.
  fs::path copy_sources(const std::string& name, bool with_std) {
    const fs::path to = dir_ / name;
    fs::copy(repo_kernel_sources(), to, fs::copy_options::recursive);
    if (!with_std) fs::remove_all(to / "kjit" / "std");
    return to;
  }

  static kjit::RuntimeConfig config(const fs::path& kernel_dir = {}) {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.disk_cache = false;
    c.kernel_dir = kernel_dir.string();
    return c;
  }

  fs::path dir_;
};

// Editing <cstdint>'s text changes the key of a program that includes it, and of no other.
TEST_F(StdHeadersKeyTest, EditingAStandardHeaderChangesOnlyTheKeysOfProgramsThatIncludeIt) {
  const fs::path live = copy_sources("live", true);
  kjit::Runtime rt(config(live));
  const kjit::ProgramSpec with_cstdint = user_program("a", "#include <cstdint>\n");
  const kjit::ProgramSpec with_cmath = user_program("b", "#include <cmath>\n");
  const kjit::ProgramSpec plain = user_program("c", "");
  const std::string a = rt.key(with_cstdint, kSm90a), b = rt.key(with_cmath, kSm90a), c = rt.key(plain, kSm90a);

  { std::ofstream(live / "kjit" / "std" / "cstdint", std::ios::app) << "// edited\n"; }
  EXPECT_NE(rt.key(with_cstdint, kSm90a), a);
  EXPECT_EQ(rt.key(with_cmath, kSm90a), b);
  EXPECT_EQ(rt.key(plain, kSm90a), c);

  // The prelude every standard header includes: both change.
  { std::ofstream(live / "kjit" / "std" / "detail" / "prelude.h", std::ios::app) << "// edited\n"; }
  EXPECT_NE(rt.key(with_cmath, kSm90a), b);
  EXPECT_EQ(rt.key(plain, kSm90a), c);
}

// The option is in the key through what it changes: with it, <cstdint> is an in-memory header
// whose name and bytes the key hashes; without it, NVRTC finds no <cstdint>. A program that
// includes no standard header compiles the same either way and has one key.
TEST_F(StdHeadersKeyTest, TheOptionChangesTheKeyExactlyWhenItChangesWhatNvrtcReads) {
  kjit::Runtime rt(config());
  kjit::ProgramSpec on = user_program("a", "#include <cstdint>\n");
  kjit::ProgramSpec off = on;
  off.std_headers = false;
  EXPECT_NE(rt.key(on, kSm90a), rt.key(off, kSm90a));

  auto header_names = [&](const kjit::ProgramSpec& spec) {
    std::set<std::string> names;
    for (const kjit::KeyInputFile& f : rt.key_inputs(spec, kSm90a).files) {
      if (f.kind == "header") names.insert(f.name);
    }
    return names;
  };
  const std::set<std::string> with = header_names(on);
  EXPECT_TRUE(with.count("cstdint"));
  EXPECT_TRUE(with.count("kjit/std/detail/prelude.h"));
  EXPECT_TRUE(header_names(off).empty());

  kjit::ProgramSpec plain_on = user_program("c", "");
  kjit::ProgramSpec plain_off = plain_on;
  plain_off.std_headers = false;
  EXPECT_EQ(rt.key(plain_on, kSm90a), rt.key(plain_off, kSm90a));
}

// The key memo (a key recalled without walking the includes) keeps the two apart too.
TEST_F(StdHeadersKeyTest, TheKeyMemoKeepsOnAndOffApart) {
  kjit::RuntimeConfig c = config();
  c.disk_cache = true;
  c.cache_dir = (dir_ / "cache").string();
  kjit::ProgramSpec on = user_program("a", "#include <cstdint>\n");
  kjit::ProgramSpec off = on;
  off.std_headers = false;
  std::string key_on, key_off;
  {
    kjit::Runtime rt(c);
    key_on = rt.key(on, kSm90a);
    key_off = rt.key(off, kSm90a);
  }
  kjit::Runtime again(c);  // a new Runtime recalls both from the memo records
  EXPECT_EQ(again.key(off, kSm90a), key_off);
  EXPECT_EQ(again.key(on, kSm90a), key_on);
  EXPECT_NE(key_on, key_off);
}

// A toolkit header's memoized closure serves a program with standard headers too (the headers it
// names are added to it): the key is the one the file-by-file walk gives, which a live kernel
// folder (KJIT_KERNEL_DIR) forces.
TEST_F(StdHeadersKeyTest, MemoizedToolkitClosuresGiveTheKeyOfTheFullWalk) {
  kjit::Runtime memoized(config());
  kjit::Runtime walked(config(copy_sources("live", true)));
  for (const char* includes : {"#include <cub/block/block_reduce.cuh>\n",
                               "#include <cstdint>\n#include <cub/block/block_reduce.cuh>\n#include <algorithm>\n",
                               "#include <cuda/std/cstdint>\n#include <cmath>\n"}) {
    const kjit::ProgramSpec spec = user_program("t", includes);
    EXPECT_EQ(memoized.key(spec, kSm90a), walked.key(spec, kSm90a)) << includes;
    EXPECT_EQ(memoized.key(spec, kSm90a), walked.key(spec, kSm90a)) << includes << " (memoized twice)";
  }
}

// kjit's families turn the standard headers off, so their keys are those of a kjit without
// kernel_sources/kjit/std/ at all (keys of before the headers existed), although the host
// branches of their headers name <cstdint>.
TEST_F(StdHeadersKeyTest, FamilyKeysDoNotDependOnTheStandardHeaders) {
  kjit::Runtime with(config(copy_sources("with", true)));
  kjit::Runtime without(config(copy_sources("without", false)));
  int compared = 0;
  for (const kjit::Family& f : kjit::families()) {
    std::set<std::string> sources;
    for (const kjit::Point& pt : f.default_points()) {
      const kjit::ProgramSpec spec = f.spec(pt);
      EXPECT_FALSE(spec.std_headers) << f.name;
      if (!f.unsupported_reason(pt, kSm90a).empty() || !sources.insert(spec.source_name).second) continue;
      const kjit::Target target = f.compile_target(pt, kSm90a);
      EXPECT_EQ(with.key(spec, target), without.key(spec, target)) << f.name << " " << f.describe(pt);
      ++compared;
    }
  }
  EXPECT_GE(compared, 5);
}

}  // namespace
