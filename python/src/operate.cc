// What an operator reaches from Python: freeze after warm-up, event listeners and metrics
// (kjit.freeze, kjit.add_listener, kjit.stats, kjit.metrics_text in python/kjit/_operate.py).
#include "names.hpp"
#include "runtime_handle.hpp"

#include <kjit/error.hpp>
#include <kjit/events.hpp>
#include <kjit/runtime.hpp>

#include <nanobind/stl/string.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace kjit::python {

namespace nb = nanobind;
using namespace nanobind::literals;

nb::dict metrics_dict(const RuntimeMetrics& m) {
  const RuntimeStats& s = m.stats;
  nb::dict d;
  d["memory_hits"] = s.memory_hits;
  d["disk_hits"] = s.disk_hits;
  d["misses"] = s.misses;
  d["compiles"] = s.compiles;
  d["compile_failures"] = s.compile_failures;
  d["loads"] = s.loads;
  d["load_rebuilds"] = s.load_rebuilds;
  d["refused"] = s.refused;
  d["compile_ms"] = s.compile_ms;
  d["remote_hits"] = s.remote_hits;
  d["remote_misses"] = s.remote_misses;
  d["remote_errors"] = s.remote_errors;
  d["remote_lease_waits"] = s.remote_lease_waits;
  d["remote_rejected_signatures"] = s.remote_rejected_signatures;
  d["remote_oversized"] = s.remote_oversized;
  d["remote_publishes"] = s.remote_publishes;
  d["remote_round_trips"] = s.remote_round_trips;
  d["fallback_launches"] = s.fallback_launches;
  d["no_fallback"] = s.no_fallback;
  d["background_compiles"] = s.background_compiles;
  d["background_failures"] = s.background_failures;
  d["background_abandoned"] = s.background_abandoned;
  d["background_queue_full"] = s.background_queue_full;
  d["jit_mode"] = jit_mode_name(m.jit_mode);
  d["frozen"] = m.frozen;
  d["cache_entries"] = m.cache_entries ? nb::cast(*m.cache_entries) : nb::none();
  d["cache_bytes"] = m.cache_bytes ? nb::cast(*m.cache_bytes) : nb::none();
  d["cache_max_bytes"] = m.cache.max_bytes;
  d["cache_writable"] = m.cache.writable;
  return d;
}

namespace {

nb::dict event_dict(const Event& e) {
  nb::dict d;
  d["kind"] = event_kind_name(e.kind);
  d["key"] = nb::str(e.key.data(), e.key.size());
  d["family"] = nb::str(e.family.data(), e.family.size());
  d["params"] = nb::str(e.params.data(), e.params.size());
  d["target"] = nb::str(e.target.data(), e.target.size());
  d["ms"] = e.ms;
  d["device"] = e.device;
  d["detail"] = nb::str(e.detail.data(), e.detail.size());
  return d;
}

// A Python callable as an EventListener. Events come from any thread, often one that released
// the GIL for a compile, so the call takes the GIL; a Python exception becomes a C++ one (the
// runtime reports it once), and the callable is released under the GIL too.
EventListener python_listener(nb::callable fn) {
  std::shared_ptr<PyObject> held(fn.release().ptr(), [](PyObject* o) {
    if (!Py_IsInitialized()) return;  // at exit: the interpreter owns it now
    nb::gil_scoped_acquire gil;
    Py_DECREF(o);
  });
  return [held](const Event& e) {
    if (!Py_IsInitialized()) return;
    std::string error;
    {
      nb::gil_scoped_acquire gil;
      try {
        nb::handle(held.get())(event_dict(e));
        return;
      } catch (nb::python_error& err) {
        error = err.what();
      }
    }
    throw std::runtime_error(error);
  };
}

}  // namespace

void register_operate(nb::module_& m) {
  m.attr("jit_modes") = names_tuple(kJitModeNames);
  m.def("_freeze",
        [](const std::string& mode, nb::handle runtime) {
          nb::object holder;
          runtime_of(runtime, &holder).get().freeze(RuntimeConfig::parse_jit_mode(mode, "kjit.freeze"));
        },
        "mode"_a, "runtime"_a.none());
  m.def("_unfreeze", [](nb::handle runtime) {
    nb::object holder;
    runtime_of(runtime, &holder).get().unfreeze();
  }, "runtime"_a.none());
  m.def("_jit_mode", [](nb::handle runtime) {
    nb::object holder;
    return std::string(jit_mode_name(runtime_of(runtime, &holder).get().jit_mode()));
  }, "runtime"_a.none());
  m.def("_add_listener", [](nb::callable fn, nb::handle runtime) {
    nb::object holder;
    return runtime_of(runtime, &holder).get().add_listener(python_listener(std::move(fn)));
  }, "listener"_a, "runtime"_a.none());
  m.def("_remove_listener", [](uint64_t id, nb::handle runtime) {
    nb::object holder;
    return runtime_of(runtime, &holder).get().remove_listener(id);
  }, "id"_a, "runtime"_a.none());
  // Before the interpreter finalizes (kjit.add_listener registers it with atexit): a background
  // compile's listener call needs the GIL, which this releases while it waits for the compile.
  m.def("_finish_background", [](nb::handle runtime) {
    nb::object holder;
    Runtime& r = runtime_of(runtime, &holder).get();
    nb::gil_scoped_release release;
    r.finish_background();
  }, "runtime"_a.none());
  m.def("_stats", [](nb::handle runtime) {
    nb::object holder;
    return metrics_dict(runtime_of(runtime, &holder).get().metrics());
  }, "runtime"_a.none());
  m.def("_metrics_text", [](nb::handle runtime) {
    nb::object holder;
    return runtime_of(runtime, &holder).get().metrics_text();
  }, "runtime"_a.none());
}

}  // namespace kjit::python
