#pragma once
/// \file families.hpp
/// The kernel families kjit ships. Each family is declared once, as data: its parameters and
/// their values, the constraints between them, which targets a point has a kernel for, the
/// program (source and name-expression patterns) a point compiles to, and the default set that
/// `kjit precompile` builds. Everything else is derived from that declaration: ParamMap parsing
/// and printing, name expressions, `kjit kernels`, the precompile defaults and the enumeration of
/// every valid point for a target (what a tuner sweeps). The typed ops name their kernels with a
/// Point, so a precompiled cache holds exactly what the ops ask for.

#include <kjit/runtime.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

namespace kjit {

/// Parameter name → value text, e.g. {"head_dim", "128"}.
using ParamMap = std::map<std::string, std::string>;

/// One value a specialization parameter accepts.
struct ParamValue {
  /// Its spelling in a ParamMap, on the command line and in cache metadata ("e4m3", "128x256").
  std::string text;
  /// The number the op plans with (head_dim 128, kFormatE4M3, 1 for a true flag).
  int64_t code = 0;
  /// Its spelling inside name expressions; empty means the decimal `code`. Several template
  /// arguments may come from one value: "128, 256" (see FamilyProgram::kernels).
  std::string targ;
};

/// One specialization parameter of a family.
struct FamilyParam {
  std::string name;
  std::vector<ParamValue> values;  ///< every accepted value, in a stable order
  std::string doc;
  /// The parameter changes how the kernel runs, never what it computes: a tile shape, a split
  /// count, pipeline stages, a kernel variant, rows per CTA. Two points that differ only in such
  /// parameters give the same result within the op's tolerance (a different fp32 summation
  /// order at most), so under KJIT_JIT=async one may serve while the other compiles
  /// (Family::same_semantics). A head_dim, a format, a style, causal or a page layout is not.
  bool performance_only = false;
  /// For a parameter added after points of the family were written down (manifests, tuning
  /// tables, command lines): the value text such a point, which does not name the parameter,
  /// takes in Family::parse, the one that runs as the family did before. Empty: the parameter
  /// must be named.
  std::string absent_value = {};

  /// The values' texts, in order.
  std::vector<std::string> texts() const;
};

/// The most parameters a family may declare (the size of Point).
inline constexpr int kMaxFamilyParams = 16;

/// A point of a family's space: for each parameter (in declaration order) the index of its value.
/// Trivially copyable and free of padding, so kernel tables key on its bytes. Unused slots are 0.
struct Point {
  uint8_t index[kMaxFamilyParams] = {};
  friend bool operator==(const Point& a, const Point& b) noexcept;
  friend bool operator!=(const Point& a, const Point& b) noexcept { return !(a == b); }
};
static_assert(std::is_trivially_copyable_v<Point> && sizeof(Point) == kMaxFamilyParams, "Point is keyed on by bytes");

/// The program some points of a family compile to: one kernel source and its kernels.
struct FamilyProgram {
  /// Points whose parameter `when_param` has the value text `when_value` compile to this program;
  /// an empty `when_param` takes every point the programs before it did not.
  std::string when_param;
  std::string when_value;
  /// Path inside kernel_sources ("attention/decode.cu").
  std::string source;
  /// Name-expression patterns, one per kernel, in the order the op indexes them. "{p}" is
  /// parameter p's value as a template argument (ParamValue::targ, else its code); "{p:i}" is
  /// the i-th comma-separated part of that text.
  std::vector<std::string> kernels;
  /// The kernels use arch-specific instructions (wgmma, setmaxnreg, tcgen05): compiled for the
  /// device's sm_XYa target. Otherwise (the default) for its plain sm_XY, even on a device whose
  /// target is sm_XYa. See ProgramSpec::arch_specific.
  bool arch_specific = false;
};

/// A kernel family: its specialization space, declared as data.
struct Family {
  std::string name;  ///< "attention.decode": cache metadata, `kjit kernels`, `kjit compile`
  std::string doc;
  std::vector<FamilyParam> params;
  std::vector<FamilyProgram> programs;
  /// Lowest SM (10 · major + minor) any point compiles for.
  int min_sm = 80;
  /// Why a combination of values is outside the space ("tile=128x256 is a wgmma tile"), or "".
  /// Empty function: every combination is inside.
  std::function<std::string(const Family&, const Point&)> constraint;
  /// Why a point inside the space has no kernel for `target` beyond min_sm ("impl=wgmma needs
  /// sm_90a"), or "". Empty function: every target from min_sm up.
  std::function<std::string(const Family&, const Point&, const Target&)> target_rule;
  /// The points `kjit precompile` compiles by default (what the shipped ops use for common
  /// models), as ParamMaps so the declaration reads like the command line.
  std::vector<ParamMap> defaults;
  /// The family whose program the ops may load together with a point of this one, or "" (the
  /// split-KV merge of attention.decode and attention.paged_decode: attention.decode_merge). Its
  /// point takes this point's values of the parameters it declares (companion_params).
  /// `kjit precompile` compiles it with every point of this family it compiles, from the
  /// defaults or from a manifest, so a cache precompiled for a point serves all of its plans.
  std::string companion;

