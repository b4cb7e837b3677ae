#include "runtime/nvrtc.hpp"

#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>

namespace kjit::detail {
namespace {

bool has_bf16_header(const std::string& include_dir) {
  return !include_dir.empty() && ::access((include_dir + "/cuda_bf16.h").c_str(), R_OK) == 0;
}

// CUDA_VERSION from cuda.h: its define sits near the top of a ~1 MB header, so the file is read
// in chunks until the line is found (a new process's first key pays for this).
std::string read_cuda_version(const std::string& include_dir) {
  const int fd = ::open((include_dir + "/cuda.h").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "unknown";
  constexpr std::string_view kDefine = "#define CUDA_VERSION ";
  std::string text;
  std::string version = "unknown";
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(chunk, static_cast<size_t>(n));
    const size_t at = text.find(kDefine);
    const size_t end = at == std::string::npos ? at : text.find('\n', at);
    if (end == std::string::npos) continue;  // not yet, or its line is not complete yet
    if (at != 0 && text[at - 1] != '\n') {  // inside a line: keep looking after it
      text.erase(0, end);
      continue;
    }
    version.clear();
    for (char c : text.substr(at + kDefine.size(), end - at - kDefine.size())) {
      if (std::isdigit(static_cast<unsigned char>(c))) version += c;
    }
    break;
  }
  ::close(fd);
  return version;
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

// Headers from one CUDA release under another release's NVRTC may use builtins or PTX it does
// not know, or compile differently; the key keeps them apart, but the user should hear of it.
void warn_version_mismatch(const CudaHeaders& h) {
  const std::string headers = cuda_version_major_minor(h.version);
  const std::string compiler = nvrtc_version();
  if (headers == compiler) return;
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard lock(mutex);
  if (!warned.insert(h.include_dir).second) return;
  warn(fmt::format("the CUDA headers in {} are CUDA {} (CUDA_VERSION {}) but NVRTC is {}; kernels may fail to "
                   "compile or compile differently. Point KJIT_CUDA_HOME at the toolkit NVRTC {} came with",
                   h.include_dir, headers.empty() ? std::string("unknown") : headers, h.version, compiler, compiler));
}

}  // namespace

std::string cuda_version_major_minor(const std::string& cuda_version) {
  if (cuda_version.empty() || cuda_version.size() > 9 ||
      !std::all_of(cuda_version.begin(), cuda_version.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return {};
  }
  const long v = std::stol(cuda_version);
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

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
    h.include_dirs.push_back(h.include_dir);
    if (::access((h.include_dir + "/cccl").c_str(), R_OK) == 0) h.include_dirs.push_back(h.include_dir + "/cccl");
    for (const auto& d : h.include_dirs) h.include_options.push_back("-I" + d);
    if (!configured.empty() && dir != candidates.front()) {
      warn(fmt::format("{}/include has no cuda_bf16.h; using {}", configured, h.include_dir));
    }
    warn_version_mismatch(h);
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

namespace {

std::string trim(std::string_view o) {
  const auto first = o.find_first_not_of(" \t\n\r");
  if (first == std::string_view::npos) return {};
  const auto last = o.find_last_not_of(" \t\n\r");
  return std::string(o.substr(first, last - first + 1));
}

// NVRTC options that take an argument, which may come in the next token instead of after '='
// (nvrtc.h, "Supported Compile Options"). -D, -U, -I and -include are handled apart.
bool takes_argument(std::string_view o) {
  static constexpr std::string_view kNames[] = {
      "--gpu-architecture", "-arch", "--relocatable-device-code", "-rdc", "--dopt", "-dopt",
      "--Ofast-compile", "-Ofc", "--ptxas-options", "-Xptxas", "--maxrregcount", "-maxrregcount",
      "--ftz", "-ftz", "--prec-sqrt", "-prec-sqrt", "--prec-div", "-prec-div", "--fmad", "-fmad",
      "--modify-stack-limit", "-modify-stack-limit", "--jump-table-density", "-jtd",
      "--frandom-seed", "-frandom-seed", "--std", "-std", "--builtin-move-forward",
      "-builtin-move-forward", "--builtin-initializer-list", "--create-pch", "-create-pch",
      "--use-pch", "-use-pch", "--pch-dir", "-pch-dir", "--pch-verbose", "-pch-verbose",
      "--pch-messages", "-pch-messages", "--instantiate-templates-in-pch", "-instantiate-templates-in-pch",
      "--optimization-info", "-opt-info", "--diag-error", "-diag-error", "--diag-suppress",
      "-diag-suppress", "--diag-warn", "-diag-warn", "--brief-diagnostics", "-brief-diag", "--time",
      "-time", "--split-compile", "-split-compile", "--fdevice-time-trace", "-fdevice-time-trace"};
  return std::find(std::begin(kNames), std::end(kNames), o) != std::end(kNames);
}

// One user option after grouping: kind, canonical token(s), and the macro name of -D/-U.
struct Unit {
  enum Kind { kMacro, kIncludeDir, kPreInclude, kFlag, kOther } kind = kOther;
  std::vector<std::string> tokens;
  std::string macro;
};

// "-D", "-U", "-I" options: the argument glued ("-DX"), after '=' ("-D=X"), after blanks
// ("-D X") or in the next token ("-D", "X"). Returns false when `o` is no such option.
bool short_with_argument(const std::vector<std::string>& in, size_t& i, const std::string& o, char letter,
                         const char* long_name, std::string& value) {
  const std::string short_name = std::string("-") + letter;
  const std::string long_eq = std::string(long_name) + "=";
  if (o == short_name || o == long_name) {
    if (i + 1 >= in.size()) throw InvalidArgument(fmt::format("option '{}' needs an argument", o));
    value = trim(in[++i]);
  } else if (o.rfind(long_eq, 0) == 0) {
    value = trim(o.substr(long_eq.size()));
  } else if (o.rfind(short_name, 0) == 0) {
    std::string_view rest = std::string_view(o).substr(2);
    if (!rest.empty() && rest.front() == '=') rest.remove_prefix(1);
    value = trim(rest);
  } else {
    return false;
  }
  if (value.empty()) throw InvalidArgument(fmt::format("option '{}' needs an argument", o));
  return true;
}

std::string macro_name(std::string_view def) {
  const size_t end = def.find_first_of("=( \t");
  return std::string(def.substr(0, end));
}

}  // namespace

namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

// Whether deleting the blanks between `a` and `b` could change how the text splits into tokens.
// Brackets, parentheses, braces, commas and semicolons never merge with a neighbour; two word
// characters do ("unsigned long"); '.' joins digits ("1 .5"); any two other punctuation
// characters might ("- -", "< :", "> >=") and keep their space.
bool may_merge(char a, char b) {
  auto separator = [](char c) { return std::strchr("()[]{},;", c) != nullptr; };
  if (separator(a) || separator(b)) return false;
  const bool wa = word_char(a) || a == '.', wb = word_char(b) || b == '.';
  if (wa && wb) return true;
  if (wa || wb) {
    // A pp-number absorbs a following sign after e/E/p/P ("0xe +1" is not "0xe+1").
    return (b == '+' || b == '-') && (a == 'e' || a == 'E' || a == 'p' || a == 'P');
  }
  return true;
}

}  // namespace

std::string canonical_name_expression(std::string_view expr) {
  std::string trimmed = trim(expr);
  if (trimmed.find_first_of("\"'\\") != std::string::npos || trimmed.find("/*") != std::string::npos ||
      trimmed.find("//") != std::string::npos) {
    return trimmed;
  }
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  std::string out;
  out.reserve(trimmed.size());
  for (size_t i = 0; i < trimmed.size();) {
    if (!blank(trimmed[i])) {
      out += trimmed[i++];
      continue;
    }
    while (i < trimmed.size() && blank(trimmed[i])) ++i;
    // Trimmed: a blank run has a character on each side.
    if (may_merge(out.back(), trimmed[i])) out += ' ';
  }
  return out;
}

Options normalize_options(const Target& target, const std::vector<std::string>& extra) {
  Options out;
  out.list = {
      "-std=c++17",
      fmt::format("-arch={}", target.str()),
      // Device code only; no host-side stubs to parse.
      "-default-device",
      "-DKJIT_NVRTC=1",
  };
  // ptxas' resource report (registers, spills, smem) goes into the log; only cubins run ptxas.
  if (!target.ptx) out.list.push_back("--ptxas-options=-v");

  std::vector<std::string> in;
  for (const std::string& o : extra) in.push_back(trim(o));
  std::vector<Unit> units;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& o = in[i];
    if (o.empty()) continue;
    if (o.rfind("-arch", 0) == 0 || o.rfind("--gpu-architecture", 0) == 0) {
      throw InvalidArgument(fmt::format("option '{}': the target comes from the device or --arch, not from options", o));
    }
    Unit u;
    std::string value;
    if (short_with_argument(in, i, o, 'D', "--define-macro", value)) {
      u.kind = Unit::kMacro;
      u.macro = macro_name(value);
      u.tokens = {"-D" + value};
    } else if (short_with_argument(in, i, o, 'U', "--undefine-macro", value)) {
      u.kind = Unit::kMacro;
      u.macro = macro_name(value);
      u.tokens = {"-U" + value};
    } else if (short_with_argument(in, i, o, 'I', "--include-path", value)) {
      u.kind = Unit::kIncludeDir;
      u.tokens = {"-I" + value};
      out.include_dirs.push_back(value);
    } else if (o == "-include" || o == "--pre-include" || o.rfind("-include=", 0) == 0 ||
               o.rfind("--pre-include=", 0) == 0) {
      const size_t eq = o.find('=');
      if (eq != std::string::npos) {
        value = trim(std::string_view(o).substr(eq + 1));
      } else if (i + 1 < in.size()) {
        value = in[++i];
      }
      if (value.empty()) throw InvalidArgument(fmt::format("option '{}' needs an argument", o));
      u.kind = Unit::kPreInclude;
      u.tokens = {"--pre-include=" + value};
      out.pre_includes.push_back(value);
    } else if (takes_argument(o)) {
      if (i + 1 >= in.size()) throw InvalidArgument(fmt::format("option '{}' needs an argument", o));
      u.tokens = {o, in[++i]};
    } else {
      if (o == "-no-source-include" || o == "--no-source-include") out.no_source_include = true;
      u.kind = o.front() == '-' && o.find('=') == std::string::npos ? Unit::kFlag : Unit::kOther;
      u.tokens = {o};
    }
    units.push_back(std::move(u));
  }

  // Runs of -D/-U: stable sort by macro name, then drop an option equal to its predecessor.
  for (size_t i = 0; i < units.size();) {
    size_t j = i;
    while (j < units.size() && units[j].kind == Unit::kMacro) ++j;
    if (j > i) {
      std::stable_sort(units.begin() + static_cast<std::ptrdiff_t>(i), units.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const Unit& a, const Unit& b) { return a.macro < b.macro; });
      i = j;
    } else {
      ++i;
    }
  }
  std::vector<std::string> flags(out.list.begin(), out.list.end());
  const Unit* previous = nullptr;
  for (const Unit& u : units) {
    if (u.kind == Unit::kMacro && previous && previous->kind == Unit::kMacro && previous->tokens == u.tokens) continue;
    if (u.kind == Unit::kFlag) {
      if (std::find(flags.begin(), flags.end(), u.tokens[0]) != flags.end()) continue;
      flags.push_back(u.tokens[0]);
    }
    out.list.insert(out.list.end(), u.tokens.begin(), u.tokens.end());
    previous = &u;
  }
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
