#pragma once
/// \file names.hpp
/// A C++ name table (kjit/names.hpp, or a list the family declarations give) as the Python
/// tuple the bindings export (kjit.fp8.SCALE_MODES, kjit.JIT_MODES, ...): the Python side spells
/// no enum value itself.

#include <kjit/names.hpp>

#include <nanobind/nanobind.h>

#include <cstddef>
#include <vector>

namespace kjit::python {

namespace nb = nanobind;

/// The table's names in its (the enum's) order.
template <class Enum, size_t N>
nb::tuple names_tuple(const EnumName<Enum> (&table)[N]) {
  nb::list names;
  for (const EnumName<Enum>& row : table) names.append(nb::str(row.name));
  return nb::tuple(names);
}

inline nb::tuple names_tuple(const std::vector<const char*>& table) {
  nb::list names;
  for (const char* name : table) names.append(nb::str(name));
  return nb::tuple(names);
}

}  // namespace kjit::python
