// `kjit cache explain FAMILY key=value… [--arch T]` and `kjit cache explain --key KEY`: every
// input of a key (Runtime::key_inputs) and whether the cache holds it; for a miss, the inputs
// that differ from the nearest entry of the family, the one with the fewest differences. With
// --key: what an entry records, and whether the same point still has that key here. Both: the
// fallbacks that served the key while it was not built under KJIT_JIT=async (the fallback log).
#include "tools/cli/common.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/cache.hpp"
#include "runtime/internal/compiler.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kjit::cli {
namespace {

using nlohmann::json;

/// One side of a comparison: what a key needs now, or what an entry records. Only the params
/// are not a key input; they are what an operator recognizes an entry by.
struct Inputs {
  std::string params, target, nvrtc_version, cuda_headers_version;
  std::vector<std::string> name_expressions, options;
  std::map<std::pair<std::string, std::string>, std::string> files;  ///< (kind, name) → digest
  bool files_known = true;  ///< false for an entry written before entries recorded their files
};

Inputs from_request(const KeyInputs& k, const std::string& params) {
  Inputs in{params, k.target, k.nvrtc_version, k.cuda_headers_version, k.name_expressions, k.options, {}, true};
  for (const KeyInputFile& f : k.files) in.files[{f.kind, f.name}] = f.digest;
  return in;
}

Inputs from_entry(const cache::EntryMeta& m) {
  Inputs in{m.template_args, m.target, m.nvrtc_version, m.cuda_headers_version, {}, m.options, {}, !m.inputs.empty()};
  for (const cache::KernelMeta& k : m.kernels) in.name_expressions.push_back(detail::canonical_name_expression(k.name_expression));
  for (const cache::InputDigest& d : m.inputs) in.files[{d.kind, d.name}] = d.digest;
  return in;
}

/// One input whose value differs; "" on a side means that side lacks it.
struct Difference {
  std::string input, entry, now;
};

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

std::vector<Difference> differences(const Inputs& entry, const Inputs& now) {
  std::vector<Difference> out;
  auto field = [&](const char* name, const std::string& a, const std::string& b) {
    if (a != b) out.push_back({name, a, b});
  };
  field("params", entry.params, now.params);
  field("target", entry.target, now.target);
  field("nvrtc_version", entry.nvrtc_version, now.nvrtc_version);
  field("cuda_headers_version", entry.cuda_headers_version, now.cuda_headers_version);
  field("name_expressions", joined(entry.name_expressions), joined(now.name_expressions));
  field("options", joined(entry.options), joined(now.options));
  if (!entry.files_known) return out;
  for (const auto& [id, digest] : now.files) {
    auto it = entry.files.find(id);
    const std::string there = it == entry.files.end() ? "" : it->second;
    if (there != digest) out.push_back({id.first + " " + id.second, there, digest});
  }
  for (const auto& [id, digest] : entry.files) {
    if (!now.files.count(id)) out.push_back({id.first + " " + id.second, digest, ""});
  }
  return out;
}

json inputs_json(const KeyInputs& k) {
  json files = json::array();
  for (const KeyInputFile& f : k.files) files.push_back({{"kind", f.kind}, {"name", f.name}, {"digest", f.digest}});
  return {{"format_version", k.format_version}, {"target", k.target},
          {"nvrtc_version", k.nvrtc_version}, {"cuda_headers_version", k.cuda_headers_version},
          {"name_expressions", k.name_expressions}, {"options", k.options}, {"files", files}};
}

json differences_json(const std::vector<Difference>& diffs) {
  json out = json::array();
  for (const Difference& d : diffs) out.push_back({{"input", d.input}, {"entry", d.entry}, {"now", d.now}});
  return out;
}

void print_inputs(const KeyInputs& k) {
  fmt::print("format version   {}\ntarget           {}\nnvrtc            {}\ncuda headers     {}\n", k.format_version,
             k.target, k.nvrtc_version, k.cuda_headers_version);
  fmt::print("name expressions\n");
  for (const std::string& e : k.name_expressions) fmt::print("  {}\n", e);
  fmt::print("options (in NVRTC's order)\n");
  for (const std::string& o : k.options) fmt::print("  {}\n", o);
  fmt::print("files ({})\n", k.files.size());
  for (const KeyInputFile& f : k.files) fmt::print("  {:<6}  {}  {}\n", f.kind, f.digest, f.name);
}

void print_differences(const std::vector<Difference>& diffs, bool files_known) {
  for (const Difference& d : diffs) {
    fmt::print("  {}\n    entry: {}\n    now:   {}\n", d.input, d.entry.empty() ? "(absent)" : d.entry,
               d.now.empty() ? "(absent)" : d.now);
  }
  if (!files_known) fmt::print("  (the entry records no file digests: it predates them; files not compared)\n");
}

/// What served `key` while it was not built (KJIT_JIT=async: cache/fallback_log.hpp), newest
/// first, one record per fallback.
std::vector<cache::FallbackRecord> fallbacks_of(const cache::DiskCache& cache, const cache::Key& key) {
  std::vector<cache::FallbackRecord> out;
  if (!cache.enabled()) return out;
  std::vector<cache::FallbackRecord> all = cache::read_fallbacks(cache.root(), key);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    bool seen = false;
    for (const cache::FallbackRecord& r : out) seen = seen || r.fallback == it->fallback;
    if (!seen) out.push_back(std::move(*it));
  }
  return out;
}

