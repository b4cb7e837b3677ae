// `kjit kernels`: the shipped kernel families, their specialization parameters and defaults.
#include "tools/cli/common.hpp"

#include <fmt/format.h>

namespace kjit::cli {
namespace {

struct KernelsOptions {
  bool defaults = false;
};

std::string sm_text(int sm) { return fmt::format("sm_{}", sm); }

int run_kernels(const KernelsOptions& options) {
  const auto& all = families();
  if (output().json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Family& f : all) {
      nlohmann::json params = nlohmann::json::array();
      for (const FamilyParam& p : f.params) {
        params.push_back({{"name", p.name}, {"values", p.texts()}, {"doc", p.doc}});
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
  add_json_flag(cmd);
  out.push_back({cmd, [options] { return run_kernels(*options); }});
}

}  // namespace kjit::cli
