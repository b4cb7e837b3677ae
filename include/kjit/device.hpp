#pragma once
/// \file device.hpp
/// Compile targets and what kjit knows about each CUDA device. Everything here that touches a
/// device loads the driver lazily; without a driver, device_count() is 0 and the rest throws
/// DriverError saying so.

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit {

/// An NVRTC compile target: a cubin for `sm_XY[a]` or PTX for `compute_XY[a]`.
struct Target {
  int major = 0;
  int minor = 0;
  /// The arch-specific "a" feature set (sm_90a: wgmma, setmaxnreg; sm_100a: tcgen05).
  bool arch_specific = false;
  /// Emit PTX (compute_XY) instead of a cubin (sm_XY).
  bool ptx = false;

  /// 10 * major + minor (90 for sm_90a).
  int sm() const noexcept { return major * 10 + minor; }
  /// "sm_90a", "sm_89", "compute_90".
  std::string str() const;
  /// Parses "sm_90a", "sm_89", "compute_80", "90a", "89". Throws InvalidArgument otherwise.
  static Target parse(std::string_view text);
  /// The target kjit compiles for a device of compute capability major.minor: the arch-specific
  /// target where the arch has one worth using (9.0 → sm_90a, 10.0 → sm_100a), else sm_XY.
  static Target for_compute_capability(int major, int minor);

  // What the arch has: the one place kjit's families, planners and checks decide it.
  /// mma.sync bf16 (m16n8k16), ldmatrix, cp.async: sm_80+.
  bool has_bf16_mma() const noexcept { return sm() >= 80; }
  /// The one SM whose arch-specific feature set has wgmma (sm_90a): the min_sm of a family
  /// whose every kernel needs it (the Hopper TMA + wgmma prefills).
  static constexpr int kWgmmaSm = 90;
  /// wgmma, setmaxnreg and the Hopper TMA kernels that use them: the arch-specific sm_90a only
  /// (sm_100a replaced wgmma with tcgen05).
  bool has_wgmma() const noexcept { return sm() == kWgmmaSm && arch_specific; }
  /// Thread-block clusters, distributed shared memory and programmatic dependent launch: sm_90+.
  bool has_clusters() const noexcept { return sm() >= 90; }
  bool has_pdl() const noexcept { return sm() >= 90; }

  friend bool operator==(const Target& a, const Target& b) noexcept {
    return a.major == b.major && a.minor == b.minor && a.arch_specific == b.arch_specific &&
           a.ptx == b.ptx;
  }
};

/// Attributes of one device, read once through the driver and cached: what the planners and
/// arch checks read (target() and its features, SMs, shared memory, L2, registers). Tests and
/// tuners fill one by hand to plan for a device that is not present.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_block = 0;
  int max_smem_per_block_optin = 0;  ///< bytes a CTA may use after opting in
  int max_smem_per_sm = 0;           ///< bytes
  int l2_bytes = 0;
  int64_t global_mem_bytes = 0;
  int driver_version = 0;            ///< e.g. 13000
  int regs_per_sm = 0;               ///< 32-bit registers per SM
  int regs_per_block = 0;            ///< 32-bit registers a CTA may use
  // What else tells two devices of one name apart for tuning (see fingerprint()): filled by
  // device_identity(), left 0 / "" by device_info() (reading the clocks costs about a millisecond,
  // which every process's first op call would pay).
  int mem_bus_width_bits = 0;        ///< global memory bus width, bits
  int mem_clock_khz = 0;             ///< peak memory clock, kHz
  int max_sm_clock_khz = 0;          ///< typical (max boost) SM clock, kHz
  std::string nvrtc_version;         ///< the NVRTC kjit compiles with, "13.0"; "" when unknown
  /// The MIG slice ("1g.10gb") when the device is a MIG instance, read from the name the driver
  /// gives it ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"); "" for a whole GPU.
  std::string mig_slice;
  /// The target kjit compiles for on this device, as device_info() chose it: the device's own
  /// (Target::for_compute_capability) where the loaded NVRTC can build it; on a GPU newer than
  /// NVRTC, PTX (compute_XY) for the highest arch NVRTC lists below it, JIT-compiled by the
  /// driver at load (warned once; kernels needing sm_XYa targets are then not offered); or the
  /// KJIT_ARCH environment variable (sm_89, sm_90, compute_90, ...: read once per process, and
  /// it must be able to run on the device, else device_info throws InvalidArgument). Left
  /// unset (major 0) in a hand-built DeviceInfo: the device's own target.
  Target compile_target;

  /// 10 · cc_major + cc_minor (90 on an H200).
  int sm() const noexcept { return cc_major * 10 + cc_minor; }

  /// What kjit compiles for on this device: compile_target, or
  /// Target::for_compute_capability(cc_major, cc_minor) when that is unset.
  Target target() const {
    return compile_target.major != 0 ? compile_target : Target::for_compute_capability(cc_major, cc_minor);
  }

  /// The canonical text of everything that identifies this device for tuning, one `key=value`
  /// per field joined by ';' in a fixed order: name, compute capability, SMs, opt-in shared
  /// memory per CTA and per SM, L2 bytes, memory bus width and clock, SM clock, driver version,
  /// NVRTC version, MIG slice. Two devices with the same fingerprint get the same tuned plans;
  /// anything that can move a measured winner (another clock, a driver or compiler update, a
  /// MIG slice) changes it. The ordinal, memory size and register limits are left out.
  std::string fingerprint() const;
  /// 12 hex digits of XXH3-64 over fingerprint(): the short stable id that names tuning tables
  /// (`<cache>/tuning/<id>.json`) and that `kjit devices` prints.
  std::string fingerprint_id() const;
};

/// True when libcuda.so.1 loaded and cuInit succeeded.
bool driver_available() noexcept;
/// Why the driver is not available ("libcuda.so.1: cannot open shared object file"), or "".
std::string driver_unavailable_reason();
/// Number of CUDA devices; 0 when there is no driver or no device.
int device_count() noexcept;
/// Attributes of device `ordinal`, cached after the first call; the fingerprint-only fields
/// (memory bus width and clock, SM clock, NVRTC version) are left empty: see device_identity().
/// Throws DriverError when there is no driver, InvalidArgument for an ordinal out of range.
const DeviceInfo& device_info(int ordinal);
/// device_info(ordinal) with the fingerprint-only fields filled too, cached after the first call:
/// what DeviceInfo::fingerprint() needs (tuning tables, `kjit devices`). Same errors.
const DeviceInfo& device_identity(int ordinal);

}  // namespace kjit
