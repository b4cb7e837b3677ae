#include "runtime/nvrtc.hpp"

#include <kjit/error.hpp>

#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace kjit::detail {
namespace {

bool has_bf16_header(const std::string& include_dir) {
  return !include_dir.empty() && ::access((include_dir + "/cuda_bf16.h").c_str(), R_OK) == 0;
}

std::string read_cuda_version(const std::string& include_dir) {
  std::ifstream in(include_dir + "/cuda.h");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#define CUDA_VERSION ", 0) == 0) {
      std::string v = line.substr(21);
      v.erase(std::remove_if(v.begin(), v.end(), [](char c) { return !std::isdigit(static_cast<unsigned char>(c)); }), v.end());
      return v;
    }
  }
  return "unknown";
}

// The toolkit NVRTC came from: <home>/lib64/libnvrtc.so or <home>/targets/<arch>/lib/libnvrtc.so.
std::vector<std::string> beside_nvrtc() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) || !info.dli_fname) return {};
  std::filesystem::path lib = std::filesystem::path(info.dli_fname).parent_path();
  return {(lib.parent_path() / "include").string(), (lib.parent_path().parent_path() / "include").string()};
}

void check_nvrtc(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) {
    throw Error(fmt::format("{} failed: {}", call, nvrtcGetErrorString(r)));
  }
}

// Parses ptxas' verbose report ("Compiling entry function '_Z…'", "Used 40 registers, … 384
// bytes smem", "N bytes spill stores, M bytes spill loads") into per-function resources.
void parse_ptxas_report(const std::string& log, std::vector<KernelInfo>& kernels) {
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex props(R"(Function properties for (\S+))");
  static const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  KernelInfo* current = nullptr;
  auto find = [&](const std::string& lowered) -> KernelInfo* {
    for (auto& k : kernels) {
      if (k.lowered_name == lowered) return &k;
    }
    return nullptr;
  };
  std::istringstream in(log);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry) || std::regex_search(line, m, props)) {
      current = find(m[1]);
      continue;
    }
    if (!current) continue;
    if (std::regex_search(line, m, spills)) current->spill_bytes = std::stoi(m[1]) + std::stoi(m[2]);
    if (std::regex_search(line, m, used)) {
      current->registers = std::stoi(m[1]);
      current->static_smem = std::regex_search(line, m, smem) ? std::stoi(m[1]) : 0;
    }
  }
}

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  nvrtcGetProgramLog(prog, log.data());
  log.resize(size - 1);
  return log;
}

struct ProgramGuard {
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

}  // namespace

CudaHeaders find_cuda_headers(const std::string& configured) {
  std::vector<std::string> candidates;
  if (!configured.empty()) candidates.push_back(configured + "/include");
  for (auto& c : beside_nvrtc()) candidates.push_back(c);
  candidates.push_back("/usr/local/cuda/include");
  for (const auto& dir : candidates) {
    if (!has_bf16_header(dir)) continue;
    CudaHeaders h;
    h.include_dir = std::filesystem::path(dir).lexically_normal().string();
    h.version = read_cuda_version(h.include_dir);
    h.include_options.push_back("-I" + h.include_dir);
    if (::access((h.include_dir + "/cccl").c_str(), R_OK) == 0) h.include_options.push_back("-I" + h.include_dir + "/cccl");
    if (!configured.empty() && dir != candidates.front()) {
      fmt::print(stderr, "kjit: warning: {}/include has no cuda_bf16.h; using {}\n", configured, h.include_dir);
    }
    return h;
  }
  std::string looked;
  for (const auto& c : candidates) looked += " " + c;
  throw Unsupported("kjit: no CUDA include directory with cuda_bf16.h found (looked in:" + looked +
                    "); set KJIT_CUDA_HOME to the CUDA toolkit NVRTC belongs to");
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> normalize_options(const Target& target, const std::vector<std::string>& extra) {
  std::vector<std::string> out = {
      "-std=c++17",
      fmt::format("-arch={}", target.str()),
      // Device code only; no host-side stubs to parse.
      "-default-device",
      "-DKJIT_NVRTC=1",
  };
  // ptxas' resource report (registers, spills, smem) goes into the log; only cubins run ptxas.
  if (!target.ptx) out.push_back("--ptxas-options=-v");
  for (std::string o : extra) {
    const auto first = o.find_first_not_of(" \t\n");
    const auto last = o.find_last_not_of(" \t\n");
    if (first == std::string::npos) continue;
    o = o.substr(first, last - first + 1);
    if (o.rfind("-arch", 0) == 0 || o.rfind("--gpu-architecture", 0) == 0) {
      throw InvalidArgument(fmt::format("option '{}': the target comes from the device or --arch, not from options", o));
    }
    out.push_back(std::move(o));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

NvrtcResult nvrtc_compile(const SourceClosure& sources, const std::vector<std::string>& name_expressions,
                          const Target& target, const std::vector<std::string>& options,
                          const std::vector<std::string>& include_options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : sources.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  ProgramGuard guard;
  check_nvrtc(nvrtcCreateProgram(&guard.prog, sources.text.c_str(), sources.name.c_str(),
                                 static_cast<int>(header_texts.size()), header_texts.data(), header_names.data()),
              "nvrtcCreateProgram");
  for (const auto& expr : name_expressions) {
    check_nvrtc(nvrtcAddNameExpression(guard.prog, expr.c_str()), "nvrtcAddNameExpression");
  }
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  for (const auto& o : include_options) argv.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(guard.prog, static_cast<int>(argv.size()), argv.data());
  NvrtcResult out;
  out.log = program_log(guard.prog);
  if (r != NVRTC_SUCCESS) {
    std::string opts;
    for (const auto& o : options) opts += " " + o;
    throw CompileError(
        fmt::format("kjit: NVRTC {} failed to compile {} for {} ({}); file names in the log are "
                    "relative to the source root (kernel_sources/ for kjit's own kernels)\noptions:{}\n{}",
                    nvrtc_version(), sources.name, target.str(), nvrtcGetErrorString(r), opts, out.log),
        out.log, options);
  }
  for (const auto& expr : name_expressions) {
    const char* lowered = nullptr;
    check_nvrtc(nvrtcGetLoweredName(guard.prog, expr.c_str(), &lowered), "nvrtcGetLoweredName");
    KernelInfo k;
    k.name_expression = expr;
    k.lowered_name = lowered;
    out.kernels.push_back(std::move(k));
  }
  size_t size = 0;
  if (target.ptx) {
    check_nvrtc(nvrtcGetPTXSize(guard.prog, &size), "nvrtcGetPTXSize");
    out.binary.resize(size);
    check_nvrtc(nvrtcGetPTX(guard.prog, out.binary.data()), "nvrtcGetPTX");
  } else {
    check_nvrtc(nvrtcGetCUBINSize(guard.prog, &size), "nvrtcGetCUBINSize");
    out.binary.resize(size);
    check_nvrtc(nvrtcGetCUBIN(guard.prog, out.binary.data()), "nvrtcGetCUBIN");
    parse_ptxas_report(out.log, out.kernels);
  }
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace kjit::detail
