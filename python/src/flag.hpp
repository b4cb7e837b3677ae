#pragma once
// Flag: the type of every on/off keyword argument of the extension (causal=, return_lse=,
// b_constant=, ...), so they all take the same values: True or False, a NumPy bool, or an integer
// (a Python or NumPy int; nonzero is on), as C and Python read an int as a truth value. Anything
// else (a float, a string, None) is a TypeError naming the argument's type, rather than a silent
// truth value: bool("False") is True.
#include <nanobind/nanobind.h>

#include <cstring>

namespace kjit::python {

struct Flag {
  bool value = false;
  Flag() = default;
  Flag(bool v) : value(v) {}  // NOLINT: defaults are written as false / true
  operator bool() const { return value; }  // NOLINT: used as the bool it holds
};

}  // namespace kjit::python

namespace nanobind::detail {

template <>
struct type_caster<kjit::python::Flag> {
  NB_TYPE_CASTER(kjit::python::Flag, const_name("bool"))

  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    PyObject* o = src.ptr();
    if (o == Py_True || o == Py_False) {
      value.value = o == Py_True;
      return true;
    }
    // numpy.bool (NumPy 2) / numpy.bool_ (NumPy 1): no __index__, but a truth value.
    const char* type = Py_TYPE(o)->tp_name;
    if (std::strcmp(type, "numpy.bool") == 0 || std::strcmp(type, "numpy.bool_") == 0 || PyIndex_Check(o)) {
      const int truth = PyObject_IsTrue(o);
      if (truth >= 0) {
        value.value = truth == 1;
        return true;
      }
      PyErr_Clear();
    }
    return false;
  }

  static handle from_cpp(kjit::python::Flag v, rv_policy, cleanup_list*) noexcept {
    return handle(v.value ? Py_True : Py_False).inc_ref();
  }
};

}  // namespace nanobind::detail
