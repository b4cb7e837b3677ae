#pragma once
/// \file names.hpp
/// Name tables: an enum's spellings, written once beside the enum as an array of
/// {enumerator, name} rows in enumerator order (kScaleModeNames, kJitModeNames, ...). Its name
/// and parse functions read the table, and so do the Python bindings, which export each table
/// as a tuple (kjit.fp8.SCALE_MODES, kjit.JIT_MODES, ...): a new enumerator is spelled in one
/// place. tests/runtime/names_test.cc checks every table against its enum's declaration.

#include <cstddef>
#include <string>
#include <string_view>

namespace kjit {

/// One row of a name table.
template <class Enum>
struct EnumName {
  Enum value;
  const char* name;
};

namespace detail {
/// Throws InvalidArgument "<op>: <what> must be one of <choices>, got '<text>'".
[[noreturn]] void bad_enum_name(std::string_view op, std::string_view what, std::string_view text,
                                const std::string& choices);
}  // namespace detail

/// The names of `table`, quoted and comma-separated: "'tensorwise', 'blockwise'".
template <class Enum, size_t N>
std::string enum_choices(const EnumName<Enum> (&table)[N]) {
  std::string s;
  for (const EnumName<Enum>& row : table) {
    if (!s.empty()) s += ", ";
    s += '\'';
    s += row.name;
    s += '\'';
  }
  return s;
}

/// The name `table` gives `value`; "?" when it has none.
template <class Enum, size_t N>
constexpr const char* enum_name(const EnumName<Enum> (&table)[N], Enum value) noexcept {
  for (const EnumName<Enum>& row : table) {
    if (row.value == value) return row.name;
  }
  return "?";
}

/// Whether `table` names `value`: false for a code cast into the enum that no enumerator has
/// (what an op checks before it reads an enum field of its arguments).
template <class Enum, size_t N>
constexpr bool enum_named(const EnumName<Enum> (&table)[N], Enum value) noexcept {
  for (const EnumName<Enum>& row : table) {
    if (row.value == value) return true;
  }
  return false;
}

/// The enumerator `table` names `text` (exact, case-sensitive). Throws InvalidArgument
/// "<op>: <what> must be one of 'a', 'b', got '<text>'".
template <class Enum, size_t N>
Enum parse_enum(const EnumName<Enum> (&table)[N], std::string_view text, std::string_view op, std::string_view what) {
  for (const EnumName<Enum>& row : table) {
    if (text == row.name) return row.value;
  }
  detail::bad_enum_name(op, what, text, enum_choices(table));
}

}  // namespace kjit
