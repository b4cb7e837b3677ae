// The name tables' failure path (kjit/names.hpp).
#include <kjit/error.hpp>
#include <kjit/names.hpp>

#include <fmt/format.h>

namespace kjit::detail {

void bad_enum_name(std::string_view op, std::string_view what, std::string_view text, const std::string& choices) {
  throw InvalidArgument(fmt::format("{}: {} must be one of {}, got '{}'", op, what, choices, text));
}

}  // namespace kjit::detail
