// The out-of-line part of the op pipeline: checking a forced choice.
#include "runtime/ops/pipeline.hpp"

#include <fmt/format.h>

#include <string>

namespace kjit::detail {

void check_choice(const OpInfo& op, const Choice& choice, const Target& target) {
  const Family& f = *choice.family;
  bool owned = false;
  for (auto family : op.families) owned = owned || (family != nullptr && &family() == &f);
  if (!owned) throw Unsupported(fmt::format("{}: a plan naming the {} family is not one of this op's", op.name, f.name));
  if (std::string why = f.invalid_reason(choice.point); !why.empty()) {
    // The point may not even index its values: name it by its raw indices.
    std::string indices;
    for (size_t i = 0; i < f.params.size(); ++i) indices += fmt::format("{}{}", i ? "," : "", choice.point.index[i]);
    throw Unsupported(fmt::format("{}: cannot run {} [value indices {}]: {}", op.name, f.name, indices, why));
  }
  if (std::string why = f.unsupported_reason(choice.point, target); !why.empty()) throw Unsupported(fmt::format("{}: cannot run {} [{}]: {}", op.name, f.name, f.describe(choice.point), why));
}

}  // namespace kjit::detail
