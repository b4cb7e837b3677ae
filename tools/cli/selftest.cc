// `kjit selftest`: run the shipped ops on device 0 against their float64 references.
#include "tools/cli/common.hpp"

#include "tools/selftest/selftest.hpp"
#include "tools/testing/gpu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

namespace kjit::cli {
namespace {

using Checks = std::vector<selftest::Result> (*)(Runtime&);

/// Every shipped op's checks, in the order the table shows them (the name labels a check set
/// that threw before returning results).
struct OpChecks {
  const char* op;
  Checks checks;
};
const OpChecks kOpChecks[] = {
    {"rotary", selftest::rotary},
    {"attention.decode", selftest::attention_decode},
    {"attention", selftest::attention},
    {"mla.swa_decode", selftest::swa_decode},
    {"fp8", selftest::fp8},
};

struct SelftestOptions {
  bool skip_without_gpu = false;
};

/// Runs one op's checks; an exception escaping them becomes one failed result, so one broken op
/// does not hide the others.
void run_checks(const char* op, Checks checks, std::vector<selftest::Result>& results) {
  try {
    std::vector<selftest::Result> r = checks(Runtime::global());
    if (r.empty()) {
      selftest::Result none;
      none.op = op;
      none.rel_l2 = std::numeric_limits<double>::quiet_NaN();
      none.detail = "ran no checks";
      r.push_back(none);
    }
    results.insert(results.end(), r.begin(), r.end());
  } catch (const std::exception& e) {
    selftest::Result failed;
    failed.op = op;
    failed.passed = false;
    failed.rel_l2 = std::numeric_limits<double>::quiet_NaN();  // nothing was compared
    failed.detail = first_line(e.what());
    results.push_back(failed);
  }
}

int run_selftest(const SelftestOptions& o) {
  if (!testing::has_gpu()) {
    std::string reason = "no CUDA device: selftest needs a GPU";
    if (!driver_available()) reason += fmt::format(" ({})", driver_unavailable_reason());
    if (o.skip_without_gpu) {
      if (output().json) {
        print_json({{"skipped", true}, {"reason", reason}, {"results", nlohmann::json::array()}});
      } else {
        fmt::print("selftest skipped: {}\n", reason);
      }
      return kExitOk;
    }
    // Asked for explicitly, a selftest that cannot run is not a success.
    if (output().json) {
      print_json({{"passed", false}, {"error", reason}, {"results", nlohmann::json::array()}});
    }
    fmt::print(stderr, "kjit: error: {}\n", reason);
    return kExitCannotRun;
  }

  const DeviceInfo& device = device_info(0);
  if (!output().json) {
    fmt::print("device 0: {} (cc {}.{}, {} SMs, {})\n", device.name, device.cc_major,
               device.cc_minor, device.sm_count, device.target().str());
  }

  std::vector<selftest::Result> results;
  for (const OpChecks& op : kOpChecks) run_checks(op.op, op.checks, results);

  size_t failed = 0;
  for (const selftest::Result& r : results) failed += r.passed ? 0 : 1;

  if (output().json) {
    nlohmann::json list = nlohmann::json::array();
    for (const selftest::Result& r : results) {
      list.push_back({{"op", r.op},
                      {"shape", r.shape},
                      {"rel_l2", r.rel_l2},
                      {"tolerance", r.tolerance},
                      {"passed", r.passed},
                      {"detail", r.detail}});
    }
    print_json({{"device", device.name},
                {"target", device.target().str()},
                {"passed", failed == 0},
                {"failed", failed},
                {"results", list}});
  } else {
    size_t op_w = 2, shape_w = 5;
    for (const selftest::Result& r : results) {
      op_w = std::max(op_w, r.op.size());
      shape_w = std::max(shape_w, r.shape.size());
    }
    fmt::print("{:<{}}  {:<{}}  {:>10}  {:>9}  {}\n", "op", op_w, "shape", shape_w, "rel_l2",
               "tolerance", "result");
    for (const selftest::Result& r : results) {
      const std::string rel = std::isnan(r.rel_l2) ? "-" : fmt::format("{:.3e}", r.rel_l2);
      const std::string tol = r.tolerance > 0 ? fmt::format("{:.1e}", r.tolerance) : "-";
      fmt::print("{:<{}}  {:<{}}  {:>10}  {:>9}  {}\n", r.op, op_w, r.shape, shape_w, rel, tol,
                 r.passed ? "PASS" : "FAIL");
      if (!r.passed && !r.detail.empty()) fmt::print("    {}\n", r.detail);
    }
    fmt::print("{} of {} checks passed\n", results.size() - failed, results.size());
  }
  if (failed > 0) {
    fmt::print(stderr, "kjit: error: {} of {} selftest checks failed\n", failed, results.size());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void add_selftest_command(CLI::App& root, std::vector<Command>& out) {
  auto o = std::make_shared<SelftestOptions>();
  CLI::App* cmd = root.add_subcommand(
      "selftest", "Run every shipped op on device 0 with real-model shapes and compare with a "
                  "float64 reference; exits 0 only when all pass, 2 when there is no GPU");
  cmd->add_flag("--skip-without-gpu", o->skip_without_gpu,
                "Without a GPU, say so and exit 0 instead of 2 (for scripts that run everywhere)");
  add_json_flag(cmd);
  out.push_back({cmd, [o] { return run_selftest(*o); }});
}

}  // namespace kjit::cli
