// The Runtime: in-process program table (single-flight), disk cache with a per-key process lock,
// NVRTC on a miss, and programs loaded once per device as context-independent libraries
// (cuLibraryLoadData), so no context's lifetime can leave a stale module behind: a module table
// keyed by CUcontext served a destroyed context's module to a new context at the same address.
// Under KJIT_JIT=async, the typed ops' probes that stop short of compiling, and the background
// compiles that fill the same table (runtime/async_jit.hpp).
#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include "cache/fallback_log.hpp"
#include "cache/key.hpp"
#include "cache/publish_queue.hpp"
#include "cache/remote/tier.hpp"
#include "cache/store.hpp"
#include "cache/warn.hpp"
#include "runtime/async_jit.hpp"
#include "runtime/background_pool.hpp"
#include "runtime/driver.hpp"
#include "runtime/events.hpp"
#include "runtime/fleet.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/record.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iterator>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kjit {
namespace detail {

using ProgramPtr = std::shared_ptr<const CompiledProgram>;

namespace {

std::atomic<uint64_t> background_epoch_value{0};

// Set on the background threads: their compiles are the point of KJIT_JIT=async, not a stall
// to warn about.
thread_local bool on_background_thread = false;

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

struct Module {
  CUlibrary handle = nullptr;
  std::unique_ptr<LoadedProgram> program;
};

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig c)
      : config(std::move(c)),
        sources(config.kernel_dir),
        nvrtc_ver(nvrtc_version()),
        disk(config.disk_cache ? cache::DiskCache(config.cache_dir, config.cache_max_bytes)
                               : cache::DiskCache::disabled()),
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

  /// `runtime`'s fleet tier (detail::fleet_tier).
  static cache::remote::RemoteTier* remote_of(const Runtime& runtime) noexcept { return runtime.impl_->remote.get(); }