  /// The companion family's ParamMap for `point`: each of its parameters with this point's value
  /// of the parameter of the same name. Throws InvalidArgument when there is no companion, it is
  /// not a registered family, or this family lacks one of its parameters.
  ParamMap companion_params(const Point& point) const;

  /// Index of the parameter called `name`, or -1.
  int param_index(std::string_view name) const noexcept;
  /// The point for value codes given in parameter order (what an op's planner has). No strings,
  /// no allocation unless it throws; throws InvalidArgument naming the parameter and code when a
  /// code is not one of its values (a planner asking for a kernel the family does not declare).
  Point point(std::initializer_list<int64_t> codes) const;
  /// The point a ParamMap names. Throws InvalidArgument naming the first unknown parameter or
  /// value outside its list (in name order), else every missing parameter at once, else the
  /// constraint the combination breaks.
  Point parse(const ParamMap& params) const;
  /// The ParamMap of `point` (the inverse of parse).
  ParamMap params_of(const Point& point) const;
  /// The value of parameter `param` (an index into `params`) at `point`.
  const ParamValue& value(const Point& point, int param) const;
  /// The value of the parameter called `name` at `point`; throws InvalidArgument for an unknown name.
  const ParamValue& value(const Point& point, std::string_view name) const;
  /// "head_dim=128 rows=8": every parameter in declaration order (cache metadata, listings).
  std::string describe(const Point& point) const;
  /// The program `point` compiles to.
  const FamilyProgram& program(const Point& point) const;
  /// The ProgramSpec of `point`: family, template_args (describe), source, name expressions.
  ProgramSpec spec(const Point& point) const;
  /// The target `point` compiles for on a device of target `device` (what Runtime::load,
  /// `kjit precompile` and `kjit tune` use): `device` itself when the point's program is
  /// arch_specific, else `device` without the "a" feature set.
  Target compile_target(const Point& point, const Target& device) const;
  /// spec(parse(params)): throws what parse throws.
  ProgramSpec spec(const ParamMap& params) const { return spec(parse(params)); }
  /// Whether `other_point` of `other` (this family, or another family of the same op: the
  /// mma.sync and wgmma kernels of one prefill) computes what `point` computes: every parameter
  /// that both families declare and that is not performance_only has the same value text in
  /// both. A parameter only one of them declares is the op's to check against the call (its
  /// planner only accepts a point that runs the call's arguments). The KJIT_JIT=async fallback
  /// choice goes through this.
  bool same_semantics(const Point& point, const Family& other, const Point& other_point) const;
  /// Why `point` is outside the space (constraint), or "".
  std::string invalid_reason(const Point& point) const;
  /// Why `point` has no kernel for `target` (below min_sm, or target_rule), or "". For a PTX
  /// target the reason adds that PTX has no arch-specific instructions.
  std::string unsupported_reason(const Point& point, const Target& target) const;
  /// unsupported_reason(parse(params), target): throws what parse throws.
  std::string unsupported_reason(const ParamMap& params, const Target& target) const {
    return unsupported_reason(parse(params), target);
  }
  /// Every point inside the space, in declaration order; with `target`, only those it supports.
  std::vector<Point> enumerate(const Target* target = nullptr) const;
  /// `defaults`, parsed.
  std::vector<Point> default_points() const;
  /// What is wrong with the declaration itself, or "": more than kMaxFamilyParams parameters, a
  /// parameter with no values, more than 255 or repeated ones, a program whose `when_param` or
  /// `when_value` is not declared, no catch-all program last, a pattern naming an undeclared
  /// parameter or a part a value does not have, a default outside the space. families() checks
  /// every shipped family once and throws on the first problem.
  std::string check() const;
};

/// All shipped families, in a stable order (the ops' own declarations, not copies).
const std::vector<std::reference_wrapper<const Family>>& families();
/// The family called `name`. Throws InvalidArgument listing the known names.
const Family& family(std::string_view name);

}  // namespace kjit
