#pragma once
/// \file runtime_handle.hpp
/// The kjit.Runtime Python object (the process-wide Runtime or one it owns), how a binding finds
/// the Runtime a call names (None: the process-wide one), and the dict kjit.stats() returns.

#include <kjit/runtime.hpp>

#include <nanobind/nanobind.h>

#include <memory>

namespace kjit::python {

/// A kjit::Runtime seen from Python: the process-wide one or one this object owns.
class PyRuntime {
 public:
  PyRuntime() : runtime_(&Runtime::global()) {}
  explicit PyRuntime(RuntimeConfig config) : owned_(std::make_unique<Runtime>(std::move(config))), runtime_(owned_.get()) {}
  /// Destroys an owned Runtime without the GIL: its destructor waits for a running background
  /// compile (KJIT_JIT=async), whose events may call a Python listener, which takes the GIL.
  ~PyRuntime() {
    if (owned_ && Py_IsInitialized() && PyGILState_Check()) {
      nanobind::gil_scoped_release release;
      owned_.reset();
    }
  }
  PyRuntime(const PyRuntime&) = delete;
  PyRuntime& operator=(const PyRuntime&) = delete;
  Runtime& get() const { return *runtime_; }

 private:
  std::unique_ptr<Runtime> owned_;
  Runtime* runtime_;
};

/// The Runtime `runtime` names: None is the process-wide one; otherwise a kjit.Runtime, kept
/// alive through `*holder` for the call.
PyRuntime& runtime_of(nanobind::handle runtime, nanobind::object* holder);

/// RuntimeStats, the JIT mode and the disk cache's totals as a dict (kjit.stats()).
nanobind::dict metrics_dict(const RuntimeMetrics& m);

}  // namespace kjit::python