  ~RuntimeImpl() {
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

  const CudaHeaders& headers() {
    std::call_once(headers_once, [&] { cuda = find_cuda_headers(config.cuda_home); });
    return cuda;
  }

  struct Prepared {
    SourceClosure sources;  // empty when the key came from the key memo (resolved == false)
    bool resolved = false;
    std::vector<std::string> options;
    std::vector<std::string> names;  // canonical name expressions
    cache::Key key;
  };

  // The key of `spec` for `target`, and what a compile needs. With `use_memo`, a program the key
  // memo covers (key_memo.hpp) takes its key from this process's memo or from its record, and
  // its sources stay unresolved until complete() (only a compile needs them).
  Prepared prepare(const ProgramSpec& spec, const Target& target, bool use_memo = true) {
    if (spec.name_expressions.empty()) {
      throw InvalidArgument(fmt::format("program '{}' lists no name expressions (kernels to emit)", spec.source_name));
    }
    Options options = normalize_options(target, spec.options);
    IncludePath path;
    path.user_dirs = options.include_dirs;
    path.pre_includes = options.pre_includes;
    path.source_dirs = !options.no_source_include;
    path.toolkit_dirs = headers().include_dirs;
    // The toolkit memo lives with the cache it speeds up, and shares its writability.
    if (disk.enabled()) path.toolkit_memo_dir = disk.root() + "/toolkit";
    path.toolkit_memo_writable = disk.writable();
    Prepared p;
    p.options = std::move(options.list);
    for (const auto& e : spec.name_expressions) p.names.push_back(canonical_name_expression(e));

    const bool memo = disk.enabled() && path.user_dirs.empty() && path.pre_includes.empty() && !sources.digest().empty();
    cache::Key id;
    if (memo) {
      id = key_memo_id(spec, p, target, path);
      if (std::optional<cache::Key> k = use_memo ? recall(id) : std::nullopt) {
        p.key = *k;
        return p;
      }
    }
    KeyChecks checks;
    p.sources = resolve_sources(spec, sources, path, memo ? &checks : nullptr);
    p.resolved = true;
    cache::KeyBuilder b;
    b.add("source.name", p.sources.name).add("source.text", p.sources.text);
    b.add("headers", static_cast<int64_t>(p.sources.headers.size()));
    for (const auto& [name, text] : p.sources.headers) b.add("header.name", name).add("header.text", text);
    b.add("files", static_cast<int64_t>(p.sources.files.size()));
    for (const auto& f : p.sources.files) b.add("file.path", f.path).add("file.xxh3", f.xxh3);
    add_spec_fields(b, p, target);
    p.key = b.finish();
    if (memo && checks.usable) {
      if (disk.writable()) remember_key(disk.root() + "/keys", id, p.key, checks);
      std::lock_guard lock(key_memo_mutex);
      known_keys[id] = p.key;
    }
    return p;
  }

  // The files of `closure` as the key hashes them: the main source, the in-memory headers, the
  // files on disk (their digests already taken by the walk).
  static std::vector<cache::InputDigest> input_digests(const SourceClosure& closure) {
    std::vector<cache::InputDigest> out;
    out.push_back({"source", closure.name, cache::digest_hex(closure.text)});
    for (const auto& [name, text] : closure.headers) out.push_back({"header", name, cache::digest_hex(text)});
    for (const auto& f : closure.files) out.push_back({"file", f.path, f.xxh3});
    return out;
  }

  KeyInputs key_inputs(const ProgramSpec& spec, const Target& target) {
    const Prepared p = prepare(spec, target, /*use_memo=*/false);
    KeyInputs k;
    k.key = p.key.hex();
    k.format_version = cache::kFormatVersion;
    for (cache::InputDigest& d : input_digests(p.sources)) {
      k.files.push_back({std::move(d.kind), std::move(d.name), std::move(d.digest)});
    }
    k.name_expressions = p.names;
    k.target = target.str();
    k.nvrtc_version = nvrtc_ver;
    k.cuda_headers_version = headers().version;
    k.options = p.options;
    return k;
  }

  // The key fields beside the sources, shared by the key and the key memo's id.
  void add_spec_fields(cache::KeyBuilder& b, const Prepared& p, const Target& target) {
    b.add("name_expressions", static_cast<int64_t>(p.names.size()));
    for (const auto& e : p.names) b.add("name_expression", e);
    b.add("target", target.str());
    b.add("nvrtc", nvrtc_ver);
    b.add("cuda_headers", headers().version);
    b.add("options", static_cast<int64_t>(p.options.size()));
    for (const auto& o : p.options) b.add("option", o);
  }

  // The key memo's id of a program (key_memo.hpp): every key input but the toolkit's files.
  cache::Key key_memo_id(const ProgramSpec& spec, const Prepared& p, const Target& target, const IncludePath& path) {
    cache::KeyBuilder b;
    b.add("memo.library", memo_library()).add("memo.embedded_sources", sources.digest());
    b.add("source.name", spec.source_name).add("source.text", spec.source_text);
    b.add("headers", static_cast<int64_t>(spec.headers.size()));
    for (const auto& [name, text] : spec.headers) b.add("header.name", name).add("header.text", text);
    b.add("source_dirs", path.source_dirs ? 1 : 0);
    b.add("std_headers", spec.std_headers ? 1 : 0);
    b.add("toolkit_dirs", static_cast<int64_t>(path.toolkit_dirs.size()));
    for (const auto& d : path.toolkit_dirs) b.add("toolkit_dir", d);
    add_spec_fields(b, p, target);
    return b.finish();
  }

  // This process's memo (the toolkit does not change under a running process, as the toolkit
  // memo assumes), then the record.
  std::optional<cache::Key> recall(const cache::Key& id) {
    {
      std::lock_guard lock(key_memo_mutex);
      if (auto it = known_keys.find(id); it != known_keys.end()) return it->second;
    }
    std::optional<cache::Key> k = recall_key(disk.root() + "/keys", id);
    if (k) {
      std::lock_guard lock(key_memo_mutex);
      known_keys[id] = *k;
    }
    return k;
  }

  // Resolves the sources of a program whose key came from the key memo: a compile needs them.
  // The walk's key replaces the recorded one (they agree unless a file changed since the checks).
  void complete(Prepared& p, const ProgramSpec& spec, const Target& target) {
    if (!p.resolved) p = prepare(spec, target, /*use_memo=*/false);
  }

  static ProgramPtr from_entry(const cache::Entry& e, CompiledProgram::Origin origin) {
    auto p = std::make_shared<CompiledProgram>();
    p->key = e.key.hex();
    p->family = e.meta.family;
    p->template_args = e.meta.template_args;
    p->target = Target::parse(e.meta.target);
    for (const auto& k : e.meta.kernels) {
      p->kernels.push_back({k.name_expression, k.lowered_name, k.registers, k.spill_bytes, k.static_smem});
    }
    p->options = e.meta.options;
    p->nvrtc_version = e.meta.nvrtc_version;
    p->compile_ms = e.meta.compile_ms;
    p->binary = e.payload;
    p->origin = origin;
    return p;
  }

  // A disk entry is used only if it describes what we asked for; anything else is a miss.
  static bool matches(const cache::Entry& e, const Prepared& p, const Target& target) {
    if (e.meta.target != target.str() || e.meta.ptx != target.ptx || e.payload.empty()) return false;
    if (e.meta.kernels.size() != p.names.size()) return false;
    for (size_t i = 0; i < p.names.size(); ++i) {
      // The entry keeps the spelling of the compile that made it; compare canonical forms.
      if (canonical_name_expression(e.meta.kernels[i].name_expression) != p.names[i] ||
          e.meta.kernels[i].lowered_name.empty()) {
        return false;
      }
    }
    return true;
  }

  // `second_look`: the look again under the key's lock, after a first one missed; a damaged entry
  // it meets was already reported by the first.
  std::optional<ProgramPtr> from_disk(const cache::Key& key, const Prepared& p, const ProgramSpec& spec,
                                      const Target& target, bool second_look = false) {
    NvtxRange range(config.nvtx, "kjit disk read", spec.family, spec.template_args, target.str());
    const auto start = std::chrono::steady_clock::now();
    std::string problem;
    auto entry = disk.lookup(key, /*count_hit=*/true, &problem);
    if (!entry) {
      if (!problem.empty() && !second_look) emit(EventKind::kRejected, spec, target, key, 0, -1, problem);
      return std::nullopt;
    }
    if (!matches(*entry, p, target)) {
      // Once per key and process: the recompile is kept in `programs` and replaces the entry.
      warn(fmt::format("cache entry {} does not match its program; recompiling", key.hex()));
      if (!second_look) emit(EventKind::kRejected, spec, target, key, 0, -1, "the entry does not describe this program");
      return std::nullopt;
    }
    ProgramPtr program = from_entry(*entry, CompiledProgram::Origin::kDisk);
    emit(EventKind::kDiskHit, spec, target, key, ms_since(start));
    return program;
  }

  static double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

  // Sends one event to the listeners; builds nothing when there are none.
  void emit(EventKind kind, const ProgramSpec& spec, const Target& target, const cache::Key& key, double ms,
            int device = -1, std::string_view detail = {}) {
    if (!events.active()) return;
    if (held_events != nullptr) {
      held_events->push_back({kind, key.hex(), spec.family, spec.template_args, target.str(), ms, device, std::string(detail)});
      return;
    }
    const std::string hex = key.hex();
    const std::string t = target.str();
    events.emit(Event{kind, hex, spec.family, spec.template_args, t, ms, device, detail});
  }

  // An event kept for later, owning its strings.
  struct HeldEvent {
    EventKind kind;
    std::string key, family, params, target;
    double ms;
    int device;
    std::string detail;
  };
  // On a background thread, the events of a key's owner are held until its result is published
  // (obtain): a thread waiting for that result may hold what a listener needs (Python's GIL,
  // whose op calls keep it while they wait), and must be released before any listener runs.
  class HoldEvents {
   public:
    HoldEvents(RuntimeImpl& runtime, bool hold) : runtime_(runtime), hold_(hold && held_events == nullptr) {
      if (hold_) held_events = &held_;
    }
    ~HoldEvents() { release(); }
    HoldEvents(const HoldEvents&) = delete;
    HoldEvents& operator=(const HoldEvents&) = delete;
    // Sends what was held, in order; later events go out at once.
    void release() noexcept {
      if (!hold_) return;
      hold_ = false;
      held_events = nullptr;
      for (const HeldEvent& e : held_) {
        runtime_.events.emit(Event{e.kind, e.key, e.family, e.params, e.target, e.ms, e.device, e.detail});
      }
      held_.clear();
    }

   private:
    RuntimeImpl& runtime_;
    bool hold_;
    std::vector<HeldEvent> held_;
  };
  static thread_local std::vector<HeldEvent>* held_events;

  ProgramPtr compile_and_publish(const Prepared& p, const ProgramSpec& spec, const Target& target) {
    cache::Entry e = compile_entry(p, spec, target);
    disk.publish(e);
    return from_entry(e, CompiledProgram::Origin::kCompiled);
  }

  // With the fleet tier: the fleet's entry, or a compile under its lease (remote/tier.hpp).
  ProgramPtr obtain_from_fleet(const Prepared& p, const ProgramSpec& spec, const Target& target) {
    bool compiled = false;
    cache::Entry e = remote->obtain(
        p.key, [&](const cache::Entry& got) { return matches(got, p, target); },
        [&] { return compile_entry(p, spec, target); }, &compiled);
    if (!compiled) return from_remote_entry(std::move(e));
    // A local compile may exist nowhere else (a read-only host, a failed remote publish): it is
    // on disk before this host's other processes, waiting for the key's lock, look there again.
    disk.publish(e);
    return from_entry(e, CompiledProgram::Origin::kCompiled);
  }

  // A verified entry from the fleet tier: loaded from its bytes at once, and published to the
  // disk cache off the request's path (it is safe in the tier meanwhile).
  ProgramPtr from_remote_entry(cache::Entry e) {
    ProgramPtr program = from_entry(e, CompiledProgram::Origin::kRemote);
    publisher.publish(std::move(e));
    return program;
  }

  // The fleet tier's entry for `p`, published to the disk cache so this host asks once per key.
  // `*bad` is set when the tier cannot help with this key: it is unreachable, or the slot holds a
  // value this host cannot use and, without the signing key, cannot replace either.
  std::optional<ProgramPtr> from_remote(const Prepared& p, const Target& target, bool* bad) {
    using Found = cache::remote::RemoteTier::Found;
    cache::remote::RemoteTier::Lookup r = remote->fetch(p.key);
    *bad = r.found == Found::kFault || (r.found == Found::kRejected && !remote->signer());
    if (!r.entry) return std::nullopt;
    if (!matches(*r.entry, p, target)) {
      warn(fmt::format("remote cache entry {} does not match its program; compiling locally", p.key.hex()));
      *bad = true;
      return std::nullopt;
    }
    return from_remote_entry(std::move(*r.entry));
  }

  cache::Entry compile_entry(const Prepared& p, const ProgramSpec& spec, const Target& target) {
    if (config.verbose) fmt::print(stderr, "kjit: compiling {} [{}] for {}\n", spec.source_name, spec.template_args, target.str());
    NvrtcResult r;
    try {
      NvtxRange range(config.nvtx, "kjit compile", spec.family, spec.template_args, target.str());
      r = nvrtc_compile(p.sources, spec.name_expressions, target, p.options, headers().include_options);
    } catch (...) {
      compile_failures.fetch_add(1, std::memory_order_relaxed);
      throw;
    }
    compiles.fetch_add(1, std::memory_order_relaxed);
    add_compile_ms(r.ms);
    cache::Entry e;
    e.key = p.key;
    e.meta.family = spec.family;
    e.meta.template_args = spec.template_args;
    e.meta.target = target.str();
    e.meta.ptx = target.ptx;
    for (const auto& k : r.kernels) {
      e.meta.kernels.push_back({k.name_expression, k.lowered_name, k.registers, k.spill_bytes, k.static_smem});
    }
    e.meta.options = p.options;
    e.meta.nvrtc_version = nvrtc_ver;
    e.meta.cuda_headers_version = headers().version;
    e.meta.source_name = spec.source_name;
    e.meta.compile_ms = r.ms;
    e.meta.created_unix = static_cast<int64_t>(std::time(nullptr));
    e.meta.inputs = input_digests(p.sources);
    e.payload = std::move(r.binary);
    emit(EventKind::kCompile, spec, target, p.key, r.ms);
    return e;
  }

  // The JitDisabled for a miss of `spec` under KJIT_JIT=off (`why`: what made it a miss).
  JitDisabled jit_disabled(const ProgramSpec& spec, const Target& target, const cache::Key& key, const char* why) {
    refused.fetch_add(1, std::memory_order_relaxed);
    const char* switch_name = jit_switch(JitMode::kOff);
    const cache::ManifestEntry e = manifest_entry(spec, target, key.hex());
    const std::string command = compile_command(e, config.cache_dir);
    const std::string what = fmt::format("{} {} for {}", spec.family, spec.template_args, target.str());
    std::string how;
    if (!command.empty()) {
      how = "build it with: " + command;
    } else {
      how = fmt::format("it is the application's own kernel {} (key {}), which no command can rebuild: run the "
                        "application once with KJIT_JIT=on against this cache, or import a bundle that holds it",
                        spec.source_name, key.hex());
    }
    JitDisabled error(fmt::format("kjit: JIT compilation is off ({}) and {} {} the disk cache {}; "
                                  "nothing was compiled; {}",
                                  switch_name, what, why, config.cache_dir, how),
                      spec.family, spec.template_args, target.str(), command);
    emit(EventKind::kRefused, spec, target, key, 0, -1, error.what());
    return error;
  }

  // The effective JIT mode: the stricter of KJIT_JIT and Runtime::freeze.
  JitMode jit_mode() const noexcept {
    return std::max(config.jit, static_cast<JitMode>(frozen_mode.load(std::memory_order_acquire)));
  }

  // What set `mode` in force, for messages: "KJIT_JIT=off" or "Runtime::freeze(off)".
  const char* jit_switch(JitMode mode) const noexcept {
    const bool env = config.jit == mode;
    switch (mode) {
      case JitMode::kOff: return env ? "KJIT_JIT=off" : "Runtime::freeze(off)";
      case JitMode::kAsync: return env ? "KJIT_JIT=async" : "Runtime::freeze(async)";
      default: return env ? "KJIT_JIT=warn" : "Runtime::freeze(warn)";
    }
  }

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
  // null and unregisters, and a waiter that receives it asks again.
  ProgramPtr obtain(const ProgramSpec& spec, const Target& target, Reach reach = Reach::kCompile) {
    for (;;) {
      Prepared p = prepare(spec, target);
      const cache::Key registered = p.key;  // complete() may correct p.key
      std::promise<ProgramPtr> promise;
      std::shared_future<ProgramPtr> future;
      bool owner = false;
      {
        std::lock_guard lock(mutex);
        auto it = programs.find(p.key);
        if (it != programs.end()) {
          future = it->second;
        } else {
          future = promise.get_future().share();
          programs.emplace(p.key, future);
          owner = true;
        }
      }
      if (!owner) {
        const bool ready = future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
        if (reach != Reach::kCompile && !ready) return nullptr;
        ProgramPtr got;
        try {
          got = future.get();
        } catch (...) {
          if (reach != Reach::kCompile) return nullptr;
          throw;
        }
        if (!got) {
          if (reach != Reach::kCompile) return nullptr;
          continue;  // its owner stopped short of compiling: ask again
        }
        (ready ? memory_hits : misses).fetch_add(1, std::memory_order_relaxed);
        return got;
      }
      HoldEvents held(*this, on_background_thread);
      try {
        ProgramPtr result = obtain_owned(p, spec, target, reach);
        promise.set_value(result);
        if (!result) {
          std::lock_guard lock(mutex);
          programs.erase(registered);
        }
        held.release();
        return result;
      } catch (...) {
        // A failed compile leaves nothing behind: the next call tries again.
        promise.set_exception(std::current_exception());
        {
          std::lock_guard lock(mutex);
          programs.erase(registered);
        }
        held.release();
        throw;
      }
    }
  }

  ProgramPtr compile(const ProgramSpec& spec, const Target& target) { return obtain(spec, target, Reach::kCompile); }

  // The owner's part of obtain(): null when `reach` stops it before the program is found.
  ProgramPtr obtain_owned(Prepared& p, const ProgramSpec& spec, const Target& target, Reach reach) {
    // Once per key and process (the owner that obtains it or compiles), never on a memory hit
    // nor for a probe that finds nothing: off the hot path.
    auto record = [&] {
      if (recorder) recorder->record(manifest_entry(spec, target, p.key.hex()));
      if (remote && config.record_path == kRecordRemote) record_remote(spec, target, p.key);
    };
    if (auto hit = from_disk(p.key, p, spec, target)) {
      disk_hits.fetch_add(1, std::memory_order_relaxed);
      record();
      return *hit;
    }
    if (reach == Reach::kDisk) return nullptr;
    bool remote_bad = false;
    if (auto fleet = remote ? from_remote(p, target, &remote_bad) : std::nullopt) {
      misses.fetch_add(1, std::memory_order_relaxed);
      record();
      return *fleet;
    }
    if (reach == Reach::kFleet) return nullptr;
    misses.fetch_add(1, std::memory_order_relaxed);
    record();
    const JitMode jit = jit_mode();
    if (jit == JitMode::kOff) throw jit_disabled(spec, target, p.key, "is not in");
    // Under async, a compile on the thread that asked (no fallback, or Runtime::compile/load)
    // is the stall the mode avoids elsewhere: warned as under warn.
    if (jit == JitMode::kWarn || (jit == JitMode::kAsync && !on_background_thread)) warn_jit(spec, target, p.key, jit);
    complete(p, spec, target);
    cache::KeyLock file_lock = disk.lock(p.key);
    if (auto late = from_disk(p.key, p, spec, target, /*second_look=*/true)) {
      return *late;  // another process compiled it while we waited for the lock
    }
    if (remote && !remote_bad) return obtain_from_fleet(p, spec, target);
    return compile_and_publish(p, spec, target);
  }

  // KJIT_RECORD=remote: the fleet's manifest set; a fault is the tier's bounded miss.
  void record_remote(const ProgramSpec& spec, const Target& target, const cache::Key& key) noexcept {
    try {
      remote->record_manifest_line(cache::format_manifest_line(manifest_entry(spec, target, key.hex())));
    } catch (...) {
    }
  }

  // Under KJIT_JIT=warn (and async, for a compile on the calling thread): one warning per key
  // and process.
  void warn_jit(const ProgramSpec& spec, const Target& target, const cache::Key& key, JitMode mode) {
    {
      std::lock_guard lock(mutex);
      if (!jit_warned.insert(key.hex()).second) return;
    }
    const std::string command = compile_command(manifest_entry(spec, target, key.hex()), config.cache_dir);
    warn(fmt::format("compiling {} {} for {} at run time{} ({}){}", spec.family, spec.template_args, target.str(),
                     mode == JitMode::kAsync ? " on the calling thread: no fallback is built" : "", jit_switch(mode),
                     command.empty() ? "" : "; precompile it with: " + command));
  }

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
  ProgramPtr rebuild(const ProgramSpec& spec, const Target& target, const ProgramPtr& rejected);

  // KJIT_JIT=async: RuntimeAccess's functions (runtime/async_jit.hpp), with the device resolved.
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
  KernelSources sources;
  std::string nvrtc_ver;
  std::once_flag headers_once;
  CudaHeaders cuda;
  cache::DiskCache disk;
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

  std::mutex key_memo_mutex;
  std::unordered_map<cache::Key, cache::Key, cache::KeyHash> known_keys;  // key memo id → key

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

thread_local std::vector<RuntimeImpl::HeldEvent>* RuntimeImpl::held_events = nullptr;

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

// The driver refused a binary that passed its checksum: compile it afresh (once per key and
// process), replacing the disk entry and the in-memory one, unless another thread or process
// already did.
ProgramPtr RuntimeImpl::rebuild(const ProgramSpec& spec, const Target& target, const ProgramPtr& rejected) {
  Prepared p = prepare(spec, target, /*use_memo=*/false);
  std::lock_guard rebuild_lock(rebuild_mutex);
  {
    std::lock_guard lock(mutex);
    auto it = programs.find(p.key);
    if (it != programs.end() && it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        if (ProgramPtr current = it->second.get(); current && current != rejected) return current;
      } catch (...) {
      }
    }
  }
  ProgramPtr fresh;
  {
    cache::KeyLock file_lock = disk.lock(p.key);
    auto late = from_disk(p.key, p, spec, target);
    if (late && (*late)->binary != rejected->binary) {
      fresh = *late;  // another process replaced the entry while we waited for the lock
    } else if (jit_mode() == JitMode::kOff) {
      throw jit_disabled(spec, target, p.key, "was refused by the driver (it passed its checksum) as read from");
    } else {
      fresh = compile_and_publish(p, spec, target);
    }
  }
  std::promise<ProgramPtr> ready;
  ready.set_value(fresh);
  std::lock_guard lock(mutex);
  programs[p.key] = ready.get_future().share();
  return fresh;
}

const LoadedProgram* RuntimeImpl::find_loaded(const ProgramSpec& spec, const Target& target, int ordinal) {
  const Prepared p = prepare(spec, target);
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
    if (events.active()) emit(EventKind::kRefused, spec, target, prepare(spec, target).key, 0, ordinal, error.what());
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
    job.abandon = [this, id] {
      background_abandoned.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(async_mutex);
      pending.erase(id);
    };
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
    key = prepare(spec, target).key;
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
  report_fallback(exact, target, prepare(exact, target).key, fallback, ordinal, capturing);
}

void RuntimeImpl::no_fallback(const ProgramSpec& exact, CUcontext context, bool capturing) {
  no_fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (!events.active()) return;
  const int ordinal = context_device(context);
  const Target target = exact.target_on(device_info(ordinal).target());
  emit(EventKind::kNoFallback, exact, target, prepare(exact, target).key, 0, ordinal,
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
  return impl_->prepare(spec, target).key.hex();
}

KeyInputs Runtime::key_inputs(const ProgramSpec& spec, const Target& target) {
  return impl_->key_inputs(spec, target);
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
std::string Runtime::nvrtc_version() const { return impl_->nvrtc_ver; }
std::string Runtime::cuda_include_dir() const { return impl_->headers().include_dir; }
std::string Runtime::cuda_headers_version() const { return impl_->headers().version; }

}  // namespace kjit
