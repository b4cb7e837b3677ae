// `kjit tune OP`, `kjit tune --check` and `kjit tune report`: per-device tuning sweeps, their
// drift check, and their reports (the tuner is tools/tune/tuner.hpp; the table format
// cache/tune_table.hpp; the rules docs/tuning.md).
#include "tools/cli/common.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/tuning.hpp"
#include "tools/tune/tuner.hpp"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace kjit::cli {
namespace {

struct TuneArgs {
  std::string op;
  std::vector<std::string> shapes;
  std::string shapes_file;
  int jobs = 4;
  int samples = 25;
  int screen_samples = 5;
  double screen_margin = 0.15;
  double noise = 0.02;
  double timeout_s = 60;
  bool no_publish = false;
  bool report = false;
  bool check = false;
  bool list = false;
  std::string png;
  std::string json_out;
};

struct ReportArgs {
  std::string file;
  std::string png;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw InvalidArgument(fmt::format("cannot write {}", path));
}

int show(const tune::SweepResult& r, const std::string& png, bool table) {
  if (table && !output().json) fmt::print("{}", tune::report_table(r));
  if (!png.empty()) {
    const std::string why = tune::write_chart(r, png);
    if (!why.empty()) {
      warn(fmt::format("no chart: {}", why));
    } else if (!output().json) {
      fmt::print("chart: {}\n", png);
    }
  }
  return kExitOk;
}

nlohmann::json summary(const tune::SweepResult& r) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const tune::ShapeResult& s : r.shapes) {
    const tune::Measurement* w = s.winner >= 0 ? &s.candidates[static_cast<size_t>(s.winner)] : nullptr;
    size_t wrong = 0, failed = 0, dropped = 0;
    for (const tune::Measurement& m : s.candidates) {
      wrong += m.status == "wrong";
      failed += m.status == "failed" || m.status == "compile-failed";
      dropped += m.status == "dropped";
    }
    shapes.push_back({{"shape", tune::shape_text(s.shape)},
                      {"winner", w ? w->label : ""},
                      {"winner_us", w ? w->us : 0.0},
                      {"default_us", s.candidates.empty() ? 0.0 : s.candidates[0].us},
                      {"gain", s.gain},
                      {"margin", s.margin},
                      {"candidates", s.candidates.size()},
                      {"wrong", wrong},
                      {"failed", failed},
                      {"dropped", dropped}});
  }
  return {{"op", r.op},           {"device", r.device},         {"fingerprint_id", r.fingerprint_id},
          {"compiled", r.compiled}, {"compile_failed", r.compile_failed}, {"compile_s", r.compile_s},
          {"measure_s", r.measure_s}, {"shapes", shapes}};
}

tune::Options options_of(const TuneArgs& a) {
  tune::Options o;
  o.jobs = a.jobs;
  o.samples = a.samples;
  o.screen_samples = a.screen_samples;
  o.screen_margin = a.screen_margin;
  o.noise = a.noise;
  o.timeout_s = a.timeout_s;
  o.publish = !a.no_publish;
  o.progress = !output().json;
  return o;
}

int run_list() {
  if (output().json) {
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [name, op] : tune::ops()) ops[name] = op.help;
    print_json({{"ops", ops}});
  } else {
    for (const auto& [name, op] : tune::ops()) fmt::print("{}\n  {}\n", name, op.help);
  }
  return kExitOk;
}

