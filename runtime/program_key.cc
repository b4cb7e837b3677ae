#include "runtime/program_key.hpp"

#include <kjit/error.hpp>

#include "runtime/key_memo.hpp"
#include "runtime/memo_file.hpp"

#include <fmt/format.h>

#include <utility>

namespace kjit::detail {

ProgramKeys::ProgramKeys(std::string kernel_dir, std::string cuda_home, const cache::DiskCache& disk)
    : sources_(std::move(kernel_dir)), cuda_home_(std::move(cuda_home)), nvrtc_version_(detail::nvrtc_version()),
      disk_(disk) {}

const CudaHeaders& ProgramKeys::headers() {
  std::call_once(headers_once_, [&] { cuda_ = find_cuda_headers(cuda_home_); });
  return cuda_;
}

PreparedProgram ProgramKeys::prepare(const ProgramSpec& spec, const Target& target, bool use_memo) {
  if (spec.name_expressions.empty()) {
    throw InvalidArgument(fmt::format("program '{}' lists no name expressions (kernels to emit)", spec.source_name));
  }
  Options options = normalize_options(target, spec.options);
  IncludePath path;
  path.user_dirs = options.include_dirs;
  path.pre_includes = options.pre_includes;
  path.source_dirs = !options.no_source_include;
  path.toolkit_dirs = headers().include_dirs;
  // The toolkit memo lives with the cache it speeds up, and shares its writability.
  if (disk_.enabled()) path.toolkit_memo_dir = disk_.root() + "/toolkit";
  path.toolkit_memo_writable = disk_.writable();
  PreparedProgram p;
  p.options = std::move(options.list);
  for (const auto& e : spec.name_expressions) p.names.push_back(canonical_name_expression(e));

  const bool memo = disk_.enabled() && path.user_dirs.empty() && path.pre_includes.empty() && !sources_.digest().empty();
  cache::Key id;
  if (memo) {
    id = key_memo_id(spec, p, target, path);
    if (std::optional<cache::Key> k = use_memo ? recall(id) : std::nullopt) {
      p.key = *k;
      return p;
    }
  }
  KeyChecks checks;
  p.sources = resolve_sources(spec, sources_, path, memo ? &checks : nullptr);
  p.resolved = true;
  cache::KeyBuilder b;
  b.add("source.name", p.sources.name).add("source.text", p.sources.text);
  b.add("headers", static_cast<int64_t>(p.sources.headers.size()));
  for (const auto& [name, text] : p.sources.headers) b.add("header.name", name).add("header.text", text);
  b.add("files", static_cast<int64_t>(p.sources.files.size()));
  for (const auto& f : p.sources.files) b.add("file.path", f.path).add("file.xxh3", f.xxh3);
  add_spec_fields(b, p, target);
  p.key = b.finish();
  if (memo && checks.usable) {
    if (disk_.writable()) remember_key(disk_.root() + "/keys", id, p.key, checks);
    std::lock_guard lock(memo_mutex_);
    known_keys_[id] = p.key;
  }
  return p;
}

void ProgramKeys::complete(PreparedProgram& p, const ProgramSpec& spec, const Target& target) {
  if (!p.resolved) p = prepare(spec, target, /*use_memo=*/false);
}

std::vector<cache::InputDigest> ProgramKeys::input_digests(const SourceClosure& closure) {
  std::vector<cache::InputDigest> out;
  out.push_back({"source", closure.name, cache::digest_hex(closure.text)});
  for (const auto& [name, text] : closure.headers) out.push_back({"header", name, cache::digest_hex(text)});
  for (const auto& f : closure.files) out.push_back({"file", f.path, f.xxh3});
  return out;
}

KeyInputs ProgramKeys::key_inputs(const ProgramSpec& spec, const Target& target) {
  const PreparedProgram p = prepare(spec, target, /*use_memo=*/false);
  KeyInputs k;
  k.key = p.key.hex();
  k.format_version = cache::kFormatVersion;
  for (cache::InputDigest& d : input_digests(p.sources)) {
    k.files.push_back({std::move(d.kind), std::move(d.name), std::move(d.digest)});
  }
  k.name_expressions = p.names;
  k.target = target.str();
  k.nvrtc_version = nvrtc_version_;
  k.cuda_headers_version = headers().version;
  k.options = p.options;
  return k;
}

void ProgramKeys::add_spec_fields(cache::KeyBuilder& b, const PreparedProgram& p, const Target& target) {
  b.add("name_expressions", static_cast<int64_t>(p.names.size()));
  for (const auto& e : p.names) b.add("name_expression", e);
  b.add("target", target.str());
  b.add("nvrtc", nvrtc_version_);
  b.add("cuda_headers", headers().version);
  b.add("options", static_cast<int64_t>(p.options.size()));
  for (const auto& o : p.options) b.add("option", o);
}

cache::Key ProgramKeys::key_memo_id(const ProgramSpec& spec, const PreparedProgram& p, const Target& target,
                                    const IncludePath& path) {
  cache::KeyBuilder b;
  b.add("memo.library", memo_library()).add("memo.embedded_sources", sources_.digest());
  b.add("source.name", spec.source_name).add("source.text", spec.source_text);
  b.add("headers", static_cast<int64_t>(spec.headers.size()));
  for (const auto& [name, text] : spec.headers) b.add("header.name", name).add("header.text", text);
  b.add("source_dirs", path.source_dirs ? 1 : 0);
  b.add("std_headers", spec.std_headers ? 1 : 0);
  b.add("toolkit_dirs", static_cast<int64_t>(path.toolkit_dirs.size()));
  for (const auto& d : path.toolkit_dirs) b.add("toolkit_dir", d);
  add_spec_fields(b, p, target);
  return b.finish();
}

// The toolkit does not change under a running process (as the toolkit memo assumes), so this
// process's memo answers first.
std::optional<cache::Key> ProgramKeys::recall(const cache::Key& id) {
  {
    std::lock_guard lock(memo_mutex_);
    if (auto it = known_keys_.find(id); it != known_keys_.end()) return it->second;
  }
  std::optional<cache::Key> k = recall_key(disk_.root() + "/keys", id);
  if (k) {
    std::lock_guard lock(memo_mutex_);
    known_keys_[id] = *k;
  }
  return k;
}

}  // namespace kjit::detail
