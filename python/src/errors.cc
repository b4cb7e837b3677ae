#include "errors.hpp"

#include <kjit/error.hpp>

#include <string>
#include <utility>

namespace kjit::python {

namespace nb = nanobind;

namespace {

PyObject* g_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_unsupported = nullptr;
PyObject* g_compile_error = nullptr;
PyObject* g_driver_error = nullptr;
PyObject* g_cache_error = nullptr;
PyObject* g_jit_disabled = nullptr;

PyObject* new_type(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("kjit.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

// Raises `type(message)` with extra attributes set on the instance.
void raise_with(PyObject* type, const char* message, const char* attr1 = nullptr, nb::object v1 = {},
                const char* attr2 = nullptr, nb::object v2 = {}) {
  nb::object exc = nb::steal(PyObject_CallFunction(type, "s", message));
  if (!exc.is_valid()) return;  // the call already set an error
  if (attr1) PyObject_SetAttrString(exc.ptr(), attr1, v1.ptr());
  if (attr2) PyObject_SetAttrString(exc.ptr(), attr2, v2.ptr());
  PyErr_SetObject(type, exc.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const CompileError& e) {
    nb::list options;
    for (const std::string& o : e.options()) options.append(nb::str(o.c_str(), o.size()));
    raise_with(g_compile_error, e.what(), "log", nb::str(e.log().c_str(), e.log().size()), "options", options);
  } catch (const DriverError& e) {
    raise_with(g_driver_error, e.what(), "code", nb::int_(e.code()));
  } catch (const InvalidArgument& e) {
    PyErr_SetString(g_invalid_argument, e.what());
  } catch (const Unsupported& e) {
    PyErr_SetString(g_unsupported, e.what());
  } catch (const JitDisabled& e) {
    nb::object exc = nb::steal(PyObject_CallFunction(g_jit_disabled, "s", e.what()));
    if (!exc.is_valid()) return;
    for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"family", &e.family()},
                                      {"params", &e.params()}, {"target", &e.target()}, {"command", &e.command()}}) {
      PyObject_SetAttrString(exc.ptr(), name, nb::str(value->c_str(), value->size()).ptr());
    }
    PyErr_SetObject(g_jit_disabled, exc.ptr());
  } catch (const CacheError& e) {
    PyErr_SetString(g_cache_error, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_error, e.what());
  }
}

}  // namespace

void register_errors(nb::module_& m) {
  g_error = new_type(m, "Error", PyExc_RuntimeError, "Base of every error kjit raises.");
  nb::object base = nb::borrow(g_error);
  nb::object invalid_bases = nb::make_tuple(base, nb::handle(PyExc_ValueError));
  g_invalid_argument = new_type(m, "InvalidArgument", invalid_bases.ptr(),
                                "An argument (tensor shape, dtype, stride, alignment, device, value) is invalid; "
                                "the message names the argument and the rule.");
  g_unsupported = new_type(m, "Unsupported", g_error, "The device, arch or build lacks what the call needs.");
  g_compile_error = new_type(m, "CompileError", g_error,
                             "NVRTC rejected a kernel source. .log holds the NVRTC log, .options the options.");
  g_driver_error = new_type(m, "DriverError", g_error,
                            "A CUDA driver call failed or no driver could be loaded. .code is the CUresult.");
  g_cache_error = new_type(m, "CacheError", g_error, "The disk cache could not be used as asked.");
  g_jit_disabled = new_type(m, "JitDisabled", g_error,
                            "A specialization missed while JIT compilation is off (KJIT_JIT=off or kjit.freeze('off')): "
                            "nothing was compiled. .family, .params, .target, and .command (the `kjit compile` line "
                            "that builds it; '' for an application's own kernel).");
  nb::register_exception_translator(translate);
}

}  // namespace kjit::python