/// Re-measures every stored winner of this device's table (of `only_op` when given) against the
/// default at the shape it was tuned at, and reports the drift of both times. An entry tuned
/// against another revision of its op's planner (which the planners ignore) counts as failed.
int run_check(const TuneArgs& a) {
  require_gpu("kjit tune --check");
  const DeviceInfo& info = device_identity(0);
  const std::string root = RuntimeConfig::from_env().cache_dir;
  cache::TuneTable table;
  if (!cache::read_table(cache::table_path(root, info.fingerprint_id()), &table)) {
    throw InvalidArgument(fmt::format("no tuning table for device 0 ({}, fingerprint {}) in {}; run kjit tune first",
                                      info.name, info.fingerprint_id(), cache::tuning_dir(root)));
  }
  // One sweep per op (one worker, every stored shape of it), measuring at each shape only its
  // stored winner and the default.
  std::vector<std::string> ops;
  std::map<std::string, std::vector<const cache::TuneEntry*>> by_op;
  for (const cache::TuneEntry& e : table.entries) {
    if (!a.op.empty() && e.op != a.op) continue;
    if (!by_op.count(e.op)) ops.push_back(e.op);
    by_op[e.op].push_back(&e);
  }
  nlohmann::json rows = nlohmann::json::array();
  int drifted = 0;
  for (const std::string& op_name : ops) {
    const std::vector<const cache::TuneEntry*>& entries = by_op[op_name];
    const tune::TuneOp& top = tune::op(op_name);
    tune::Options o = options_of(a);
    o.publish = false;
    o.screen_samples = 0;  // both are measured in full, whatever they do now
    std::vector<tune::Shape> shapes;
    for (const cache::TuneEntry* e : entries) {
      try {
        shapes.push_back(tune::parse_shape({e->shape}, top.defaults));
      } catch (const InvalidArgument& err) {
        throw InvalidArgument(fmt::format("tuning table {}: entry op={} shape \"{}\": {}",
                                          cache::table_path(root, info.fingerprint_id()), e->op, e->shape, err.what()));
      }
      o.only_by_shape.push_back({e->winner.describe(), e->default_choice.describe()});
    }
    const tune::SweepResult r = tune::sweep(op_name, shapes, o);
    for (size_t k = 0; k < entries.size(); ++k) {
      const cache::TuneEntry& e = *entries[k];
      const tune::ShapeResult& s = r.shapes.at(k);
      const tune::Measurement* now = nullptr;
      for (const tune::Measurement& m : s.candidates) {
        if (!m.is_default && tune::stored_description(e.op, m) == e.winner.describe()) now = &m;
      }
      const tune::Measurement& def = s.candidates.at(0);
      const bool default_won = e.winner.describe() == e.default_choice.describe();
      const double winner_now = default_won ? def.us : now && now->status == "ok" ? now->us : 0;
      const double drift = e.winner.us > 0 && winner_now > 0 ? winner_now / e.winner.us - 1 : 0;
      const bool still_wins = default_won || (winner_now > 0 && winner_now < def.us * (1 - a.noise));
      const kjit::detail::TuneOpSpec* spec = kjit::detail::find_tune_op(e.op);
      const bool stale = spec != nullptr && e.planner != spec->planner;
      const bool bad = winner_now == 0 || !still_wins || std::abs(drift) > 0.1 || stale;
      // The tuned plan now loses to the default beyond the noise (or no longer runs).
      const bool slower = !default_won && (winner_now == 0 || winner_now > def.us * (1 + a.noise));
      drifted += bad;
      rows.push_back({{"op", e.op},
                      {"shape", e.shape},
                      {"winner", e.winner.describe()},
                      {"default_won", default_won},
                      {"stored_us", e.winner.us},
                      {"now_us", winner_now},
                      {"drift", drift},
                      {"default_now_us", def.us},
                      {"still_wins", still_wins},
                      {"slower_than_default", slower},
                      {"planner", e.planner},
                      {"stale_planner", stale},
                      {"status", winner_now == 0 ? (now ? now->status + ": " + now->why : "not measured") : "ok"}});
      if (!output().json) {
        fmt::print("{:<9} {:<40} {:>9.2f} → {:>9.2f} µs ({:+.1f}%)  default now {:.2f} µs  {}\n", e.op, e.shape,
                   e.winner.us, winner_now, drift * 100, def.us,
                   stale                ? fmt::format("TUNED AGAINST PLANNER REVISION {} (now {}): re-run kjit tune {}",
                                                      e.planner, spec->planner, e.op)
                   : winner_now == 0    ? std::string("FAILED")
                   : still_wins         ? std::string("still wins")
                                        : std::string("NO LONGER BEATS THE DEFAULT"));
      }
    }
  }
  if (output().json) print_json({{"fingerprint_id", info.fingerprint_id()}, {"entries", rows}, {"drifted", drifted}});
  return drifted == 0 ? kExitOk : kExitFailed;
}

