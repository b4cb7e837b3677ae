// The compile target of a device (see target_choice.hpp).
#include "runtime/target_choice.hpp"

#include <kjit/error.hpp>

#include "cache/echo.hpp"
#include "runtime/nvrtc.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>

namespace kjit::detail {

TargetChoice choose_target(int cc_major, int cc_minor, const std::vector<int>& nvrtc_sms, std::string_view kjit_arch,
                           std::string_view device) {
  const int sm = cc_major * 10 + cc_minor;
  if (!kjit_arch.empty()) {
    const Target t = parse_kjit_arch(kjit_arch);
    bool runs = false;
    if (t.arch_specific) {
      runs = t.major == cc_major && t.minor == cc_minor;
    } else if (!t.ptx) {
      runs = t.major == cc_major && t.minor <= cc_minor;
    } else {
      runs = t.sm() <= sm;
    }
    if (!runs) {
      throw InvalidArgument(fmt::format(
          "KJIT_ARCH={} cannot run on {} (compute capability {}.{}): an sm_XY cubin runs on X.Y up to X.9, an "
          "sm_XYa cubin or compute_XYa PTX only on X.Y, compute_XY PTX on X.Y and newer",
          kjit_arch, device, cc_major, cc_minor));
    }
    return {t, ""};
  }
  const Target native = Target::for_compute_capability(cc_major, cc_minor);
  if (nvrtc_sms.empty() || std::find(nvrtc_sms.begin(), nvrtc_sms.end(), sm) != nvrtc_sms.end()) return {native, ""};
  int best = 0;
  for (int s : nvrtc_sms) {
    if (s <= sm) best = std::max(best, s);
  }
  if (best == 0) return {native, ""};
  Target ptx;
  ptx.major = best / 10;
  ptx.minor = best % 10;
  ptx.ptx = true;
  const int newest = *std::max_element(nvrtc_sms.begin(), nvrtc_sms.end());
  std::string note = fmt::format(
      "{} (compute capability {}.{}) is {} NVRTC {} (newest target sm_{}): kjit compiles PTX for {}, which the "
      "driver JIT-compiles when it loads it; kernels that need arch-specific instructions (the sm_XYa targets: "
      "wgmma, tcgen05) are not available on it. Set KJIT_ARCH to choose another target",
      device, cc_major, cc_minor, sm > newest ? "newer than" : "not a target of", nvrtc_version(), newest,
      ptx.str());
  return {ptx, std::move(note)};
}

std::string_view kjit_arch() {
  static const char* const value = std::getenv("KJIT_ARCH");
  return value != nullptr ? value : "";
}

Target parse_kjit_arch(std::string_view value) {
  try {
    return Target::parse(value);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("KJIT_ARCH={}: {}", cache::printable(value), e.what()));
  }
}

const std::vector<int>& nvrtc_supported_sms() {
  static const std::vector<int> sms = [] {
    std::vector<int> out;
    int n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return out;
    out.resize(static_cast<size_t>(n));
    if (nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) out.clear();
    return out;
  }();
  return sms;
}

}  // namespace kjit::detail
