#pragma once
/// \file events.hpp
/// What a Runtime tells an operator as it works: one Event per compile, disk hit, load, rejected
/// cache entry and refused JIT, and under KJIT_JIT=async per fallback built, background compile
/// done or abandoned and miss without a fallback, handed to the listeners registered with
/// Runtime::add_listener. Events fire only where the runtime already does slow work (a disk
/// read, an NVRTC compile, a module load, an op's plan on a miss, an error); a memory hit and an
/// op's hot path never build or send one.

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
  /// JitMode::kAsync: a typed op built its launch from a fallback because the program named by
  /// the event (key, family, params) is not built yet; its compile is queued. `detail` names the
  /// fallback ("attention.decode head_dim=128 rows=8 (key …)") and says when the launch is being
  /// captured into a CUDA graph. Reported by the background compile of the missing program, on
  /// its thread (the calling thread builds no key), once per fallback and capture state while
  /// that compile is pending (or, when it is abandoned before it started, on the thread that
  /// abandons it); on the calling thread, once per launch value built, where no background
  /// compile will (a full or shut-down queue, a failed compile). Not per launch:
  /// RuntimeStats::fallback_launches counts those.
  kFallbackLaunch,
  /// JitMode::kAsync: a background compile ended. The program is loaded on `device` and op calls
  /// use it from their next call; `ms` is the compile (or fetch) and load time. When a fallback
  /// was captured into a CUDA graph meanwhile, `detail` says so: re-capture the graph to use the
  /// better program. A failed compile says "failed: " and the error in `detail`.
  kBackgroundCompileDone,
  /// JitMode::kAsync: a typed op missed and no fallback was at hand (a new head_dim, nothing of
  /// its family built): it compiles on the calling thread as under KJIT_JIT=warn, or, during a
  /// graph capture, throws CaptureMiss while the compile is queued.
  kNoFallback,
  /// JitMode::kAsync: a queued background compile was dropped before it started, because the
  /// Runtime finished its background compiles (its destructor, or Runtime::finish_background);
  /// RuntimeStats::background_abandoned counts them. The program named by the event (key,
  /// family, params) was not built; the fallbacks that served its calls meanwhile are reported by
  /// kFallbackLaunch events just before this one. `detail` starts with "abandoned: ". Sent on the
  /// thread that finished them, before the call that did so returns; `ms` is 0.
  kBackgroundCompileAbandoned,
};

/// "compile", "disk_hit", "load", "rejected", "refused", "fallback_launch",
/// "background_compile_done", "no_fallback", "background_compile_abandoned".
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
  /// The device ordinal for kLoad, a refused capture and the JitMode::kAsync events; -1 otherwise.
  int device = -1;
  /// kRejected: why the entry was not used; kRefused: the error's message; the JitMode::kAsync
  /// events: see each; else empty.
  std::string_view detail;
};

/// A listener. It runs on the thread that did the work (a background compile's events on the
/// Runtime's background thread), possibly several at once, so it must be
/// thread-safe; it should be quick (a compile waits for it, and may hold the key's cross-process
/// lock meanwhile). It may add or remove listeners but must not compile or load through the
/// Runtime that sent the event. An exception it throws is caught, reported once per listener on
/// stderr, and never reaches the op.
using EventListener = std::function<void(const Event&)>;

}  // namespace kjit
