// The Runtime: in-process program table (single-flight), disk cache with a per-key process lock,
// NVRTC on a miss, and modules loaded once per CUDA context.
#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include "cache/key.hpp"
#include "cache/store.hpp"
#include "cache/warn.hpp"
#include "runtime/driver.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/nvrtc.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <future>
#include <map>
#include <mutex>
#include <unordered_map>

namespace kjit {
namespace detail {

using ProgramPtr = std::shared_ptr<const CompiledProgram>;

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig c)
      : config(std::move(c)),
        sources(config.kernel_dir),
        nvrtc_ver(nvrtc_version()),
        disk(config.disk_cache ? cache::DiskCache(config.cache_dir, config.cache_max_bytes)
                               : cache::DiskCache::disabled()) {}

  ~RuntimeImpl() {
    // Unload modules best-effort: at process exit the contexts may already be gone.
    if (const Driver* d = try_driver()) {
      for (auto& [key, module] : modules) {
        if (module.handle) d->cuModuleUnload(module.handle);
      }
    }
  }

  const CudaHeaders& headers() {
    std::call_once(headers_once, [&] { cuda = find_cuda_headers(config.cuda_home); });
    return cuda;
  }

  struct Prepared {
    SourceClosure sources;
    std::vector<std::string> options;
    cache::Key key;
  };

