#pragma once
/// \file runtime/async_jit.hpp
/// What the op pipeline (runtime/ops/fallback.hpp) asks of a Runtime under KJIT_JIT=async
/// (JitMode::kAsync): whether a program is at hand without compiling, to queue the exact
/// program's compile on the background threads (runtime/background_pool.hpp), and to report
/// the fallback that serves meanwhile. Only the ops' miss paths call these; a hot call reads at
/// most background_epoch(). A miss with a loaded fallback calls only background_loaded and
/// queue: memory lookups and a queue push, no key hashed, no file touched.

#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace kjit::detail {

/// Moves on each time a background compile has loaded its program (any Runtime's). A launch
/// value built from a fallback remembers the epoch its build started in (CallEntry::fallback_epoch)
/// and is built again once the epoch moved: the next call after the exact program is loaded
/// runs it, and a stored call never pins its fallback.
uint64_t background_epoch() noexcept;

/// The Runtime's side of KJIT_JIT=async, for the op pipeline (a friend of Runtime).
struct RuntimeAccess {
  /// Whether misses follow JitMode::kAsync now (one atomic load).
  static bool async(const Runtime& runtime) noexcept { return runtime.jit_mode() == JitMode::kAsync; }

  /// Whether `stream` (null: none) is being captured into a CUDA graph, or is the legacy stream
  /// while another stream captures in a mode that forbids using it (one driver call).
  static bool capturing(const CUstream* stream);

  /// The program of `spec`, loaded on the device of `context`, if it is at hand without
  /// compiling: already loaded; else, unless `capturing`, found in this Runtime's memory or the
  /// disk cache and, for the call's `exact` program, the fleet tier, and loaded now. Null
  /// otherwise, also while its compile runs. Never compiles and never waits for a compile.
  static const LoadedProgram* at_hand(Runtime& runtime, const ProgramSpec& spec, CUcontext context, bool capturing,
                                      bool exact);

  /// The program of (`family`, `point`) on the device of `context` if a background compile of
  /// this Runtime loaded it, else null: one lookup in memory, no key built.
  static const LoadedProgram* background_loaded(Runtime& runtime, const Family& family, const Point& point,
                                                CUcontext context);

  /// Queues the compile and load of (`family`, `point`) for the device of `context` on the
  /// background threads, once per program and device at a time; a program whose background
  /// compile failed, or that one loaded already, is not queued again. The calling thread builds
  /// neither the program's spec nor its key: the background thread does, then looks in memory,
  /// the disk cache and the fleet tier before it compiles. `capturing`: the miss happened during
  /// a graph capture (the done event says a re-capture picks the program up). `fallback`: the
  /// program serving the call meanwhile (null: none), which the background thread reports
  /// (fallback_served's event and log). True when a background compile, queued now or earlier,
  /// will report `fallback`; false when none will (a full or shut-down queue, counted as
  /// RuntimeStats::background_queue_full; a failed or loaded program): the caller reports it.
  static bool queue(Runtime& runtime, const Family& family, const Point& point, CUcontext context, bool capturing,
                    const LoadedProgram* fallback);

  /// Reports that `fallback` serves the call whose program `exact` is missing (the fallback_launch
  /// event, the cache's fallback log once per pair and process). `capturing`: the launch is
  /// being captured.
  static void fallback_served(Runtime& runtime, const ProgramSpec& exact, const LoadedProgram& fallback,
                              CUcontext context, bool capturing);

  /// Reports that no fallback serves the call whose program `exact` is missing (the no_fallback
  /// event and counter, and a warning once per program unless `capturing`, where CaptureMiss
  /// follows): the caller compiles on its own thread.
  static void no_fallback(Runtime& runtime, const ProgramSpec& exact, CUcontext context, bool capturing);

  /// The counter of launches from a fallback (RuntimeStats::fallback_launches): a stored call
  /// adds to it on each launch, lock-free. Lives as long as the Runtime.
  static std::atomic<uint64_t>* fallback_launches(Runtime& runtime) noexcept;
};

}  // namespace kjit::detail
