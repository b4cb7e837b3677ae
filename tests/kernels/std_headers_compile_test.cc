// kjit's NVRTC standard headers (kernel_sources/kjit/std/, ProgramSpec::std_headers) through
// Runtime::compile: each compiles on its own for sm_80 and sm_90a in a kernel that uses its main
// facilities; an ordinary kernel that includes them all compiles, with kjit and with nvcc; a
// host-only call is a compile error naming its header; real toolkit headers (CUB, and CuTe when
// KJIT_CUTLASS_DIR names a CUTLASS tree) keep compiling with them on.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include "tests/cli/process.hpp"
#include "tests/kernels/std_kernel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// For each standard header kjit ships: a kernel body using its main facilities. The probe kernel
// is `__global__ void std_probe(int* p, float* f)`.
const std::map<std::string, std::string>& probes() {
  static const std::map<std::string, std::string> m = {
      {"cstdint",
       "std::int64_t a = INT64_MAX; std::uint8_t b = UINT8_MAX; std::uint32_t c = UINT32_C(7);\n"
       "std::int_fast16_t d = INT16_MIN; std::uintptr_t e = reinterpret_cast<std::uintptr_t>(p);\n"
       "p[0] = static_cast<int>(a & 1) + b + static_cast<int>(c) + d + static_cast<int>(e & 1) +\n"
       "       static_cast<int>(sizeof(std::intmax_t));"},
      {"stdint.h", "int64_t a = INT64_MIN; uint16_t b = UINT16_MAX; p[0] = static_cast<int>(a & 1) + b;"},
      {"cstddef",
       "struct S { int a; double b; };\n"
       "std::size_t n = offsetof(S, b); std::ptrdiff_t d = p - p; std::nullptr_t np = nullptr;\n"
       "std::byte by{7}; by |= std::byte{8}; const std::max_align_t* m = nullptr;\n"
       "p[0] = static_cast<int>(n + d) + std::to_integer<int>(by) + (np == nullptr) + (m == nullptr) + (NULL == 0);"},
      {"stddef.h", "size_t n = sizeof(max_align_t); ptrdiff_t d = 2; p[0] = static_cast<int>(n + d);"},
      {"climits", "p[0] = CHAR_BIT + INT_MAX + SCHAR_MIN + SHRT_MAX + (LLONG_MIN < 0) + (UINT_MAX > 0) + (ULLONG_MAX > 0);"},
      {"limits.h", "p[0] = CHAR_BIT + INT_MIN + (LONG_MAX > INT_MAX);"},
      {"cfloat",
       "f[0] = FLT_MAX + FLT_EPSILON + FLT_MIN + FLT_TRUE_MIN + static_cast<float>(DBL_EPSILON + DBL_MIN);\n"
       "p[0] = FLT_MANT_DIG + DBL_MANT_DIG + FLT_DIG + DBL_MAX_EXP + FLT_RADIX + FLT_EVAL_METHOD + DECIMAL_DIG;"},
      {"float.h", "f[0] = FLT_MAX - static_cast<float>(DBL_MAX > 1.0); p[0] = FLT_DIG;"},
      {"cassert", "assert(p != nullptr); assert(f[0] >= 0.0f && \"non-negative\"); p[0] = 1;"},
      {"assert.h", "assert(p[1] < 100); p[0] = 1;"},
      {"cmath",
       "f[0] = std::sqrt(f[1]) + std::exp(f[2]) + std::pow(f[3], 2) + std::fabs(f[4]) + std::fmin(f[5], 1.0f);\n"
       "double d = std::sqrt(p[1]) + std::pow(p[2], 3) + std::hypot(3, 4.0f) + std::ldexp(p[3], 2) + std::fma(1, 2.0f, 3);\n"
       "p[0] = std::fpclassify(f[6]) + std::isnormal(d) + std::isless(p[4], 2.5) + std::ilogb(8) +\n"
       "       static_cast<int>(std::lround(2.5f)) + std::signbit(-0.0) + std::isnan(f[7]) + (FP_NORMAL == 4);\n"
       "f[1] = INFINITY + NAN + HUGE_VALF + static_cast<float>(HUGE_VAL + M_PI + M_SQRT2);\n"
       "std::float_t x = std::abs(-1.5f); std::double_t y = std::abs(-2.5); f[2] = x + static_cast<float>(y);"},
      {"math.h",
       "f[0] = sqrtf(f[1]) + powf(f[2], 2.0f) + sqrt(f[3]) + static_cast<float>(sqrt(p[1]) + pow(p[1], 2));\n"
       "p[0] = fpclassify(f[4]) + isnormal(f[5]) + isgreater(f[6], 1) + isunordered(f[7], 2.0);"},
      {"cstdio",
       "if (p[0] < 0) { std::printf(\"std::printf %d\\n\", p[0]); printf(\"%s %f\\n\", \"printf\", f[0]); }\n"
       "std::FILE* out = stderr; p[1] = EOF + (out == nullptr);"},
      {"stdio.h", "if (p[0] < 0) printf(\"%d\\n\", p[0]); FILE* e = stdout; p[1] = (e == nullptr);"},
      {"cstring",
       "char s[16] = \"kjit\"; char t[16];\n"
       "std::memcpy(t, s, 5); std::memset(t + 5, 0, 11); std::memmove(t + 1, t, 4);\n"
       "std::strcpy(t, s); std::strcat(t, \"-std\"); std::strncat(t, \"xyz\", 1);\n"
       "p[0] = static_cast<int>(std::strlen(t)) + std::strcmp(s, \"kjit\") + std::strncmp(t, \"kj\", 2) +\n"
       "       std::memcmp(s, t, 4) + (std::strchr(t, '-') != nullptr) + (std::strstr(t, \"std\") != nullptr) +\n"
       "       (std::memchr(s, 'j', 4) != nullptr) + static_cast<int>(std::strspn(t, \"kj\") + std::strcspn(t, \"-\")) +\n"
       "       (std::strrchr(t, 't') != nullptr) + (std::strpbrk(t, \"xy\") != nullptr);\n"
       "std::strncpy(s, \"ab\", 8); p[1] = static_cast<int>(strlen(s));"},
      {"string.h", "char s[8] = \"ab\"; p[0] = static_cast<int>(strlen(s)) + strcmp(s, \"ab\") + memcmp(s, \"ab\", 2);"},
      {"cstdlib",
       "void* m = std::malloc(64); std::free(m);\n"
       "const std::div_t q = std::div(7, 2); const std::ldiv_t r = std::ldiv(7L, 3L);\n"
       "p[0] = std::abs(p[1]) + static_cast<int>(std::labs(-3L) + std::llabs(-4LL)) + q.quot + q.rem +\n"
       "       static_cast<int>(r.rem) + EXIT_SUCCESS + EXIT_FAILURE;\n"
       "f[0] = std::abs(-1.5f);"},
      {"stdlib.h", "void* m = malloc(8); free(m); p[0] = abs(p[1]) + div(9, 4).quot;"},
      {"type_traits",
       "static_assert(std::is_same_v<std::decay_t<const int&>, int>, \"\");\n"
       "static_assert(std::is_trivially_copyable<float2>::value, \"\");\n"
       "static_assert(std::conjunction_v<std::is_integral<int>, std::is_signed<int>>, \"\");\n"
       "static_assert(std::is_same<std::make_unsigned_t<int>, unsigned>::value, \"\");\n"
       "static_assert(std::is_same_v<std::invoke_result_t<int (*)(float), float>, int>, \"\");\n"
       "static_assert(std::is_same_v<std::void_t<int>, void>, \"\");\n"
       "using T = std::conditional_t<true, std::integral_constant<int, 3>, std::false_type>;\n"
       "std::enable_if_t<T::value == 3, int> v = T::value; p[0] = v + std::is_floating_point<double>::value;"},
      {"limits",
       "f[0] = std::numeric_limits<float>::infinity() + std::numeric_limits<float>::lowest() +\n"
       "       std::numeric_limits<float>::epsilon() + std::numeric_limits<float>::quiet_NaN();\n"
       "p[0] = std::numeric_limits<int>::max() + std::numeric_limits<unsigned char>::digits +\n"
       "       (std::numeric_limits<long long>::min() < 0) + std::numeric_limits<double>::is_iec559 +\n"
       "       (std::numeric_limits<float>::round_style == std::round_to_nearest) +\n"
       "       (std::numeric_limits<float>::has_denorm == std::denorm_present);"},
      {"utility",
       "std::pair<int, float> pr = std::make_pair(p[1], f[1]); auto [a, b] = pr;\n"
       "int x = p[2], y = p[3]; std::swap(x, y); int z = std::exchange(x, 5);\n"
       "static_assert(std::tuple_size_v<std::pair<int, float>> == 2, \"\");\n"
       "static_assert(std::is_same<std::tuple_element_t<1, std::pair<int, float>>, float>::value, \"\");\n"
       "static_assert(std::index_sequence_for<int, char>::size() == 2, \"\");\n"
       "static_assert(std::is_same<decltype(std::move(z)), int&&>::value, \"<type_traits> comes along\");\n"
       "int&& r = std::move(z); p[0] = a + static_cast<int>(b) + x + y + r + std::get<0>(pr) + std::forward<int&>(x);"},
      {"initializer_list",
       "std::initializer_list<int> l = {1, 2, 3}; int s = 0; for (int v : l) s += v; p[0] = s + static_cast<int>(l.size());"},
      {"new", "struct Pt { int x, y; }; __shared__ Pt slot[1]; Pt* q = new (slot) Pt{p[1], p[2]}; p[0] = q->x + q->y;"},
      {"tuple",
       "std::tuple<int, float, char> t = std::make_tuple(p[1], f[1], 'c'); auto [a, b, c] = t;\n"
       "int x; float y; std::tie(x, y, std::ignore) = t;\n"
       "auto u = std::tuple_cat(t, std::make_tuple(2.0));\n"
       "static_assert(std::tuple_size_v<decltype(u)> == 4, \"\");\n"
       "p[0] = a + static_cast<int>(b) + c + x + static_cast<int>(y) + std::get<0>(u) +\n"
       "       std::apply([](int i, float g, char h) { return i + static_cast<int>(g) + h; }, t);"},
      {"array",
       "std::array<int, 4> a = {p[1], p[2], p[3], p[4]}; a.fill(1); a[2] = 7;\n"
       "static_assert(std::tuple_size_v<std::array<int, 4>> == 4, \"\");\n"
       "auto [w, x, y, z] = a; std::array<int, 4> b{}; std::swap(a, b);\n"
       "p[0] = w + x + y + z + static_cast<int>(a.size()) + std::get<2>(b) + *b.data() + b.back();"},
      {"algorithm",
       "int v[8] = {p[0], p[1], p[2], p[3], 5, 4, 3, 2};\n"
       "std::sort(v, v + 8); std::sort(v, v + 8, [](int a, int b) { return a > b; });\n"
       "std::nth_element(v, v + 3, v + 8); std::reverse(v, v + 8); std::swap(v[0], v[1]);\n"
       "const auto mm = std::minmax_element(v, v + 8);\n"
       "p[0] = std::min(p[1], p[2]) + std::max(p[3], 4) + std::clamp(p[4], 0, 9) + std::min({1, 2, 3}) +\n"
       "       static_cast<int>(std::count_if(v, v + 8, [](int a) { return a > 2; })) + *mm.first + *mm.second +\n"
       "       static_cast<int>(std::lower_bound(v, v + 8, 3) - v) + (std::find(v, v + 8, 4) != v + 8) +\n"
       "       std::is_sorted(v, v + 8) + std::all_of(v, v + 8, [](int a) { return a > 0; });\n"
       "int w[3] = {3, 1, 2}; int d[3]; std::move(w, w + 3, d); int m = std::move(d[0]);\n"
       "f[0] = std::max(f[1], 2.0f) + static_cast<float>(m);"},
  };
  return m;
}

