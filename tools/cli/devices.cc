// `kjit devices`: the CUDA driver and every device with the target kjit compiles for it.
#include "tools/cli/common.hpp"

#include "runtime/internal/driver.hpp"

#include <fmt/format.h>

namespace kjit::cli {
namespace {

std::string driver_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

int run_devices() {
  nlohmann::json report;
  if (!driver_available()) {
    // No driver is a normal state for a build machine: report it, and succeed.
    const std::string reason = driver_unavailable_reason();
    if (output().json) {
      print_json({{"driver", nullptr}, {"reason", reason}, {"devices", nlohmann::json::array()}});
    } else {
      fmt::print("no CUDA driver: {}\n", reason.empty() ? "libcuda could not be loaded" : reason);
    }
    return kExitOk;
  }

  int driver_version = 0;
  if (const detail::Driver* d = detail::try_driver()) d->cuDriverGetVersion(&driver_version);
  const int count = device_count();

  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    const DeviceInfo& info = device_identity(i);
    devices.push_back({{"ordinal", info.ordinal},
                       {"name", info.name},
                       {"compute_capability", fmt::format("{}.{}", info.cc_major, info.cc_minor)},
                       {"sm_count", info.sm_count},
                       {"global_mem_bytes", info.global_mem_bytes},
                       {"max_smem_per_block_optin", info.max_smem_per_block_optin},
                       {"l2_bytes", info.l2_bytes},
                       {"target", info.target().str()},
                       {"fingerprint_id", info.fingerprint_id()},
                       {"fingerprint",
                        {{"name", info.name},
                         {"compute_capability", fmt::format("{}.{}", info.cc_major, info.cc_minor)},
                         {"sm_count", info.sm_count},
                         {"max_smem_per_block_optin", info.max_smem_per_block_optin},
                         {"max_smem_per_sm", info.max_smem_per_sm},
                         {"l2_bytes", info.l2_bytes},
                         {"mem_bus_width_bits", info.mem_bus_width_bits},
                         {"mem_clock_khz", info.mem_clock_khz},
                         {"max_sm_clock_khz", info.max_sm_clock_khz},
                         {"driver_version", info.driver_version},
                         {"nvrtc_version", info.nvrtc_version},
                         {"mig_slice", info.mig_slice},
                         {"text", info.fingerprint()}}}});
  }

  if (output().json) {
    print_json({{"driver", driver_version_text(driver_version)},
                {"driver_version", driver_version},
                {"devices", devices}});
    return kExitOk;
  }

  fmt::print("CUDA driver {} ({}), {} device{}\n", driver_version_text(driver_version),
             driver_version, count, count == 1 ? "" : "s");
  if (count == 0) {
    fmt::print("no CUDA device\n");
    return kExitOk;
  }
  fmt::print("{:>3}  {:<28} {:>4} {:>5} {:>10}  {:<7} {}\n", "#", "name", "cc", "SMs", "memory",
             "target", "fingerprint");
  for (int i = 0; i < count; ++i) {
    const DeviceInfo& info = device_identity(i);
    fmt::print("{:>3}  {:<28} {:>4} {:>5} {:>10}  {:<7} {}\n", info.ordinal, info.name,
               fmt::format("{}.{}", info.cc_major, info.cc_minor), info.sm_count,
               human_bytes(static_cast<uint64_t>(info.global_mem_bytes)), info.target().str(),
               info.fingerprint_id());
  }
  return kExitOk;
}

}  // namespace

void add_devices_command(CLI::App& root, std::vector<Command>& out) {
  CLI::App* cmd = root.add_subcommand(
      "devices", "Show the CUDA driver and each device: name, compute capability, SMs, memory, "
                 "the target kjit compiles for it and its fingerprint id (tuning tables are per fingerprint; "
                 "--json prints every field). No driver is reported, not an error");
  add_json_flag(cmd);
  out.push_back({cmd, run_devices});
}

}  // namespace kjit::cli