json fallbacks_json(const std::vector<cache::FallbackRecord>& records) {
  json out = json::array();
  for (const cache::FallbackRecord& r : records) {
    out.push_back({{"key", r.fallback.hex()}, {"family", r.family}, {"params", r.params}, {"unix", r.unix}});
  }
  return out;
}

void print_fallbacks(const std::vector<cache::FallbackRecord>& records) {
  if (records.empty()) return;
  fmt::print("served by a fallback while it was not built (KJIT_JIT=async), newest first:\n");
  for (const cache::FallbackRecord& r : records) {
    fmt::print("  {}  {} {}  (last logged {} s since the epoch)\n", r.fallback.hex(), r.family, r.params, r.unix);
  }
}

/// The entry of `family` with the fewest differences from `now` (the newest among equals).
struct Nearest {
  cache::EntryInfo entry;
  std::vector<Difference> diffs;
};

std::optional<Nearest> nearest_entry(const cache::DiskCache& cache, const std::string& family, const Inputs& now) {
  std::optional<Nearest> best;
  for (cache::EntryInfo& e : cache.list()) {
    if (!e.meta || e.meta->family != family) continue;
    std::vector<Difference> d = differences(from_entry(*e.meta), now);
    if (!best || d.size() < best->diffs.size() ||
        (d.size() == best->diffs.size() && e.meta->created_unix > best->entry.meta->created_unix)) {
      best = Nearest{std::move(e), std::move(d)};
    }
  }
  return best;
}

/// The target `kjit compile` would use for `spec` (--arch as given; else this machine's).
Target explain_target(const ProgramSpec& spec, const std::string& arch) {
  return arch.empty() ? spec.target_on(default_targets().front()) : Target::parse(arch);
}

