// `kjit compile FAMILY key=value...`: one specialization through Runtime::compile (so it lands
// in the disk cache), with what ptxas reported per kernel, or the kernel source text.
#include "tools/cli/common.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/compiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

namespace kjit::cli {
namespace {

struct CompileOptions {
  std::string family;
  std::vector<std::string> params;
  std::string arch;
  std::string emit = "cubin";
  std::string output_path;
};

void write_file(const std::string& path, const std::string& bytes) {
  if (path == "-") {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
    return;
  }
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    const int err = errno;
    throw Error(fmt::format("cannot write {}: {}", path, err != 0 ? std::strerror(err) : "write failed"));
  }
}

std::string source_text(const ProgramSpec& spec, const Runtime& runtime) {
  if (!spec.source_text.empty()) return spec.source_text;
  const detail::KernelSources sources(runtime.config().kernel_dir);
  std::optional<std::string> text = sources.read(spec.source_name);
  if (!text) throw InvalidArgument(fmt::format("no kernel source named {}", spec.source_name));
  return *text;
}

int run_compile(const CompileOptions& o) {
  const Family& family = kjit::family(o.family);
  Target target = o.arch.empty() ? default_targets().front() : Target::parse(o.arch);
  const ParamMap params = parse_params(family.name, o.params);
  const ProgramSpec spec = family.spec(params);

  if (o.emit == "ptx") target.ptx = true;
  // A PTX target the user named, by --arch or else by KJIT_ARCH (which the default target
  // follows), builds no cubin: one rule and one message for both. Named by neither (a GPU newer
  // than NVRTC), the device's own target is PTX already and is compiled as such.
  if (o.emit == "cubin" && target.ptx) {
    const std::string_view env_arch = kjit::detail::kjit_arch();
    if (!o.arch.empty()) throw InvalidArgument(fmt::format("--arch {} is a PTX target; add --emit ptx", o.arch));
    if (!env_arch.empty()) throw InvalidArgument(fmt::format("KJIT_ARCH={} is a PTX target; add --emit ptx", env_arch));
  }
  if (std::string why = family.unsupported_reason(params, target); !why.empty()) throw Unsupported(why);
  // Without --arch: what the op would load on this machine's device (sm_XYa only for
  // arch-specific programs); --arch is compiled as given.
  if (o.arch.empty()) target = spec.target_on(target);
  if (output().json && o.output_path == "-") {
    throw InvalidArgument("--json and -o - would both write to stdout; name a file with -o");
  }

  Runtime& runtime = Runtime::global();
  nlohmann::json report = {{"family", family.name},
                           {"params", params_json(params)},
                           {"target", target.str()},
                           {"emit", o.emit},
                           {"source_name", spec.source_name},
                           {"cache_dir", runtime.disk_cache().root},
                           {"cache_enabled", runtime.disk_cache().enabled},
                           {"cache_writable", runtime.disk_cache().writable}};
  if (!o.output_path.empty()) report["output"] = o.output_path;

  if (o.emit == "source") {
    const std::string text = source_text(spec, runtime);
    const std::string key = runtime.key(spec, target);
    if (!o.output_path.empty()) write_file(o.output_path, text);
    if (output().json) {
      nlohmann::json kernels = nlohmann::json::array();
      for (const std::string& name : spec.name_expressions) kernels.push_back({{"name_expression", name}});
      report.update({{"compiled", 0}, {"cached", 0}, {"failed", 0}, {"key", key},
                     {"kernels", kernels}, {"options", spec.options}});
      if (o.output_path.empty()) report["source"] = text;
      print_json(report);
    } else if (o.output_path.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      fmt::print("wrote {} ({}) to {}\n", spec.source_name, human_bytes(text.size()), o.output_path);
    }
    return kExitOk;
  }

  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<const CompiledProgram> program;
  try {
    program = runtime.compile(spec, target);
  } catch (const CompileError& e) {
    if (output().json) {
      report.update({{"compiled", 0}, {"cached", 0}, {"failed", 1},
                     {"key", runtime.key(spec, target)}, {"kernels", nlohmann::json::array()},
                     {"error", first_line(e.what())}, {"log", e.log()}});
      print_json(report);
    }
    throw;  // main prints the one-line reason and the log below it
  }
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const bool compiled = program->origin == CompiledProgram::Origin::kCompiled;

  // The artifact goes to stdout only for `-o -`, or for PTX without -o (text a user pipes on);
  // the report then moves to stderr so stdout stays the artifact alone.
  const bool ptx_to_stdout = o.emit == "ptx" && o.output_path.empty() && !output().json;
  // PTX is kept NUL-terminated (the driver reads it as a C string); the text written has no NUL,
  // so ptxas and editors take it as it is.
  std::string artifact = program->binary;
  if (o.emit == "ptx" && !artifact.empty() && artifact.back() == '\0') artifact.pop_back();
  if (!o.output_path.empty()) write_file(o.output_path, artifact);
  if (ptx_to_stdout) write_file("-", artifact);

  if (output().json) {
    report.update({{"compiled", compiled ? 1 : 0},
                   {"cached", compiled ? 0 : 1},
                   {"failed", 0},
                   {"key", program->key},
                   {"origin", origin_name(program->origin)},
                   {"compile_ms", program->compile_ms},
                   {"wall_ms", wall_ms},
                   {"nvrtc_version", program->nvrtc_version},
                   {"options", program->options},
                   {"binary_bytes", program->binary.size()},
                   {"kernels", kernels_json(program->kernels)}});
    if (o.emit == "ptx" && o.output_path.empty()) report["ptx"] = artifact;
    print_json(report);
    return kExitOk;
  }

  std::FILE* out = (ptx_to_stdout || o.output_path == "-") ? stderr : stdout;
  const std::string args = format_params(params);
  fmt::print(out, "family   {}{}\n", family.name, args.empty() ? "" : " (" + args + ")");
  fmt::print(out, "target   {}\n", target.str());
  fmt::print(out, "key      {}\n", program->key);
  if (compiled) {
    fmt::print(out, "result   compiled in {:.1f} ms (NVRTC {})\n", program->compile_ms,
               program->nvrtc_version);
  } else {
    fmt::print(out, "result   cached ({}) in {:.1f} ms; compiled in {:.1f} ms originally\n",
               origin_name(program->origin), wall_ms, program->compile_ms);
  }
  fmt::print(out, "binary   {} {}\n", human_bytes(program->binary.size()), target.ptx ? "PTX" : "cubin");
  if (!o.output_path.empty() && o.output_path != "-") fmt::print(out, "output   {}\n", o.output_path);
  if (!runtime.disk_cache().enabled) {
    fmt::print(out, "note     the disk cache is off; the result was not saved\n");
  } else if (!runtime.disk_cache().writable) {
    fmt::print(out, "note     the disk cache is read-only; a new compile was not saved\n");
  }
  size_t width = 6;
  for (const KernelInfo& k : program->kernels) width = std::max(width, k.name_expression.size());
  auto num = [](int v) { return v < 0 ? std::string("?") : std::to_string(v); };
  fmt::print(out, "{:<{}}  {:>5} {:>7} {:>10}\n", "kernel", width, "regs", "spills", "smem");
  for (const KernelInfo& k : program->kernels) {
    fmt::print(out, "{:<{}}  {:>5} {:>7} {:>10}\n", k.name_expression, width, num(k.registers),
               num(k.spill_bytes), k.static_smem < 0 ? std::string("?") : human_bytes(k.static_smem));
  }
  return kExitOk;
}

}  // namespace

