#include "runtime/kernel_sources.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

namespace kjit::detail {

struct EmbeddedSource {
  const char* path;
  const unsigned char* data;
  size_t size;
};
// Generated at build time by cmake/embed_kernel_sources.cmake; ends with a null path.
extern const EmbeddedSource kEmbeddedSources[];

KernelSources::KernelSources(std::string live_dir) : live_dir_(std::move(live_dir)) {}

std::optional<std::string> KernelSources::read(std::string_view path) const {
  if (!live_dir_.empty()) {
    // Reject paths that climb out of the folder: a kernel source names files inside it.
    if (path.find("..") != std::string_view::npos || (!path.empty() && path.front() == '/')) return std::nullopt;
    std::ifstream in(live_dir_ + "/" + std::string(path), std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  for (const EmbeddedSource* e = kEmbeddedSources; e->path; ++e) {
    if (path == e->path) return std::string(reinterpret_cast<const char*>(e->data), e->size);
  }
  return std::nullopt;
}

std::vector<std::string> KernelSources::list() const {
  std::vector<std::string> out;
  if (!live_dir_.empty()) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(live_dir_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file()) out.push_back(std::filesystem::relative(it->path(), live_dir_).string());
    }
  } else {
    for (const EmbeddedSource* e = kEmbeddedSources; e->path; ++e) out.emplace_back(e->path);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// One include directive (or __has_include probe) found by the textual scan.
struct Include {
  std::string name;
  bool quoted = false;
  bool next = false;  // #include_next / __has_include_next: every hit counts
};

std::string_view skip_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// Reads `<name>` or `"name"` at the start of `s` (after blanks).
bool header_name(std::string_view s, Include& out) {
  s = skip_space(s);
  if (s.empty() || (s[0] != '<' && s[0] != '"')) return false;
  const char close = s[0] == '<' ? '>' : '"';
  const size_t end = s.find(close, 1);
  if (end == std::string_view::npos || end == 1) return false;
  out.name = std::string(s.substr(1, end - 1));
  out.quoted = close == '"';
  return true;
}

// The includes of `text`, in order. Only preprocessing lines are looked at; conditionals are
// ignored on purpose (see kernel_sources.hpp).
std::vector<Include> scan_includes(std::string_view text) {
  std::vector<Include> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = skip_space(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line[0] != '#') continue;
    line = skip_space(line.substr(1));
    Include inc;
    if (line.substr(0, 12) == "include_next") {
      inc.next = true;
      if (header_name(line.substr(12), inc)) out.push_back(std::move(inc));
    } else if (line.substr(0, 7) == "include") {
      if (header_name(line.substr(7), inc)) out.push_back(std::move(inc));
    } else {
      // #if / #elif __has_include(<x>): whether x exists changes the compile.
      for (size_t at = line.find("__has_include"); at != std::string_view::npos;
           at = line.find("__has_include", at + 13)) {
        std::string_view rest = line.substr(at + 13);
        Include probe;
        if (rest.substr(0, 5) == "_next") {
          probe.next = true;
          rest.remove_prefix(5);
        }
        rest = skip_space(rest);
        if (!rest.empty() && rest[0] == '(' && header_name(rest.substr(1), probe)) out.push_back(std::move(probe));
      }
    }
  }
  return out;
}

std::string digest(std::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "dir" + "/" + name the way a search path entry forms it; "" and "." mean the working directory.
std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty() || dir == ".") return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

std::string parent_dir(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

// Toolkit files, read once per process: whether a path exists, and a file's digest and includes.
class ToolkitMemo {
 public:
  struct File {
    std::string xxh3;
    std::vector<Include> includes;
  };

  bool exists(const std::string& path) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = exists_.find(path); it != exists_.end()) return it->second;
    }
    const bool found = is_regular_file(path);
    std::lock_guard lock(mutex_);
    return exists_.emplace(path, found).first->second;
  }

  // nullptr when the file cannot be read.
  const File* file(const std::string& path) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = files_.find(path); it != files_.end()) return it->second.get();
    }
    auto text = read_file(path);
    if (!text) return nullptr;
    auto f = std::make_unique<File>(File{digest(*text), scan_includes(*text)});
    std::lock_guard lock(mutex_);
    return files_.emplace(path, std::move(f)).first->second.get();  // a racing reader's copy is equal
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, bool> exists_;
  std::unordered_map<std::string, std::unique_ptr<File>> files_;
};

ToolkitMemo& toolkit_memo() {
  static ToolkitMemo* memo = new ToolkitMemo;  // never destroyed: used until process exit
  return *memo;
}

