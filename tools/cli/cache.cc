// `kjit cache ls|stats|verify|prune|clear|export|import`: the disk cache the environment names.
// The inspecting commands (ls, stats, verify, export) only read: a missing folder is an empty
// cache, a read-only one is listed. prune and clear open an existing cache strictly (a directory
// that cannot be written is an error naming the path, never a silent memory-only cache) and leave
// a missing one missing. The work is in cache/ (store.hpp, bundle.hpp, oci.hpp); this file parses
// arguments and prints.
#include "tools/cli/common.hpp"

#include "runtime/internal/cache.hpp"
#include "runtime/internal/shipping.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace kjit::cli {
namespace {

std::string local_time(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

/// The largest of a per-kernel figure over an entry's kernels (-1 when none is known): what an
/// entry-level column shows and sorts by.
int max_of(const cache::EntryMeta& m, int cache::KernelMeta::*field) {
  int v = -1;
  for (const cache::KernelMeta& k : m.kernels) v = std::max(v, k.*field);
  return v;
}

/// "head_dim=128 rows=8" → {"head_dim": "128", "rows": "8"} (words without '=' are left out).
nlohmann::json params_of(const std::string& template_args) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& word : split_words(template_args)) {
    if (const size_t eq = word.find('='); eq != std::string::npos && eq > 0) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

nlohmann::json entry_json(const cache::EntryInfo& e) {
  nlohmann::json j = {{"key", e.key.hex()},
                      {"path", e.path},
                      {"bytes", e.bytes},
                      {"hits", e.hits},
                      {"last_used_unix", e.last_used_unix}};
  if (e.meta) {
    const cache::EntryMeta& m = *e.meta;
    nlohmann::json kernels = nlohmann::json::array();
    for (const cache::KernelMeta& k : m.kernels) {
      kernels.push_back({{"name_expression", k.name_expression},
                         {"lowered_name", k.lowered_name},
                         {"registers", k.registers},
                         {"spill_bytes", k.spill_bytes},
                         {"static_smem", k.static_smem}});
    }
    j.update({{"ok", true},
              {"family", m.family},
              {"template_args", m.template_args},
              {"params", params_of(m.template_args)},
              {"target", m.target},
              {"registers", max_of(m, &cache::KernelMeta::registers)},
              {"spill_bytes", max_of(m, &cache::KernelMeta::spill_bytes)},
              {"static_smem", max_of(m, &cache::KernelMeta::static_smem)},
              {"ptx", m.ptx},
              {"source_name", m.source_name},
              {"nvrtc_version", m.nvrtc_version},
              {"cuda_headers_version", m.cuda_headers_version},
              {"compile_ms", m.compile_ms},
              {"created_unix", m.created_unix},
              {"kernels", kernels}});
  } else {
    j.update({{"ok", false}, {"problem", e.problem}});
  }
  return j;
}

/// The fields `cache ls --sort` takes. Names sort ascending, figures descending (most first).
const std::vector<std::string>& sort_fields() {
  static const std::vector<std::string> fields = {"key",       "family", "params", "target",     "size", "registers",
                                                  "spills",    "smem",   "hits",   "compile_ms", "last_use"};
  return fields;
}

void sort_entries(std::vector<cache::EntryInfo>& entries, const std::string& field) {
  using E = cache::EntryInfo;
  auto text = [&](const E& e) -> std::string {
    if (field == "key") return e.key.hex();
    if (!e.meta) return "";
    if (field == "family") return e.meta->family;
    if (field == "params") return e.meta->template_args;
    return e.meta->target;
  };
  auto number = [&](const E& e) -> double {
    if (field == "size") return static_cast<double>(e.bytes);
    if (field == "hits") return static_cast<double>(e.hits);
    if (field == "last_use") return static_cast<double>(e.last_used_unix);
    if (!e.meta) return -1;
    if (field == "registers") return max_of(*e.meta, &cache::KernelMeta::registers);
    if (field == "spills") return max_of(*e.meta, &cache::KernelMeta::spill_bytes);
    if (field == "smem") return max_of(*e.meta, &cache::KernelMeta::static_smem);
    return e.meta->compile_ms;
  };
  const bool by_name = field == "key" || field == "family" || field == "params" || field == "target";
  // Stable, after the listing's key order: equal values keep a fixed order.
  std::stable_sort(entries.begin(), entries.end(), [&](const E& a, const E& b) {
    return by_name ? text(a) < text(b) : number(a) > number(b);
  });
}

int run_ls(const std::string& sort) {
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  cache.fold_hits();
  std::vector<cache::EntryInfo> entries = cache.list();
  if (!sort.empty()) sort_entries(entries, sort);
  uint64_t total = 0;
  for (const cache::EntryInfo& e : entries) total += e.bytes;

  if (output().json) {
    nlohmann::json list = nlohmann::json::array();
    for (const cache::EntryInfo& e : entries) list.push_back(entry_json(e));
    print_json({{"root", cache.root()}, {"count", entries.size()}, {"bytes", total},
                {"entries", list}});
    return kExitOk;
  }
  if (!entries.empty()) {
    fmt::print("{:<32}  {:<22} {:<11} {:>10} {:>6}  {:<16}  {}\n", "key", "family", "target", "size", "hits",
               "last used", "args");
  }
  for (const cache::EntryInfo& e : entries) {
    if (e.meta) {
      fmt::print("{:<32}  {:<22} {:<11} {:>10} {:>6}  {:<16}  {}\n", e.key.hex(), e.meta->family,
                 e.meta->target, human_bytes(e.bytes), e.hits, local_time(e.last_used_unix),
                 e.meta->template_args);
    } else {
      fmt::print("{:<32}  {:<22} {:<11} {:>10} {:>6}  {:<16}  bad entry: {}\n", e.key.hex(), "?", "?",
                 human_bytes(e.bytes), e.hits, local_time(e.last_used_unix), e.problem);
    }
  }
  fmt::print("{} entr{}, {} in {}\n", entries.size(), entries.size() == 1 ? "y" : "ies",
             human_bytes(total), cache.root());
  return kExitOk;
}

int run_stats(bool prometheus) {
  if (prometheus && output().json) throw InvalidArgument("--prometheus and --json are two output formats: pick one");
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  const cache::CacheStats stats = cache.stats();
  // The cache was opened for reading only; say whether this user could also write to it. A
  // folder not created yet is writable when the first publish could create it.
  const bool writable = cache::writable_or_creatable(stats.root) == 0;
  // Break the total down by family and target (from the entries' metadata).
  std::map<std::string, uint64_t> by_family, by_target;
  std::map<std::pair<std::string, std::string>, uint64_t> by_family_target;
  uint64_t bad = 0, hits = 0;
  if (prometheus) cache.fold_hits();
  for (const cache::EntryInfo& e : cache.list()) {
    hits += e.hits;
    if (!e.meta) {
      ++bad;
      continue;
    }
    const std::string family = e.meta->family.empty() ? "(none)" : e.meta->family;
    ++by_family[family];
    ++by_target[e.meta->target];
    ++by_family_target[{family, e.meta->target}];
  }
  if (prometheus) {
    detail::CacheListingMetrics m;
    m.writable = writable;
    m.entries = stats.entries;
    m.bytes = stats.bytes;
    m.max_bytes = stats.max_bytes;
    m.bad = bad;
    m.hits = hits;
    m.by_family_target.assign(by_family_target.begin(), by_family_target.end());
    detail::PromWriter w;
    detail::write_cache_listing_metrics(w, m);
    fmt::print("{}", w.text());
    return kExitOk;
  }
  if (output().json) {
    print_json({{"root", stats.root},
                {"exists", stats.enabled},
                {"writable", writable},
                {"entries", stats.entries},
                {"bytes", stats.bytes},
                {"max_bytes", stats.max_bytes},
                {"bad", bad},
                {"by_family", by_family},
                {"by_target", by_target}});
    return kExitOk;
  }
  fmt::print("root       {}{}\n", stats.root,
             !stats.enabled ? (writable ? " (does not exist yet; the first compile creates it)"
                                        : " (does not exist yet and cannot be created)")
             : writable     ? ""
                            : " (read-only)");
  fmt::print("entries    {}{}\n", stats.entries, bad ? fmt::format(" ({} bad: run `kjit cache verify`)", bad) : "");
  fmt::print("size       {} ({} bytes)\n", human_bytes(stats.bytes), stats.bytes);
  fmt::print("cap        {}\n", stats.max_bytes == 0 ? std::string("none") : human_bytes(stats.max_bytes));
  // One count column for both breakdowns, as wide as the longest name (family names outgrow any
  // fixed width: attention.paged_prefill_sm90).
  size_t width = 0;
  for (const auto& [family, n] : by_family) width = std::max(width, family.size());
  for (const auto& [target, n] : by_target) width = std::max(width, target.size());
  for (const auto& [family, n] : by_family) fmt::print("family     {:<{}} {}\n", family, width, n);
  for (const auto& [target, n] : by_target) fmt::print("target     {:<{}} {}\n", target, width, n);
  return kExitOk;
}

int run_verify() {
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  const cache::VerifyResult result = cache.verify();
  if (output().json) {
    print_json({{"root", cache.root()},
                {"ok", result.ok},
                {"bad", result.bad},
                {"bad_paths", result.bad_paths}});
  } else {
    for (const std::string& bad : result.bad_paths) fmt::print("bad: {}\n", bad);
    fmt::print("{} ok, {} bad in {}{}\n", result.ok, result.bad, cache.root(),
               result.bad ? " (`kjit cache prune` removes bad entries)" : "");
  }
  return result.bad == 0 ? kExitOk : kExitFailed;
}

/// prune and clear change an existing cache (strictly: it must be writable); a missing one has
/// nothing to remove and stays missing.
cache::DiskCache open_cache_to_change(const RuntimeConfig& config) {
  cache::DiskCache existing = open_cache_for_reading(config);
  return existing.enabled() ? open_cache_strict(config) : existing;
}

/// The NVRTC and CUDA headers versions this machine compiles with: what `prune` keeps. Throws
/// when they cannot be found (no CUDA headers), naming why.
cache::Toolkit current_toolkit(const RuntimeConfig& config) {
  RuntimeConfig quiet = config;
  quiet.disk_cache = false;  // only the versions are wanted; opening the cache twice is not
  Runtime runtime(quiet);
  return {runtime.nvrtc_version(), runtime.cuda_headers_version()};
}

int run_prune(const std::string& max_bytes_text, bool stale_only) {
  const RuntimeConfig config = RuntimeConfig::from_env();
  cache::DiskCache cache = open_cache_to_change(config);
  uint64_t cap = 0;
  if (!max_bytes_text.empty()) {
    if (stale_only) throw InvalidArgument("--stale removes only entries of other toolkits; it takes no --max-bytes");
    cap = RuntimeConfig::parse_bytes(max_bytes_text, "--max-bytes");
    // DiskCache::prune reads 0 as "the configured cap"; emptying the cache is `clear`.
    if (cap == 0) throw InvalidArgument("--max-bytes 0 would remove everything; use `kjit cache clear`");
  }
  std::optional<cache::Toolkit> toolkit;
  try {
    toolkit = current_toolkit(config);
  } catch (const Error& e) {
    if (stale_only) throw Unsupported(fmt::format("cannot tell which entries are stale: {}", strip_prefix(e.what())));
    warn(fmt::format("keeping entries of every toolkit: {}", first_line(e.what())));
  }
  cache::PruneOptions options;
  options.max_bytes = cap;
  options.current = toolkit ? &*toolkit : nullptr;
  options.stale_only = stale_only;
  const cache::PruneResult result = cache.prune(options);
  const uint64_t removed = result.removed();
  const cache::CacheStats stats = cache.stats();
  if (output().json) {
    nlohmann::json j = {{"root", stats.root},
                        {"removed", removed},
                        {"removed_bad", result.bad},
                        {"removed_stale", result.stale},
                        {"evicted", result.evicted},
                        {"entries", stats.entries},
                        {"bytes", stats.bytes},
                        {"max_bytes", cap ? cap : stats.max_bytes}};
    j["toolkit"] = toolkit ? nlohmann::json{{"nvrtc_version", toolkit->nvrtc_version},
                                            {"cuda_headers_version", toolkit->cuda_headers_version}}
                           : nlohmann::json(nullptr);
    print_json(j);
  } else {
    fmt::print("removed {} entr{} ({} bad, {} of other toolkits, {} least recently used); {} entr{}, {} left in {}\n",
               removed, removed == 1 ? "y" : "ies", result.bad, result.stale, result.evicted, stats.entries,
               stats.entries == 1 ? "y" : "ies", human_bytes(stats.bytes), stats.root);
  }
  return kExitOk;
}

int run_clear() {
  cache::DiskCache cache = open_cache_to_change(RuntimeConfig::from_env());
  const uint64_t removed = cache.clear();
  if (output().json) {
    print_json({{"root", cache.root()}, {"removed", removed}});
  } else {
    fmt::print("removed {} entr{} from {}\n", removed, removed == 1 ? "y" : "ies", cache.root());
  }
  return kExitOk;
}

/// Where an export or import goes: a bundle file, or an OCI image layout (`--oci REF`, or a
/// positional "oci:DIR[:TAG]").
struct Destination {
  std::string bundle;
  std::optional<cache::OciRef> oci;
  /// As given, for messages: the bundle's path, or "oci:DIR:TAG".
  std::string display() const {
    return oci ? "oci:" + oci->dir + (oci->tag.empty() ? "" : ":" + oci->tag) : bundle;
  }
};

/// The Destination of a command's positional `path`, --oci and --tag. Throws InvalidArgument
/// naming the options when they do not name exactly one place, or --tag is given twice.
Destination destination(const std::string& path, const std::string& oci, const std::string& tag) {
  Destination d;
  const bool oci_path = path.rfind("oci:", 0) == 0;
  if (!path.empty() && !oci.empty()) throw InvalidArgument("name a bundle file or --oci, not both");
  if (path.empty() && oci.empty()) throw InvalidArgument("name a bundle file, or an OCI image layout with --oci DIR");
  if (!oci.empty() || oci_path) {
    d.oci = cache::parse_oci_ref(oci_path ? path : oci);
    if (!tag.empty()) {
      if (!d.oci->tag.empty()) throw InvalidArgument(fmt::format("--tag {}: {} names its tag already", tag, d.display()));
      d.oci = cache::parse_oci_ref("oci:" + d.oci->dir + ":" + tag);
    }
  } else {
    if (!tag.empty()) throw InvalidArgument("--tag names an image's tag: it goes with --oci");
    d.bundle = path;
  }
  return d;
}

struct ExportOptions {
  std::string path, oci, tag, manifest, signing_key, platform;
  std::vector<std::string> families, archs;
};

/// The filter of `o`'s --family, --arch and --manifest.
cache::ExportFilter export_filter(const ExportOptions& o) {
  cache::ExportFilter filter;
  for (const Target& t : parse_targets(o.archs)) {
    filter.targets.push_back(t.str());
    // A device of an arch-specific target loads plain sm_XY cubins too (every program that is
    // not arch-specific: Family::compile_target), so sm_90a takes sm_90's entries.
    if (t.arch_specific) {
      Target plain = t;
      plain.arch_specific = false;
      if (std::find(filter.targets.begin(), filter.targets.end(), plain.str()) == filter.targets.end()) {
        filter.targets.push_back(plain.str());
      }
    }
  }
  for (const std::string& f : o.families) family(f);  // an unknown family is an error, not an empty export
  filter.families = o.families;
  if (!o.manifest.empty()) {
    filter.manifest.emplace();
    const std::string text = cache::read_input_file(o.manifest, "manifest", cache::kMaxManifestBytes);
    for (const cache::ManifestLine& line : cache::parse_manifest(text)) {
      if (line.entry) {
        filter.manifest->push_back(*line.entry);
      } else {
        warn(fmt::format("manifest {} line {}: {}; skipped", o.manifest, line.line, line.error));
      }
    }
  }
  return filter;
}

/// The tail of an export's summary line: what it left out, and where to look.
std::string left_out(uint64_t bad_entries, uint64_t bad_tables) {
  std::string s;
  if (bad_entries) s += fmt::format("; {} bad entr{} left out (`kjit cache verify`)", bad_entries, bad_entries == 1 ? "y" : "ies");
  if (bad_tables) s += fmt::format("; {} tuning table{} left out (warned above)", bad_tables, bad_tables == 1 ? "" : "s");
  return s;
}

int run_export_oci(const cache::DiskCache& cache, const cache::OciRef& ref, const ExportOptions& o,
                   const cache::ExportFilter& filter) {
  const RemoteConfig remote = RuntimeConfig::from_env().remote;
  const std::string key_file = o.signing_key.empty() ? remote.signing_key_file : o.signing_key;
  std::optional<cache::remote::SecretKey> key;
  if (!key_file.empty()) {
    key = cache::remote::read_secret_key(key_file, o.signing_key.empty() ? "KJIT_REMOTE_SIGNING_KEY" : "--signing-key");
  }
  cache::OciExportOptions options;
  if (!ref.tag.empty()) options.tag = ref.tag;
  options.signer = key ? &*key : nullptr;
  if (!o.platform.empty()) {
    const size_t slash = o.platform.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == o.platform.size()) {
      throw InvalidArgument(fmt::format("--platform '{}' is not OS/ARCHITECTURE (linux/arm64)", o.platform));
    }
    options.os = o.platform.substr(0, slash);
    options.architecture = o.platform.substr(slash + 1);
  }
  const cache::OciExportReport report = cache::export_oci(cache, ref.dir, filter, options);
  const std::string image = "oci:" + ref.dir + ":" + report.tag;
  if (report.entries == 0 && report.tables == 0) {
    fmt::print(stderr, "kjit: warning: the image {} is empty: nothing in {} matched\n", image, cache.root());
  }
  const std::string signer = key ? fmt::format("{:016x}", key->pub.id) : "";
  if (output().json) {
    print_json({{"image", image}, {"manifest_digest", report.manifest_digest}, {"entries", report.entries},
                {"tuning_tables", report.tables}, {"layers", report.layers}, {"bytes", report.bytes},
                {"skipped_bad", report.skipped_bad}, {"skipped_tables", report.skipped_tables}, {"signer", signer},
                {"root", cache.root()}});
  } else {
    fmt::print("exported {} entr{} and {} tuning table{} in {} layer{} ({}{}) from {} to {} ({}){}\n", report.entries,
               report.entries == 1 ? "y" : "ies", report.tables, report.tables == 1 ? "" : "s", report.layers,
               report.layers == 1 ? "" : "s", human_bytes(report.bytes), key ? ", signed by " + signer : "",
               cache.root(), image, report.manifest_digest, left_out(report.skipped_bad, report.skipped_tables));
  }
  return kExitOk;
}

int run_export(const ExportOptions& o) {
  const Destination to = destination(o.path, o.oci, o.tag);
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  const cache::ExportFilter filter = export_filter(o);
  if (to.oci) return run_export_oci(cache, *to.oci, o, filter);
  if (!o.signing_key.empty()) throw InvalidArgument("--signing-key signs an OCI image (--oci): bundles carry no signatures");
  if (!o.platform.empty()) throw InvalidArgument("--platform names an OCI image's platform: it goes with --oci");
  const std::string& path = to.bundle;
  const cache::ExportReport report = cache::export_bundle(cache, path, filter);
  // Legal (an image may carry no kernels), but more often a wrong KJIT_CACHE_DIR or filter.
  if (report.entries == 0 && report.tables == 0) {
    fmt::print(stderr, "kjit: warning: the bundle {} is empty: nothing in {} matched\n", path, cache.root());
  }
  if (output().json) {
    print_json({{"bundle", path}, {"entries", report.entries}, {"bytes", report.bytes},
                {"skipped_bad", report.skipped_bad}, {"skipped_tables", report.skipped_tables},
                {"tuning_tables", report.tables}, {"root", cache.root()}});
  } else {
    fmt::print("exported {} entr{} and {} tuning table{} ({}) from {} to {}{}\n", report.entries,
               report.entries == 1 ? "y" : "ies", report.tables, report.tables == 1 ? "" : "s",
               human_bytes(report.bytes), cache.root(), path, left_out(report.skipped_bad, report.skipped_tables));
  }
  return kExitOk;
}

struct ImportOptions {
  std::string path, oci, tag;
  std::vector<std::string> trusted_keys;
};

int run_import(const ImportOptions& o) {
  const Destination from = destination(o.path, o.oci, o.tag);
  if (!from.oci && !o.trusted_keys.empty()) {
    throw InvalidArgument("--trusted-keys checks an OCI image's signatures (--oci): bundles carry none");
  }
  cache::DiskCache cache = open_cache_strict(RuntimeConfig::from_env());
  cache::ImportReport report;
  const std::string source = from.display();
  if (from.oci) {
    cache::OciImportOptions options;
    const bool given = !o.trusted_keys.empty();
    for (const std::string& file : given ? o.trusted_keys : RuntimeConfig::from_env().remote.trusted_key_files) {
      for (const cache::remote::PublicKey& k :
           cache::remote::read_public_keys(file, given ? "--trusted-keys" : "KJIT_REMOTE_TRUSTED_KEYS")) {
        options.trusted.push_back(k);
      }
    }
    report = cache::import_oci(cache, *from.oci, options);
  } else {
    report = cache::import_bundle(cache, from.bundle);
  }
  for (const std::string& problem : report.problems) warn(fmt::format("{}: {}", source, problem));
  if (output().json) {
    print_json({{from.oci ? "image" : "bundle", source}, {"entries", report.declared}, {"imported", report.imported},
                {"present", report.present}, {"bad", report.problems.size()},
                {"not_stored", report.not_stored}, {"tuning_tables", report.tables}, {"root", cache.root()}});
  } else {
    fmt::print("imported {}, already present {}, bad {}, not stored {} of {} entries and {} tuning table{} from {} "
               "into {}\n",
               report.imported, report.present, report.problems.size(), report.not_stored, report.declared,
               report.tables, report.tables == 1 ? "" : "s", source, cache.root());
  }
  return report.problems.empty() && report.not_stored == 0 ? kExitOk : kExitFailed;
}

}  // namespace

