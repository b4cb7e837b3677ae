// User kernels from Python: Runtime (the global one or a private one), Program (a ProgramSpec),
// CompiledProgram (cubin/PTX and per-kernel resources), Module (a LoadedProgram) and Kernel
// (launch with a params buffer whose layout the caller controls).
#include "flag.hpp"
#include "runtime_handle.hpp"
#include "tensors.hpp"

#include "runtime/internal/python.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/launch.hpp>
#include <kjit/runtime.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kjit::python {

namespace {

using namespace nanobind::literals;

std::string origin_name(CompiledProgram::Origin o) {
  switch (o) {
    case CompiledProgram::Origin::kDisk: return "disk";
    case CompiledProgram::Origin::kCompiled: return "compiled";
    case CompiledProgram::Origin::kRemote: return "remote";
  }
  return "?";
}

struct PyCompiled {
  std::shared_ptr<const CompiledProgram> program;
};

/// cuKernelGetParamInfo (driver ≥ 12.4), looked up once in the libcuda kjit loaded; null when absent.
using ParamInfoFn = CUresult (*)(CUkernel, size_t, size_t*, size_t*);
ParamInfoFn param_info_fn() {
  static ParamInfoFn fn = [] {
    detail::driver();  // loads libcuda (throws DriverError without one)
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return lib ? reinterpret_cast<ParamInfoFn>(dlsym(lib, "cuKernelGetParamInfo")) : nullptr;
  }();
  return fn;
}

/// A Kernel of a loaded program, with its parameter layout as the driver reports it.
class PyKernel {
 public:
  PyKernel(const Kernel* kernel, nb::object owner) : kernel_(kernel), owner_(std::move(owner)) {
    if (ParamInfoFn fn = param_info_fn()) {
      size_t offset = 0, size = 0;
      int count = 0;
      while (fn(kernel->handle(), static_cast<size_t>(count), &offset, &size) == CUDA_SUCCESS) {
        param_bytes_ = offset + size;
        ++count;
      }
      param_count_ = count;
    }
  }

  const Kernel& kernel() const { return *kernel_; }
  std::optional<size_t> param_bytes() const {
    return param_count_ < 0 ? std::nullopt : std::optional<size_t>(param_bytes_);
  }
  int param_count() const { return param_count_; }

