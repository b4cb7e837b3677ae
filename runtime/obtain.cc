// The obtain path of a Runtime: memory → disk → fleet tier → compile, one function per step
// (runtime/runtime_impl.hpp declares them). The memory step is the single flight: one compile per
// key and process, the first caller owning the key and the others waiting on its shared future;
// a failed compile leaves nothing behind. The compile step takes the key's process lock and looks
// at the disk again before it compiles, so one process of a host compiles a key.
#include "runtime/runtime_impl.hpp"

#include "cache/manifest.hpp"
#include "cache/warn.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/record.hpp"

#include <fmt/format.h>

#include <ctime>
#include <exception>

namespace kjit::detail {

namespace {

// On a background thread, the events of a key's owner are held until its result is published
// (obtain): a thread waiting for that result may hold what a listener needs (Python's GIL,
// whose op calls keep it while they wait), and must be released before any listener runs.
class HoldEvents {
 public:
  HoldEvents(RuntimeImpl& runtime, bool hold)
      : runtime_(runtime), hold_(hold && RuntimeImpl::held_events == nullptr) {
    if (hold_) RuntimeImpl::held_events = &held_;
  }
  ~HoldEvents() { release(); }
  HoldEvents(const HoldEvents&) = delete;
  HoldEvents& operator=(const HoldEvents&) = delete;
  // Sends what was held, in order; later events go out at once.
  void release() noexcept {
    if (!hold_) return;
    hold_ = false;
    RuntimeImpl::held_events = nullptr;
    for (const RuntimeImpl::HeldEvent& e : held_) {
      runtime_.events.emit(Event{e.kind, e.key, e.family, e.params, e.target, e.ms, e.device, e.detail});
    }
    held_.clear();
  }

