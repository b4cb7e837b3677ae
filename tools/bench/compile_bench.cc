// Cold compile time of the default specializations, split into where it goes: for each family's
// defaults on one target, NVRTC to PTX only (front end and NVVM), then to a cubin (ptxas too),
// then to a cubin with NVRTC's automatic precompiled header (-pch: the first compile of a source
// in a process builds the PCH of its leading includes, later ones with the same prefix reuse it).
// No disk cache: every figure is a compile. Single thread, so figures add up.
//   compile_bench [--arch sm_90a] [--family NAME]... [--json PATH]
#include <kjit/families.hpp>
#include <kjit/kjit.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "sm_90a", json_path;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--arch" && i + 1 < argc) arch = argv[++i];
    else if (a == "--family" && i + 1 < argc) only.push_back(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else {
      fmt::print(stderr, "usage: compile_bench [--arch sm_90a] [--family NAME]... [--json PATH]\n");
      return 2;
    }
  }
  const kjit::Target cubin = kjit::Target::parse(arch);
  kjit::Target ptx = cubin;
  ptx.ptx = true;
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  config.disk_cache = false;

  struct Row {
    std::string family, params;
    double ptx_ms, cubin_ms, pch_ms;
  };
  std::vector<Row> rows;
  int pch_differs = 0;
  // One Runtime per mode and family, so each -pch run starts without a PCH for that source.
  for (const kjit::Family& f : kjit::families()) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    std::vector<kjit::ProgramSpec> specs;
    for (const auto& p : f.default_points()) {
      if (f.unsupported_reason(p, cubin).empty()) specs.push_back(f.spec(p));
    }
    if (specs.empty()) continue;
    std::vector<std::string> binaries;
    auto time_all = [&](const kjit::Target& target, bool pch) {
      kjit::Runtime rt(config);
      std::vector<double> ms;
      for (size_t i = 0; i < specs.size(); ++i) {
        kjit::ProgramSpec s = specs[i];
        if (pch) s.options.push_back("-pch");
        const auto t0 = Clock::now();
        const auto program = rt.compile(s, target);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        // A PCH must not change what is compiled: the cubins with and without it are compared.
        if (!target.ptx && !pch) binaries.push_back(program->binary);
        if (pch && program->binary != binaries[i]) ++pch_differs;
      }
      return ms;
    };
    const auto p = time_all(ptx, false), c = time_all(cubin, false), h = time_all(cubin, true);
    for (size_t i = 0; i < specs.size(); ++i) rows.push_back({f.name, specs[i].template_args, p[i], c[i], h[i]});
  }

  fmt::print("{:<22} {:<44} {:>9} {:>9} {:>9} {:>7}\n", "family", "specialization", "ptx ms", "cubin ms",
             "-pch ms", "ptx %");
  std::vector<double> all_c, all_h, all_p;
  for (const Row& r : rows) {
    fmt::print("{:<22} {:<44} {:>9.1f} {:>9.1f} {:>9.1f} {:>6.0f}%\n", r.family, r.params.substr(0, 44), r.ptx_ms,
               r.cubin_ms, r.pch_ms, 100 * r.ptx_ms / r.cubin_ms);
    all_p.push_back(r.ptx_ms);
    all_c.push_back(r.cubin_ms);
    all_h.push_back(r.pch_ms);
  }
  double sum_c = 0, sum_h = 0, sum_p = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    sum_p += all_p[i];
    sum_c += all_c[i];
    sum_h += all_h[i];
  }
  fmt::print("{} specializations for {}: median ptx {:.1f} ms, cubin {:.1f} ms, cubin with -pch {:.1f} ms; "
             "sums {:.0f} / {:.0f} / {:.0f} ms\n",
             rows.size(), arch, median(all_p), median(all_c), median(all_h), sum_p, sum_c, sum_h);
  fmt::print("cubins that differ with -pch: {} of {}\n", pch_differs, rows.size());
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << fmt::format("  {{\"family\": \"{}\", \"params\": \"{}\", \"ptx_ms\": {:.2f}, \"cubin_ms\": {:.2f}, "
                         "\"pch_ms\": {:.2f}}}{}\n",
                         rows[i].family, rows[i].params, rows[i].ptx_ms, rows[i].cubin_ms, rows[i].pch_ms,
                         i + 1 < rows.size() ? "," : "");
    }
    out << "]\n";
  }
  return pch_differs == 0 ? 0 : 1;
}
