// Family points vs host kernels, manifest lines and the recorder (see record.hpp).
#include "runtime/record.hpp"

#include <kjit/error.hpp>
#include <kjit/families.hpp>

#include "cache/file_util.hpp"
#include "cache/warn.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>

namespace kjit::detail {
namespace {

bool is_family_point(const ProgramSpec& spec, ParamMap* params) {
  if (!spec.source_text.empty() || !spec.headers.empty() || !spec.options.empty()) return false;
  std::optional<ParamMap> split = cache::params_of_template_args(spec.template_args);
  if (!split) return false;
  *params = std::move(*split);
  try {
    const Family& f = family(spec.family);
    const ProgramSpec made = f.spec(*params);
    return made.source_name == spec.source_name && made.name_expressions == spec.name_expressions &&
           made.std_headers == spec.std_headers;
  } catch (const Error&) {
    return false;  // not a shipped family, or not one of its points
  }
}

}  // namespace

cache::ManifestEntry manifest_entry(const ProgramSpec& spec, const Target& target, const std::string& key_hex) {
  cache::ManifestEntry e;
  e.family = spec.family;
  e.target = target.str();
  ParamMap params;
  if (is_family_point(spec, &params)) {
    e.params = std::move(params);
  } else {
    e.user = true;
    e.template_args = spec.template_args;
    e.source_name = spec.source_name;
    e.key = key_hex;
    if (e.family.empty()) e.family = "(unnamed)";
  }
  return e;
}

std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-.,/:=+@%", c) != nullptr;
  });
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string compile_command(const cache::ManifestEntry& e, const std::string& cache_dir) {
  if (e.user) return {};
  std::string out = "KJIT_CACHE_DIR=" + shell_word(cache_dir) + " KJIT_JIT=on kjit compile " + shell_word(e.family);
  for (const auto& [name, value] : e.params) out += " " + shell_word(name + "=" + value);
  out += " --arch " + shell_word(e.target);
  if (e.target.rfind("compute_", 0) == 0) out += " --emit ptx";
  return out;
}

Recorder& Recorder::for_path(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Recorder>>* recorders = new std::map<std::string, std::unique_ptr<Recorder>>;
  std::lock_guard lock(mutex);
  std::unique_ptr<Recorder>& r = (*recorders)[path];
  if (!r) r.reset(new Recorder(path));
  return *r;
}

Recorder::Recorder(std::string path) : path_(std::move(path)) {}

void Recorder::record(const cache::ManifestEntry& entry) noexcept {
  try {
    const std::string line = cache::format_manifest_line(entry);
    std::lock_guard lock(mutex_);
    if (!loaded_) {
      // A service restarted with the same KJIT_RECORD should not grow the file by its whole
      // working set each time: what is there already counts as written.
      loaded_ = true;
      std::string text;
      if (cache::read_file(path_, 64ull << 20, cache::kReadPlain, &text) == 0) {
        for (const cache::ManifestLine& l : cache::parse_manifest(text)) {
          if (l.entry) written_.insert(cache::format_manifest_line(*l.entry));
        }
      }
    }
    if (!written_.insert(line).second) return;
    if (const int err = cache::append_manifest_line(path_, line); err != 0) {
      written_.erase(line);  // not in the file: a later use tries again
      // A FIFO, socket or device was warned about where it was refused (open_regular).
      if (!warned_ && err != cache::kNotRegularFile) {
        warn(fmt::format("cannot record into the manifest {} (KJIT_RECORD): {}; the line was not recorded and the "
                         "file is left as it was",
                         path_, cache::errno_text(err)));
      }
      warned_ = true;
    }
  } catch (...) {
  }
}

}  // namespace kjit::detail