 private:
  RuntimeImpl& runtime_;
  bool hold_;
  std::vector<RuntimeImpl::HeldEvent> held_;
};

}  // namespace

ProgramPtr RuntimeImpl::obtain(const ProgramSpec& spec, const Target& target, Reach reach) {
  for (;;) {
    PreparedProgram p = keys.prepare(spec, target);
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

ProgramPtr RuntimeImpl::obtain_owned(PreparedProgram& p, const ProgramSpec& spec, const Target& target, Reach reach) {
  if (auto hit = from_disk(p.key, p, spec, target)) {
    disk_hits.fetch_add(1, std::memory_order_relaxed);
    record_obtained(spec, target, p.key);
    return *hit;
  }
  if (reach == Reach::kDisk) return nullptr;
  bool remote_bad = false;
  if (auto fleet = remote ? from_remote(p, target, &remote_bad) : std::nullopt) {
    misses.fetch_add(1, std::memory_order_relaxed);
    record_obtained(spec, target, p.key);
    return *fleet;
  }
  if (reach == Reach::kFleet) return nullptr;
  misses.fetch_add(1, std::memory_order_relaxed);
  record_obtained(spec, target, p.key);
  return compile_locked(p, spec, target, remote_bad);
}

std::optional<ProgramPtr> RuntimeImpl::from_disk(const cache::Key& key, const PreparedProgram& p,
                                                 const ProgramSpec& spec, const Target& target, bool second_look) {
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

std::optional<ProgramPtr> RuntimeImpl::from_remote(const PreparedProgram& p, const Target& target, bool* bad) {
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

ProgramPtr RuntimeImpl::compile_locked(PreparedProgram& p, const ProgramSpec& spec, const Target& target,
                                       bool remote_bad) {
  const JitMode jit = jit_mode();
  if (jit == JitMode::kOff) throw jit_disabled(spec, target, p.key, "is not in");
  // Under async, a compile on the thread that asked (no fallback, or Runtime::compile/load)
  // is the stall the mode avoids elsewhere: warned as under warn.
  if (jit == JitMode::kWarn || (jit == JitMode::kAsync && !on_background_thread)) warn_jit(spec, target, p.key, jit);
  keys.complete(p, spec, target);
  cache::KeyLock file_lock = disk.lock(p.key);
  if (auto late = from_disk(p.key, p, spec, target, /*second_look=*/true)) {
    return *late;  // another process compiled it while we waited for the lock
  }
  if (remote && !remote_bad) return obtain_from_fleet(p, spec, target);
  return compile_and_publish(p, spec, target);
}

ProgramPtr RuntimeImpl::rebuild(const ProgramSpec& spec, const Target& target, const ProgramPtr& rejected) {
  PreparedProgram p = keys.prepare(spec, target, /*use_memo=*/false);
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

ProgramPtr RuntimeImpl::compile_and_publish(const PreparedProgram& p, const ProgramSpec& spec, const Target& target) {
  cache::Entry e = compile_entry(p, spec, target);
  disk.publish(e);
  return from_entry(e, CompiledProgram::Origin::kCompiled);
}

ProgramPtr RuntimeImpl::obtain_from_fleet(const PreparedProgram& p, const ProgramSpec& spec, const Target& target) {
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

ProgramPtr RuntimeImpl::from_remote_entry(cache::Entry e) {
  ProgramPtr program = from_entry(e, CompiledProgram::Origin::kRemote);
  publisher.publish(std::move(e));
  return program;
}

cache::Entry RuntimeImpl::compile_entry(const PreparedProgram& p, const ProgramSpec& spec, const Target& target) {
  if (config.verbose) fmt::print(stderr, "kjit: compiling {} [{}] for {}\n", spec.source_name, spec.template_args, target.str());
  NvrtcResult r;
  try {
    NvtxRange range(config.nvtx, "kjit compile", spec.family, spec.template_args, target.str());
    r = nvrtc_compile(p.sources, spec.name_expressions, target, p.options, keys.headers().include_options);
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
  e.meta.nvrtc_version = keys.nvrtc_version();
  e.meta.cuda_headers_version = keys.headers().version;
  e.meta.source_name = spec.source_name;
  e.meta.compile_ms = r.ms;
  e.meta.created_unix = static_cast<int64_t>(std::time(nullptr));
  e.meta.inputs = ProgramKeys::input_digests(p.sources);
  e.payload = std::move(r.binary);
  emit(EventKind::kCompile, spec, target, p.key, r.ms);
  return e;
}

ProgramPtr RuntimeImpl::from_entry(const cache::Entry& e, CompiledProgram::Origin origin) {
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

bool RuntimeImpl::matches(const cache::Entry& e, const PreparedProgram& p, const Target& target) {
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

void RuntimeImpl::record_obtained(const ProgramSpec& spec, const Target& target, const cache::Key& key) {
  if (recorder) recorder->record(manifest_entry(spec, target, key.hex()));
  if (remote && config.record_path == kRecordRemote) record_remote(spec, target, key);
}

void RuntimeImpl::record_remote(const ProgramSpec& spec, const Target& target, const cache::Key& key) noexcept {
  try {
    remote->record_manifest_line(cache::format_manifest_line(manifest_entry(spec, target, key.hex())));
  } catch (...) {
  }
}

JitDisabled RuntimeImpl::jit_disabled(const ProgramSpec& spec, const Target& target, const cache::Key& key,
                                      const char* why) {
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

const char* RuntimeImpl::jit_switch(JitMode mode) const noexcept {
  const bool env = config.jit == mode;
  switch (mode) {
    case JitMode::kOff: return env ? "KJIT_JIT=off" : "Runtime::freeze(off)";
    case JitMode::kAsync: return env ? "KJIT_JIT=async" : "Runtime::freeze(async)";
    default: return env ? "KJIT_JIT=warn" : "Runtime::freeze(warn)";
  }
}

void RuntimeImpl::warn_jit(const ProgramSpec& spec, const Target& target, const cache::Key& key, JitMode mode) {
  {
    std::lock_guard lock(mutex);
    if (!jit_warned.insert(key.hex()).second) return;
  }
  const std::string command = compile_command(manifest_entry(spec, target, key.hex()), config.cache_dir);
  warn(fmt::format("compiling {} {} for {} at run time{} ({}){}", spec.family, spec.template_args, target.str(),
                   mode == JitMode::kAsync ? " on the calling thread: no fallback is built" : "", jit_switch(mode),
                   command.empty() ? "" : "; precompile it with: " + command));
}

}  // namespace kjit::detail
