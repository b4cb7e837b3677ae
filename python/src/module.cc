// kjit._C: the extension behind the `kjit` package (python/kjit). The public names are
// re-exported, with docstrings, by the Python modules.
#include "errors.hpp"

#include <nanobind/nanobind.h>

namespace kjit::python {
void register_programs(nanobind::module_& m);
void register_ops(nanobind::module_& m);
void register_operate(nanobind::module_& m);
}  // namespace kjit::python

NB_MODULE(_C, m) {
  m.attr("__version__") = KJIT_PYTHON_VERSION;
  kjit::python::register_errors(m);
  kjit::python::register_programs(m);
  kjit::python::register_ops(m);
  kjit::python::register_operate(m);
}
