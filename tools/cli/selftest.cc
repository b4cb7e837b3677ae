// `kjit selftest`: run the shipped ops on device 0 (or the devices named) against their float64
// references.
#include "tools/cli/common.hpp"

#include <kjit/error.hpp>

#include "tools/selftest/selftest.hpp"
#include "tools/testing/gpu.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

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
  std::vector<int> devices;  ///< --device, in the order given; empty: device 0
  bool all_devices = false;
};

std::string device_count_text(int count) {
  return fmt::format("this machine has {} CUDA device{}{}", count, count == 1 ? "" : "s",
                     count > 1 ? fmt::format(" (0 to {})", count - 1) : "");
}

/// The ordinals to check, each once, in the order asked. Throws InvalidArgument naming the
/// device count for an ordinal the machine does not have.
std::vector<int> chosen_devices(const SelftestOptions& o, int count) {
  std::vector<int> out;
  if (o.all_devices) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  if (o.devices.empty()) return {0};
  for (int d : o.devices) {
    if (d >= count) throw InvalidArgument(fmt::format("--device {} is out of range: {}", d, device_count_text(count)));
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

/// Runs one op's checks; an exception escaping them becomes one failed result, so one broken op
/// does not hide the others.
void run_checks(const char* op, Checks checks, int device, std::vector<selftest::Result>& results) {
  const size_t first = results.size();
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
  for (size_t i = first; i < results.size(); ++i) results[i].device = device;
}

/// Makes `device`'s primary context current and runs every op's checks there; a device that
/// cannot be opened is one failed result.
void run_device(int device, std::vector<selftest::Result>& results) {
  try {
    testing::use_device(device);
    const DeviceInfo& info = device_info(device);
    if (!output().json) {
      fmt::print("device {}: {} (cc {}.{}, {} SMs, {})\n", device, info.name, info.cc_major, info.cc_minor,
                 info.sm_count, info.target().str());
    }
  } catch (const std::exception& e) {
    selftest::Result failed;
    failed.op = "device";
    failed.rel_l2 = std::numeric_limits<double>::quiet_NaN();
    failed.detail = first_line(e.what());
    failed.device = device;
    results.push_back(failed);
    return;
  }
  for (const OpChecks& op : kOpChecks) run_checks(op.op, op.checks, device, results);
}

int run_selftest(const SelftestOptions& o) {
  if (std::string reason = missing_gpu("kjit selftest"); !reason.empty()) {
    // Named devices a machine without any cannot have: say so in the same line.
    if (!o.devices.empty()) reason += fmt::format("; --device {} is out of range: {}", o.devices.front(), device_count_text(0));
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

  const std::vector<int> devices = chosen_devices(o, device_count());
  std::vector<selftest::Result> results;
  for (int device : devices) run_device(device, results);

  size_t failed = 0;
  for (const selftest::Result& r : results) failed += r.passed ? 0 : 1;

  if (output().json) {
    nlohmann::json list = nlohmann::json::array();
    for (const selftest::Result& r : results) {
      list.push_back({{"device", r.device},
                      {"op", r.op},
                      {"shape", r.shape},
                      {"rel_l2", r.rel_l2},
                      {"tolerance", r.tolerance},
                      {"passed", r.passed},
                      {"detail", r.detail}});
    }
    nlohmann::json per_device = nlohmann::json::array();
    for (int device : devices) {
      size_t checks = 0, device_failed = 0;
      for (const selftest::Result& r : results) {
        if (r.device != device) continue;
        ++checks;
        device_failed += r.passed ? 0 : 1;
      }
      nlohmann::json d = {{"ordinal", device}, {"checks", checks}, {"failed", device_failed},
                          {"passed", device_failed == 0}};
      try {
        const DeviceInfo& info = device_info(device);
        d["name"] = info.name;
        d["target"] = info.target().str();
      } catch (const std::exception&) {
        // The device that could not be opened already has its failed result.
      }
      per_device.push_back(d);
    }
    print_json({{"devices", per_device}, {"passed", failed == 0}, {"failed", failed}, {"results", list}});
  } else {
    size_t op_w = 2, shape_w = 5;
    for (const selftest::Result& r : results) {
      op_w = std::max(op_w, r.op.size());
      shape_w = std::max(shape_w, r.shape.size());
    }
    fmt::print("{:>6}  {:<{}}  {:<{}}  {:>10}  {:>9}  {}\n", "device", "op", op_w, "shape", shape_w, "rel_l2",
               "tolerance", "result");
    for (const selftest::Result& r : results) {
      const std::string rel = std::isnan(r.rel_l2) ? "-" : fmt::format("{:.3e}", r.rel_l2);
      const std::string tol = r.tolerance > 0 ? fmt::format("{:.1e}", r.tolerance) : "-";
      fmt::print("{:>6}  {:<{}}  {:<{}}  {:>10}  {:>9}  {}\n", r.device, r.op, op_w, r.shape, shape_w, rel, tol,
                 r.passed ? "PASS" : "FAIL");
      if (!r.passed && !r.detail.empty()) fmt::print("    {}\n", r.detail);
    }
    fmt::print("{} of {} checks passed on device{} {}\n", results.size() - failed, results.size(),
               devices.size() == 1 ? "" : "s", fmt::join(devices, ", "));
  }
  if (failed > 0) {
    std::vector<std::string> where;
    for (int device : devices) {
      size_t n = 0;
      for (const selftest::Result& r : results) n += r.device == device && !r.passed ? 1 : 0;
      if (n > 0) where.push_back(fmt::format("device {}: {}", device, n));
    }
    fmt::print(stderr, "kjit: error: {} of {} selftest checks failed ({})\n", failed, results.size(),
               fmt::join(where, ", "));
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void add_selftest_command(CLI::App& root, std::vector<Command>& out) {
  auto o = std::make_shared<SelftestOptions>();
  CLI::App* cmd = root.add_subcommand(
      "selftest", "Run every shipped op on device 0 (or the devices --device / --all-devices name) with "
                  "real-model shapes and compare with a float64 reference; exits 0 only when all pass "
                  "on every device named, 2 when there is no GPU or a device does not exist");
  cmd->add_flag("--skip-without-gpu", o->skip_without_gpu,
                "Without a GPU, say so and exit 0 instead of 2 (for scripts that run everywhere)");
  CLI::Option* device = cmd->add_option("--device", o->devices,
                                         "Run on this CUDA device ordinal (repeatable; default 0)")
                            ->check(CLI::Validator(
                                [](std::string& text) -> std::string {
                                  const bool digits = !text.empty() && text.size() <= 6 &&
                                                      text.find_first_not_of("0123456789") == std::string::npos;
                                  return digits ? std::string()
                                                : "a device ordinal is a number from 0, got '" + text + "'";
                                },
                                "", "device ordinal"))
                            ->type_name("N");
  cmd->add_flag("--all-devices", o->all_devices, "Run on every CUDA device of the machine, one after another")
      ->excludes(device);
  add_json_flag(cmd);
  out.push_back({cmd, [o] { return run_selftest(*o); }});
}

}  // namespace kjit::cli
