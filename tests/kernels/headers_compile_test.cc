// Every shared device header (kernel_sources/kjit/) compiles with NVRTC on its own, included
// twice: each one includes what it uses and nothing relies on include order. Kernel families
// include these headers in many combinations, so a header that only compiles after another one
// would break the next kernel that includes it first.
#include <kjit/device.hpp>
#include <kjit/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace {

std::vector<std::string> shared_headers() {
  // tests/kernels/this_file.cc → the repository root.
  const std::filesystem::path dir =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "kernel_sources" / "kjit";
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".cuh" || ext == ".h")) out.push_back("kjit/" + e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(KernelHeaders, EachSharedHeaderCompilesOnItsOwn) {
  const std::vector<std::string> headers = shared_headers();
  ASSERT_GE(headers.size(), 10u) << "kernel_sources/kjit/ not found beside " << __FILE__;
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const std::string& h : headers) {
      kjit::ProgramSpec spec;
      spec.family = "test.header";
      spec.template_args = h;
      spec.source_name = "header_probe.cu";
      spec.source_text = "#include \"" + h + "\"\n#include \"" + h + "\"\n__global__ void kjit_header_probe() {}\n";
      spec.name_expressions = {"kjit_header_probe"};
      EXPECT_NO_THROW(rt.compile(spec, kjit::Target::parse(arch))) << h << " for " << arch;
    }
  }
}

}  // namespace