int run_explain_point(const std::string& family_name, const std::vector<std::string>& words, const std::string& arch) {
  const Family& family = kjit::family(family_name);
  const ParamMap params = parse_params(family.name, words);
  const ProgramSpec spec = family.spec(params);
  const Target target = explain_target(spec, arch);
  const RuntimeConfig config = RuntimeConfig::from_env();
  RuntimeConfig quiet = config;
  quiet.disk_cache = false;  // the key needs no cache, and explaining must not create one
  Runtime runtime(quiet);
  const KeyInputs k = runtime.key_inputs(spec, target);
  const cache::DiskCache cache = open_cache_for_reading(config);
  cache::Key key;
  cache::Key::from_hex(k.key, &key);
  // `unusable`: why the entry at the key's path was not used (corrupt, foreign), when one is there.
  std::string unusable;
  const bool hit = cache.lookup(key, /*count_hit=*/false, &unusable).has_value();
  std::optional<Nearest> nearest;
  if (!hit && unusable.empty()) nearest = nearest_entry(cache, family.name, from_request(k, spec.template_args));
  const std::vector<cache::FallbackRecord> fallbacks = fallbacks_of(cache, key);

  if (output().json) {
    json j = {{"family", family.name}, {"params", params_json(params)}, {"target", target.str()},
              {"key", k.key},          {"hit", hit},                    {"root", cache.root()},
              {"inputs", inputs_json(k)}, {"fallbacks", fallbacks_json(fallbacks)}};
    j["unusable"] = unusable.empty() ? json(nullptr) : json(unusable);
    j["nearest"] = nullptr;
    if (nearest) {
      j["nearest"] = {{"key", nearest->entry.key.hex()}, {"params", nearest->entry.meta->template_args},
                      {"target", nearest->entry.meta->target}, {"files_compared", !nearest->entry.meta->inputs.empty()},
                      {"differences", differences_json(nearest->diffs)}};
    }
    print_json(j);
    return kExitOk;
  }
  fmt::print("{} {} for {}\nkey              {} ({} {})\n", family.name, spec.template_args, target.str(), k.key,
             hit ? "in" : unusable.empty() ? "not in" : "unusable in", cache.root());
  print_inputs(k);
  print_fallbacks(fallbacks);
  if (hit) return kExitOk;
  if (!unusable.empty()) {
    fmt::print("the entry for this key is there but cannot be used: {}; the next compile of it replaces it\n", unusable);
    return kExitOk;
  }
  if (!nearest) {
    fmt::print("no entry of {} in the cache to compare with\n", family.name);
    return kExitOk;
  }
  fmt::print("nearest entry of {}: {} ({} for {}), {} input{} differ{}:\n", family.name, nearest->entry.key.hex(),
             nearest->entry.meta->template_args, nearest->entry.meta->target, nearest->diffs.size(),
             nearest->diffs.size() == 1 ? "" : "s", nearest->diffs.size() == 1 ? "s" : "");
  print_differences(nearest->diffs, !nearest->entry.meta->inputs.empty());
  return kExitOk;
}

/// The key inputs the shipped family `meta` names would have here, or nullopt when the entry is
/// not a point of a shipped family (an application's own kernel) or its target does not parse.
std::optional<KeyInputs> current_inputs(const cache::EntryMeta& meta, std::string* why) {
  try {
    const Family& family = kjit::family(meta.family);
    const ProgramSpec spec = family.spec(parse_params(family.name, split_words(meta.template_args)));
    RuntimeConfig quiet = RuntimeConfig::from_env();
    quiet.disk_cache = false;
    Runtime runtime(quiet);
    return runtime.key_inputs(spec, Target::parse(meta.target));
  } catch (const Error& e) {
    *why = first_line(e.what());
    return std::nullopt;
  }
}

