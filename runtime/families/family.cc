// What a family declaration derives: points from codes or ParamMaps and back, name expressions,
// the ProgramSpec, target support and the enumeration of the space.
#include <kjit/error.hpp>
#include <kjit/families.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kjit {

bool operator==(const Point& a, const Point& b) noexcept { return std::memcmp(a.index, b.index, sizeof(a.index)) == 0; }

namespace {

std::string targ_of(const ParamValue& v) { return v.targ.empty() ? std::to_string(v.code) : v.targ; }

// The i-th comma-separated part of `text`, trimmed.
std::string part(const std::string& text, size_t i) {
  size_t start = 0;
  for (size_t n = 0; n < i; ++n) {
    start = text.find(',', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  size_t end = text.find(',', start);
  std::string s = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
  const size_t b = s.find_first_not_of(' ');
  const size_t e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

[[noreturn]] void bad_code(const Family& f, int param, int64_t code) {
  throw InvalidArgument(fmt::format("{}: no kernel for {}={} (the family declares {})", f.name, f.params[param].name,
                                    code, fmt::join(f.params[param].texts(), ", ")));
}

}  // namespace

std::vector<std::string> FamilyParam::texts() const {
  std::vector<std::string> out;
  for (const ParamValue& v : values) out.push_back(v.text);
  return out;
}

int Family::param_index(std::string_view n) const noexcept {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == n) return static_cast<int>(i);
  }
  return -1;
}

Point Family::point(std::initializer_list<int64_t> codes) const {
  Point pt;
  if (codes.size() != params.size()) {
    throw InvalidArgument(fmt::format("{}: a point needs {} parameter codes, got {}", name, params.size(), codes.size()));
  }
  int i = 0;
  for (int64_t code : codes) {
    const std::vector<ParamValue>& values = params[i].values;
    size_t j = 0;
    while (j < values.size() && values[j].code != code) ++j;
    if (j == values.size()) bad_code(*this, i, code);
    pt.index[i++] = static_cast<uint8_t>(j);
  }
  return pt;
}

Point Family::parse(const ParamMap& map) const {
  // Unknown names and values outside their list first, then every missing parameter at once,
  // with its values, so one error fixes the command line.
  Point pt;
  for (const auto& [n, text] : map) {
    const int i = param_index(n);
    if (i < 0) {
      std::vector<std::string> known;
      for (const FamilyParam& p : params) known.push_back(p.name);
      throw InvalidArgument(fmt::format("{}: unknown parameter '{}' (parameters: {})", name, n, fmt::join(known, ", ")));
    }
    const std::vector<ParamValue>& values = params[i].values;
    size_t j = 0;
    while (j < values.size() && values[j].text != text) ++j;
    if (j == values.size()) {
      throw InvalidArgument(fmt::format("{}: {}={} is not in the specialization space ({})", name, n, text,
                                        fmt::join(params[i].texts(), ", ")));
    }
    pt.index[i] = static_cast<uint8_t>(j);
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < params.size(); ++i) {
    const FamilyParam& p = params[i];
    if (map.count(p.name)) continue;
    if (!p.absent_value.empty()) {
      const std::vector<std::string> texts = p.texts();
      pt.index[i] = static_cast<uint8_t>(std::find(texts.begin(), texts.end(), p.absent_value) - texts.begin());
      continue;
    }
    missing.push_back(fmt::format("{} (one of {})", p.name, fmt::join(p.texts(), ", ")));
  }
  if (!missing.empty()) {
    throw InvalidArgument(
        fmt::format("{}: missing parameter{} {}", name, missing.size() == 1 ? "" : "s", fmt::join(missing, "; ")));
  }
  if (std::string why = invalid_reason(pt); !why.empty()) {
    throw InvalidArgument(fmt::format("{}: {}: {}", name, describe(pt), why));
  }
  return pt;
}

ParamMap Family::params_of(const Point& pt) const {
  ParamMap map;
  for (size_t i = 0; i < params.size(); ++i) map.emplace(params[i].name, value(pt, static_cast<int>(i)).text);
  return map;
}

const ParamValue& Family::value(const Point& pt, int param) const {
  const std::vector<ParamValue>& values = params.at(static_cast<size_t>(param)).values;
  if (pt.index[param] >= values.size()) {
    throw InvalidArgument(fmt::format("{}: value index {} of {} is out of range", name, pt.index[param], params[param].name));
  }
  return values[pt.index[param]];
}

const ParamValue& Family::value(const Point& pt, std::string_view n) const {
  const int i = param_index(n);
  if (i < 0) throw InvalidArgument(fmt::format("{}: unknown parameter '{}'", name, n));
  return value(pt, i);
}

std::string Family::describe(const Point& pt) const {
  std::string out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) out += ' ';
    out += params[i].name + "=" + value(pt, static_cast<int>(i)).text;
  }
  return out;
}

