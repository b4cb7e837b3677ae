// The out-of-line part of the op pipeline: checking a forced choice.
#include "runtime/ops/pipeline.hpp"

#include <fmt/format.h>

#include <string>

namespace kjit::detail {

void check_choice(const OpInfo& op, const Choice& choice, const Target& target) {
  const Family& f = *choice.family;
  std::string why = f.invalid_reason(choice.point);
  if (why.empty()) why = f.unsupported_reason(choice.point, target);
  if (!why.empty()) throw Unsupported(fmt::format("{}: cannot run {} [{}]: {}", op.name, f.name, f.describe(choice.point), why));
}

}  // namespace kjit::detail