void add_cache_commands(CLI::App& root, std::vector<Command>& out) {
  CLI::App* cache = root.add_subcommand(
      "cache", "Inspect and maintain the disk cache (KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, "
               "else ~/.cache/kjit, else /tmp/kjit-cache); an unusable directory is an error naming it");
  cache->require_subcommand(1);

  CLI::App* ls = cache->add_subcommand("ls", "List the entries: key, family, target, size, hits, "
                                             "last use, template arguments (--json adds registers, "
                                             "spills, shared memory and compile time)");
  auto ls_sort = std::make_shared<std::string>();
  ls->add_option("--sort", *ls_sort, "Order by this field: key, family, params, target (ascending) or size, "
                                     "registers, spills, smem, hits, compile_ms, last_use (largest first)")
      ->check(CLI::IsMember(sort_fields()));
  add_json_flag(ls);
  out.push_back({ls, [ls_sort] { return run_ls(*ls_sort); }});

  CLI::App* stats = cache->add_subcommand("stats", "Entry count and bytes, the cap, and counts "
                                                   "by family and target");
  add_json_flag(stats);
  auto prometheus = std::make_shared<bool>(false);
  stats->add_flag("--prometheus", *prometheus, "Print the figures in the Prometheus text format (for a node "
                                               "exporter's textfile collector), with the hits log's total");
  out.push_back({stats, [prometheus] { return run_stats(*prometheus); }});

  CLI::App* verify = cache->add_subcommand("verify", "Decode and checksum every entry; exits 1 "
                                                     "when any is bad (changes nothing)");
  add_json_flag(verify);
  out.push_back({verify, run_verify});

  struct PruneFlags {
    std::string max_bytes;
    bool stale = false;
  };
  auto pr = std::make_shared<PruneFlags>();
  CLI::App* prune = cache->add_subcommand("prune", "Remove bad entries and entries built by another "
                                                   "NVRTC or CUDA headers version, then "
                                                   "least-recently-used ones until the cache fits its cap");
  prune->add_option("--max-bytes", pr->max_bytes, "The cap to prune to: bytes with an optional "
                                               "K/M/G/T suffix (default: KJIT_CACHE_MAX_BYTES, "
                                               "2G when unset)")
      ->check(non_empty());
  prune->add_flag("--stale", pr->stale, "Remove only entries built by another NVRTC or CUDA headers "
                                        "version (they can never be hit here)");
  add_json_flag(prune);
  out.push_back({prune, [pr] { return run_prune(pr->max_bytes, pr->stale); }});

  auto ex = std::make_shared<ExportOptions>();
  CLI::App* exp = cache->add_subcommand("export", "Write the cache's entries (optionally only some "
                                                  "families or targets, or those a warm-up manifest "
                                                  "names) to one bundle file or an OCI image, to ship "
                                                  "a precompiled cache");
  exp->add_option("bundle", ex->path, "The bundle file to write (or oci:DIR[:TAG], as --oci)")->check(non_empty());
  exp->add_option("--oci", ex->oci, "Write an OCI image into this image layout folder (DIR or oci:DIR[:TAG]; "
                                    "created when missing): one layer per target and toolkit, for a registry "
                                    "(skopeo copy) or a Kubernetes image volume")->check(non_empty());
  exp->add_option("--tag", ex->tag, "The OCI image's tag (default: latest)")->check(non_empty());
  // One value per flag (--family a --family b), so a positional after one is not taken for a second.
  exp->add_option("--family", ex->families, "Only this family (repeatable)")->check(non_empty())->allow_extra_args(false);
  exp->add_option("--arch", ex->archs, "Only this target (repeatable): sm_90a (with the sm_90 entries an sm_90a device loads), sm_89, ...")
      ->check(non_empty())
      ->allow_extra_args(false);
  exp->add_option("--manifest", ex->manifest, "Only the entries this warm-up manifest (KJIT_RECORD) names")
      ->check(non_empty());
  exp->add_option("--signing-key", ex->signing_key, "Sign every entry of the OCI image with this Ed25519 secret key "
                                                    "(kjit remote keygen; default: KJIT_REMOTE_SIGNING_KEY when set)")
      ->check(non_empty());
  exp->add_option("--platform", ex->platform, "The OCI image's platform OS/ARCHITECTURE (default: linux and this "
                                              "host's architecture, e.g. linux/amd64)")->check(non_empty());
  add_json_flag(exp);
  out.push_back({exp, [ex] { return run_export(*ex); }});

  auto im = std::make_shared<ImportOptions>();
  CLI::App* imp = cache->add_subcommand("import", "Add a bundle's or an OCI image's entries to the cache (each "
                                                  "checked; present ones are kept); exits 1 when "
                                                  "any entry of a bundle is damaged or cannot be stored; an "
                                                  "image that fails any check is refused whole");
  imp->add_option("bundle", im->path, "The bundle file to read (or oci:DIR[:TAG], as --oci)")->check(non_empty());
  imp->add_option("--oci", im->oci, "Read the OCI image of this image layout folder (DIR or oci:DIR[:TAG]): "
                                    "every blob's digest, every entry and, with trusted keys, every "
                                    "signature is checked before anything is imported")->check(non_empty());
  imp->add_option("--tag", im->tag, "The OCI image's tag (default: the layout's only image)")->check(non_empty());
  imp->add_option("--trusted-keys", im->trusted_keys, "A file of trusted Ed25519 public keys (repeatable; default: "
                                                      "KJIT_REMOTE_TRUSTED_KEYS): every entry of the image must be "
                                                      "signed by one of them")
      ->check(non_empty())
      ->allow_extra_args(false);
  add_json_flag(imp);
  out.push_back({imp, [im] { return run_import(*im); }});

  add_cache_explain_command(*cache, out);

  CLI::App* clear = cache->add_subcommand("clear", "Remove every entry");
  add_json_flag(clear);
  out.push_back({clear, run_clear});
}

}  // namespace kjit::cli
