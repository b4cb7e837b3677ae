// `kjit kernels`: the shipped kernel families, their specialization parameters and defaults, and
// (--points) every valid point of a family's space for a target: what a tuner sweeps.
#include "tools/cli/common.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

namespace kjit::cli {
namespace {

struct KernelsOptions {
  bool defaults = false;
  bool points = false;
  std::vector<std::string> families;
  std::vector<std::string> archs;
};

std::string sm_text(int sm) { return fmt::format("sm_{}", sm); }

/// Every valid point of the chosen families (all without --family) for each --arch (or for any
/// target without one), one line or JSON object each.
int run_points(const KernelsOptions& options) {
  std::vector<const Family*> chosen;
  if (options.families.empty()) {
    for (const Family& f : families()) chosen.push_back(&f);
  } else {
    for (const std::string& name : options.families) chosen.push_back(&family(name));
  }
  std::vector<std::optional<Target>> targets;
  for (const Target& t : parse_targets(options.archs)) targets.emplace_back(t);
  if (targets.empty()) targets.emplace_back();
  nlohmann::json list = nlohmann::json::array();
  for (const Family* f : chosen) {
    for (const std::optional<Target>& t : targets) {
      for (const Point& pt : f->enumerate(t ? &*t : nullptr)) {
        if (output().json) {
          nlohmann::json j = {{"family", f->name}, {"params", params_json(f->params_of(pt))}};
          if (t) j["target"] = t->str();
          list.push_back(std::move(j));
        } else {
          fmt::print("{}{}{} {}\n", t ? t->str() : "", t ? " " : "", f->name, f->describe(pt));
        }
      }
    }
  }
  if (output().json) print_json({{"points", list}});
  return kExitOk;
}

int run_kernels(const KernelsOptions& options) {
  if (options.points && options.defaults) {
    throw InvalidArgument("--points lists every point of the space; --defaults belongs to the family listing");
  }
  if (!options.points && (!options.families.empty() || !options.archs.empty())) {
    throw InvalidArgument("--family and --arch select points: add --points");
  }
  if (options.points) return run_points(options);
  const auto& all = families();
  if (output().json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Family& f : all) {
      nlohmann::json params = nlohmann::json::array();
      for (const FamilyParam& p : f.params) {
        params.push_back({{"name", p.name}, {"values", p.texts()}, {"doc", p.doc}, {"performance_only", p.performance_only}});
      }
      nlohmann::json defaults = nlohmann::json::array();
      for (const ParamMap& d : f.defaults) defaults.push_back(params_json(d));
      list.push_back({{"name", f.name},
                      {"doc", f.doc},
                      {"min_sm", f.min_sm},
                      {"points", f.enumerate().size()},
                      {"params", params},
                      {"default_count", f.defaults.size()},
                      {"defaults", defaults}});
    }
    print_json({{"families", list}});
    return kExitOk;
  }

  for (size_t i = 0; i < all.size(); ++i) {
    const Family& f = all[i];
    if (i > 0) fmt::print("\n");
    fmt::print("{}\n", f.name);
    if (!f.doc.empty()) fmt::print("  {}\n", f.doc);
    const size_t points = f.enumerate().size();
    fmt::print("  min {}, {} specialization{} in its space, {} default{}\n", sm_text(f.min_sm), points,
               points == 1 ? "" : "s", f.defaults.size(), f.defaults.size() == 1 ? "" : "s");
    size_t width = 0;
    for (const FamilyParam& p : f.params) width = std::max(width, p.name.size());
    for (const FamilyParam& p : f.params) {
      fmt::print("  {:<{}}  {}", p.name, width, fmt::join(p.texts(), " | "));
      if (!p.doc.empty()) fmt::print("   ({})", p.doc);
      if (p.performance_only) fmt::print(" [performance-only]");
      fmt::print("\n");
    }
    if (options.defaults) {
      for (const ParamMap& d : f.defaults) fmt::print("  default: {}\n", format_params(d));
    }
  }
  return kExitOk;
}

}  // namespace

void add_kernels_command(CLI::App& root, std::vector<Command>& out) {
  auto options = std::make_shared<KernelsOptions>();
  CLI::App* cmd = root.add_subcommand(
      "kernels", "List the kernel families: parameters and their values, minimum SM, and the "
                 "default specializations `kjit precompile` compiles");
  cmd->add_flag("--defaults", options->defaults, "Also list each default specialization");
  cmd->add_flag("--points", options->points,
                "List every valid point of each family's space instead (the candidates a tuner sweeps)");
  cmd->add_option("--family", options->families, "With --points: only this family (repeatable)");
  cmd->add_option("--arch", options->archs,
                  "With --points: only the points with a kernel for this target (repeatable), e.g. sm_90a");
  add_json_flag(cmd);
  out.push_back({cmd, [options] { return run_kernels(*options); }});
}

}  // namespace kjit::cli