void add_compile_command(CLI::App& root, std::vector<Command>& out) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* cmd = root.add_subcommand(
      "compile", "Compile one specialization of a kernel family (into the disk cache) and show "
                 "its key, whether it was cached, the compile time and registers/spills/smem "
                 "per kernel");
  cmd->add_option("family", o->family, "Kernel family (see `kjit kernels`)")->required();
  cmd->add_option("params", o->params, "Specialization parameters as key=value (every parameter "
                                       "of the family)");
  cmd->add_option("--arch", o->arch, "Target: sm_90a, sm_89, compute_90, ... (default: what the op "
                                     "loads on device 0, or without a GPU on a KJIT_ARCH device or an "
                                     "sm_90a one: sm_XYa only for arch-specific programs)")
      ->check(non_empty());
  cmd->add_option("--emit", o->emit, "What to produce: cubin (default), ptx (compiles a "
                                     "compute_XX target, which --arch or KJIT_ARCH naming one needs; "
                                     "printed when there is no -o) or "
                                     "source (prints the kernel source text, compiles nothing)")
      ->check(CLI::IsMember({"cubin", "ptx", "source"}));
  cmd->add_option("-o,--output", o->output_path, "Write the cubin, PTX or source to this file "
                                                 "('-' for stdout)")
      ->check(non_empty());
  add_json_flag(cmd);
  out.push_back({cmd, [o] { return run_compile(*o); }});
}

}  // namespace kjit::cli
