#pragma once
/// \file events.hpp
/// What a Runtime tells an operator as it works: one Event per compile, disk hit, load, rejected
/// cache entry and refused JIT, handed to the listeners registered with Runtime::add_listener.
/// Events fire only where the runtime already does slow work (a disk read, an NVRTC compile, a
/// module load, an error); a memory hit and an op's hot path never build or send one.

#include <cstdint>
#include <functional>
#include <string_view>

namespace kjit {

/// What happened.
enum class EventKind : uint8_t {
  kCompile,   ///< NVRTC compiled a program (and it was published to the disk cache when writable)
  kDiskHit,   ///< a program was read from the disk cache (checksum and metadata verified)
  kLoad,      ///< a program was loaded onto a device (cuLibraryLoadData and its kernels)
  kRejected,  ///< a disk cache entry was not used: corrupt, not the program asked for, or refused
              ///< by the driver; a compile replaces it (unless JIT is off or frozen)
  kRefused,   ///< a miss was refused: JitDisabled (KJIT_JIT=off or Runtime::freeze) or CaptureMiss
};

/// "compile", "disk_hit", "load", "rejected", "refused".
const char* event_kind_name(EventKind kind) noexcept;

/// One event. The views point into the runtime's own strings and stay valid only during the
/// listener's call: copy what must outlive it.
struct Event {
  EventKind kind = EventKind::kCompile;
  std::string_view key;     ///< the cache key, 32 hex digits
  std::string_view family;  ///< ProgramSpec::family ("rotary", "attention.decode", a user name)
  std::string_view params;  ///< ProgramSpec::template_args ("head_dim=128 style=neox")
  std::string_view target;  ///< "sm_90a", "compute_90"
  /// Wall time of what the event reports, in milliseconds: the NVRTC compile, the disk read and
  /// decode, the module load; 0 for kRejected and kRefused.
  double ms = 0;
  int device = -1;  ///< the device ordinal for kLoad (and a refused capture); -1 otherwise
  /// kRejected: why the entry was not used; kRefused: the error's message; else empty.
  std::string_view detail;
};

/// A listener. It runs on the thread that did the work, possibly several at once, so it must be
/// thread-safe; it should be quick (a compile waits for it, and may hold the key's cross-process
/// lock meanwhile). It may add or remove listeners but must not compile or load through the
/// Runtime that sent the event. An exception it throws is caught, reported once per listener on
/// stderr, and never reaches the op.
using EventListener = std::function<void(const Event&)>;

}  // namespace kjit