std::string repo_root() {
  // tests/kernels/this_file.cc → the repository root.
  return fs::path(__FILE__).parent_path().parent_path().parent_path().string();
}

// The standard headers shipped in kernel_sources/kjit/std/ (files only; detail/ is internal).
std::vector<std::string> shipped_std_headers() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(repo_root()) / "kernel_sources" / "kjit" / "std", ec)) {
    if (e.is_regular_file()) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

kjit::ProgramSpec program(const std::string& family, const std::string& source_name, const std::string& source,
                          const std::string& name_expression) {
  kjit::ProgramSpec spec;
  spec.family = family;
  spec.source_name = source_name;
  spec.source_text = source;
  spec.name_expressions = {name_expression};
  return spec;
}

kjit::ProgramSpec probe_spec(const std::string& header, const std::string& body) {
  // Twice: an include guard (or, for <cassert>, a redefinition that is allowed) must hold.
  kjit::ProgramSpec spec = program("test.std_header", "std_probe.cu",
                                   "#include <" + header + ">\n#include <" + header +
                                       ">\n__global__ void std_probe(int* p, float* f) {\n" + body + "\n}\n",
                                   "std_probe");
  spec.template_args = header;
  return spec;
}

class StdHeadersTest : public ::testing::Test {
 protected:
  static kjit::RuntimeConfig config() {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.disk_cache = false;
    return c;
  }
  // Compiles `spec` for `arch`; a CompileError is a test failure that shows the NVRTC log.
  std::shared_ptr<const kjit::CompiledProgram> expect_compiles(const kjit::ProgramSpec& spec, const char* arch) {
    try {
      auto program = rt_.compile(spec, kjit::Target::parse(arch));
      EXPECT_FALSE(program->binary.empty()) << spec.source_name << " for " << arch;
      return program;
    } catch (const kjit::CompileError& e) {
      ADD_FAILURE() << spec.source_name << " (" << spec.template_args << ") for " << arch << ":\n" << e.what();
      return nullptr;
    }
  }

  kjit::Runtime rt_{config()};
};

// Every header the issue names is shipped, and every shipped header has a probe here.
TEST_F(StdHeadersTest, EveryShippedHeaderHasAProbe) {
  const std::vector<std::string> shipped = shipped_std_headers();
  ASSERT_FALSE(shipped.empty()) << "kernel_sources/kjit/std/ not found under " << repo_root();
  for (const char* required :
       {"cstdint", "cassert", "type_traits", "limits", "cfloat", "cmath", "cstdio", "algorithm", "cstddef", "climits",
        "utility", "tuple", "array", "cstring", "stdint.h", "assert.h", "limits.h", "float.h", "math.h", "stdio.h",
        "string.h", "stddef.h"}) {
    EXPECT_TRUE(std::find(shipped.begin(), shipped.end(), required) != shipped.end()) << required << " is not shipped";
  }
  for (const std::string& h : shipped) EXPECT_TRUE(probes().count(h)) << h << " has no probe in this test";
  for (const auto& [h, body] : probes()) {
    EXPECT_TRUE(std::find(shipped.begin(), shipped.end(), h) != shipped.end()) << h << " is probed but not shipped";
  }
}

TEST_F(StdHeadersTest, EachHeaderCompilesAloneForSm80AndSm90a) {
  for (const char* arch : {"sm_90a", "sm_80"}) {
    for (const auto& [header, body] : probes()) expect_compiles(probe_spec(header, body), arch);
  }
}

// Without std_headers, NVRTC has none of them: the error users met before.
TEST_F(StdHeadersTest, OffMeansNvrtcFindsNoStandardHeader) {
  kjit::ProgramSpec spec = probe_spec("cstdint", probes().at("cstdint"));
  spec.std_headers = false;
  try {
    rt_.compile(spec, kjit::Target::parse("sm_90a"));
    ADD_FAILURE() << "compiled without std_headers";
  } catch (const kjit::CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open source file \"cstdint\""), std::string::npos) << e.what();
  }
}

