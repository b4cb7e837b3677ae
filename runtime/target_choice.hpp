#pragma once
/// \file runtime/target_choice.hpp
/// Which target kjit compiles for on a device: the device's own cubin target where NVRTC can
/// build it; on a GPU newer than NVRTC (its arch not in nvrtcGetSupportedArchs), PTX for the
/// highest listed arch below it, which the driver JIT-compiles at load; or what KJIT_ARCH says.
/// device_info() applies it once per device, so DeviceInfo::target() is the one answer every
/// planner, family check and Runtime::load reads.

#include <kjit/device.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace kjit::detail {

/// The chosen target, and the warning to give once when it is not the device's own cubin
/// target ("" when it is, or when KJIT_ARCH chose it).
struct TargetChoice {
  Target target;
  std::string note;
};

/// The target for a device of compute capability `cc_major`.`cc_minor` called `device` (for
/// messages), given NVRTC's supported SMs (`nvrtc_sms`, e.g. 75, 80, ..., 121; empty: unknown,
/// assume the device's own target) and `kjit_arch` (KJIT_ARCH; empty: none).
///   - KJIT_ARCH: Target::parse of it, which must run on the device: an sm_XY cubin on X.Y..X.9,
///     an sm_XYa cubin or compute_XYa PTX on X.Y only, compute_XY PTX on X.Y and newer. Throws
///     InvalidArgument naming KJIT_ARCH, the device and that rule otherwise.
///   - the device's arch listed by NVRTC: Target::for_compute_capability.
///   - not listed: compute_S PTX for the highest listed S at or below the device's SM, with a
///     note saying so and that arch-specific kernels are not available; none below it (a device
///     older than NVRTC supports): the device's own target, which NVRTC then refuses by name.
TargetChoice choose_target(int cc_major, int cc_minor, const std::vector<int>& nvrtc_sms, std::string_view kjit_arch,
                           std::string_view device);

/// The KJIT_ARCH environment variable, read once per process ("" when unset): the one reading
/// that device_info() and the CLI's default target share.
std::string_view kjit_arch();

/// Target::parse(`value`) for a KJIT_ARCH value; throws InvalidArgument "KJIT_ARCH=<value>: <why>".
Target parse_kjit_arch(std::string_view value);

/// The SMs nvrtcGetSupportedArchs lists (read once; empty when NVRTC cannot say).
const std::vector<int>& nvrtc_supported_sms();

}  // namespace kjit::detail
