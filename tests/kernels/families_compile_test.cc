// Every shipped family's default specializations compile with NVRTC for each arch CI covers
// (sm_80, sm_89, sm_90a, sm_100a), and the families reject parameters outside their space.
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

namespace {

struct Job {
  const kjit::Family* family;
  kjit::ParamMap params;
  kjit::Target target;
};

std::string describe(const Job& j) {
  std::string s = j.family->name + " " + j.target.str();
  for (const auto& [k, v] : j.params) s += " " + k + "=" + v;
  return s;
}

TEST(FamiliesCompile, DefaultsCompileForEveryCiArch) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;  // measure NVRTC itself, and leave no state behind
  kjit::Runtime rt(c);
  std::vector<Job> jobs;
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a"}) {
    const kjit::Target t = kjit::Target::parse(arch);
    for (const kjit::Family& f : kjit::families()) {
      if (t.sm() < f.min_sm) continue;
      ASSERT_FALSE(f.defaults.empty()) << f.name << " has no default specializations";
      for (const auto& p : f.defaults) {
        if (f.unsupported_reason(p, t).empty()) jobs.push_back({&f, p, t});
      }
    }
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      try {
        auto p = rt.compile(jobs[i].family->spec(jobs[i].params), jobs[i].target);
        std::lock_guard lock(mutex);
        if (p->binary.empty()) failures.push_back(describe(jobs[i]) + ": empty binary");
        for (const auto& k : p->kernels) {
          if (k.spill_bytes > 0) {
            // Spills are a performance bug, not a correctness one: report them loudly.
            std::printf("note: %s: %s spills %d bytes\n", describe(jobs[i]).c_str(), k.name_expression.c_str(), k.spill_bytes);
          }
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        failures.push_back(describe(jobs[i]) + ": " + e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  for (unsigned i = 0; i < n; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(rt.stats().compiles, jobs.size());
  std::printf("%zu specializations compiled in %.1f s of NVRTC time\n", jobs.size(), rt.stats().compile_ms / 1000);
}

TEST(FamiliesCompile, RejectParametersOutsideTheSpace) {
  for (const kjit::Family& f : kjit::families()) {
    ASSERT_FALSE(f.params.empty()) << f.name;
    kjit::ParamMap good = f.defaults.at(0);
    EXPECT_NO_THROW(f.spec(good)) << f.name;
    kjit::ParamMap unknown = good;
    unknown["no_such_param"] = "1";
    EXPECT_THROW(f.spec(unknown), kjit::InvalidArgument) << f.name;
    kjit::ParamMap missing = good;
    missing.erase(f.params[0].name);
    EXPECT_THROW(f.spec(missing), kjit::InvalidArgument) << f.name;
    kjit::ParamMap bad = good;
    bad[f.params[0].name] = "not-a-value";
    EXPECT_THROW(f.spec(bad), kjit::InvalidArgument) << f.name;
  }
  EXPECT_THROW(kjit::family("no-such-family"), kjit::InvalidArgument);
}

TEST(FamiliesCompile, PointsOutsideTheirTargetsAreRefused) {
  const kjit::Family& gemm = kjit::family("fp8.gemm");
  kjit::ParamMap wgmma;
  for (const auto& p : gemm.defaults) {
    if (p.at("impl") == "wgmma") wgmma = p;
  }
  ASSERT_FALSE(wgmma.empty());
  EXPECT_EQ(gemm.unsupported_reason(wgmma, kjit::Target::parse("sm_90a")), "");
  for (const char* t : {"sm_89", "sm_90", "sm_100a"}) {
    EXPECT_NE(gemm.unsupported_reason(wgmma, kjit::Target::parse(t)).find("needs sm_90a"), std::string::npos) << t;
  }
  EXPECT_NE(gemm.unsupported_reason(gemm.defaults.back(), kjit::Target::parse("sm_80")).find("sm_89"),
            std::string::npos);
}

}  // namespace
