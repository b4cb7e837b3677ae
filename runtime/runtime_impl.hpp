#pragma once
/// \file runtime/runtime_impl.hpp
/// The state behind kjit::Runtime and the declarations of its jobs, each defined in its own file:
///   - the program key: runtime/program_key.cc (ProgramKeys);
///   - the obtain path, memory → disk → fleet tier → compile, one function per step, with the
///     single-flight compile (one compile per key and process; a per-key process lock with a
///     second look; a failed compile forgotten): runtime/obtain.cc;
///   - loading onto devices, captures, KJIT_JIT=async's probes and background compiles, events,
///     and the public Runtime API: runtime/runtime.cc.
/// Only those files include it.

#include <kjit/error.hpp>
#include <kjit/events.hpp>
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/publish_queue.hpp"
#include "cache/remote/tier.hpp"
#include "cache/store.hpp"
#include "runtime/background_pool.hpp"
#include "runtime/driver.hpp"
#include "runtime/events.hpp"
#include "runtime/program_key.hpp"
#include "runtime/record.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kjit::detail {

using ProgramPtr = std::shared_ptr<const CompiledProgram>;

/// A program loaded for one device: the library and the kernels' handles.
struct Module {
  CUlibrary handle = nullptr;
  std::unique_ptr<LoadedProgram> program;
};

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig c);
  ~RuntimeImpl();

  /// `runtime`'s fleet tier (detail::fleet_tier).
  static cache::remote::RemoteTier* remote_of(const Runtime& runtime) noexcept { return runtime.impl_->remote.get(); }

  // ---- The obtain path (runtime/obtain.cc) ----

  // How far obtain() may go for a program it does not hold.
  enum class Reach {
    kCompile,  // compile on a miss (Runtime::compile, load, a background compile)
    kFleet,    // stop before compiling: memory, disk, fleet tier (the exact program under async)
    kDisk,     // stop before the fleet tier: memory and disk (a fallback under async)
  };

  // Memory table → disk → fleet tier → (per-key process lock, second look) → NVRTC, stopping at
  // `reach`. One compile per key per process: the first caller owns the key, the others wait on
  // its shared_future; a caller that may not compile (reach short of kCompile) never waits and
  // gets null instead (also while the key's compile runs). An owner that stops short publishes
  // null and unregisters, and a waiter that receives it asks again. This is the memory step.
  ProgramPtr obtain(const ProgramSpec& spec, const Target& target, Reach reach = Reach::kCompile);
  ProgramPtr compile(const ProgramSpec& spec, const Target& target) { return obtain(spec, target, Reach::kCompile); }
  // The owner's part of obtain(): the steps after memory, in order; null when `reach` stops it
  // before the program is found.
  ProgramPtr obtain_owned(PreparedProgram& p, const ProgramSpec& spec, const Target& target, Reach reach);
  // The disk step. `second_look`: the look again under the key's lock, after a first one missed;
  // a damaged entry it meets was already reported by the first.
  std::optional<ProgramPtr> from_disk(const cache::Key& key, const PreparedProgram& p, const ProgramSpec& spec,
                                      const Target& target, bool second_look = false);
  // The fleet step: the fleet tier's entry for `p`, published to the disk cache so this host asks
  // once per key. `*bad` is set when the tier cannot help with this key: it is unreachable, or the
  // slot holds a value this host cannot use and, without the signing key, cannot replace either.
  std::optional<ProgramPtr> from_remote(const PreparedProgram& p, const Target& target, bool* bad);
  // The compile step, after every look missed: the JIT mode's say, the per-key process lock and a
  // second look at the disk, then a compile under the fleet's lease (unless `remote_bad`) or a
  // local compile, published.
  ProgramPtr compile_locked(PreparedProgram& p, const ProgramSpec& spec, const Target& target, bool remote_bad);
  // The driver refused a binary that passed its checksum: compile it afresh (once per key and
  // process), replacing the disk entry and the in-memory one, unless another thread or process
  // already did.
  ProgramPtr rebuild(const ProgramSpec& spec, const Target& target, const ProgramPtr& rejected);

  ProgramPtr compile_and_publish(const PreparedProgram& p, const ProgramSpec& spec, const Target& target);
  // With the fleet tier: the fleet's entry, or a compile under its lease (remote/tier.hpp).
  ProgramPtr obtain_from_fleet(const PreparedProgram& p, const ProgramSpec& spec, const Target& target);
  // A verified entry from the fleet tier: loaded from its bytes at once, and published to the
  // disk cache off the request's path (it is safe in the tier meanwhile).
  ProgramPtr from_remote_entry(cache::Entry e);
  cache::Entry compile_entry(const PreparedProgram& p, const ProgramSpec& spec, const Target& target);
  static ProgramPtr from_entry(const cache::Entry& e, CompiledProgram::Origin origin);
  // A disk or fleet entry is used only if it describes what we asked for; anything else is a miss.
  static bool matches(const cache::Entry& e, const PreparedProgram& p, const Target& target);

  // KJIT_RECORD: once per key and process (the owner that obtains it or compiles), never on a
  // memory hit nor for a probe that finds nothing: off the hot path.
  void record_obtained(const ProgramSpec& spec, const Target& target, const cache::Key& key);
  // KJIT_RECORD=remote: the fleet's manifest set; a fault is the tier's bounded miss.
  void record_remote(const ProgramSpec& spec, const Target& target, const cache::Key& key) noexcept;
  // The JitDisabled for a miss of `spec` under KJIT_JIT=off (`why`: what made it a miss).
  JitDisabled jit_disabled(const ProgramSpec& spec, const Target& target, const cache::Key& key, const char* why);
  // Under KJIT_JIT=warn (and async, for a compile on the calling thread): one warning per key
  // and process.
  void warn_jit(const ProgramSpec& spec, const Target& target, const cache::Key& key, JitMode mode);
  // The effective JIT mode: the stricter of KJIT_JIT and Runtime::freeze.
  JitMode jit_mode() const noexcept {
    return std::max(config.jit, static_cast<JitMode>(frozen_mode.load(std::memory_order_acquire)));
  }
  // What set `mode` in force, for messages: "KJIT_JIT=off" or "Runtime::freeze(off)".
  const char* jit_switch(JitMode mode) const noexcept;

  // ---- Events (runtime/runtime.cc) ----

  static double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  // Sends one event to the listeners; builds nothing when there are none.
  void emit(EventKind kind, const ProgramSpec& spec, const Target& target, const cache::Key& key, double ms,
            int device = -1, std::string_view detail = {});
  // An event kept for later, owning its strings.
  struct HeldEvent {
    EventKind kind;
    std::string key, family, params, target;
    double ms;
    int device;
    std::string detail;
  };
  // Where this thread's events are held (obtain.cc's HoldEvents), or null: they go out at once.
  static thread_local std::vector<HeldEvent>* held_events;
  // Set on the background threads: their compiles are the point of KJIT_JIT=async, not a stall
  // to warn about.
  static thread_local bool on_background_thread;

  // ---- Loading onto devices (runtime/runtime.cc) ----

  // `stream`: the launch stream whose capture a miss must not disturb, or null for none.
  const LoadedProgram& load(const ProgramSpec& spec, CUcontext context, const CUstream* stream);
  // `program` loaded for device `ordinal` (once per device; a cached binary the driver refuses is
  // rebuilt once).
  const LoadedProgram& load_onto(ProgramPtr program, const ProgramSpec& spec, const Target& target, int ordinal,
                                 const DeviceInfo& info);
  // `context`, or the current context (device 0's primary context made current when none is).
  static CUcontext context_or_current(CUcontext context);
  // Whether `stream` is being captured (or is the legacy stream while a capture forbids using
  // it); `*invalidated`: the capture was already invalidated.
  static bool capturing(CUstream stream, bool* invalidated = nullptr);
  // The program already loaded for (`ordinal`, `spec`, `target`), or null: no driver call.
  const LoadedProgram* find_loaded(const ProgramSpec& spec, const Target& target, int ordinal);
  // Loads `program` for `device`: the driver's result and, on success, the module.
  CUresult load_library(const ProgramPtr& program, CUdevice device, const DeviceInfo& info, Module& out,
                        const char** failed_call);

  // ---- KJIT_JIT=async (runtime/runtime.cc) ----

  // RuntimeAccess's functions (runtime/async_jit.hpp), with the device resolved.
  // A background compile is known by its (family, point, device ordinal): the calling thread
  // never builds a program's spec or key for it.
  struct BackgroundId {
    const Family* family = nullptr;
    Point point;
    int ordinal = 0;
    friend bool operator<(const BackgroundId& a, const BackgroundId& b) noexcept {
      if (a.family != b.family) return std::less<const Family*>()(a.family, b.family);
      if (a.ordinal != b.ordinal) return a.ordinal < b.ordinal;
      return std::memcmp(a.point.index, b.point.index, sizeof(a.point.index)) < 0;
    }
  };
  const LoadedProgram* at_hand(const ProgramSpec& spec, CUcontext context, bool capturing, bool exact);
  const LoadedProgram* background_loaded(const BackgroundId& id);
  bool queue_background(const BackgroundId& id, bool capturing, const LoadedProgram* fallback);
  void fallback_served(const ProgramSpec& exact, const LoadedProgram& fallback, CUcontext context, bool capturing);
  void no_fallback(const ProgramSpec& exact, CUcontext context, bool capturing);
  // The body of one background compile: report the fallbacks serving meanwhile, obtain
  // (compile) and load the program, report the late fallbacks, then tell.
  void run_background(const BackgroundId& id) noexcept;
  // What a background compile that never started does instead (BackgroundPool::Job::abandon, on
  // the thread that shuts the pool down): count it, report the fallbacks that served meanwhile
  // and tell (background_compile_abandoned), then forget its pending entry.
  void abandon_background(const BackgroundId& id) noexcept;
  // Reports the fallbacks `id`'s pending entry holds that are not reported yet.
  void report_pending_fallbacks(const BackgroundId& id, const ProgramSpec& spec, const Target& target,
                                const cache::Key& key);
  // The fallback log (once per pair and process) and the fallback_launch event of `fallback`
  // serving `exact` (key `key`).
  void report_fallback(const ProgramSpec& exact, const Target& target, const cache::Key& key,
                       const LoadedProgram& fallback, int ordinal, bool capturing);

  void add_compile_ms(double ms) {
    std::lock_guard lock(stats_mutex);
    compile_ms += ms;
  }

  RuntimeConfig config;
  cache::DiskCache disk;
  ProgramKeys keys;  // the sources, NVRTC and CUDA headers a key is made of, and the key memo
  cache::PublishQueue publisher{disk};  // remote hits' disk publishes (drained before `disk` goes)

  std::mutex mutex;
  std::unordered_map<cache::Key, std::shared_future<ProgramPtr>, cache::KeyHash> programs;

  std::mutex modules_mutex;
  // (device ordinal, program key): a context-independent library serves every context of its
  // device, and ordinals are never reused within a process, unlike context addresses.
  std::map<std::pair<int, std::string>, Module> modules;
  std::mutex rebuild_mutex;
  std::set<std::string> rebuilt;  // keys warned about and rebuilt once in this process
  std::set<std::string> jit_warned;  // keys warned about under KJIT_JIT=warn (guarded by `mutex`)
  Recorder* recorder = nullptr;  // KJIT_RECORD; shared by the Runtimes recording to one file
  std::unique_ptr<cache::remote::RemoteTier> remote;  // KJIT_REMOTE; null when the tier is off

  std::atomic<int> frozen_mode{static_cast<int>(JitMode::kOn)};  // Runtime::freeze; kOn: not frozen
  EventHub events;

  std::atomic<uint64_t> memory_hits{0}, disk_hits{0}, misses{0}, compiles{0}, compile_failures{0}, loads{0},
      load_rebuilds{0}, refused{0};
  std::mutex stats_mutex;
  double compile_ms = 0;

  // KJIT_JIT=async.
  struct Served {
    const LoadedProgram* fallback = nullptr;
    bool captured = false;  // served a launch captured into a CUDA graph
  };
  struct Pending {
    bool captured = false;  // a fallback was captured into a graph meanwhile
    bool failed = false;    // the compile failed: never queued again in this process
    const LoadedProgram* loaded = nullptr;  // the program, once the compile loaded it
    std::vector<Served> served;  // the fallbacks that served its calls meanwhile
    size_t reported = 0;         // how many of `served` the background thread reported
  };
  std::mutex async_mutex;
  std::map<BackgroundId, Pending> pending;  // every background compile of this Runtime
  uint64_t pending_generation = fork_generation();  // the process `pending` belongs to
  std::set<std::pair<std::string, std::string>> fallbacks_logged;  // (missing, fallback) keys logged
  std::atomic<uint64_t> fallback_launches{0}, no_fallbacks{0}, background_compiles{0}, background_failures{0},
      background_abandoned{0}, background_queue_full{0};
  // Last: its threads use everything above (the destructor shuts it down first).
  BackgroundPool background;
};

}  // namespace kjit::detail