// Walks the include closure in NVRTC's search order (kernel_sources.hpp says which).
class ClosureWalk {
 public:
  ClosureWalk(const ProgramSpec& spec, const KernelSources& sources, const IncludePath& path, SourceClosure& out)
      : spec_(spec), sources_(sources), path_(path), out_(out) {}

  // Where a file lives, for quoted includes from it ("." = the working directory).
  struct From {
    std::string dir;
  };

  void main_source() {
    const From from{parent_dir(spec_.source_name)};
    for (const Include& inc : scan_includes(out_.text)) resolve(inc, from);
    for (const std::string& name : path_.pre_includes) pre_include(name);
  }

 private:
  void pre_include(const std::string& name) {
    if (memory(name)) return;
    // A -include file is looked for in the working directory, then on the -I path.
    std::vector<std::string> dirs{"."};
    search(Include{name, false, false}, dirs);
  }

  void resolve(const Include& inc, const From& from) {
    if (memory(inc.name)) return;
    std::vector<std::string> dirs;
    if (inc.quoted && path_.source_dirs) dirs.push_back(from.dir);
    search(inc, dirs);
  }

  // Steps 2-4 of the search, `dirs` being step 2.
  void search(const Include& inc, std::vector<std::string>& dirs) {
    if (!inc.name.empty() && inc.name.front() == '/') {
      if (exists(inc.name)) visit(inc.name);
      return;
    }
    dirs.insert(dirs.end(), path_.user_dirs.begin(), path_.user_dirs.end());
    dirs.insert(dirs.end(), path_.toolkit_dirs.begin(), path_.toolkit_dirs.end());
    for (const std::string& dir : dirs) {
      std::string candidate = join(dir, inc.name);
      if (!exists(candidate)) continue;
      visit(candidate);
      if (!inc.next) return;
    }
  }

  // An in-memory header: ProgramSpec::headers, then the kernel sources.
  bool memory(const std::string& name) {
    if (in_memory_.count(name)) return true;
    std::optional<std::string> text;
    for (const auto& [n, t] : spec_.headers) {
      if (n == name) {
        text = t;
        break;
      }
    }
    if (!text) text = sources_.read(name);
    if (!text) return false;
    std::vector<Include> includes = scan_includes(*text);
    in_memory_.emplace(name, std::move(*text));
    const From from{parent_dir(name)};
    for (const Include& inc : includes) resolve(inc, from);
    return true;
  }

  // The toolkit directory `path` lies in, or nullptr.
  const std::string* toolkit_dir(const std::string& path) const {
    for (const std::string& dir : path_.toolkit_dirs) {
      if (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/') return &dir;
    }
    return nullptr;
  }

  bool exists(const std::string& path) {
    return toolkit_dir(path) ? toolkit_memo().exists(path) : is_regular_file(path);
  }

  void visit(const std::string& path) {
    if (!visited_.insert(path).second) return;
    const From from{parent_dir(path)};
    if (const std::string* dir = toolkit_dir(path)) {
      const ToolkitMemo::File* f = toolkit_memo().file(path);
      if (!f) return;
      // Below the first toolkit dir that holds it, so the install path does not enter the key.
      files_.emplace("<cuda>/" + path.substr(dir->size() + 1), f->xxh3);
      for (const Include& inc : f->includes) resolve(inc, from);
      return;
    }
    auto text = read_file(path);
    if (!text) return;  // unreadable: NVRTC will fail on it too, and say so
    files_.emplace(path, digest(*text));
    for (const Include& inc : scan_includes(*text)) resolve(inc, from);
  }

 public:
  void finish() {
    out_.headers.assign(in_memory_.begin(), in_memory_.end());
    out_.files.clear();
    for (auto& [p, d] : files_) out_.files.push_back({p, d});
  }

 private:
  const ProgramSpec& spec_;
  const KernelSources& sources_;
  const IncludePath& path_;
  SourceClosure& out_;
  std::map<std::string, std::string> in_memory_;
  std::map<std::string, std::string> files_;
  std::set<std::string> visited_;
};

}  // namespace

SourceClosure resolve_sources(const ProgramSpec& spec, const KernelSources& sources, const IncludePath& path) {
  SourceClosure c;
  c.name = spec.source_name;
  if (!spec.source_text.empty()) {
    c.text = spec.source_text;
  } else if (auto text = sources.read(spec.source_name)) {
    c.text = std::move(*text);
  } else {
    throw InvalidArgument(fmt::format("kernel source '{}' not found in {}", spec.source_name,
                                      sources.live_dir().empty() ? std::string("the embedded kernel sources")
                                                                 : "KJIT_KERNEL_DIR=" + sources.live_dir()));
  }
  ClosureWalk walk(spec, sources, path, c);
  walk.main_source();
  walk.finish();
  return c;
}

}  // namespace kjit::detail