// An entry of ProgramSpec::headers with a standard name replaces kjit's.
TEST_F(StdHeadersTest, ProgramHeaderOfTheSameNameWins) {
  kjit::ProgramSpec spec = probe_spec("cstdint", "p[0] = kMine;");
  spec.headers = {{"cstdint", "#pragma once\nconstexpr int kMine = 3;\n"}};
  EXPECT_NO_THROW(rt_.compile(spec, kjit::Target::parse("sm_90a")));
}

TEST_F(StdHeadersTest, OrdinaryKernelIncludingThemAllCompiles) {
  kjit::ProgramSpec spec = program("test.std_kernel", "std_kernel.cu", kjit::testing::kStdKernelSource, "std_kernel");
  for (const char* arch : {"sm_90a", "sm_80"}) {
    const auto program = expect_compiles(spec, arch);
    ASSERT_TRUE(program && program->kernels.size() == 1u);
    EXPECT_EQ(program->kernels[0].lowered_name, "std_kernel");
  }
}

TEST_F(StdHeadersTest, KernelUsingWhatOnlyKjitGivesDeviceCodeCompiles) {
  kjit::ProgramSpec spec = program("test.std_kjit_only", "kjit_only.cu", kjit::testing::kStdKjitOnlySource, "kjit_only");
  for (const char* arch : {"sm_90a", "sm_80"}) expect_compiles(spec, arch);
}

