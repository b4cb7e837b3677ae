// The warm-up manifest line format (see manifest.hpp).
#include "cache/manifest.hpp"

#include "cache/file_util.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kjit::cache {
namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

/// Fills `*out` from string field `name`; false (and `*why`) when it is missing or not a string.
bool string_field(const nlohmann::json& j, const char* name, std::string* out, std::string* why) {
  const nlohmann::json* f = field(j, name);
  if (f == nullptr || !f->is_string()) {
    *why = std::string("no \"") + name + "\" string";
    return false;
  }
  *out = f->get<std::string>();
  return true;
}

bool is_hex32(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

/// Parses one line; `*torn` is set when it is not JSON because it stops early: the parser ran
/// out of input, or the line ends the file without its newline (`unended`), as a write cut short
/// leaves a line.
std::optional<ManifestEntry> parse_line(std::string_view text, bool unended, std::string* why, bool* torn) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    *torn = unended || e.byte == text.size() + 1;
    *why = *torn ? "a torn line: it stops mid-way (a write cut short, e.g. on a full disk)" : "not JSON";
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {  // a number beyond double
    *why = "not JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    *why = "not a JSON object";
    return std::nullopt;
  }
  ManifestEntry e;
  if (const nlohmann::json* user = field(j, "user"); user != nullptr) {
    if (!user->is_boolean()) {
      *why = "\"user\" is not true or false";
      return std::nullopt;
    }
    e.user = user->get<bool>();
  }
  if (!string_field(j, "family", &e.family, why) || !string_field(j, "target", &e.target, why)) return std::nullopt;
  if (e.family.empty()) {
    *why = "\"family\" is empty";
    return std::nullopt;
  }
  if (e.user) {
    if (!string_field(j, "key", &e.key, why)) return std::nullopt;
    if (!is_hex32(e.key)) {
      *why = "\"key\" is not 32 lowercase hex digits";
      return std::nullopt;
    }
    // Descriptions only: absent is fine, another type is not.
    for (auto [name, out] : {std::pair{"template_args", &e.template_args}, std::pair{"source_name", &e.source_name}}) {
      const nlohmann::json* f = field(j, name);
      if (f == nullptr) continue;
      if (!f->is_string()) {
        *why = std::string("\"") + name + "\" is not a string";
        return std::nullopt;
      }
      *out = f->get<std::string>();
    }
    return e;
  }
  const nlohmann::json* params = field(j, "params");
  if (params == nullptr || !params->is_object()) {
    *why = "no \"params\" object";
    return std::nullopt;
  }
  for (auto it = params->begin(); it != params->end(); ++it) {
    if (!it.value().is_string()) {
      *why = "parameter \"" + it.key() + "\" is not a string";
      return std::nullopt;
    }
    e.params.emplace(it.key(), it.value().get<std::string>());
  }
  return e;
}

}  // namespace

std::optional<std::map<std::string, std::string>> params_of_template_args(std::string_view template_args) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < template_args.size()) {
    size_t end = template_args.find(' ', pos);
    if (end == std::string_view::npos) end = template_args.size();
    const std::string_view word = template_args.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    const size_t eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0 ||
        !out.emplace(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1))).second) {
      return std::nullopt;
    }
  }
  return out;
}

std::string format_manifest_line(const ManifestEntry& e) {
  // ordered_json keeps the insertion order: the fixed field order that makes equal entries
  // equal lines.
  nlohmann::ordered_json j;
  if (e.user) {
    j["user"] = true;
    j["family"] = e.family;
    j["template_args"] = e.template_args;
    j["source_name"] = e.source_name;
    j["target"] = e.target;
    j["key"] = e.key;
  } else {
    j["family"] = e.family;
    nlohmann::ordered_json params = nlohmann::ordered_json::object();
    for (const auto& [name, value] : e.params) params[name] = value;  // std::map: sorted by name
    j["params"] = std::move(params);
    j["target"] = e.target;
  }
  // Names a host application chose need not be UTF-8: replace bad bytes rather than throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::vector<ManifestLine> parse_manifest(std::string_view text) {
  std::vector<ManifestLine> out;
  size_t number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool unended = end == std::string_view::npos;
    if (unended) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    ManifestLine l;
    l.line = number;
    l.entry = parse_line(line, unended, &l.error, &l.torn);
    if (l.entry) l.error.clear();
    out.push_back(std::move(l));
  }
  return out;
}

int append_manifest_line(const std::string& path, std::string_view line) {
  int fd = -1;
  // Read access too: the last byte tells whether a torn line precedes this one (a file we may
  // only write is appended to without that look).
  int err = detail::open_regular(path, O_RDWR | O_APPEND | O_CREAT, &fd);
  if (err == EACCES) err = detail::open_regular(path, O_WRONLY | O_APPEND | O_CREAT, &fd);
  if (err != 0) return err;
  bool locked = true;
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      locked = false;  // no flock here (some network filesystems): O_APPEND alone
      break;
    }
  }
  struct stat st;
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  std::string joined;
  std::string_view out = line;
  char last = '\n';
  if (before > 0 && ::pread(fd, &last, 1, before - 1) == 1 && last != '\n') {
    // A torn line ends the file: start on a line of our own so the fragment cannot swallow it.
    joined.reserve(line.size() + 1);
    joined += '\n';
    joined += line;
    out = joined;
  }
  size_t done = 0;
  while (done < out.size()) {
    // One write() normally; the rest of a short one is written while the lock is still held.
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err != 0 && done > 0 && locked && before >= 0) {
    // Whole or not at all: cut the part that was written (nobody else appended meanwhile: we
    // hold the lock). Without the lock a fragment may stay; readers skip it.
    while (::ftruncate(fd, before) != 0 && errno == EINTR) {
    }
  }
  if (::close(fd) != 0 && err == 0) err = errno;  // releases the lock
  return err;
}

}  // namespace kjit::cache
