// Installing kjit and using it from another CMake project: `cmake --install` the build tree into
// a temporary prefix, configure and build tests/consumer (find_package(kjit REQUIRED) +
// target_link_libraries(... kjit::kjit)) against that prefix only, and run the program, which
// JIT-compiles a host-provided kernel without a GPU. Also runs the installed `kjit` binary.
#include "tests/cli/process.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace kjit::test {
namespace {

/// The line of `ldd` output that resolves libkjit ("" when none does).
std::string libkjit_line(const std::string& ldd) {
  const size_t at = ldd.find("libkjit.so");
  if (at == std::string::npos) return "";
  const size_t end = ldd.find('\n', at);
  return ldd.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST(Consumer, FindPackageBuildsAndRunsAgainstAnInstalledKjit) {
  const std::string cmake = cmake_cache_value("CMAKE_COMMAND");
  const std::string source_dir = cmake_cache_value("kjit_SOURCE_DIR");
  const std::string cxx = cmake_cache_value("CMAKE_CXX_COMPILER");
  ASSERT_FALSE(cmake.empty()) << "no CMAKE_COMMAND in " << build_dir() / "CMakeCache.txt";
  ASSERT_FALSE(source_dir.empty()) << "no kjit_SOURCE_DIR in " << build_dir() / "CMakeCache.txt";

  const fs::path work = fresh_dir("consumer");
  const fs::path prefix = work / "prefix";
  const fs::path consumer_build = work / "build";
  const fs::path scratch = work / "io";

  ProcessResult r = run_process({cmake, "--install", build_dir().string(), "--prefix", prefix.string()}, {}, scratch);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(fs::exists(prefix / "include" / "kjit" / "runtime.hpp"));
  fs::path config;
  for (const char* lib : {"lib", "lib64", "lib/x86_64-linux-gnu"}) {
    if (fs::exists(prefix / lib / "cmake" / "kjit" / "kjitConfig.cmake")) config = prefix / lib;
  }
  ASSERT_FALSE(config.empty()) << "kjitConfig.cmake was not installed under " << prefix;

  // Only the temporary prefix may satisfy find_package: no package registry, no system kjit.
  r = run_process({cmake, "-S", source_dir + "/tests/consumer", "-B", consumer_build.string(),
                   "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + prefix.string(),
                   "-Dkjit_DIR=" + (config / "cmake" / "kjit").string(),
                   "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF",
                   "-DCMAKE_CXX_COMPILER=" + cxx},
                  {}, scratch);
  ASSERT_EQ(r.code, 0) << r.describe();
  r = run_process({cmake, "--build", consumer_build.string()}, {}, scratch);
  ASSERT_EQ(r.code, 0) << r.describe();

  const fs::path program = consumer_build / "kjit_consumer";
  ASSERT_TRUE(fs::exists(program));
  r = run_process({program.string()}, {{"KJIT_CACHE_DIR", (work / "cache").string()}}, scratch);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("kjit consumer: ok"), std::string::npos) << r.describe();

  // The consumer linked the installed library, not the build tree's.
  r = run_process({"ldd", program.string()}, {}, scratch);
  EXPECT_NE(libkjit_line(r.out).find(prefix.string()), std::string::npos) << r.describe();

  // The installed CLI runs from the prefix and uses the installed library (its RPATH points
  // from <prefix>/bin to <prefix>/lib), with no LD_LIBRARY_PATH.
  const fs::path installed_kjit = prefix / "bin" / "kjit";
  ASSERT_TRUE(fs::exists(installed_kjit));
  r = run_process({installed_kjit.string(), "kernels", "--json"},
                  {{"KJIT_CACHE_DIR", (work / "cache").string()}}, scratch);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("\"families\""), std::string::npos) << r.describe();
  r = run_process({"ldd", installed_kjit.string()}, {}, scratch);
  EXPECT_NE(libkjit_line(r.out).find(prefix.string()), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace kjit::test