int run_tune(const TuneArgs& a) {
  if (a.list) return run_list();
  if (a.check) return run_check(a);
  if (a.op.empty()) throw InvalidArgument("kjit tune needs an op (kjit tune --list names them) or --check");
  const tune::TuneOp& top = tune::op(a.op);
  if (!top.only_default.empty()) {
    if (output().json) {
      print_json({{"op", a.op}, {"candidates", 1}, {"only_default", top.only_default}});
    } else {
      fmt::print("{}: the default plan is the only candidate, nothing to measure: {}\n", a.op, top.only_default);
    }
    return kExitOk;
  }
  std::vector<tune::Shape> shapes;
  if (!a.shapes_file.empty()) shapes = tune::read_shapes_file(a.shapes_file, top.defaults);
  for (const std::string& s : a.shapes) shapes.push_back(tune::parse_shape({s}, top.defaults));
  if (shapes.empty()) shapes.push_back(top.defaults);
  for (const tune::Shape& s : shapes) top.make(s);  // a bad shape is an error before any GPU work
  require_gpu("kjit tune");
  const tune::SweepResult r = tune::sweep(a.op, shapes, options_of(a));
  if (!a.json_out.empty()) write_text(a.json_out, tune::to_json(r));
  if (output().json) {
    print_json(summary(r));
  } else if (!a.report) {
    for (const tune::ShapeResult& s : r.shapes) {
      const tune::Measurement* w = s.winner >= 0 ? &s.candidates[static_cast<size_t>(s.winner)] : nullptr;
      fmt::print("{:<48} {}\n", tune::shape_text(s.shape),
                 w ? fmt::format("{:.2f} µs (default {:.2f}, {:+.1f}%): {}", w->us, s.candidates[0].us, -s.gain * 100 / (1 + s.gain),
                                 w->label)
                   : std::string("no winner: the default did not measure ok"));
    }
    fmt::print("{} compiled ({} failed, {} skipped) in {:.1f} s, measured in {:.1f} s{}\n", r.compiled, r.compile_failed,
               r.compile_skipped, r.compile_s, r.measure_s,
               a.no_publish ? "" : fmt::format("; table: {}", cache::table_path(RuntimeConfig::from_env().cache_dir, r.fingerprint_id)));
  }
  return show(r, a.png, a.report);
}

}  // namespace

void add_tune_command(CLI::App& root, std::vector<Command>& out) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = root.add_subcommand(
      "tune", "Measure an op's candidates (family points × planner knobs, pruned by the device) on device 0 over "
              "shapes, check each against the float64 reference, time them (CUDA graph and eager) and store the "
              "winners in the device's tuning table (cache dir/tuning/<fingerprint id>.json), which the planners "
              "read. --list names the ops and their shape keys; --check re-measures stored winners.");
  cmd->add_option("op", a->op, "the op to tune (kjit tune --list)");
  cmd->add_option("--shape", a->shapes, "key=value words of one shape (repeatable; keys default as --list says)");
  cmd->add_option("--shapes", a->shapes_file, "a file of shapes, one line of key=value words each ('#' comments)");
  cmd->add_option("-j,--jobs", a->jobs, "parallel compiles")->check(CLI::Range(1, 256));
  cmd->add_option("--samples", a->samples, "timing samples per fully measured candidate (at least 20)")
      ->check(CLI::Range(20, 10000));
  cmd->add_option("--screen-samples", a->screen_samples,
                  "CUDA-graph samples every correct candidate gets before early rejection (0: measure all in full)")
      ->check(CLI::Range(0, 20));
  cmd->add_option("--screen-margin", a->screen_margin,
                  "drop a candidate early when its best screening sample is slower than the leader's median by more "
                  "than this (relative)")
      ->check(CLI::Range(0.05, 10.0));
  cmd->add_option("--noise", a->noise, "a candidate must beat the default by more than this (relative)")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--timeout", a->timeout_s, "seconds one candidate may take before it is killed and marked failed")
      ->check(CLI::Range(1.0, 3600.0));
  cmd->add_flag("--no-publish", a->no_publish, "measure and report, but leave the tuning table alone");
  cmd->add_flag("--report", a->report, "print every candidate of every shape as a table");
  cmd->add_option("--png", a->png, "also draw a chart of the sweep into this PNG (needs gnuplot)");
  cmd->add_option("--json-out", a->json_out, "write the whole sweep as JSON (kjit tune report reads it)");
  cmd->add_flag("--check", a->check, "re-measure the stored winners (of OP when given) and report their drift");
  cmd->add_flag("--list", a->list, "list the ops kjit tune covers, their shape keys, knobs and bucket rules");
  add_json_flag(cmd);

  auto r = std::make_shared<ReportArgs>();
  CLI::App* rep = cmd->add_subcommand("report", "Print a sweep saved with --json-out as a table, and chart it with --png "
                                                "(on any machine: no GPU needed)");
  rep->add_option("file", r->file, "the JSON a sweep wrote with --json-out (of an op kjit tune covers)")->required();
  rep->add_option("--png", r->png, "write a PNG chart here (needs gnuplot)");
  add_json_flag(rep);
  out.push_back({rep, [r] {
                   const std::string text = cache::read_input_file(r->file, "tune report", tune::kMaxTuneFileBytes);
                   tune::SweepResult s;
                   try {
                     s = tune::from_json(text);
                     tune::op(s.op);  // a sweep of an op kjit tune does not cover is no sweep it wrote
                   } catch (const InvalidArgument& e) {
                     throw InvalidArgument(fmt::format("{}: {}", r->file, e.what()));
                   }
                   if (output().json) print_json(summary(s));
                   return show(s, r->png, true);
                 }});
  out.push_back({cmd, [a] { return run_tune(*a); }});
}

}  // namespace kjit::cli