  Prepared prepare(const ProgramSpec& spec, const Target& target) {
    if (spec.name_expressions.empty()) {
      throw InvalidArgument(fmt::format("program '{}' lists no name expressions (kernels to emit)", spec.source_name));
    }
    Prepared p{resolve_sources(spec, sources), normalize_options(target, spec.options), {}};
    cache::KeyBuilder b;
    b.add("source.name", p.sources.name).add("source.text", p.sources.text);
    b.add("headers", static_cast<int64_t>(p.sources.headers.size()));
    for (const auto& [name, text] : p.sources.headers) b.add("header.name", name).add("header.text", text);
    b.add("name_expressions", static_cast<int64_t>(spec.name_expressions.size()));
    for (const auto& e : spec.name_expressions) b.add("name_expression", e);
    b.add("target", target.str());
    b.add("nvrtc", nvrtc_ver);
    b.add("cuda_headers", headers().version);
    b.add("options", static_cast<int64_t>(p.options.size()));
    for (const auto& o : p.options) b.add("option", o);
    p.key = b.finish();
    return p;
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
  static bool matches(const cache::Entry& e, const ProgramSpec& spec, const Target& target) {
    if (e.meta.target != target.str() || e.meta.ptx != target.ptx || e.payload.empty()) return false;
    if (e.meta.kernels.size() != spec.name_expressions.size()) return false;
    for (size_t i = 0; i < spec.name_expressions.size(); ++i) {
      if (e.meta.kernels[i].name_expression != spec.name_expressions[i] || e.meta.kernels[i].lowered_name.empty()) return false;
    }
    return true;
  }

  std::optional<ProgramPtr> from_disk(const cache::Key& key, const ProgramSpec& spec, const Target& target) {
    auto entry = disk.lookup(key);
    if (!entry) return std::nullopt;
    if (!matches(*entry, spec, target)) {
      // Once per key and process: the recompile is kept in `programs` and replaces the entry.
      cache::detail::warn(fmt::format("cache entry {} does not match its program; recompiling", key.hex()));
      return std::nullopt;
    }
    return from_entry(*entry, CompiledProgram::Origin::kDisk);
  }

  ProgramPtr compile_and_publish(const Prepared& p, const ProgramSpec& spec, const Target& target) {
    if (config.verbose) fmt::print(stderr, "kjit: compiling {} [{}] for {}\n", spec.source_name, spec.template_args, target.str());
    NvrtcResult r;
    try {
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
    e.payload = std::move(r.binary);
    disk.publish(e);
    return from_entry(e, CompiledProgram::Origin::kCompiled);
  }

  // Memory table → disk → (per-key process lock, second look) → NVRTC. One compile per key per
  // process: the first caller compiles, the others wait on its shared_future.
  ProgramPtr compile(const ProgramSpec& spec, const Target& target) {
    Prepared p = prepare(spec, target);
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
      (ready ? memory_hits : misses).fetch_add(1, std::memory_order_relaxed);
      return future.get();
    }
    try {
      ProgramPtr result;
      if (auto hit = from_disk(p.key, spec, target)) {
        disk_hits.fetch_add(1, std::memory_order_relaxed);
        result = *hit;
      } else {
        misses.fetch_add(1, std::memory_order_relaxed);
        cache::KeyLock file_lock = disk.lock(p.key);
        if (auto late = from_disk(p.key, spec, target)) {
          result = *late;  // another process compiled it while we waited for the lock
        } else {
          result = compile_and_publish(p, spec, target);
        }
      }
      promise.set_value(result);
      return result;
    } catch (...) {
      // A failed compile leaves nothing behind: the next call tries again.
      promise.set_exception(std::current_exception());
      std::lock_guard lock(mutex);
      programs.erase(p.key);
      throw;
    }
  }

  const LoadedProgram& load(Runtime& self, const ProgramSpec& spec, CUcontext context);

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

  std::mutex mutex;
  std::unordered_map<cache::Key, std::shared_future<ProgramPtr>, cache::KeyHash> programs;

  struct Module {
    CUmodule handle = nullptr;
    std::unique_ptr<LoadedProgram> program;
  };
  std::mutex modules_mutex;
  std::map<std::pair<CUcontext, std::string>, Module> modules;

  std::atomic<uint64_t> memory_hits{0}, disk_hits{0}, misses{0}, compiles{0}, compile_failures{0}, loads{0};
  std::mutex stats_mutex;
  double compile_ms = 0;

};

const LoadedProgram& RuntimeImpl::load(Runtime& self, const ProgramSpec& spec, CUcontext context) {
  const Driver& d = driver();
  CUcontext current = nullptr;
  check_driver(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (!context) context = current ? current : ensure_context(0);
  // Driver queries below act on the current context; switch for the call when asked for another.
  struct Restore {
    const Driver& d;
    CUcontext previous;
    bool active;
    ~Restore() {
      if (active) d.cuCtxSetCurrent(previous);
    }
  } restore{d, current, context != current && current != nullptr};
  if (context != current) check_driver(d.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUdevice device = 0;
  check_driver(d.cuCtxGetDevice(&device), "cuCtxGetDevice");
  const DeviceInfo& info = device_info(static_cast<int>(device));
  ProgramPtr program = self.compile(spec, info.target());

  std::lock_guard lock(modules_mutex);
  auto key = std::make_pair(context, program->key);
  if (auto it = modules.find(key); it != modules.end()) return *it->second.program;
  Module m;
  check_driver(d.cuModuleLoadData(&m.handle, program->binary.data()), "cuModuleLoadData");
  loads.fetch_add(1, std::memory_order_relaxed);
  m.program = std::make_unique<LoadedProgram>();
  LoadedProgram& lp = *m.program;
  lp.compiled_ = program;
  try {
    for (const KernelInfo& k : program->kernels) {
      Kernel kernel;
      check_driver(d.cuModuleGetFunction(&kernel.function_, m.handle, k.lowered_name.c_str()), "cuModuleGetFunction");
      kernel.info_ = &k;
      check_driver(d.cuFuncGetAttribute(&kernel.max_threads_, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel.function_),
                   "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)");
      check_driver(d.cuFuncGetAttribute(&kernel.static_smem_, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function_),
                   "cuFuncGetAttribute(SHARED_SIZE_BYTES)");
      kernel.max_dynamic_smem_ = info.max_smem_per_block_optin - kernel.static_smem_;
      lp.kernels_.push_back(std::move(kernel));
    }
  } catch (...) {
    d.cuModuleUnload(m.handle);
    throw;
  }
  return *modules.emplace(key, std::move(m)).first->second.program;
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
  throw InvalidArgument(fmt::format("program {} has no kernel '{}'", compiled_->key, name_expression));
}

Runtime& Runtime::global() {
  // Never destroyed: modules outlive static destruction order problems at exit, and the OS
  // reclaims everything anyway.
  static Runtime* runtime = new Runtime(RuntimeConfig::from_env());
  return *runtime;
}

Runtime::Runtime(RuntimeConfig config) : impl_(std::make_unique<detail::RuntimeImpl>(std::move(config))) {}
Runtime::~Runtime() = default;

std::shared_ptr<const CompiledProgram> Runtime::compile(const ProgramSpec& spec, const Target& target) {
  return impl_->compile(spec, target);
}

const LoadedProgram& Runtime::load(const ProgramSpec& spec, CUcontext context) {
  return impl_->load(*this, spec, context);
}

std::string Runtime::key(const ProgramSpec& spec, const Target& target) {
  return impl_->prepare(spec, target).key.hex();
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.memory_hits = impl_->memory_hits.load();
  s.disk_hits = impl_->disk_hits.load();
  s.misses = impl_->misses.load();
  s.compiles = impl_->compiles.load();
  s.compile_failures = impl_->compile_failures.load();
  s.loads = impl_->loads.load();
  std::lock_guard lock(impl_->stats_mutex);
  s.compile_ms = impl_->compile_ms;
  return s;
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