// Under -std=c++20 (the user's option comes after kjit's -std=c++17): what C++20 removed is
// gone (std::result_of) and what it added is there.
TEST_F(StdHeadersTest, CompilesUnderCpp20Too) {
  kjit::ProgramSpec spec = program("test.std_cpp20", "std_kernel.cu", kjit::testing::kStdKernelSource, "std_kernel");
  spec.options = {"-std=c++20"};
  expect_compiles(spec, "sm_90a");
  spec.source_name = "cpp20.cu";
  spec.source_text = R"(#include <type_traits>
#include <utility>
#include <array>
#include <algorithm>
__global__ void cpp20(int* p) {
  static_assert(std::is_same_v<std::remove_cvref_t<const int&>, int>);
  static_assert(std::is_same_v<std::type_identity_t<float>, float>);
  const auto a = std::to_array({1, 2, 3});
  int v[4] = {4, 3, 2, 1};
  std::shift_left(v, v + 4, 1);
  p[0] = std::cmp_less(-1, 1u) + a[1] + v[0] + std::in_range<unsigned char>(300);
}
)";
  spec.name_expressions = {"cpp20"};
  expect_compiles(spec, "sm_90a");
}

// The same file compiles under nvcc with the host's real headers: the kernel is ordinary CUDA,
// not written for kjit. (The GPU test runs both binaries.)
TEST_F(StdHeadersTest, OrdinaryKernelCompilesWithNvccToo) {
  const fs::path nvcc = fs::path(rt_.cuda_include_dir()).parent_path() / "bin" / "nvcc";
  if (!fs::exists(nvcc)) GTEST_SKIP() << "no nvcc at " << nvcc;
  const fs::path dir = kjit::test::fresh_dir("std_kernel_nvcc");
  {
    std::ofstream(dir / "std_kernel.cu") << kjit::testing::kStdKernelSource;
  }
  const auto r = kjit::test::run_process({nvcc.string(), "-cubin", "-arch=sm_90a", "-std=c++17", "--expt-relaxed-constexpr",
                                          (dir / "std_kernel.cu").string(), "-o", (dir / "std_kernel.cubin").string()},
                                         {}, dir);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_GT(fs::file_size(dir / "std_kernel.cubin"), 0u);
}

