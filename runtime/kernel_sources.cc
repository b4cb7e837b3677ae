#include "runtime/kernel_sources.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

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

// The targets of `#include "..."` lines. Conditional compilation is ignored on purpose: a header
// behind a false #if is hashed too, which can only make the key more specific.
std::vector<std::string> quoted_includes(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string_view::npos || line.substr(i, 7) != "include") continue;
    size_t open = line.find('"', i + 7);
    if (open == std::string_view::npos) continue;
    size_t close = line.find('"', open + 1);
    if (close == std::string_view::npos) continue;
    out.emplace_back(line.substr(open + 1, close - open - 1));
  }
  return out;
}

}  // namespace

SourceClosure resolve_sources(const ProgramSpec& spec, const KernelSources& sources) {
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
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    for (const auto& [n, t] : spec.headers) {
      if (n == name) return t;
    }
    return sources.read(name);
  };
  std::map<std::string, std::string> found;
  std::vector<std::string> pending = quoted_includes(c.text);
  while (!pending.empty()) {
    std::string name = std::move(pending.back());
    pending.pop_back();
    if (found.count(name)) continue;
    auto text = lookup(name);
    if (!text) continue;
    for (auto& inc : quoted_includes(*text)) pending.push_back(std::move(inc));
    found.emplace(std::move(name), std::move(*text));
  }
  c.headers.assign(found.begin(), found.end());
  return c;
}

}  // namespace kjit::detail