int run_explain_key(const std::string& hex) {
  cache::Key key;
  if (!cache::Key::from_hex(hex, &key)) throw InvalidArgument(fmt::format("--key {}: not 32 lower-case hex digits", hex));
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  std::string problem;
  const std::optional<cache::Entry> entry = cache.lookup(key, /*count_hit=*/false, &problem);
  if (!entry) {
    throw CacheError(fmt::format("no usable entry {} in {}{}", hex, cache.root(),
                                 problem.empty() ? "" : " (" + problem + ")"));
  }
  const cache::EntryMeta& m = entry->meta;
  std::string why;
  const std::optional<KeyInputs> now = current_inputs(m, &why);
  std::vector<Difference> diffs;
  if (now) diffs = differences(from_entry(m), from_request(*now, m.template_args));
  const std::vector<cache::FallbackRecord> fallbacks = fallbacks_of(cache, key);

  if (output().json) {
    json files = json::array();
    for (const cache::InputDigest& d : m.inputs) files.push_back({{"kind", d.kind}, {"name", d.name}, {"digest", d.digest}});
    json names = json::array();
    for (const cache::KernelMeta& k : m.kernels) names.push_back(k.name_expression);
    json j = {{"key", hex}, {"root", cache.root()}, {"family", m.family}, {"params", m.template_args},
              {"recorded", {{"target", m.target}, {"nvrtc_version", m.nvrtc_version},
                            {"cuda_headers_version", m.cuda_headers_version}, {"name_expressions", names},
                            {"options", m.options}, {"files", files}}}};
    j["current_key"] = now ? json(now->key) : json(nullptr);
    j["current"] = now ? json({{"same_key", now->key == hex}, {"differences", differences_json(diffs)}})
                       : json({{"why_not", why}});
    j["fallbacks"] = fallbacks_json(fallbacks);
    print_json(j);
    return kExitOk;
  }
  fmt::print("entry {} in {}\n{} {} for {}\nnvrtc            {}\ncuda headers     {}\n", hex, cache.root(), m.family,
             m.template_args, m.target, m.nvrtc_version, m.cuda_headers_version);
  fmt::print("options\n");
  for (const std::string& o : m.options) fmt::print("  {}\n", o);
  fmt::print("files ({})\n", m.inputs.size());
  for (const cache::InputDigest& d : m.inputs) fmt::print("  {:<6}  {}  {}\n", d.kind, d.digest, d.name);
  print_fallbacks(fallbacks);
  if (!now) {
    fmt::print("not compared with this machine: {}\n", why);
  } else if (now->key == hex) {
    fmt::print("this machine computes the same key for {} {} {}: a lookup hits it\n", m.family, m.template_args,
               m.target);
  } else {
    fmt::print("this machine computes key {} for {} {} {}; {} input{} differ{}:\n", now->key, m.family,
               m.template_args, m.target, diffs.size(), diffs.size() == 1 ? "" : "s", diffs.size() == 1 ? "s" : "");
    print_differences(diffs, !m.inputs.empty());
  }
  return kExitOk;
}

}  // namespace

void add_cache_explain_command(CLI::App& cache, std::vector<Command>& out) {
  struct ExplainOptions {
    std::string family, arch, key;
    std::vector<std::string> params;
  };
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* explain = cache.add_subcommand(
      "explain", "Every input of a specialization's key (sources and headers with their digests, options in "
                 "NVRTC's order, target, NVRTC and CUDA headers versions) and whether the cache holds it; on a "
                 "miss, the inputs that differ from the nearest entry of the family; the fallbacks that served it "
                 "while it was not built (KJIT_JIT=async). --key KEY: what an entry records, and whether this "
                 "machine still computes its key");
  explain->add_option("family", o->family, "Kernel family (see `kjit kernels`)");
  explain->add_option("params", o->params, "key=value pairs, one per parameter of the family");
  explain->add_option("--arch", o->arch, "Target, as `kjit compile` takes it (default: this machine's)")
      ->check(non_empty());
  explain->add_option("--key", o->key, "Explain the cache entry with this key instead")->check(non_empty());
  add_json_flag(explain);
  out.push_back({explain, [o] {
                   if (!o->key.empty()) {
                     if (!o->family.empty() || !o->arch.empty()) {
                       throw InvalidArgument("--key names an entry; it takes no family, parameters or --arch");
                     }
                     return run_explain_key(o->key);
                   }
                   if (o->family.empty()) throw InvalidArgument("name a FAMILY (with key=value parameters) or --key KEY");
                   return run_explain_point(o->family, o->params, o->arch);
                 }});
}

}  // namespace kjit::cli
