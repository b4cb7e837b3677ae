#pragma once
/// \file tools/testing/prometheus_text.hpp
/// A strict reader of the Prometheus text exposition format (0.0.4) as kjit writes it, for the
/// tests of Runtime::metrics_text and `kjit cache stats --prometheus`: every line is a HELP, a
/// TYPE or a sample; each family is declared once (HELP then TYPE) before its samples; a sample
/// belongs to the family declared last (a summary's samples end in _sum or _count); values are
/// numbers. Header-only: the tests share it, the library never reads metrics.

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::testing {

struct PrometheusText {
  std::map<std::string, std::string> types;  ///< family name → type
  std::map<std::string, double> samples;     ///< "name{labels}" → value
  std::vector<std::string> problems;         ///< empty when the text is well-formed
};

inline PrometheusText parse_prometheus(const std::string& text) {
  PrometheusText out;
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|summary|histogram|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (\S+))");
  std::set<std::string> helped;
  std::string family;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  if (!text.empty() && text.back() != '\n') out.problems.push_back("the text does not end in a newline");
  while (std::getline(in, line)) {
    ++n;
    std::smatch m;
    const std::string where = "line " + std::to_string(n) + " '" + line + "': ";
    if (std::regex_match(line, m, kHelp)) {
      if (!helped.insert(m[1]).second) out.problems.push_back(where + "a second HELP");
    } else if (std::regex_match(line, m, kType)) {
      if (!helped.count(m[1])) out.problems.push_back(where + "TYPE before HELP");
      if (!out.types.emplace(m[1], m[2]).second) out.problems.push_back(where + "a second TYPE");
      family = m[1];
    } else if (std::regex_match(line, m, kSample)) {
      const std::string name = m[1];
      const std::string& type = out.types.count(family) ? out.types[family] : std::string();
      const bool ok = name == family || (type == "summary" && (name == family + "_sum" || name == family + "_count"));
      if (!ok) out.problems.push_back(where + "a sample outside its family " + family);
      char* end = nullptr;
      const std::string value = m[3];
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0') out.problems.push_back(where + "not a number");
      if (!out.samples.emplace(name + m[2].str(), v).second) out.problems.push_back(where + "a repeated sample");
    } else {
      out.problems.push_back(where + "neither HELP, TYPE nor a sample");
    }
  }
  return out;
}

}  // namespace kjit::testing