const FamilyProgram& Family::program(const Point& pt) const {
  for (const FamilyProgram& p : programs) {
    if (p.when_param.empty() || value(pt, p.when_param).text == p.when_value) return p;
  }
  throw InvalidArgument(fmt::format("{}: no program is declared for {}", name, describe(pt)));
}

Target Family::compile_target(const Point& pt, const Target& device) const {
  Target t = device;
  t.arch_specific = device.arch_specific && program(pt).arch_specific;
  return t;
}

ParamMap Family::companion_params(const Point& pt) const {
  if (companion.empty()) throw InvalidArgument(fmt::format("{} declares no companion family", name));
  const Family& other = family(companion);
  ParamMap out;
  for (const FamilyParam& p : other.params) {
    if (param_index(p.name) < 0) {
      throw InvalidArgument(fmt::format("{}: its companion {} takes parameter {}, which {} does not declare", name,
                                        other.name, p.name, name));
    }
    out[p.name] = value(pt, p.name).text;
  }
  return out;
}

ProgramSpec Family::spec(const Point& pt) const {
  const FamilyProgram& prog = program(pt);
  ProgramSpec spec;
  spec.family = name;
  spec.template_args = describe(pt);
  spec.source_name = prog.source;
  spec.arch_specific = prog.arch_specific;
  // kjit's kernels include no standard header under NVRTC. The host branches of their params
  // headers and of the toolkit headers they reach name some (<cstdint>), which would otherwise
  // bring kjit's standard headers into their keys.
  spec.std_headers = false;
  for (const std::string& pattern : prog.kernels) {
    std::string expr;
    for (size_t i = 0; i < pattern.size();) {
      if (pattern[i] != '{') {
        expr += pattern[i++];
        continue;
      }
      const size_t close = pattern.find('}', i);
      if (close == std::string::npos) throw InvalidArgument(fmt::format("{}: unclosed '{{' in '{}'", name, pattern));
      std::string field = pattern.substr(i + 1, close - i - 1);
      std::string index;
      if (const size_t colon = field.find(':'); colon != std::string::npos) {
        index = field.substr(colon + 1);
        field.resize(colon);
      }
      const std::string text = targ_of(value(pt, field));
      expr += index.empty() ? text : part(text, std::stoul(index));
      i = close + 1;
    }
    spec.name_expressions.push_back(std::move(expr));
  }
  return spec;
}

bool Family::same_semantics(const Point& pt, const Family& other, const Point& other_pt) const {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].performance_only) continue;
    const int j = other.param_index(params[i].name);
    if (j < 0) continue;
    if (other.params[static_cast<size_t>(j)].performance_only) continue;  // declared unlike here: not comparable
    if (value(pt, static_cast<int>(i)).text != other.value(other_pt, j).text) return false;
  }
  return true;
}

std::string Family::invalid_reason(const Point& pt) const {
  for (size_t i = 0; i < params.size(); ++i) {
    if (pt.index[i] >= params[i].values.size()) return fmt::format("value index out of range for {}", params[i].name);
  }
  // Kernel tables compare every byte of a point: unused slots must be zero.
  for (size_t i = params.size(); i < static_cast<size_t>(kMaxFamilyParams); ++i) {
    if (pt.index[i] != 0) return "a point slot beyond the family's parameters is not zero";
  }
  return constraint ? constraint(*this, pt) : std::string();
}

