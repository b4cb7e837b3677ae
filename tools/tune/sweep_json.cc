// A sweep as text and JSON: shape_text, the worker's measurement lines and the `--json-out` file
// that `kjit tune report` reads back (see tuner.hpp). The reader checks every field it takes:
// the file may come from another machine or a person's editor, and the report indexes the
// candidates by the winner and runner-up it names.
#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>

namespace kjit::tune {
namespace {

using nlohmann::json;

/// A sweep nests 4 levels (sweep → shapes → shape → candidates → candidate); the parser stops
/// far deeper input before it costs stack.
constexpr int kMaxDepth = 16;

[[noreturn]] void bad(const std::string& where, const char* name, const std::string& why) {
  throw InvalidArgument(fmt::format("{}{} {}", where, name, why));
}

const json* find(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

std::string opt_string(const json& j, const char* name, const char* fallback, const std::string& where) {
  const json* v = find(j, name);
  if (v == nullptr) return fallback;
  if (!v->is_string()) bad(where, name, "is not a string");
  return v->get<std::string>();
}

bool opt_bool(const json& j, const char* name, bool fallback, const std::string& where) {
  const json* v = find(j, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(where, name, "is not true or false");
  return v->get<bool>();
}

/// A time, ratio or count of seconds: finite. Negative values are kept (margin and gain may be).
double opt_double(const json& j, const char* name, double fallback, const std::string& where) {
  const json* v = find(j, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) bad(where, name, "is not a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) bad(where, name, "is not finite");
  return d;
}

json measurement_json(const Measurement& m) {
  return {{"index", m.index},
          {"status", m.status},
          {"why", m.why},
          {"us", m.us},
          {"eager_us", m.eager_us},
          {"spread", m.spread},
          {"samples", m.samples},
          {"threads", m.threads},
          {"smem", m.smem},
          {"registers", m.registers},
          {"cluster", m.cluster},
          {"screen_best_us", m.screen_best_us},
          {"screen_median_us", m.screen_median_us},
          {"leader", m.leader},
          {"leader_us", m.leader_us}};
}

}  // namespace

namespace detail {

int json_int(const nlohmann::json& j, const char* name, int fallback, int lo, int hi, const std::string& where) {
  const json* v = find(j, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) bad(where, name, "is not an integer");
  // Compared as int64 first: a value outside int must not wrap into the range.
  const int64_t i = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX} ? INT64_MAX : v->get<int64_t>();
  if (i < lo || i > hi) bad(where, name, fmt::format("= {} is outside [{}, {}]", v->dump(), lo, hi));
  return static_cast<int>(i);
}

void read_measurement(const nlohmann::json& j, Measurement* m, const std::string& where) {
  if (!j.is_object()) throw InvalidArgument(fmt::format("{}is not an object", where));
  m->status = opt_string(j, "status", "failed", where);
  m->why = opt_string(j, "why", "", where);
  m->us = opt_double(j, "us", 0.0, where);
  m->eager_us = opt_double(j, "eager_us", 0.0, where);
  m->spread = opt_double(j, "spread", 0.0, where);
  m->samples = json_int(j, "samples", 0, 0, INT_MAX, where);
  m->threads = json_int(j, "threads", 0, 0, INT_MAX, where);
  m->smem = json_int(j, "smem", 0, 0, INT_MAX, where);
  m->registers = json_int(j, "registers", -1, -1, INT_MAX, where);
  m->cluster = json_int(j, "cluster", 1, 0, INT_MAX, where);
  m->screen_best_us = opt_double(j, "screen_best_us", 0.0, where);
  m->screen_median_us = opt_double(j, "screen_median_us", 0.0, where);
  m->leader = json_int(j, "leader", -1, -1, INT_MAX, where);
  m->leader_us = opt_double(j, "leader_us", 0.0, where);
}

}  // namespace detail

std::string shape_text(const Shape& shape) {
  std::string s;
  for (const auto& [k, v] : shape) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

std::string measurement_line(const Measurement& m, int shape) {
  json j = measurement_json(m);
  if (shape >= 0) j["shape"] = shape;
  return j.dump();
}

std::string to_json(const SweepResult& r) {
  json shapes = json::array();
  for (const ShapeResult& s : r.shapes) {
    json cands = json::array();
    for (const Measurement& m : s.candidates) {
      json j = measurement_json(m);
      j["label"] = m.label;
      j["is_default"] = m.is_default;
      cands.push_back(j);
    }
    shapes.push_back({{"shape", s.shape}, {"text", shape_text(s.shape)}, {"bucket", s.bucket}, {"tunable", s.tunable},
                      {"winner", s.winner}, {"runner_up", s.runner_up}, {"margin", s.margin}, {"gain", s.gain},
                      {"candidates", cands}});
  }
  return json{{"op", r.op},
              {"device", r.device},
              {"fingerprint_id", r.fingerprint_id},
              {"fingerprint", r.fingerprint},
              {"compiled", r.compiled},
              {"compile_failed", r.compile_failed},
              {"compile_skipped", r.compile_skipped},
              {"compile_s", r.compile_s},
              {"measure_s", r.measure_s},
              {"screen_samples", r.screen_samples},
              {"screen_margin", r.screen_margin},
              {"shapes", shapes}}
      .dump(1);
}

SweepResult from_json(const std::string& text) {
  const json::parser_callback_t depth_guard = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) throw InvalidArgument(fmt::format("not a kjit tune result: nested deeper than {} levels", kMaxDepth));
    return true;
  };
  json j;
  try {
    j = json::parse(text, depth_guard);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    throw InvalidArgument(fmt::format("not a kjit tune result (not JSON: {})", e.what()));
  }
  if (!j.is_object() || !j.contains("shapes") || !j["shapes"].is_array()) {
    throw InvalidArgument("not a kjit tune result (expected the JSON `kjit tune --json-out` writes)");
  }
  SweepResult r;
  r.op = opt_string(j, "op", "", "");
  r.device = opt_string(j, "device", "", "");
  r.fingerprint_id = opt_string(j, "fingerprint_id", "", "");
  r.fingerprint = opt_string(j, "fingerprint", "", "");
  r.compiled = detail::json_int(j, "compiled", 0, 0, INT_MAX, "");
  r.compile_failed = detail::json_int(j, "compile_failed", 0, 0, INT_MAX, "");
  r.compile_skipped = detail::json_int(j, "compile_skipped", 0, 0, INT_MAX, "");
  r.compile_s = opt_double(j, "compile_s", 0.0, "");
  r.measure_s = opt_double(j, "measure_s", 0.0, "");
  r.screen_samples = detail::json_int(j, "screen_samples", 0, 0, INT_MAX, "");
  r.screen_margin = opt_double(j, "screen_margin", 0.0, "");
  size_t si = 0;
  for (const json& s : j["shapes"]) {
    const std::string where = fmt::format("shapes[{}].", si++);
    if (!s.is_object()) throw InvalidArgument(fmt::format("{} is not an object", where.substr(0, where.size() - 1)));
    ShapeResult sr;
    const json* shape = find(s, "shape");
    if (shape == nullptr || !shape->is_object()) bad(where, "shape", "is not an object of key → value text");
    for (auto it = shape->begin(); it != shape->end(); ++it) {
      if (!it->is_string()) bad(where, ("shape." + it.key()).c_str(), "is not a string");
      sr.shape[it.key()] = it->get<std::string>();
    }
    if (const json* bucket = find(s, "bucket")) {
      if (!bucket->is_array()) bad(where, "bucket", "is not an array of integers");
      for (const json& b : *bucket) {
        if (!b.is_number_integer()) bad(where, "bucket", "holds a non-integer");
        sr.bucket.push_back(b.get<int64_t>());
      }
    }
    sr.tunable = opt_bool(s, "tunable", true, where);
    sr.margin = opt_double(s, "margin", 0.0, where);
    sr.gain = opt_double(s, "gain", 0.0, where);
    const json* cands = find(s, "candidates");
    if (cands == nullptr || !cands->is_array()) bad(where, "candidates", "is not an array");
    for (size_t ci = 0; ci < cands->size(); ++ci) {
      const json& c = (*cands)[ci];
      const std::string cwhere = fmt::format("{}candidates[{}].", where, ci);
      Measurement m;
      detail::read_measurement(c, &m, cwhere);
      // The winner and runner-up are positions in this list; an index that says otherwise would
      // mark another candidate than the one they name.
      m.index = detail::json_int(c, "index", static_cast<int>(ci), 0, INT_MAX, cwhere);
      if (m.index != static_cast<int>(ci)) bad(cwhere, "index", fmt::format("= {} is not its position {}", m.index, ci));
      m.label = opt_string(c, "label", "", cwhere);
      m.is_default = opt_bool(c, "is_default", false, cwhere);
      sr.candidates.push_back(std::move(m));
    }
    // -1: none. Anything else must name a candidate: the report and the summary index by it.
    const int count = static_cast<int>(sr.candidates.size());
    for (auto [name, out] : {std::pair{"winner", &sr.winner}, std::pair{"runner_up", &sr.runner_up}}) {
      *out = detail::json_int(s, name, -1, -1, INT_MAX, where);
      if (*out >= count) bad(where, name, fmt::format("= {} names no candidate (the shape has {})", *out, count));
    }
    r.shapes.push_back(std::move(sr));
  }
  return r;
}

}  // namespace kjit::tune