// A host-only facility is a compile error that says which header and why.
TEST_F(StdHeadersTest, HostOnlyCallIsAnErrorNamingTheHeader) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cstdio", "std::FILE* f = std::fopen(\"x\", \"r\"); (void)f;"},
      {"stdio.h", "fprintf(stderr, \"%d\\n\", p[0]);"},
      {"cstdlib", "if (p[0]) std::exit(1);"},
      {"cstdlib", "p[0] = std::rand();"},
      {"cstring", "char s[8] = \"a b\"; (void)std::strtok(s, \" \");"},
  };
  const std::vector<std::string> expected = {"kjit: <cstdio>: fopen is host-only", "kjit: <cstdio>: fprintf is host-only",
                                             "kjit: <cstdlib>: exit is host-only", "kjit: <cstdlib>: rand is host-only",
                                             "kjit: <cstring>: strtok is host-only"};
  for (size_t i = 0; i < cases.size(); ++i) {
    try {
      rt_.compile(probe_spec(cases[i].first, cases[i].second), kjit::Target::parse("sm_90a"));
      ADD_FAILURE() << cases[i].second << " compiled";
    } catch (const kjit::CompileError& e) {
      EXPECT_NE(e.log().find(expected[i]), std::string::npos) << "expected '" << expected[i] << "' in:\n" << e.log();
    }
  }
  // Naming one without calling it is fine.
  EXPECT_NO_THROW(rt_.compile(probe_spec("cstdio", "using std::fopen; p[0] = 1;"), kjit::Target::parse("sm_90a")));
}

// NVRTC's own assert ignores a `#define NDEBUG` in the source; <cassert> honours it, per
// inclusion, as the standard says.
TEST_F(StdHeadersTest, CassertFollowsNdebugAtEachInclusion) {
  auto ptx_of = [&](const std::string& source) {
    return rt_.compile(program("test.std_assert", "assert_probe.cu", source, "assert_probe"),
                       kjit::Target::parse("compute_90"))
        ->binary;
  };
  const std::string body = "__global__ void assert_probe(int* p) { assert(p[0] == 1); }\n";
  EXPECT_NE(ptx_of("#include <cassert>\n" + body).find("__assertfail"), std::string::npos);
  EXPECT_EQ(ptx_of("#define NDEBUG\n#include <cassert>\n" + body).find("__assertfail"), std::string::npos);
  EXPECT_NE(ptx_of("#define NDEBUG\n#include <cassert>\n#undef NDEBUG\n#include <assert.h>\n" + body).find("__assertfail"),
            std::string::npos);
}

