#pragma once
/// \file families.hpp
/// The registry of shipped kernel families. Each family maps a set of named parameters
/// (head_dim=128, ...) to a ProgramSpec; the typed ops, `kjit compile`, `kjit precompile` and
/// `kjit kernels` all go through it, so a precompiled cache holds exactly what the ops ask for.

#include <kjit/runtime.hpp>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kjit {

/// Parameter name → value, e.g. {"head_dim", "128"}.
using ParamMap = std::map<std::string, std::string>;

/// One specialization parameter of a family and the values it accepts.
struct FamilyParam {
  std::string name;
  std::vector<std::string> values;  ///< every accepted value, as text
  std::string doc;
};

/// A kernel family: its specialization space and how to turn a point of it into a ProgramSpec.
struct Family {
  std::string name;
  std::string doc;
  std::vector<FamilyParam> params;
  /// Lowest SM (10 * major + minor) the family compiles for.
  int min_sm = 80;
  /// Why the point `params` has no kernel for `target` beyond min_sm ("impl=wgmma needs sm_90a"),
  /// or "" when it has one. Empty function: every target from min_sm up.
  std::function<std::string(const ParamMap& params, const Target& target)> unsupported_reason;
  /// Builds the ProgramSpec. Throws InvalidArgument naming a missing, unknown or out-of-space
  /// parameter (check_params below does the checking).
  std::function<ProgramSpec(const ParamMap&)> make;
  /// The points `kjit precompile` compiles by default (what the shipped ops use for common models).
  std::vector<ParamMap> defaults;
};

/// All shipped families, in a stable order.
const std::vector<Family>& families();
/// The family called `name`. Throws InvalidArgument listing the known names.
const Family& family(std::string_view name);
/// Throws InvalidArgument unless `params` gives exactly `family`'s parameters with accepted values.
void check_params(const Family& family, const ParamMap& params);
/// Why `family` at `params` cannot be compiled for `target` (below min_sm, or the family's own
/// unsupported_reason), or "" when it can.
std::string unsupported_reason(const Family& family, const ParamMap& params, const Target& target);

}  // namespace kjit
