#pragma once
/// \file runtime.hpp
/// The JIT runtime: ProgramSpec (what to compile) → CompiledProgram (a cubin or PTX, from the
/// in-memory table, the disk cache or NVRTC) → LoadedProgram (a context-independent library for
/// one device) → Kernel (a launchable function). See launch.hpp for launching;
/// CompiledProgram::key says what the cache key covers.

#include <kjit/device.hpp>
#include <kjit/disk_cache.hpp>
#include <kjit/remote.hpp>
#include <kjit/events.hpp>
#include <kjit/key_inputs.hpp>
#include <kjit/names.hpp>

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit {

namespace detail {
class RuntimeImpl;
struct RuntimeAccess;
}

/// What to compile: one translation unit and the template instantiations to emit from it.
/// Everything here except `family` and `template_args` (metadata) goes into the cache key, with
/// the bytes of every file the compile can read: headers from ProgramSpec::headers, kjit's kernel
/// sources, the source's own directory, `-I` directories, `-include` files and the CUDA toolkit
/// (runtime/kernel_sources.hpp describes the search and its cost).
struct ProgramSpec {
  /// Kernel family for metadata and `kjit cache ls` ("rotary", "attention.decode", or a host
  /// application's own name).
  std::string family;
  /// Human-readable template arguments for metadata ("head_dim=128 group=4").
  std::string template_args;
  /// The source's file name: a path inside kernel_sources ("rotary/rotary.cu") when
  /// `source_text` is empty, else any name the host application likes (used in NVRTC logs).
  std::string source_name;
  /// The source text; empty means: read `source_name` from kjit's kernel sources.
  std::string source_text;
  /// Extra headers a host application supplies, as (include name, text). An include of that
  /// exact name (quoted or angle) resolves against these first, then against kjit's kernel
  /// sources (so host kernels can use them), then on disk.
  std::vector<std::pair<std::string, std::string>> headers;
  /// NVRTC name expressions, one per kernel to emit: e.g. "kjit::rotary_kernel<128, true>".
  /// Blanks that cannot matter are dropped before the key is computed ("k< 128 >" and "k<128>"
  /// are one key and one compile; KernelInfo::name_expression keeps the spelling of the call
  /// that compiled it, and LoadedProgram::kernel finds either). Different spellings of one type
  /// ("size_t", "unsigned long") are different keys: only the compiler can tell they are equal.
  std::vector<std::string> name_expressions;
  /// Extra NVRTC options ("-DNAME=VALUE", "-I", "dir", "--use_fast_math", ...). They reach NVRTC
  /// and the key after kjit's own options, in the order given: `-I` directories are searched in
  /// that order, `-include` files are included in that order and a later `-D`/`-U` of one macro
  /// wins. Only what provably cannot matter is normalized: blanks around an option; the spellings
  /// NVRTC documents as equal ("-D X", "--define-macro=X" → "-DX"; "-include", "x.h" →
  /// "--pre-include=x.h"); the order of `-D`/`-U` of different macros within a run of them and
  /// an identical repeat in such a run; a repeated flag without an argument. Throws
  /// InvalidArgument (from compile/load/key) for an option that sets the architecture.
  std::vector<std::string> options;
  /// The kernels use instructions of the arch-specific feature set (wgmma, setmaxnreg,
  /// tcgen05), so on a device whose target is arch-specific (sm_90a) they compile for it; false
  /// compiles for the plain sm_XY of the device (a cubin any device of that compute capability
  /// loads, and one cache entry whatever the "a" variant). Families set it from their declaration
  /// (FamilyProgram::arch_specific); a host application's program keeps the device's own target.
  bool arch_specific = true;
  /// NVRTC has no standard library: with this set, an `#include` of a standard header that kjit
  /// supplies (<cstdint>, <cassert>, <type_traits>, <limits>, <cfloat>, <cmath>, <cstdio>,
  /// <algorithm>, ... and the C forms <stdint.h>, <math.h>, ...) gets kjit's NVRTC-safe version
  /// (kernel_sources/kjit/std/, built on the toolkit's libcu++; docs/std-headers.md lists what
  /// each provides). A host-only facility (fopen, exit, ...) is then a compile error naming its
  /// header. The headers are in-memory headers after ProgramSpec::headers and kjit's kernel
  /// sources, so an entry of `headers` with a standard name replaces kjit's, and they shadow
  /// files of that name in `-I` directories. Only the headers a program includes are read, handed
  /// to NVRTC and hashed into its key: a program that includes none has the same key either way.
  /// On for a host application's programs; kjit's own kernel families turn it off.
  bool std_headers = true;

  /// The target this program compiles for on a device whose target is `device`.
  Target target_on(const Target& device) const noexcept {
    Target t = device;
    t.arch_specific = device.arch_specific && arch_specific;
    return t;
  }
};

/// What NVRTC/ptxas reported for one kernel of a compiled program.
struct KernelInfo {
  std::string name_expression;
  std::string lowered_name;  ///< the mangled symbol NVRTC produced for `name_expression`
  int registers = -1;        ///< per thread; -1 when unknown
  int spill_bytes = -1;      ///< spill stores + loads reported by ptxas; -1 when unknown
  int static_smem = -1;      ///< static shared memory in bytes; -1 when unknown
};

/// A compiled (or cached) program for one target.
struct CompiledProgram {
  /// kDisk: read from the disk cache; kRemote: fetched from the fleet tier (and published to the
  /// disk cache); kCompiled: compiled by NVRTC in this process. A program served again from the
  /// in-process table is the same object and keeps its first origin (RuntimeStats::memory_hits
  /// counts those calls).
  enum class Origin { kDisk, kCompiled, kRemote };

  std::string key;  ///< 32 hex digits: XXH3-128 of the canonical key serialization
  std::string family;
  std::string template_args;
  Target target;
  std::vector<KernelInfo> kernels;  ///< in the order of ProgramSpec::name_expressions
  std::vector<std::string> options;  ///< the normalized NVRTC options used
  std::string nvrtc_version;        ///< "13.0"
  double compile_ms = 0;            ///< NVRTC wall time when it was compiled
  std::string binary;               ///< cubin (target.ptx == false) or PTX text
  /// Where this process first obtained it (later calls share the same object).
  Origin origin = Origin::kCompiled;
};

/// A launchable function of a LoadedProgram, for one device. Kernels live as long as the
/// Runtime that returned them; the handle is cheap to copy around by pointer.
class Kernel {
 public:
  /// The context-independent CUkernel cast to CUfunction, as cuLaunchKernelEx and the
  /// cuOccupancy* queries accept it: it runs in any context of device() (the stream's, or the
  /// current one for a null stream), also in contexts created after it was loaded. Not for
  /// cuFuncGetAttribute/cuFuncSetAttribute: use handle() with cuKernelGetAttribute.
  CUfunction function() const noexcept { return reinterpret_cast<CUfunction>(kernel_); }
  /// The CUkernel itself.
  CUkernel handle() const noexcept { return kernel_; }
  /// The device ordinal whose limits the attributes below describe.
  int device() const noexcept { return device_; }
  const KernelInfo& info() const noexcept { return *info_; }
  /// The most threads a CTA of this function may have (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK).
  int max_threads_per_block() const noexcept { return max_threads_; }
  /// Static shared memory of the function, in bytes.
  int static_smem_bytes() const noexcept { return static_smem_; }
  /// The most dynamic shared memory a launch may ask for on this device, in bytes.
  int max_dynamic_smem_bytes() const noexcept { return max_dynamic_smem_; }

  /// Raises CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on device() to at least `bytes` (a
  /// high-water mark, raised once under a lock; later calls that need no more take no lock).
  /// Throws InvalidArgument when `bytes` exceeds max_dynamic_smem_bytes().
  void reserve_dynamic_smem(uint32_t bytes) const;

 private:
  friend class detail::RuntimeImpl;
  CUkernel kernel_ = nullptr;
  int device_ = 0;
  const KernelInfo* info_ = nullptr;
  int max_threads_ = 0;
  int static_smem_ = 0;
  int max_dynamic_smem_ = 0;
  // High-water mark of the dynamic shared-memory attribute; heap-held so Kernel stays movable.
  std::unique_ptr<std::atomic<uint32_t>> reserved_smem_ = std::make_unique<std::atomic<uint32_t>>(0);
};

/// A program loaded for one device as a context-independent library (cuLibraryLoadData): its
/// kernels run in every context of that device, current and future, so destroying a context
/// never invalidates it. Lives as long as the Runtime.
class LoadedProgram {
 public:
  /// The kernel for ProgramSpec::name_expressions[i]. Throws InvalidArgument when out of range.
  const Kernel& kernel(size_t i) const;
  /// The kernel for a name expression. Throws InvalidArgument when the program has none such.
  const Kernel& kernel(std::string_view name_expression) const;
  size_t size() const noexcept { return kernels_.size(); }
  const CompiledProgram& compiled() const noexcept { return *compiled_; }

 private:
  friend class detail::RuntimeImpl;
  std::shared_ptr<const CompiledProgram> compiled_;
  std::vector<Kernel> kernels_;
};

/// What the runtime does when a specialization is in neither its memory nor the disk cache. A
/// disk hit is never refused: reading a precompiled entry is what a fail-closed deployment wants
/// (EventKind::kDiskHit and kjit_disk_hits_total show each one). The modes are ordered, each
/// stricter than the one before about compiling on the thread that asked: KJIT_JIT and
/// Runtime::freeze combine to the stricter of the two.
enum class JitMode {
  kOn,    ///< compile it (the default)
  kWarn,  ///< compile it, and warn once per specialization that it was compiled at run time
  /// A typed op whose program is not loaded launches a fallback instead: a program of the same
  /// op whose parameters differ from the call's only in ones its family declares
  /// performance-only (FamilyParam::performance_only), already built: loaded (then the call only
  /// looks in memory and queues), else in memory or the disk cache, when the exact program is
  /// not in the disk cache or the fleet tier either. The exact program is looked for in the disk
  /// cache and the fleet tier and else compiled on the Runtime's background threads
  /// (RuntimeConfig::background_threads), through the same cache, per-key lock and fleet lease,
  /// is loaded there, and serves the op's calls from the next one after it is loaded
  /// (EventKind::kBackgroundCompileDone). With no fallback at hand the op compiles on
  /// the calling thread as under kWarn (EventKind::kNoFallback). Under CUDA graph capture a miss
  /// captures a loaded fallback and never compiles or loads on the capturing thread.
  /// Runtime::compile and Runtime::load, which name one exact program, compile it as under kWarn.
  kAsync,
  kOff,  ///< compile nothing: throw JitDisabled naming it and the command that would build it
};

/// JitMode's names, in enumerator order (kjit/names.hpp): kjit.JIT_MODES in Python.
inline constexpr EnumName<JitMode> kJitModeNames[] = {
    {JitMode::kOn, "on"}, {JitMode::kWarn, "warn"}, {JitMode::kAsync, "async"}, {JitMode::kOff, "off"}};
/// "on", "warn", "async", "off" (kJitModeNames).
const char* jit_mode_name(JitMode mode) noexcept;

/// Settings read once from the environment (RuntimeConfig::from_env) or set by a host app.
/// (KJIT_ARCH, the compile target override, is process-wide and read by device_info.)
struct RuntimeConfig {
  /// Disk cache root: KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else $HOME/.cache/kjit, else
  /// /tmp/kjit-cache.
  std::string cache_dir;
  /// False for KJIT_CACHE_DISABLE=1: memory-only caching.
  bool disk_cache = true;
  /// KJIT_CACHE_MAX_BYTES: bytes with an optional K/M/G/T suffix (powers of 1024); 0 = no cap.
  /// Default 2 GiB.
  uint64_t cache_max_bytes = 2ull << 30;
  /// KJIT_KERNEL_DIR: read kernel sources from this folder instead of the embedded copies.
  std::string kernel_dir;
  /// KJIT_CUDA_HOME / CUDA_HOME / CUDA_PATH; empty = search beside NVRTC, then /usr/local/cuda.
  std::string cuda_home;
  /// KJIT_VERBOSE=1: log compiles and cache events to stderr, and the cache directory in use when
  /// the Runtime starts.
  bool verbose = false;
  /// KJIT_ATTN_VARIANT: the kernel kjit::attention::attention prefers for a kAuto call ("auto",
  /// "mma" or "wgmma"; empty = auto). An unknown value warns once and reads as auto.
  std::string attention_variant;
  /// KJIT_RECORD: a warm-up manifest file (cache/manifest.hpp) to which every specialization this
  /// Runtime obtains (compiled, read from the disk cache, or refused under KJIT_JIT=off) is
  /// appended once per process, for `kjit precompile --manifest`. Written when a specialization
  /// is first obtained, never on a memory hit. Empty: no recording. "remote:" (kRecordRemote):
  /// record into the fleet tier's manifest set instead (needs KJIT_REMOTE; see kjit/remote.hpp).
  std::string record_path;
  /// KJIT_JIT: on (default), warn, async or off (also 1/0, true/false). Fail-closed deployments
  /// set off; serving processes that must never stall on a compile set async.
  JitMode jit = JitMode::kOn;
  /// KJIT_JIT_THREADS: threads compiling in the background under JitMode::kAsync, 1..16
  /// (default 1: NVRTC is CPU-bound, and a serving process needs its cores for the host path).
  /// Started with a Runtime whose `jit` is kAsync (or by freeze(JitMode::kAsync), or the first
  /// background compile), so a miss only queues; on Linux they run under SCHED_BATCH and never
  /// preempt a request's thread when woken.
  int background_threads = 1;
  /// KJIT_JIT_QUEUE: background compiles that may wait for a thread, 1..4096 (default 64). A
  /// miss that finds the queue full runs its fallback without queuing its compile
  /// (RuntimeStats::background_queue_full); a later call queues it.
  int background_queue = 64;
  /// KJIT_REMOTE and the KJIT_REMOTE_* variables: the fleet tier (kjit/remote.hpp); off by default.
  RemoteConfig remote;
  /// KJIT_TUNING: on (default; also 1/true) or off (0/false). Off, the planners ignore tuning
  /// tables (the local ones and the fleet's) and use their built-in rules. The tables are those
  /// of Runtime::global()'s cache_dir and fleet tier.
  bool tuning = true;
  /// KJIT_NVTX=1: NVTX ranges (domain "kjit") around each compile, disk read and module load, for
  /// Nsight Systems timelines. Off by default.
  bool nvtx = false;

  /// Reads the variables above. Throws InvalidArgument for an unparsable KJIT_CACHE_MAX_BYTES,
  /// a KJIT_JIT other than on, warn, async, off (a typo must not silently allow compiling), a
  /// KJIT_JIT_THREADS / KJIT_JIT_QUEUE that is not a whole number in its range, a KJIT_TUNING
  /// other than on or off, or a malformed KJIT_REMOTE* variable (RemoteConfig::from_env).
  static RuntimeConfig from_env();

  /// Parses a byte count as KJIT_CACHE_MAX_BYTES (and `kjit cache prune --max-bytes`) take it:
  /// digits, then optionally K, M, G or T (powers of 1024) and an optional "B" or "iB"
  /// ("512M", "2GiB", "1048576", "64KB"). Throws InvalidArgument naming `what` and the text.
  static uint64_t parse_bytes(std::string_view text, std::string_view what);

  /// Parses a JIT mode as KJIT_JIT (and kjit.freeze in Python) take it: on/1/true, warn, async,
  /// off/0/false. Throws InvalidArgument naming `what` and the text for anything else.
  static JitMode parse_jit_mode(std::string_view text, std::string_view what);
};

/// Counters since the Runtime was created (monotonic; safe to read from any thread).
struct RuntimeStats {
  uint64_t memory_hits = 0;  ///< compile() answered from the in-process table
  uint64_t disk_hits = 0;    ///< answered from the disk cache
  uint64_t misses = 0;       ///< neither: compiled (or waited on another thread's compile)
  uint64_t compiles = 0;     ///< NVRTC compiles this process ran
  uint64_t compile_failures = 0;
  /// Programs loaded (cuLibraryLoadData calls that succeeded): one per (device, program), never
  /// per context, since a library serves every context of its device, current and future. Each
  /// stays loaded until the Runtime is destroyed, so this is also the number of libraries held:
  /// creating or destroying contexts never changes it.
  uint64_t loads = 0;
  /// Cached binaries that passed their checksum but the driver refused to load (another arch, a
  /// driver that rejects them): each was replaced by a fresh compile.
  uint64_t load_rebuilds = 0;
  double compile_ms = 0;     ///< NVRTC wall time summed over `compiles`
  /// Misses refused: JitDisabled (KJIT_JIT=off) and CaptureMiss thrown.
  uint64_t refused = 0;
  /// The fleet tier (RuntimeConfig::remote); all zero without KJIT_REMOTE.
  uint64_t remote_hits = 0;    ///< entries (or failed-compile records) served by the remote tier
  uint64_t remote_misses = 0;  ///< remote lookups that found nothing usable
  /// Faults: each attempt that found the server unreachable or silent (timed out), and each
  /// error reply (OOM, NOPERM). An error reply, or two lost replies in a row, open the circuit
  /// breaker, which skips the tier for KJIT_REMOTE_COOLDOWN_MS (those skips are not counted).
  uint64_t remote_errors = 0;
  uint64_t remote_lease_waits = 0;  ///< times this process waited on another host's compile lease
  /// Remote values rejected for trust (unsigned, signed by an untrusted key, or a bad
  /// signature), once per key; they were never loaded.
  uint64_t remote_rejected_signatures = 0;
  /// Remote values refused by their length alone (over KJIT_REMOTE_MAX_VALUE_BYTES, never
  /// downloaded), once per key.
  uint64_t remote_oversized = 0;
  uint64_t remote_publishes = 0;  ///< entries this process wrote to the remote tier
  /// Round trips to the remote tier's server (lookups, leases, publishes, the fleet's tuning
  /// tables, AUTH and SELECT on a connect), answered or not: a pipeline of commands counts once,
  /// a command sent again after a lost reply twice.
  uint64_t remote_round_trips = 0;
  /// JitMode::kAsync; all zero in the other modes.
  /// Op calls launched from a fallback while their exact program compiled in the background.
  uint64_t fallback_launches = 0;
  /// Misses with no fallback at hand: compiled on the calling thread (or, during a graph
  /// capture, refused with CaptureMiss).
  uint64_t no_fallback = 0;
  /// Background compiles that ended with their program loaded (compiled here, or found in the
  /// disk cache or the fleet tier by the time it ran).
  uint64_t background_compiles = 0;
  /// Background compiles that failed (each warned once; the key is not queued again in this
  /// process and its fallback keeps serving).
  uint64_t background_failures = 0;
  /// Queued background compiles dropped before they started, when the Runtime was destroyed or
  /// finish_background() was called (each one an EventKind::kBackgroundCompileAbandoned event).
  uint64_t background_abandoned = 0;
  /// Misses whose compile found the background queue full (RuntimeConfig::background_queue):
  /// the fallback ran, and a later call queues the compile.
  uint64_t background_queue_full = 0;
};

/// What a Runtime reports to monitoring at one moment (Runtime::metrics; metrics_text() writes
/// it in the Prometheus text format).
struct RuntimeMetrics {
  RuntimeStats stats;
  JitMode jit_mode = JitMode::kOn;  ///< Runtime::jit_mode()
  bool frozen = false;              ///< Runtime::frozen()
  DiskCacheInfo cache;              ///< Runtime::disk_cache()
  /// Entries and bytes in the disk cache (every process's, not only this one's), from its usage
  /// record; nullopt when the cache is disabled or has no record yet (the first publish writes it).
  std::optional<uint64_t> cache_entries, cache_bytes;
};

/// The runtime: NVRTC compiler, disk cache, in-memory program table and per-device libraries.
/// Thread-safe. Most applications use Runtime::global().
class Runtime {
 public:
  /// The process-wide runtime, configured from the environment on first use.
  static Runtime& global();

  explicit Runtime(RuntimeConfig config);
  /// Under JitMode::kAsync, background compiles that have not started are dropped
  /// (RuntimeStats::background_abandoned) and those running are waited for (NVRTC cannot be
  /// interrupted): no compile or load of this Runtime runs after it returns. Runtime::global()
  /// does the same when the process exits (std::atexit).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Compiles `spec` for `target`, or returns it from the in-memory table or the disk cache.
  /// Needs no GPU. N threads asking for one key compile it once; N processes cold-starting on one
  /// key compile it once (per-key file lock and a second look). Throws CompileError (NVRTC log,
  /// file and line), InvalidArgument (unknown kernel source, empty name_expressions).
  std::shared_ptr<const CompiledProgram> compile(const ProgramSpec& spec, const Target& target);

  /// Compiles (or fetches) `spec` for the device of `context` (nullptr = the current context,
  /// making device 0's primary context current when none is) and loads it once per device (the
  /// result serves every context of that device). A cached binary that the driver refuses to
  /// load is a miss: one warning, a fresh compile replaces the entry. Throws DriverError when no
  /// driver is present, a driver call fails, or the fresh binary is refused too (naming the
  /// driver's reason).
  const LoadedProgram& load(const ProgramSpec& spec, CUcontext context = nullptr);

  /// load(spec, context) for a launch on `stream`: first asks the driver whether `stream` is
  /// being captured into a CUDA graph (cuStreamIsCapturing, one call; the typed ops come here
  /// only on their kernel table's miss path, so their hot path makes no such call). If it is, a
  /// program this Runtime already loaded for the device is returned (no further driver call),
  /// and anything else throws CaptureMiss naming the family, parameters and target, compiling
  /// and loading nothing. Not capturing: exactly load(spec, context).
  /// Why not serve a miss: a module load is a call that global-mode capture forbids (the driver
  /// then invalidates the capture) and a compile stalls it for up to seconds, so a graph would
  /// be broken or slow depending on timing; failing the same way every time is the contract.
  const LoadedProgram& load(const ProgramSpec& spec, CUcontext context, CUstream stream);

  /// The cache key `compile` would use, without compiling.
  std::string key(const ProgramSpec& spec, const Target& target);
  /// Every input of that key, as `kjit cache explain` prints it (see KeyInputs). Reads the
  /// program's include closure afresh (no key memo); compiles nothing.
  KeyInputs key_inputs(const ProgramSpec& spec, const Target& target);

  /// After warm-up: from now on a miss (a specialization neither in this Runtime's memory nor in
  /// the disk cache, so it would be compiled) is handled as KJIT_JIT=`mode` handles it: kWarn
  /// compiles and warns once per specialization, kAsync runs a typed op's fallback while the
  /// exact program compiles in the background (JitMode::kAsync), kOff compiles nothing and
  /// throws JitDisabled naming the family, parameters, target and the `kjit compile` command that
  /// builds it.
  /// Programs already obtained keep running, and a disk hit is still served (and loaded): a
  /// precompiled cache is the intended way to add specializations to a frozen process. The
  /// effective mode is the stricter of KJIT_JIT and the freeze, so freezing never loosens it.
  /// Thread-safe; takes effect for misses that start after it returns. Throws InvalidArgument
  /// for kOn (use unfreeze()).
  void freeze(JitMode mode = JitMode::kOff);
  /// Undoes freeze(): misses follow RuntimeConfig::jit (KJIT_JIT) again.
  void unfreeze() noexcept;
  /// The mode misses follow now: the stricter of RuntimeConfig::jit and the freeze.
  JitMode jit_mode() const noexcept;
  /// Whether freeze() is in effect.
  bool frozen() const noexcept;

  /// Under JitMode::kAsync: drops the background compiles that have not started
  /// (RuntimeStats::background_abandoned) and waits for the running ones; later misses queue
  /// nothing (RuntimeStats::background_queue_full): their fallbacks keep serving, and a miss
  /// without one compiles on the calling thread. What the destructor and, for Runtime::global(),
  /// process exit do; a host whose listeners need something of their own at exit (Python's
  /// interpreter) calls it earlier. Idempotent; thread-safe; never from a listener.
  void finish_background() noexcept;

  /// Registers `listener` for this Runtime's events (kjit/events.hpp) and returns the id that
  /// remove_listener takes. Thread-safe. Throws InvalidArgument for an empty function.
  uint64_t add_listener(EventListener listener);
  /// Unregisters a listener; false when `id` is not registered.
  bool remove_listener(uint64_t id);

  /// RuntimeStats, the JIT mode and the disk cache's totals in the Prometheus text exposition
  /// format (version 0.0.4: HELP and TYPE lines, then samples; counters end in _total, times
  /// are in seconds, sizes in bytes), for a host application to serve on its own /metrics.
  /// The cache totals come from its usage record (one small file read), not a listing.
  std::string metrics_text() const;
  /// The numbers metrics_text() writes. Thread-safe; reads one small file (the usage record).
  RuntimeMetrics metrics() const;

  RuntimeStats stats() const;
  /// A number no other Runtime of this process has or will have (unlike its address, which a
  /// later Runtime may reuse): what per-runtime tables key on.
  uint64_t id() const noexcept { return id_; }
  const RuntimeConfig& config() const;
  /// Where the disk cache is and whether it is used (see DiskCacheInfo).
  DiskCacheInfo disk_cache() const;
  /// "13.0": the NVRTC version compiling here.
  std::string nvrtc_version() const;
  /// The CUDA include directory handed to NVRTC, and its CUDA_VERSION ("13000").
  std::string cuda_include_dir() const;
  std::string cuda_headers_version() const;

 private:
  friend class detail::RuntimeImpl;  // detail::fleet_tier reaches the runtime's tier through it
  friend struct detail::RuntimeAccess;  // the op pipeline's side of JitMode::kAsync (runtime/async_jit.hpp)
  std::unique_ptr<detail::RuntimeImpl> impl_;
  uint64_t id_;
};

}  // namespace kjit