  void launch(nb::handle grid, nb::handle block, nb::handle params, uint32_t shared_mem, nb::handle stream,
              nb::handle cluster, Flag overlap_previous) {
    LaunchConfig c;
    dims("grid", grid, c.grid);
    dims("block", block, c.block);
    if (!cluster.is_none()) dims("cluster", cluster, c.cluster);
    c.dynamic_smem_bytes = shared_mem;
    c.stream = stream.is_none() ? nullptr : parse_stream(stream);
    c.overlap_previous = overlap_previous;
    Py_buffer view{};
    const bool have = !params.is_none();
    if (have && PyObject_GetBuffer(params.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      throw InvalidArgument(std::string("Kernel.launch: params must be bytes-like (bytes, bytearray, a ctypes "
                                        "Structure, a NumPy record...), got ") + Py_TYPE(params.ptr())->tp_name);
    }
    struct Release {
      Py_buffer* v;
      bool on;
      ~Release() {
        if (on) PyBuffer_Release(v);
      }
    } release{&view, have};
    const size_t given = have ? static_cast<size_t>(view.len) : 0;
    if (param_count_ > 1) {
      throw InvalidArgument("Kernel.launch: " + kernel_->info().name_expression + " takes " +
                            std::to_string(param_count_) +
                            " parameters; a kjit kernel takes one params struct by value (pack the arguments "
                            "into one struct)");
    }
    if (param_count_ >= 0 && given != param_bytes_) {
      throw InvalidArgument("Kernel.launch: params of " + kernel_->info().name_expression + " are " +
                            std::to_string(param_bytes_) + " bytes, got " + std::to_string(given));
    }
    if (param_count_ < 0 && given == 0) {
      throw InvalidArgument("Kernel.launch: params are empty and this driver cannot report the kernel's parameter "
                            "size (cuKernelGetParamInfo needs a CUDA 12.4 driver)");
    }
    // The driver copies the struct at launch, so the buffer only has to live through this call.
    detail::launch_raw(*kernel_, c, given ? view.buf : nullptr);
  }

 private:
  static void dims(const char* what, nb::handle obj, uint32_t out[3]) {
    out[0] = out[1] = out[2] = 1;
    if (PyLong_Check(obj.ptr())) {
      out[0] = checked(what, obj);
      return;
    }
    nb::sequence seq = nb::borrow<nb::sequence>(obj);
    const size_t n = nb::len(seq);
    if (n < 1 || n > 3) throw InvalidArgument(std::string("Kernel.launch: ") + what + " must be an int or 1 to 3 ints");
    for (size_t i = 0; i < n; ++i) out[i] = checked(what, seq[i]);
  }
  static uint32_t checked(const char* what, nb::handle v) {
    const long long x = nb::cast<long long>(v);
    if (x < 1 || x > 0xffffffffll) {
      throw InvalidArgument(std::string("Kernel.launch: ") + what + " dimensions must be in [1, 2^32), got " +
                            std::to_string(x));
    }
    return static_cast<uint32_t>(x);
  }

  const Kernel* kernel_;
  nb::object owner_;  // the Module (and through it the Runtime) the kernel lives in
  size_t param_bytes_ = 0;
  int param_count_ = -1;
};

/// A LoadedProgram (alive as long as its Runtime).
struct PyModule {
  const LoadedProgram* program;
  nb::object runtime;  // keeps a private Runtime alive
};

ProgramSpec make_spec(nb::object source, std::vector<std::string> name_expressions, std::vector<std::string> options,
                      nb::object headers, std::string family, std::string source_name, std::string template_args,
                      bool std_headers) {
  ProgramSpec s;
  s.std_headers = std_headers;
  s.family = std::move(family);
  s.template_args = std::move(template_args);
  s.source_name = std::move(source_name);
  if (!source.is_none()) s.source_text = nb::cast<std::string>(source);
  s.name_expressions = std::move(name_expressions);
  s.options = std::move(options);
  if (!headers.is_none()) {
    if (PyDict_Check(headers.ptr())) {
      for (auto [k, v] : nb::borrow<nb::dict>(headers)) s.headers.emplace_back(nb::cast<std::string>(k), nb::cast<std::string>(v));
    } else {
      for (nb::handle item : nb::borrow<nb::sequence>(headers)) {
        s.headers.push_back(nb::cast<std::pair<std::string, std::string>>(item));
      }
    }
  }
  return s;
}

}  // namespace

PyRuntime& runtime_of(nb::handle runtime, nb::object* holder) {
  static PyRuntime* global = nullptr;
  if (runtime.is_none()) {
    if (!global) global = new PyRuntime();  // lives as long as Runtime::global()
    return *global;
  }
  *holder = nb::borrow(runtime);
  return nb::cast<PyRuntime&>(runtime);
}

void register_programs(nb::module_& m) {
  nb::class_<PyRuntime>(m, "Runtime")
      .def(nb::init<>())
      .def("__init__",
           [](PyRuntime* self, std::optional<std::string> cache_dir, std::optional<bool> disk_cache,
              std::optional<uint64_t> cache_max_bytes, std::optional<std::string> kernel_dir,
              std::optional<std::string> cuda_home, std::optional<bool> verbose, std::optional<std::string> jit) {
             RuntimeConfig c = RuntimeConfig::from_env();
             if (cache_dir) c.cache_dir = *cache_dir;
             if (disk_cache) c.disk_cache = *disk_cache;
             if (cache_max_bytes) c.cache_max_bytes = *cache_max_bytes;
             if (kernel_dir) c.kernel_dir = *kernel_dir;
             if (cuda_home) c.cuda_home = *cuda_home;
             if (verbose) c.verbose = *verbose;
             if (jit) c.jit = RuntimeConfig::parse_jit_mode(*jit, "kjit.Runtime(jit=)");
             new (self) PyRuntime(std::move(c));
           },
           nb::kw_only(), "cache_dir"_a = nb::none(), "disk_cache"_a = nb::none(), "cache_max_bytes"_a = nb::none(),
           "kernel_dir"_a = nb::none(), "cuda_home"_a = nb::none(), "verbose"_a = nb::none(), "jit"_a = nb::none())
      .def("stats", [](const PyRuntime& r) { return metrics_dict(r.get().metrics()); })
      .def_prop_ro("cache_dir", [](const PyRuntime& r) { return r.get().disk_cache().root; })
      .def_prop_ro("disk_cache_enabled", [](const PyRuntime& r) { return r.get().disk_cache().enabled; })
      .def_prop_ro("disk_cache_writable", [](const PyRuntime& r) { return r.get().disk_cache().writable; })
      .def_prop_ro("nvrtc_version", [](const PyRuntime& r) { return r.get().nvrtc_version(); })
      .def_prop_ro("cuda_include_dir", [](const PyRuntime& r) { return r.get().cuda_include_dir(); })
      .def_prop_ro("id", [](const PyRuntime& r) { return r.get().id(); });

  nb::class_<KernelInfo>(m, "KernelInfo")
      .def_ro("name_expression", &KernelInfo::name_expression)
      .def_ro("lowered_name", &KernelInfo::lowered_name)
      .def_ro("registers", &KernelInfo::registers)
      .def_ro("spill_bytes", &KernelInfo::spill_bytes)
      .def_ro("static_smem", &KernelInfo::static_smem)
      .def("__repr__", [](const KernelInfo& k) {
        return "KernelInfo(" + k.name_expression + ", registers=" + std::to_string(k.registers) +
               ", spill_bytes=" + std::to_string(k.spill_bytes) + ", static_smem=" + std::to_string(k.static_smem) + ")";
      });

  nb::class_<PyCompiled>(m, "CompiledProgram")
      .def_prop_ro("key", [](const PyCompiled& p) { return p.program->key; })
      .def_prop_ro("family", [](const PyCompiled& p) { return p.program->family; })
      .def_prop_ro("template_args", [](const PyCompiled& p) { return p.program->template_args; })
      .def_prop_ro("target", [](const PyCompiled& p) { return p.program->target.str(); })
      .def_prop_ro("kernels", [](const PyCompiled& p) { return p.program->kernels; })
      .def_prop_ro("options", [](const PyCompiled& p) { return p.program->options; })
      .def_prop_ro("nvrtc_version", [](const PyCompiled& p) { return p.program->nvrtc_version; })
      .def_prop_ro("compile_ms", [](const PyCompiled& p) { return p.program->compile_ms; })
      .def_prop_ro("origin", [](const PyCompiled& p) { return origin_name(p.program->origin); })
      .def_prop_ro("is_ptx", [](const PyCompiled& p) { return p.program->target.ptx; })
      .def_prop_ro("binary", [](const PyCompiled& p) {
        return nb::bytes(p.program->binary.data(), p.program->binary.size());
      });

  nb::class_<PyKernel>(m, "Kernel")
      .def("launch", &PyKernel::launch, "grid"_a, "block"_a, "params"_a = nb::none(), nb::kw_only(),
           "shared_mem"_a = 0, "stream"_a = nb::none(), "cluster"_a = nb::none(), "overlap_previous"_a = false)
      .def("__call__", &PyKernel::launch, "grid"_a, "block"_a, "params"_a = nb::none(), nb::kw_only(),
           "shared_mem"_a = 0, "stream"_a = nb::none(), "cluster"_a = nb::none(), "overlap_previous"_a = false)
      .def_prop_ro("info", [](const PyKernel& k) { return k.kernel().info(); })
      .def_prop_ro("name_expression", [](const PyKernel& k) { return k.kernel().info().name_expression; })
      .def_prop_ro("device", [](const PyKernel& k) { return k.kernel().device(); })
      .def_prop_ro("max_threads_per_block", [](const PyKernel& k) { return k.kernel().max_threads_per_block(); })
      .def_prop_ro("static_smem_bytes", [](const PyKernel& k) { return k.kernel().static_smem_bytes(); })
      .def_prop_ro("max_dynamic_smem_bytes", [](const PyKernel& k) { return k.kernel().max_dynamic_smem_bytes(); })
      .def_prop_ro("param_bytes", &PyKernel::param_bytes)
      .def_prop_ro("handle", [](const PyKernel& k) { return reinterpret_cast<uintptr_t>(k.kernel().handle()); });

  nb::class_<PyModule>(m, "Module")
      .def("kernel",
           [](nb::handle self, nb::handle which) {
             const PyModule& mod = nb::cast<const PyModule&>(self);
             const Kernel* k = PyLong_Check(which.ptr()) ? &mod.program->kernel(nb::cast<size_t>(which))
                                                         : &mod.program->kernel(nb::cast<std::string>(which));
             return PyKernel(k, nb::borrow(self));
           },
           "name_or_index"_a)
      .def("__len__", [](const PyModule& m) { return m.program->size(); })
      .def_prop_ro("compiled", [](const PyModule& m) {
        return PyCompiled{std::shared_ptr<const CompiledProgram>(std::shared_ptr<void>(), &m.program->compiled())};
      }, nb::keep_alive<0, 1>());

  m.def("_compile",
        [](nb::object source, std::vector<std::string> names, std::vector<std::string> options, nb::object headers,
           std::string family, std::string source_name, std::string template_args, Flag std_headers,
           std::string target, nb::handle runtime) {
          nb::object holder;
          PyRuntime& r = runtime_of(runtime, &holder);
          ProgramSpec spec = make_spec(source, std::move(names), std::move(options), headers, std::move(family),
                                       std::move(source_name), std::move(template_args), std_headers);
          const Target t = Target::parse(target);
          std::shared_ptr<const CompiledProgram> p;
          {
            nb::gil_scoped_release release;
            p = r.get().compile(spec, t);
          }
          return PyCompiled{std::move(p)};
        },
        "source"_a.none(), "name_expressions"_a, "options"_a, "headers"_a.none(), "family"_a, "source_name"_a,
        "template_args"_a, "std_headers"_a, "target"_a, "runtime"_a.none());
  m.def("_key",
        [](nb::object source, std::vector<std::string> names, std::vector<std::string> options, nb::object headers,
           std::string family, std::string source_name, std::string template_args, Flag std_headers,
           std::string target, nb::handle runtime) {
          nb::object holder;
          PyRuntime& r = runtime_of(runtime, &holder);
          ProgramSpec spec = make_spec(source, std::move(names), std::move(options), headers, std::move(family),
                                       std::move(source_name), std::move(template_args), std_headers);
          const Target t = Target::parse(target);
          nb::gil_scoped_release release;
          return r.get().key(spec, t);
        },
        "source"_a.none(), "name_expressions"_a, "options"_a, "headers"_a.none(), "family"_a, "source_name"_a,
        "template_args"_a, "std_headers"_a, "target"_a, "runtime"_a.none());
  m.def("_load",
        [](nb::object source, std::vector<std::string> names, std::vector<std::string> options, nb::object headers,
           std::string family, std::string source_name, std::string template_args, Flag std_headers,
           std::optional<int> device, nb::handle runtime, Flag arch_specific) {
          nb::object holder;
          PyRuntime& r = runtime_of(runtime, &holder);
          ProgramSpec spec = make_spec(source, std::move(names), std::move(options), headers, std::move(family),
                                       std::move(source_name), std::move(template_args), std_headers);
          // Runtime::load compiles for spec.target_on(the device's target): the device's own
          // target (sm_90a on an H100/H200) unless the program says it needs no arch-specific
          // instructions, then the plain sm_XY.
          spec.arch_specific = arch_specific;
          const LoadedProgram* p = nullptr;
          {
            nb::gil_scoped_release release;
            CUcontext ctx = device ? detail::ensure_context(*device) : nullptr;
            p = &r.get().load(spec, ctx);
          }
          return PyModule{p, holder};
        },
        "source"_a.none(), "name_expressions"_a, "options"_a, "headers"_a.none(), "family"_a, "source_name"_a,
        "template_args"_a, "std_headers"_a, "device"_a.none(), "runtime"_a.none(), "arch_specific"_a = true);

  // Devices.
  // The truth value of an on/off argument by the rule every flag of the extension follows
  // (flag.hpp), for the pure-Python modules' flags.
  m.def("_flag", [](Flag value) { return value.value; }, "value"_a);
  m.def("driver_available", &driver_available);
  m.def("driver_unavailable_reason", &driver_unavailable_reason);
  m.def("device_count", &device_count);
  m.def("device_target", [](int ordinal) { return device_info(ordinal).target().str(); }, "device"_a = 0);
  m.def("device_info", [](int ordinal) {
    const DeviceInfo& i = device_info(ordinal);
    nb::dict d;
    d["ordinal"] = i.ordinal;
    d["name"] = i.name;
    d["compute_capability"] = nb::make_tuple(i.cc_major, i.cc_minor);
    d["target"] = i.target().str();
    d["sm_count"] = i.sm_count;
    d["max_smem_per_block_optin"] = i.max_smem_per_block_optin;
    d["l2_bytes"] = i.l2_bytes;
    d["global_mem_bytes"] = i.global_mem_bytes;
    d["driver_version"] = i.driver_version;
    return d;
  }, "device"_a = 0);
}

}  // namespace kjit::python
