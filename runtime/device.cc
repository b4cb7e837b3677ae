#include <kjit/device.hpp>
#include <kjit/error.hpp>

#include "cache/echo.hpp"
#include "cache/warn.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/target_choice.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <memory>
#include <mutex>

namespace kjit {

std::string Target::str() const {
  return fmt::format("{}_{}{}{}", ptx ? "compute" : "sm", major, minor, arch_specific ? "a" : "");
}

Target Target::parse(std::string_view text) {
  std::string_view rest = text;
  Target t;
  if (rest.substr(0, 3) == "sm_") {
    rest.remove_prefix(3);
  } else if (rest.substr(0, 8) == "compute_") {
    rest.remove_prefix(8);
    t.ptx = true;
  }
  if (!rest.empty() && rest.back() == 'a') {
    t.arch_specific = true;
    rest.remove_suffix(1);
  }
  const bool digits = rest.size() >= 2 && rest.size() <= 3 &&
                      std::all_of(rest.begin(), rest.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!digits) {
    throw InvalidArgument(fmt::format(
        "bad target '{}': expected sm_XY, sm_XYa, compute_XY or XY (e.g. sm_90a, sm_89)", cache::printable(text)));
  }
  const int value = std::stoi(std::string(rest));
  t.major = value / 10;
  t.minor = value % 10;
  if (t.major < 7) throw InvalidArgument(fmt::format("bad target '{}': kjit needs sm_70 or newer", cache::printable(text)));
  // The compute capabilities CUDA 13 knows (NVRTC 13.0 lists 75-121 of them); anything else is a
  // typo (sm_99, sm_890) that NVRTC would only reject with an opaque log. The "a" (arch-specific)
  // variants exist from sm_90 on.
  static constexpr int kKnown[] = {70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121};
  const bool known = std::find(std::begin(kKnown), std::end(kKnown), value) != std::end(kKnown);
  if (!known || (t.arch_specific && value < 90)) {
    throw InvalidArgument(fmt::format(
        "bad target '{}': no such {}architecture (known: 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, "
        "103, 110, 120, 121; an 'a' suffix from 90 on, e.g. sm_90a)",
        cache::printable(text), t.arch_specific && known ? "arch-specific " : ""));
  }
  return t;
}

Target Target::for_compute_capability(int major, int minor) {
  Target t;
  t.major = major;
  t.minor = minor;
  // Hopper and datacenter Blackwell have arch-specific instruction sets (wgmma, tcgen05) that
  // only an sm_XYa cubin may use; a cubin for sm_90a runs only on 9.0, which is what we want.
  t.arch_specific = (major == 9 && minor == 0) || (major == 10 && minor == 0);
  return t;
}

std::string DeviceInfo::fingerprint() const {
  return fmt::format(
      "name={};cc={}.{};sms={};smem_block={};smem_sm={};l2={};bus_bits={};mem_khz={};sm_khz={};driver={};nvrtc={};"
      "mig={}",
      name, cc_major, cc_minor, sm_count, max_smem_per_block_optin, max_smem_per_sm, l2_bytes, mem_bus_width_bits,
      mem_clock_khz, max_sm_clock_khz, driver_version, nvrtc_version, mig_slice);
}

std::string DeviceInfo::fingerprint_id() const {
  const std::string text = fingerprint();
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size())).substr(0, 12);
}

namespace {

/// "1g.10gb" from "NVIDIA H100 80GB HBM3 MIG 1g.10gb" (the driver names MIG instances so), else "".
std::string mig_slice_of(const std::string& name) {
  const size_t at = name.find(" MIG ");
  return at == std::string::npos ? std::string() : name.substr(at + 5);
}

}  // namespace

bool driver_available() noexcept { return detail::try_driver() != nullptr; }

std::string driver_unavailable_reason() { return detail::driver_reason(); }

int device_count() noexcept {
  const detail::Driver* d = detail::try_driver();
  if (!d) return 0;
  int n = 0;
  return d->cuDeviceGetCount(&n) == CUDA_SUCCESS ? n : 0;
}

const DeviceInfo& device_info(int ordinal) {
  static constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<std::unique_ptr<DeviceInfo>, kMaxDevices> infos;
  // Ops ask on every call: after the first read it is one atomic load.
  static std::array<std::atomic<const DeviceInfo*>, kMaxDevices> ready{};
  if (ordinal >= 0 && ordinal < kMaxDevices) {
    if (const DeviceInfo* info = ready[ordinal].load(std::memory_order_acquire)) return *info;
  }
  const detail::Driver& d = detail::driver();
  if (ordinal < 0 || ordinal >= kMaxDevices || ordinal >= device_count()) {
    throw InvalidArgument(fmt::format("device ordinal {} out of range ({} devices)", ordinal, device_count()));
  }
  std::call_once(once[ordinal], [&] {
    auto info = std::make_unique<DeviceInfo>();
    CUdevice dev = 0;
    KJIT_CU(cuDeviceGet(&dev, ordinal));
    char name[256] = {};
    KJIT_CU(cuDeviceGetName(name, sizeof(name), dev));
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      detail::check_driver(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
      return v;
    };
    info->ordinal = ordinal;
    info->name = name;
    info->cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    info->cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    info->sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info->max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info->max_smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    info->max_smem_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    info->l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    info->regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    info->regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    size_t total = 0;
    KJIT_CU(cuDeviceTotalMem(&total, dev));
    info->global_mem_bytes = static_cast<int64_t>(total);
    KJIT_CU(cuDriverGetVersion(&info->driver_version));
    info->mig_slice = mig_slice_of(info->name);
    // The one target choice of this device (KJIT_ARCH, else its own, else the PTX fallback), made
    // here because the loads, the planners and the family checks all read device_info();
    // device_identity() copies it.
    const detail::TargetChoice choice =
        detail::choose_target(info->cc_major, info->cc_minor, detail::nvrtc_supported_sms(), detail::kjit_arch(),
                              fmt::format("device {} ({})", ordinal, info->name));
    info->compile_target = choice.target;
    if (!choice.note.empty()) warn(choice.note);
    infos[ordinal] = std::move(info);
  });
  if (!infos[ordinal]) throw DriverError(fmt::format("reading device {}'s attributes failed earlier", ordinal), 0);
  ready[ordinal].store(infos[ordinal].get(), std::memory_order_release);
  return *infos[ordinal];
}

const DeviceInfo& device_identity(int ordinal) {
  static constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<std::unique_ptr<DeviceInfo>, kMaxDevices> infos;
  const DeviceInfo& base = device_info(ordinal);  // checks the ordinal
  std::call_once(once[ordinal], [&] {
    const detail::Driver& d = detail::driver();
    auto info = std::make_unique<DeviceInfo>(base);
    CUdevice dev = 0;
    KJIT_CU(cuDeviceGet(&dev, ordinal));
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      detail::check_driver(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
      return v;
    };
    info->mem_bus_width_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    info->mem_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    info->max_sm_clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    // The compiler is part of what a tuned winner was measured with (its code generation).
    try {
      info->nvrtc_version = detail::nvrtc_version();
    } catch (const std::exception&) {
      info->nvrtc_version.clear();
    }
    infos[ordinal] = std::move(info);
  });
  if (!infos[ordinal]) throw DriverError(fmt::format("reading device {}'s attributes failed earlier", ordinal), 0);
  return *infos[ordinal];
}

}  // namespace kjit