std::string Family::unsupported_reason(const Point& pt, const Target& target) const {
  std::string why = target_rule ? target_rule(*this, pt, target) : std::string();
  // Below the floor, the family's own rule names what it needs when it has one ("needs sm_90a"
  // for a wgmma family, where "sm_90 or newer" would be false on sm_100a).
  if (target.sm() < min_sm && why.empty()) {
    return fmt::format("{} needs sm_{} or newer; the target is {}", name, min_sm, target.str());
  }
  if (!why.empty() && target.ptx && !target.arch_specific) {
    why += " (a PTX target, as kjit uses on a GPU newer than its NVRTC, has no arch-specific instructions; "
           "KJIT_ARCH can name another target)";
  }
  return why;
}

std::vector<Point> Family::enumerate(const Target* target) const {
  std::vector<Point> out;
  Point pt;
  // Odometer over the value indices, the last parameter fastest.
  for (;;) {
    if (invalid_reason(pt).empty() && (target == nullptr || unsupported_reason(pt, *target).empty())) out.push_back(pt);
    int i = static_cast<int>(params.size()) - 1;
    while (i >= 0 && pt.index[i] + 1u >= params[i].values.size()) pt.index[i--] = 0;
    if (i < 0) return out;
    ++pt.index[i];
  }
}

std::vector<Point> Family::default_points() const {
  std::vector<Point> out;
  for (const ParamMap& d : defaults) out.push_back(parse(d));
  return out;
}

std::string Family::check() const {
  if (params.size() > static_cast<size_t>(kMaxFamilyParams)) {
    return fmt::format("{} parameters, at most {}", params.size(), kMaxFamilyParams);
  }
  for (const FamilyParam& p : params) {
    if (p.values.empty() || p.values.size() > 255) return fmt::format("{} has {} values (1..255)", p.name, p.values.size());
    for (size_t i = 0; i < p.values.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (p.values[i].text == p.values[j].text || p.values[i].code == p.values[j].code) {
          return fmt::format("{} repeats a value ({})", p.name, p.values[i].text);
        }
      }
    }
    if (!p.absent_value.empty()) {
      const std::vector<std::string> texts = p.texts();
      if (std::find(texts.begin(), texts.end(), p.absent_value) == texts.end()) {
        return fmt::format("{}: absent_value {} is not one of its values", p.name, p.absent_value);
      }
    }
  }
  if (programs.empty() || !programs.back().when_param.empty()) return "the last program must take every point (no when_param)";
  for (const FamilyProgram& prog : programs) {
    if (!prog.when_param.empty()) {
      const int i = param_index(prog.when_param);
      if (i < 0) return fmt::format("program {} selects on undeclared parameter {}", prog.source, prog.when_param);
      const std::vector<std::string> texts = params[i].texts();
      if (std::find(texts.begin(), texts.end(), prog.when_value) == texts.end()) {
        return fmt::format("program {}: {} has no value {}", prog.source, prog.when_param, prog.when_value);
      }
    }
    for (const std::string& pattern : prog.kernels) {
      for (size_t at = pattern.find('{'); at != std::string::npos; at = pattern.find('{', at + 1)) {
        const size_t close = pattern.find('}', at);
        if (close == std::string::npos) return fmt::format("unclosed '{{' in {}", pattern);
        std::string field = pattern.substr(at + 1, close - at - 1);
        std::string index;
        if (const size_t colon = field.find(':'); colon != std::string::npos) {
          index = field.substr(colon + 1);
          field.resize(colon);
        }
        const int i = param_index(field);
        if (i < 0) return fmt::format("{} names undeclared parameter {}", pattern, field);
        if (index.empty()) continue;
        if (index.find_first_not_of("0123456789") != std::string::npos || index.size() > 2) {
          return fmt::format("{}: part '{}' of {} is not a number", pattern, index, field);
        }
        for (const ParamValue& v : params[i].values) {
          if (part(targ_of(v), std::stoul(index)).empty()) {
            return fmt::format("{}: {}={} has no part {}", pattern, field, v.text, index);
          }
        }
      }
    }
  }
  for (const ParamMap& d : defaults) {
    try {
      parse(d);
    } catch (const Error& e) {
      return fmt::format("default: {}", e.what());
    }
  }
  return {};
}

}  // namespace kjit
