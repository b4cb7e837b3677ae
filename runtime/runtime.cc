// The Runtime: its construction, its events, and programs loaded once per device as
// context-independent libraries (cuLibraryLoadData), so no context's lifetime can leave a stale
// module behind: a module table keyed by CUcontext served a destroyed context's module to a new
// context at the same address. Under KJIT_JIT=async, the typed ops' probes that stop short of
// compiling, and the background compiles that fill the same table (runtime/async_jit.hpp). A
// program's key is runtime/program_key.cc's; obtaining it (memory, disk, fleet tier, compile,
// in a single flight) is runtime/obtain.cc's.
#include "runtime/runtime_impl.hpp"

#include "cache/fallback_log.hpp"
#include "cache/warn.hpp"
#include "runtime/async_jit.hpp"
#include "runtime/fleet.hpp"
#include "runtime/nvrtc.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <ctime>
#include <iterator>
#include <string>
#include <vector>

namespace kjit {
namespace detail {

namespace {

std::atomic<uint64_t> background_epoch_value{0};

// This thread's stream capture mode set to relaxed for its lifetime, so a background load never
// disturbs (nor is refused for) another thread's global-mode capture: only the capturing thread
// and threads in global mode are barred from such calls. Restores the previous mode.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
    set_ = driver().cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (set_) driver().cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_;
  bool set_ = false;
};

}  // namespace

uint64_t background_epoch() noexcept { return background_epoch_value.load(std::memory_order_acquire); }

RuntimeImpl::RuntimeImpl(RuntimeConfig c)
    : config(std::move(c)),
      disk(config.disk_cache ? cache::DiskCache(config.cache_dir, config.cache_max_bytes)
                             : cache::DiskCache::disabled()),
      keys(config.kernel_dir, config.cuda_home, disk),
      recorder(config.record_path.empty() || config.record_path == kRecordRemote ? nullptr
                                                                                 : &Recorder::for_path(config.record_path)),
      remote(config.remote.enabled() ? std::make_unique<cache::remote::RemoteTier>(config.remote) : nullptr),
      background(config.background_threads, config.background_queue) {
  // Under async the threads wait from the start: a first miss only queues its compile.
  if (config.jit == JitMode::kAsync) background.start();
  if (config.verbose) {
    fmt::print(stderr, "kjit: cache directory {} ({})\n", config.cache_dir,
               !config.disk_cache   ? "disabled by KJIT_CACHE_DISABLE: memory only"
               : !disk.enabled()    ? "unusable: memory only"
               : disk.writable()    ? "read-write"
                                    : "read-only");
  }
}

RuntimeImpl::~RuntimeImpl() {
  // First, while everything a background compile uses is still alive: queued compiles are
  // abandoned, running ones finish.
  background.shutdown();
  // Libraries belong to no context, so unloading them is safe even after every context is gone;
  // best-effort, since at process exit the driver may be shutting down.
  if (const Driver* d = try_driver()) {
    for (auto& [key, module] : modules) {
      if (module.handle) d->cuLibraryUnload(module.handle);
    }
  }
}

thread_local std::vector<RuntimeImpl::HeldEvent>* RuntimeImpl::held_events = nullptr;
thread_local bool RuntimeImpl::on_background_thread = false;

void RuntimeImpl::emit(EventKind kind, const ProgramSpec& spec, const Target& target, const cache::Key& key, double ms,
                       int device, std::string_view detail) {
  if (!events.active()) return;
  if (held_events != nullptr) {
    held_events->push_back({kind, key.hex(), spec.family, spec.template_args, target.str(), ms, device, std::string(detail)});
    return;
  }
  const std::string hex = key.hex();
  const std::string t = target.str();
  events.emit(Event{kind, hex, spec.family, spec.template_args, t, ms, device, detail});
}

CUresult RuntimeImpl::load_library(const ProgramPtr& program, CUdevice device, const DeviceInfo& info, Module& out,
                                   const char** failed_call) {
  const Driver& d = driver();
  Module m;
  *failed_call = "cuLibraryLoadData";
  CUresult r = d.cuLibraryLoadData(&m.handle, program->binary.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (r != CUDA_SUCCESS) return r;
  m.program = std::make_unique<LoadedProgram>();
  LoadedProgram& lp = *m.program;
  lp.compiled_ = program;
  for (const KernelInfo& k : program->kernels) {
    Kernel kernel;
    kernel.device_ = static_cast<int>(device);
    kernel.info_ = &k;
    *failed_call = "cuLibraryGetKernel";
    r = d.cuLibraryGetKernel(&kernel.kernel_, m.handle, k.lowered_name.c_str());
    if (r == CUDA_SUCCESS) {
      *failed_call = "cuKernelGetAttribute(MAX_THREADS_PER_BLOCK)";
      r = d.cuKernelGetAttribute(&kernel.max_threads_, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel.kernel_, device);
    }
    if (r == CUDA_SUCCESS) {
      *failed_call = "cuKernelGetAttribute(SHARED_SIZE_BYTES)";
      r = d.cuKernelGetAttribute(&kernel.static_smem_, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.kernel_, device);
    }
    if (r != CUDA_SUCCESS) {
      d.cuLibraryUnload(m.handle);
      return r;
    }
    kernel.max_dynamic_smem_ = info.max_smem_per_block_optin - kernel.static_smem_;
    lp.kernels_.push_back(std::move(kernel));
  }
  out = std::move(m);
  return CUDA_SUCCESS;
}


const LoadedProgram* RuntimeImpl::find_loaded(const ProgramSpec& spec, const Target& target, int ordinal) {
  const PreparedProgram p = keys.prepare(spec, target);
  ProgramPtr program;
  {
    std::lock_guard lock(mutex);
    auto it = programs.find(p.key);
    if (it == programs.end() || it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
    try {
      program = it->second.get();
    } catch (...) {
      return nullptr;
    }
  }
  if (!program) return nullptr;  // an owner that stopped short of compiling (obtain)
  std::lock_guard lock(modules_mutex);
  auto it = modules.find(std::make_pair(ordinal, program->key));
  return it == modules.end() ? nullptr : it->second.program.get();
}

CUcontext RuntimeImpl::context_or_current(CUcontext context) {
  if (context) return context;
  CUcontext current = nullptr;
  check_driver(driver().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  return current ? current : ensure_context(0);
}

bool RuntimeImpl::capturing(CUstream stream, bool* invalidated) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = driver().cuStreamIsCapturing(stream, &status);
  // IMPLICIT: the legacy stream, while another stream captures in a mode that forbids using it.
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) check_driver(r, "cuStreamIsCapturing");
  if (invalidated != nullptr) *invalidated = status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  return r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

const LoadedProgram& RuntimeImpl::load(const ProgramSpec& spec, CUcontext context, const CUstream* stream) {
  context = context_or_current(context);
  const int ordinal = context_device(context);
  const DeviceInfo& info = device_info(ordinal);
  const Target target = spec.target_on(info.target());
  bool invalidated = false;
  if (stream != nullptr && capturing(*stream, &invalidated)) {
    if (const LoadedProgram* loaded = find_loaded(spec, target, ordinal)) return *loaded;
    refused.fetch_add(1, std::memory_order_relaxed);
    CaptureMiss error(fmt::format(
        "kjit: {} {} for {} is not loaded on device {} and the launch stream is being captured into a CUDA "
        "graph{}: kjit compiles and loads nothing during a capture (a module load invalidates a global-mode "
        "capture, a compile stalls it); the capture is untouched: end it, run the op once outside a capture "
        "(precompile it to make that fast), then capture again",
        spec.family, spec.template_args, target.str(), ordinal, invalidated ? " (a capture already invalidated)" : ""));
    if (events.active()) emit(EventKind::kRefused, spec, target, keys.prepare(spec, target).key, 0, ordinal, error.what());
    throw error;
  }
  return load_onto(compile(spec, target), spec, target, ordinal, info);
}

const LoadedProgram& RuntimeImpl::load_onto(ProgramPtr program, const ProgramSpec& spec, const Target& target,
                                            int ordinal, const DeviceInfo& info) {
  const CUdevice device = static_cast<CUdevice>(ordinal);
  const auto key = std::make_pair(ordinal, program->key);
  {
    std::lock_guard lock(modules_mutex);
    if (auto it = modules.find(key); it != modules.end()) return *it->second.program;
  }
  for (int attempt = 0;; ++attempt) {
    std::unique_lock lock(modules_mutex);
    if (auto it = modules.find(key); it != modules.end()) return *it->second.program;
    Module m;
    const char* call = "";
    const auto start = std::chrono::steady_clock::now();
    CUresult r;
    {
      NvtxRange range(config.nvtx, "kjit load", spec.family, spec.template_args, target.str());
      r = load_library(program, device, info, m, &call);
    }
    if (r == CUDA_SUCCESS) {
      loads.fetch_add(1, std::memory_order_relaxed);
      const LoadedProgram& loaded = *modules.emplace(key, std::move(m)).first->second.program;
      lock.unlock();  // listeners run without the module table's lock
      cache::Key k;
      cache::Key::from_hex(program->key, &k);
      emit(EventKind::kLoad, spec, target, k, ms_since(start), ordinal);
      return loaded;
    }
    // A binary from the disk cache that the driver refuses is a miss, once; a fresh compile
    // refused too is an error naming the driver's reason.
    if (!binary_rejected(r) || attempt > 0 || program->origin != CompiledProgram::Origin::kDisk) {
      check_driver(r, call);
    }
    lock.unlock();
    const char* name = nullptr;
    const char* text = nullptr;
    driver().cuGetErrorName(r, &name);
    driver().cuGetErrorString(r, &text);
    bool first = false;
    {
      std::lock_guard rebuild_lock(rebuild_mutex);
      first = rebuilt.insert(program->key).second;
    }
    if (first) {
      warn(fmt::format("cache entry {} ({} for {}) passed its checksum but the driver refused it: "
                       "{} failed: {} ({}); recompiling and replacing it",
                       program->key, program->family, program->target.str(), call, name ? name : "CUDA_ERROR_?",
                       text ? text : "no description"));
      if (events.active()) {
        cache::Key k;
        cache::Key::from_hex(program->key, &k);
        emit(EventKind::kRejected, spec, target, k, 0, ordinal,
             fmt::format("the driver refused it: {} failed: {}", call, name ? name : "CUDA_ERROR_?"));
      }
    }
    load_rebuilds.fetch_add(1, std::memory_order_relaxed);
    program = rebuild(spec, target, program);
  }
}

const LoadedProgram* RuntimeImpl::at_hand(const ProgramSpec& spec, CUcontext context, bool capturing, bool exact) {
  const int ordinal = context_device(context);
  const DeviceInfo& info = device_info(ordinal);
  const Target target = spec.target_on(info.target());
  // During a capture only what is loaded already: a module load would disturb the capture.
  if (capturing) return find_loaded(spec, target, ordinal);
  ProgramPtr program = obtain(spec, target, exact ? Reach::kFleet : Reach::kDisk);
  return program ? &load_onto(std::move(program), spec, target, ordinal, info) : nullptr;
}

const LoadedProgram* RuntimeImpl::background_loaded(const BackgroundId& id) {
  std::lock_guard lock(async_mutex);
  auto it = pending.find(id);
  return it == pending.end() ? nullptr : it->second.loaded;
}

bool RuntimeImpl::queue_background(const BackgroundId& id, bool capturing, const LoadedProgram* fallback) {
  std::lock_guard lock(async_mutex);
  if (pending_generation != fork_generation()) {
    // A fork()'s child: the compiles its parent had queued or running are not coming here.
    for (auto it = pending.begin(); it != pending.end();) {
      it = it->second.loaded != nullptr || it->second.failed ? std::next(it) : pending.erase(it);
    }
    pending_generation = fork_generation();
  }
  auto [it, fresh] = pending.try_emplace(id);
  Pending& entry = it->second;
  if (!fresh) {
    if (entry.failed || entry.loaded != nullptr) return false;
    entry.captured = entry.captured || capturing;  // queued or running already
  } else {
    BackgroundPool::Job job;
    job.run = [this, id] { run_background(id); };
    job.abandon = [this, id] { abandon_background(id); };
    // Under async_mutex: a job cannot finish (and update its entry) before the entry is filled.
    if (!background.submit(std::move(job))) {
      pending.erase(it);
      background_queue_full.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    entry.captured = capturing;
  }
  if (fallback != nullptr) {
    const Served s{fallback, capturing};
    const bool known = std::any_of(entry.served.begin(), entry.served.end(), [&](const Served& e) {
      return e.fallback == s.fallback && e.captured == s.captured;
    });
    if (!known) entry.served.push_back(s);
  }
  return true;
}

void RuntimeImpl::run_background(const BackgroundId& id) noexcept {
  on_background_thread = true;
  const auto start = std::chrono::steady_clock::now();
  std::string failure;
  ProgramSpec spec;
  Target target;
  cache::Key key{};
  bool keyed = false;
  const LoadedProgram* loaded = nullptr;
  try {
    spec = id.family->spec(id.point);
    target = spec.target_on(device_info(id.ordinal).target());
    // The device's primary context, whichever device this thread's last job was for (the
    // library serves every context of the device, so which one is current does not matter).
    check_driver(driver().cuCtxSetCurrent(nullptr), "cuCtxSetCurrent");
    ensure_context(id.ordinal);
    key = keys.prepare(spec, target).key;
    keyed = true;
    report_pending_fallbacks(id, spec, target, key);
    ProgramPtr program = obtain(spec, target, Reach::kCompile);
    RelaxedCaptureMode relaxed;
    loaded = &load_onto(std::move(program), spec, target, id.ordinal, device_info(id.ordinal));
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "an exception that is not a std::exception";
  }
  const double ms = ms_since(start);
  bool captured = false;
  {
    std::lock_guard lock(async_mutex);
    auto it = pending.find(id);
    if (it != pending.end()) {
      captured = it->second.captured;
      if (failure.empty()) {
        it->second.loaded = loaded;
      } else {
        it->second.failed = true;  // its fallback keeps serving; compiling it again would fail again
      }
    }
  }
  std::string detail;
  if (failure.empty()) {
    background_compiles.fetch_add(1, std::memory_order_relaxed);
    // After the load: a call that sees the new epoch finds the program loaded.
    background_epoch_value.fetch_add(1, std::memory_order_acq_rel);
    if (captured) {
      detail = "a fallback was captured into a CUDA graph while this program compiled: re-capture the graph to use it";
    }
  } else {
    background_failures.fetch_add(1, std::memory_order_relaxed);
    warn(fmt::format("background compile of {} {} for {} failed: {}; its calls go on as before (a fallback, or a "
                     "compile on the calling thread where none is built) and this process does not queue it again",
                     spec.family, spec.template_args, target.str(), failure));
    detail = "failed: " + failure;
  }
  try {
    if (keyed) report_pending_fallbacks(id, spec, target, key);
    emit(EventKind::kBackgroundCompileDone, spec, target, key, ms, id.ordinal, detail);
  } catch (...) {
  }
}

void RuntimeImpl::abandon_background(const BackgroundId& id) noexcept {
  background_abandoned.fetch_add(1, std::memory_order_relaxed);
  // The key is what the job would have built first (from the key memo as a rule: no compile, no
  // driver call); only where someone hears of it or the fallback log can be written.
  if (events.active() || disk.writable()) {
    try {
      const ProgramSpec spec = id.family->spec(id.point);
      const Target target = spec.target_on(device_info(id.ordinal).target());
      const cache::Key key = keys.prepare(spec, target).key;
      report_pending_fallbacks(id, spec, target, key);
      emit(EventKind::kBackgroundCompileAbandoned, spec, target, key, 0, id.ordinal,
           "abandoned: the Runtime's background compiles were finished (destroyed, or finish_background) before "
           "this one started; precompile it");
    } catch (...) {
    }
  }
  std::lock_guard lock(async_mutex);
  pending.erase(id);
}

void RuntimeImpl::report_pending_fallbacks(const BackgroundId& id, const ProgramSpec& spec, const Target& target,
                                           const cache::Key& key) {
  std::vector<Served> todo;
  {
    std::lock_guard lock(async_mutex);
    auto it = pending.find(id);
    if (it == pending.end()) return;
    Pending& entry = it->second;
    todo.assign(entry.served.begin() + static_cast<std::ptrdiff_t>(entry.reported), entry.served.end());
    entry.reported = entry.served.size();
  }
  for (const Served& s : todo) report_fallback(spec, target, key, *s.fallback, id.ordinal, s.captured);
}

void RuntimeImpl::report_fallback(const ProgramSpec& exact, const Target& target, const cache::Key& key,
                                  const LoadedProgram& fallback, int ordinal, bool capturing) {
  const CompiledProgram& fb = fallback.compiled();
  bool first = false;
  {
    std::lock_guard lock(async_mutex);
    first = fallbacks_logged.emplace(key.hex(), fb.key).second;
  }
  cache::Key fb_key;
  if (first && disk.writable() && cache::Key::from_hex(fb.key, &fb_key)) {
    cache::record_fallback(disk.root(), {key, fb_key, static_cast<int64_t>(std::time(nullptr)), fb.family, fb.template_args});
  }
  if (events.active()) {
    emit(EventKind::kFallbackLaunch, exact, target, key, 0, ordinal,
         fmt::format("served by {} {} for {} (key {}){}", fb.family, fb.template_args, fb.target.str(), fb.key,
                     capturing ? "; captured into a CUDA graph" : ""));
  }
}

void RuntimeImpl::fallback_served(const ProgramSpec& exact, const LoadedProgram& fallback, CUcontext context,
                                  bool capturing) {
  const int ordinal = context_device(context);
  const Target target = exact.target_on(device_info(ordinal).target());
  report_fallback(exact, target, keys.prepare(exact, target).key, fallback, ordinal, capturing);
}

void RuntimeImpl::no_fallback(const ProgramSpec& exact, CUcontext context, bool capturing) {
  no_fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (!events.active()) return;
  const int ordinal = context_device(context);
  const Target target = exact.target_on(device_info(ordinal).target());
  emit(EventKind::kNoFallback, exact, target, keys.prepare(exact, target).key, 0, ordinal,
       capturing ? "no loaded fallback while the launch stream is captured: CaptureMiss, the compile is queued"
                 : "no fallback is built: compiling on the calling thread");
}

bool RuntimeAccess::capturing(const CUstream* stream) {
  return stream != nullptr && RuntimeImpl::capturing(*stream);
}

const LoadedProgram* RuntimeAccess::at_hand(Runtime& runtime, const ProgramSpec& spec, CUcontext context,
                                            bool capturing, bool exact) {
  return runtime.impl_->at_hand(spec, RuntimeImpl::context_or_current(context), capturing, exact);
}

const LoadedProgram* RuntimeAccess::background_loaded(Runtime& runtime, const Family& family, const Point& point,
                                                      CUcontext context) {
  return runtime.impl_->background_loaded({&family, point, context_device(RuntimeImpl::context_or_current(context))});
}

bool RuntimeAccess::queue(Runtime& runtime, const Family& family, const Point& point, CUcontext context,
                          bool capturing, const LoadedProgram* fallback) {
  const int ordinal = context_device(RuntimeImpl::context_or_current(context));
  return runtime.impl_->queue_background({&family, point, ordinal}, capturing, fallback);
}

void RuntimeAccess::fallback_served(Runtime& runtime, const ProgramSpec& exact, const LoadedProgram& fallback,
                                    CUcontext context, bool capturing) {
  runtime.impl_->fallback_served(exact, fallback, RuntimeImpl::context_or_current(context), capturing);
}

void RuntimeAccess::no_fallback(Runtime& runtime, const ProgramSpec& exact, CUcontext context, bool capturing) {
  runtime.impl_->no_fallback(exact, RuntimeImpl::context_or_current(context), capturing);
}

std::atomic<uint64_t>* RuntimeAccess::fallback_launches(Runtime& runtime) noexcept {
  return &runtime.impl_->fallback_launches;
}

}  // namespace detail

const Kernel& LoadedProgram::kernel(size_t i) const {
  if (i >= kernels_.size()) {
    throw InvalidArgument(fmt::format("kernel index {} out of range: program {} has {} kernels", i,
                                      compiled_->key, kernels_.size()));
  }
  return kernels_[i];
}

const Kernel& LoadedProgram::kernel(std::string_view name_expression) const {
  for (const Kernel& k : kernels_) {
    if (k.info().name_expression == name_expression) return k;
  }
  // The program may have been compiled for another spelling of the same expression ("k< 128 >").
  const std::string canonical = detail::canonical_name_expression(name_expression);
  for (const Kernel& k : kernels_) {
    if (detail::canonical_name_expression(k.info().name_expression) == canonical) return k;
  }
  throw InvalidArgument(fmt::format("program {} has no kernel '{}'", compiled_->key, name_expression));
}

cache::remote::RemoteTier* detail::fleet_tier(const Runtime& runtime) noexcept {
  return RuntimeImpl::remote_of(runtime);
}

Runtime& Runtime::global() {
  // Never destroyed: modules outlive static destruction order problems at exit, and the OS
  // reclaims everything anyway. At exit (before the static objects made before it are
  // destroyed) its background compiles are shut down, so none runs while the process tears
  // down, and then its remote hits' disk copies are written.
  static Runtime* runtime = [] {
    auto* r = new Runtime(RuntimeConfig::from_env());
    std::atexit([] {
      runtime->finish_background();
      runtime->impl_->publisher.drain();
    });
    return r;
  }();
  return *runtime;
}

Runtime::Runtime(RuntimeConfig config)
    : impl_(std::make_unique<detail::RuntimeImpl>(std::move(config))), id_([] {
        static std::atomic<uint64_t> next{1};
        return next.fetch_add(1, std::memory_order_relaxed);
      }()) {}
Runtime::~Runtime() = default;

std::shared_ptr<const CompiledProgram> Runtime::compile(const ProgramSpec& spec, const Target& target) {
  return impl_->compile(spec, target);
}

const LoadedProgram& Runtime::load(const ProgramSpec& spec, CUcontext context) {
  return impl_->load(spec, context, nullptr);
}

const LoadedProgram& Runtime::load(const ProgramSpec& spec, CUcontext context, CUstream stream) {
  return impl_->load(spec, context, &stream);
}

std::string Runtime::key(const ProgramSpec& spec, const Target& target) {
  return impl_->keys.prepare(spec, target).key.hex();
}

KeyInputs Runtime::key_inputs(const ProgramSpec& spec, const Target& target) {
  return impl_->keys.key_inputs(spec, target);
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.memory_hits = impl_->memory_hits.load();
  s.disk_hits = impl_->disk_hits.load();
  s.misses = impl_->misses.load();
  s.compiles = impl_->compiles.load();
  s.compile_failures = impl_->compile_failures.load();
  s.loads = impl_->loads.load();
  s.load_rebuilds = impl_->load_rebuilds.load();
  s.refused = impl_->refused.load();
  if (impl_->remote) {
    const cache::remote::TierCounters r = impl_->remote->counters();
    s.remote_hits = r.hits;
    s.remote_misses = r.misses;
    s.remote_errors = r.errors;
    s.remote_lease_waits = r.lease_waits;
    s.remote_rejected_signatures = r.rejected_signatures;
    s.remote_oversized = r.oversized;
    s.remote_publishes = r.publishes;
    s.remote_round_trips = r.round_trips;
  }
  s.fallback_launches = impl_->fallback_launches.load();
  s.no_fallback = impl_->no_fallbacks.load();
  s.background_compiles = impl_->background_compiles.load();
  s.background_failures = impl_->background_failures.load();
  s.background_abandoned = impl_->background_abandoned.load();
  s.background_queue_full = impl_->background_queue_full.load();
  std::lock_guard lock(impl_->stats_mutex);
  s.compile_ms = impl_->compile_ms;
  return s;
}

void Runtime::freeze(JitMode mode) {
  if (mode == JitMode::kOn) throw InvalidArgument("Runtime::freeze(JitMode::kOn) freezes nothing: use unfreeze()");
  impl_->frozen_mode.store(static_cast<int>(mode), std::memory_order_release);
  if (mode == JitMode::kAsync) impl_->background.start();
}

void Runtime::unfreeze() noexcept { impl_->frozen_mode.store(static_cast<int>(JitMode::kOn), std::memory_order_release); }
JitMode Runtime::jit_mode() const noexcept { return impl_->jit_mode(); }
bool Runtime::frozen() const noexcept {
  return impl_->frozen_mode.load(std::memory_order_acquire) != static_cast<int>(JitMode::kOn);
}

void Runtime::finish_background() noexcept { impl_->background.shutdown(); }

uint64_t Runtime::add_listener(EventListener listener) { return impl_->events.add(std::move(listener)); }
bool Runtime::remove_listener(uint64_t id) { return impl_->events.remove(id); }

RuntimeMetrics Runtime::metrics() const {
  RuntimeMetrics m;
  m.stats = stats();
  m.jit_mode = jit_mode();
  m.frozen = frozen();
  m.cache = disk_cache();
  if (std::optional<cache::UsageRecord> u = impl_->disk.recorded_usage()) {
    m.cache_entries = u->entries;
    m.cache_bytes = u->bytes;
  }
  return m;
}

const RuntimeConfig& Runtime::config() const { return impl_->config; }
DiskCacheInfo Runtime::disk_cache() const {
  const cache::DiskCache& d = impl_->disk;
  return {d.root(), d.enabled(), d.writable(), d.max_bytes()};
}
std::string Runtime::nvrtc_version() const { return impl_->keys.nvrtc_version(); }
std::string Runtime::cuda_include_dir() const { return impl_->keys.headers().include_dir; }
std::string Runtime::cuda_headers_version() const { return impl_->keys.headers().version; }

}  // namespace kjit
