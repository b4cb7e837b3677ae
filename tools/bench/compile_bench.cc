// Cold compile time of the default specializations, split into where it goes: for each family's
// defaults on one target, NVRTC to PTX only (front end and NVVM), then to a cubin (ptxas too);
// optionally the same cubins from another kernel-source tree (--baseline-kernel-dir: the sources
// before a change, measured in the same run) and with extra NVRTC options (--variant, e.g.
// -split-compile=4 or -pch), whose cubins must keep the same code (every .text, per-kernel .nv.info
// and constant section byte for byte). No disk cache: every figure is a compile, the fastest of
// --reps, on one thread, so figures add up. NVRTC (12.9+) keeps its own cache of PTX and cubins in
// the driver's compute cache when a driver is loaded, which would turn every compile after the first
// of a program into a lookup; it is switched off here (CUDA_CACHE_DISABLE=1) so figures are compiles.
//   compile_bench [--arch sm_90a] [--family NAME]... [--reps N] [--baseline-kernel-dir DIR]
//                 [--variant "OPT ..."] [--json PATH]
#include <kjit/families.hpp>
#include <kjit/kjit.hpp>

#include <elf.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// The sections of a cubin that hold code and its launch metadata, by name. Internal-linkage names
// carry a hash of the translation unit (which the options change), so it is cut from the names;
// the global .nv.info (symbol indices) and the string and symbol tables are left out.
std::map<std::string, std::string> code_sections(const std::string& elf) {
  std::map<std::string, std::string> out;
  if (elf.size() < sizeof(Elf64_Ehdr)) return out;
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  if (eh.e_shoff + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > elf.size() || eh.e_shstrndx >= eh.e_shnum) return out;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), elf.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  const Elf64_Shdr& names = sh[eh.e_shstrndx];
  static const std::regex internal("_INTERNAL_[0-9a-f_]+");
  for (const Elf64_Shdr& s : sh) {
    if (names.sh_offset + s.sh_name >= elf.size()) continue;
    const std::string name = std::regex_replace(std::string(elf.c_str() + names.sh_offset + s.sh_name), internal, "");
    const bool code = name.rfind(".text", 0) == 0 || name.rfind(".nv.constant", 0) == 0 ||
                      name.rfind(".nv.info.", 0) == 0 || name.rfind(".nv.shared", 0) == 0;
    if (!code || s.sh_type == SHT_NOBITS || s.sh_offset + s.sh_size > elf.size()) continue;
    out[name] = elf.substr(s.sh_offset, s.sh_size);
  }
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "sm_90a", json_path, baseline_dir, variant;
  int reps = 1;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--arch" && i + 1 < argc) arch = argv[++i];
    else if (a == "--family" && i + 1 < argc) only.push_back(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::stoi(argv[++i]));
    else if (a == "--baseline-kernel-dir" && i + 1 < argc) baseline_dir = argv[++i];
    else if (a == "--variant" && i + 1 < argc) variant = argv[++i];
    else {
      fmt::print(stderr,
                 "usage: compile_bench [--arch sm_90a] [--family NAME]... [--reps N] [--baseline-kernel-dir DIR] "
                 "[--variant \"OPT ...\"] [--json PATH]\n");
      return 2;
    }
  }
  ::setenv("CUDA_CACHE_DISABLE", "1", 1);  // before NVRTC's first compile reads it
  const kjit::Target cubin = kjit::Target::parse(arch);
  kjit::Target ptx = cubin;
  ptx.ptx = true;
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  config.disk_cache = false;
  kjit::RuntimeConfig baseline_config = config;
  baseline_config.kernel_dir = baseline_dir;
  const std::vector<std::string> variant_options = split_words(variant);

  struct Row {
    std::string family, params;
    double baseline_ms = 0, ptx_ms = 0, cubin_ms = 0, variant_ms = 0;
  };
  std::vector<Row> rows;
  int variant_differs = 0;
  for (const kjit::Family& f : kjit::families()) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    for (const auto& p : f.default_points()) {
      if (!f.unsupported_reason(p, cubin).empty()) continue;
      const kjit::ProgramSpec spec = f.spec(p);
      // The fastest of `reps` fresh compiles (a new Runtime each time: no in-memory reuse).
      auto time_one = [&](const kjit::RuntimeConfig& cfg, const kjit::Target& target,
                          const std::vector<std::string>& extra, std::string* binary) {
        double best = 1e300;
        for (int r = 0; r < reps; ++r) {
          kjit::Runtime rt(cfg);
          kjit::ProgramSpec s = spec;
          s.options.insert(s.options.end(), extra.begin(), extra.end());
          const auto t0 = Clock::now();
          const auto program = rt.compile(s, target);
          best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          if (binary) *binary = program->binary;
        }
        return best;
      };
      Row row{f.name, spec.template_args};
      std::string plain, varied;
      if (!baseline_dir.empty()) row.baseline_ms = time_one(baseline_config, cubin, {}, nullptr);
      row.ptx_ms = time_one(config, ptx, {}, nullptr);
      row.cubin_ms = time_one(config, cubin, {}, &plain);
      if (!variant_options.empty()) {
        row.variant_ms = time_one(config, cubin, variant_options, &varied);
        if (code_sections(plain) != code_sections(varied)) {
          ++variant_differs;
          fmt::print(stderr, "{} [{}]: the cubin's code changes with {}\n", f.name, spec.template_args, variant);
        }
      }
      rows.push_back(row);
    }
  }

  fmt::print("{:<22} {:<44} {:>9} {:>9} {:>9} {:>9} {:>6}\n", "family", "specialization", "base ms", "ptx ms",
             "cubin ms", "variant", "ptx %");
  std::vector<double> b, p, c, v;
  for (const Row& r : rows) {
    fmt::print("{:<22} {:<44} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>5.0f}%\n", r.family, r.params.substr(0, 44),
               r.baseline_ms, r.ptx_ms, r.cubin_ms, r.variant_ms, 100 * r.ptx_ms / r.cubin_ms);
    b.push_back(r.baseline_ms), p.push_back(r.ptx_ms), c.push_back(r.cubin_ms), v.push_back(r.variant_ms);
  }
  fmt::print("{} specializations for {}, fastest of {}: median / sum ms: ptx {:.1f} / {:.0f}, cubin {:.1f} / {:.0f}",
             rows.size(), arch, reps, median(p), sum(p), median(c), sum(c));
  if (!baseline_dir.empty()) {
    fmt::print("; baseline sources {:.1f} / {:.0f} ({:.2f}x / {:.2f}x)", median(b), sum(b), median(b) / median(c),
               sum(b) / sum(c));
  }
  if (!variant_options.empty()) {
    fmt::print("; with {} {:.1f} / {:.0f}, code changed in {}", variant, median(v), sum(v), variant_differs);
  }
  fmt::print("\n");
  if (!json_path.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      j.push_back({{"family", r.family}, {"params", r.params}, {"baseline_ms", r.baseline_ms}, {"ptx_ms", r.ptx_ms},
                   {"cubin_ms", r.cubin_ms}, {"variant_ms", r.variant_ms}});
    }
    std::ofstream(json_path) << j.dump(1) << "\n";
  }
  return variant_differs == 0 ? 0 : 1;
}
