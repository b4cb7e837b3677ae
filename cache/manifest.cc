// The warm-up manifest line format (see manifest.hpp).
#include "cache/manifest.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
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

std::optional<ManifestEntry> parse_line(std::string_view text, std::string* why) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
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
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    ManifestLine l;
    l.line = number;
    l.entry = parse_line(line, &l.error);
    if (l.entry) l.error.clear();
    out.push_back(std::move(l));
  }
  return out;
}

int append_manifest_line(const std::string& path, std::string_view line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) break;  // no flock here (some network filesystems): O_APPEND alone
  }
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;  // releases the lock
  return err;
}

}  // namespace kjit::cache