// `using namespace std;` with unqualified math calls, as nvcc code writes them: std's math names
// are NVRTC's built-ins, so nothing is ambiguous.
TEST_F(StdHeadersTest, UsingNamespaceStdLeavesMathUnambiguous) {
  const std::string body =
      "using namespace std;\n"
      "f[0] = sqrt(f[1]) + fabs(f[2]) + abs(f[3]) + pow(f[4], 2) + fmin(f[5], 1.0f) + exp(f[6]);\n"
      "p[0] = abs(p[1]) + min(p[2], p[3]) + max(p[4], 1) + isnan(f[7]) + static_cast<int>(sqrt(p[5]));\n"
      "int32_t a = 1; p[1] = a + static_cast<int>(numeric_limits<int8_t>::max());";
  kjit::ProgramSpec spec = probe_spec("cmath", body);
  spec.source_text = "#include <cstdint>\n#include <cstdlib>\n#include <limits>\n#include <algorithm>\n" + spec.source_text;
  expect_compiles(spec, "sm_90a");
}

// The toolkit's CUB, with kjit's standard headers on and included first.
TEST_F(StdHeadersTest, CubBlockReduceStillCompiles) {
  const std::string source = R"(#include <cstdint>
#include <type_traits>
#include <algorithm>
#include <cub/block/block_reduce.cuh>
template <int kBlock>
__global__ void block_sum(const float* in, float* out) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage tmp;
  const float v = in[blockIdx.x * kBlock + threadIdx.x];
  const float s = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = std::max(s, 0.0f);
}
)";
  expect_compiles(program("test.std_cub", "cub_reduce.cu", source, "block_sum<256>"), "sm_90a");
}

// CUTLASS and CuTe from a CUTLASS tree (KJIT_CUTLASS_DIR: the tree's root, holding
// include/cute), with kjit's standard headers included before them and after them. CUTLASS's
// NVRTC path declares FP_NAN and friends itself and defines the macros after them.
TEST_F(StdHeadersTest, CutlassAndCuteStillCompileWhenACutlassTreeIsGiven) {
  const char* root = std::getenv("KJIT_CUTLASS_DIR");
  if (!root || !*root) GTEST_SKIP() << "KJIT_CUTLASS_DIR is not set";
  const fs::path include = fs::path(root) / "include";
  if (!fs::exists(include / "cute" / "tensor.hpp")) GTEST_SKIP() << "no cute/tensor.hpp under " << include;
  const std::string std_includes =
      "#include <cstdint>\n#include <cmath>\n#include <cstring>\n#include <type_traits>\n#include <limits>\n"
      "#include <algorithm>\n#include <tuple>\n#include <math.h>\n";
  const std::string cutlass_includes =
      "#include <cutlass/cutlass.h>\n#include <cutlass/numeric_types.h>\n#include <cutlass/array.h>\n"
      "#include <cute/tensor.hpp>\n#include <cute/atom/mma_atom.hpp>\n";
  const std::string kernel = R"(template <int kN>
__global__ void cute_copy(const float* in, float* out) {
  using namespace cute;
  Tensor src = make_tensor(make_gmem_ptr(in), make_layout(make_shape(Int<kN>{})));
  Tensor dst = make_tensor(make_gmem_ptr(out), make_layout(make_shape(Int<kN>{})));
  for (int i = threadIdx.x; i < kN; i += blockDim.x) {
    dst(i) = std::sqrt(src(i)) + float(cutlass::half_t(1.5f)) + (std::fpclassify(src(i)) == FP_NORMAL);
  }
}
)";
  kjit::ProgramSpec spec = program("test.std_cute", "cute_copy.cu", std_includes + cutlass_includes + kernel,
                                   "cute_copy<128>");
  spec.options = {"-I", include.string()};
  expect_compiles(spec, "sm_90a");
  spec.source_text = cutlass_includes + std_includes + kernel;
  expect_compiles(spec, "sm_90a");
}

}  // namespace
