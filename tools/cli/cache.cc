// `kjit cache ls|stats|verify|prune|clear`: the disk cache the environment names. The inspecting
// commands (ls, stats, verify) only read: a missing folder is an empty cache, a read-only one is
// listed. prune and clear open an existing cache strictly (a directory that cannot be written is
// an error naming the path, never a silent memory-only cache) and leave a missing one missing.
#include "tools/cli/common.hpp"

#include "cache/bundle.hpp"
#include "cache/file_util.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <memory>
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

nlohmann::json entry_json(const cache::EntryInfo& e) {
  nlohmann::json j = {{"key", e.key.hex()},
                      {"path", e.path},
                      {"bytes", e.bytes},
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
              {"target", m.target},
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

int run_ls() {
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  const std::vector<cache::EntryInfo> entries = cache.list();
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
    fmt::print("{:<32}  {:<22} {:<11} {:>10}  {:<16}  {}\n", "key", "family", "target", "size",
               "last used", "args");
  }
  for (const cache::EntryInfo& e : entries) {
    if (e.meta) {
      fmt::print("{:<32}  {:<22} {:<11} {:>10}  {:<16}  {}\n", e.key.hex(), e.meta->family,
                 e.meta->target, human_bytes(e.bytes), local_time(e.last_used_unix),
                 e.meta->template_args);
    } else {
      fmt::print("{:<32}  {:<22} {:<11} {:>10}  {:<16}  bad entry: {}\n", e.key.hex(), "?", "?",
                 human_bytes(e.bytes), local_time(e.last_used_unix), e.problem);
    }
  }
  fmt::print("{} entr{}, {} in {}\n", entries.size(), entries.size() == 1 ? "y" : "ies",
             human_bytes(total), cache.root());
  return kExitOk;
}

int run_stats() {
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  const cache::CacheStats stats = cache.stats();
  // The cache was opened for reading only; say whether this user could also write to it.
  const bool writable = stats.enabled && ::access(stats.root.c_str(), W_OK) == 0;
  // Break the total down by family and target (from the entries' metadata).
  std::map<std::string, uint64_t> by_family, by_target;
  uint64_t bad = 0;
  for (const cache::EntryInfo& e : cache.list()) {
    if (!e.meta) {
      ++bad;
      continue;
    }
    ++by_family[e.meta->family.empty() ? "(none)" : e.meta->family];
    ++by_target[e.meta->target];
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
             !stats.enabled ? " (does not exist yet)" : writable ? "" : " (read-only)");
  fmt::print("entries    {}{}\n", stats.entries, bad ? fmt::format(" ({} bad: run `kjit cache verify`)", bad) : "");
  fmt::print("size       {} ({} bytes)\n", human_bytes(stats.bytes), stats.bytes);
  fmt::print("cap        {}\n", stats.max_bytes == 0 ? std::string("none") : human_bytes(stats.max_bytes));
  for (const auto& [family, n] : by_family) fmt::print("family     {:<20} {}\n", family, n);
  for (const auto& [target, n] : by_target) fmt::print("target     {:<20} {}\n", target, n);
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

int run_prune(const std::string& max_bytes_text) {
  cache::DiskCache cache = open_cache_to_change(RuntimeConfig::from_env());
  uint64_t cap = 0;
  if (!max_bytes_text.empty()) {
    cap = RuntimeConfig::parse_bytes(max_bytes_text, "--max-bytes");
    // DiskCache::prune reads 0 as "the configured cap"; emptying the cache is `clear`.
    if (cap == 0) throw InvalidArgument("--max-bytes 0 would remove everything; use `kjit cache clear`");
  }
  const uint64_t removed = cache.prune(cap);
  const cache::CacheStats stats = cache.stats();
  if (output().json) {
    print_json({{"root", stats.root},
                {"removed", removed},
                {"entries", stats.entries},
                {"bytes", stats.bytes},
                {"max_bytes", cap ? cap : stats.max_bytes}});
  } else {
    fmt::print("removed {} entr{}; {} entr{}, {} left in {}\n", removed, removed == 1 ? "y" : "ies",
               stats.entries, stats.entries == 1 ? "y" : "ies", human_bytes(stats.bytes), stats.root);
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

/// Entries a bundle is capped at when read back: the store's own per-entry cap times a few
/// hundred specializations is far below this.
constexpr uint64_t kMaxBundleBytes = uint64_t{16} << 30;

int run_export(const std::string& path, const std::vector<std::string>& families,
               const std::vector<std::string>& archs) {
  const cache::DiskCache cache = open_cache_for_reading(RuntimeConfig::from_env());
  auto wanted = [](const std::vector<std::string>& list, const std::string& value) {
    return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
  };
  std::vector<std::string> targets;
  for (const Target& t : parse_targets(archs)) targets.push_back(t.str());
  for (const std::string& f : families) family(f);  // an unknown family is an error, not an empty bundle
  std::vector<std::string> encoded;
  uint64_t skipped_bad = 0;
  for (const cache::EntryInfo& e : cache.list()) {
    if (!e.meta) {
      ++skipped_bad;
      continue;
    }
    if (!wanted(families, e.meta->family) || !wanted(targets, e.meta->target)) continue;
    std::string bytes;
    if (cache::detail::read_file(e.path, kMaxBundleBytes, /*touch=*/false, &bytes) != 0) continue;  // evicted meanwhile
    encoded.push_back(std::move(bytes));
  }
  const std::string bundle = cache::encode_bundle(encoded);
  if (const int err = cache::detail::write_file_atomic(path, bundle); err != 0) {
    throw CacheError(fmt::format("cannot write bundle {}: {}", path, cache::detail::errno_text(err)));
  }
  if (output().json) {
    print_json({{"bundle", path}, {"entries", encoded.size()}, {"bytes", bundle.size()},
                {"skipped_bad", skipped_bad}, {"root", cache.root()}});
  } else {
    fmt::print("exported {} entr{} ({}) from {} to {}{}\n", encoded.size(), encoded.size() == 1 ? "y" : "ies",
               human_bytes(bundle.size()), cache.root(), path,
               skipped_bad ? fmt::format("; {} bad entries left out (`kjit cache verify`)", skipped_bad) : "");
  }
  return kExitOk;
}

int run_import(const std::string& path) {
  std::string bytes;
  if (const int err = cache::detail::read_file(path, kMaxBundleBytes, /*touch=*/false, &bytes); err != 0) {
    throw CacheError(fmt::format("cannot read bundle {}: {}", path, cache::detail::errno_text(err)));
  }
  cache::BundleContents contents;
  try {
    contents = cache::decode_bundle(bytes);
  } catch (const CacheError& e) {
    throw CacheError(fmt::format("{}: {}", path, e.what()));
  }
  cache::DiskCache cache = open_cache_strict(RuntimeConfig::from_env());
  uint64_t imported = 0, present = 0, not_stored = 0;
  for (const cache::Entry& e : contents.entries) {
    if (cache.lookup(e.key)) {
      ++present;
      continue;
    }
    cache.publish(e);  // atomic; a failure is warned by the store
    if (cache.lookup(e.key)) {
      ++imported;
    } else {
      ++not_stored;
    }
  }
  for (const std::string& problem : contents.problems) fmt::print(stderr, "kjit: warning: {}: {}\n", path, problem);
  if (output().json) {
    print_json({{"bundle", path}, {"entries", contents.count}, {"imported", imported}, {"present", present},
                {"bad", contents.problems.size()}, {"not_stored", not_stored}, {"root", cache.root()}});
  } else {
    fmt::print("imported {}, already present {}, bad {}, not stored {} of {} entries from {} into {}\n", imported,
               present, contents.problems.size(), not_stored, contents.count, path, cache.root());
  }
  return contents.problems.empty() && not_stored == 0 ? kExitOk : kExitFailed;
}

}  // namespace

void add_cache_commands(CLI::App& root, std::vector<Command>& out) {
  CLI::App* cache = root.add_subcommand(
      "cache", "Inspect and maintain the disk cache (KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, "
               "else ~/.cache/kjit); an unusable directory is an error naming it");
  cache->require_subcommand(1);

  CLI::App* ls = cache->add_subcommand("ls", "List the entries: key, family, target, size, "
                                             "last use, template arguments");
  add_json_flag(ls);
  out.push_back({ls, run_ls});

  CLI::App* stats = cache->add_subcommand("stats", "Entry count and bytes, the cap, and counts "
                                                   "by family and target");
  add_json_flag(stats);
  out.push_back({stats, run_stats});

  CLI::App* verify = cache->add_subcommand("verify", "Decode and checksum every entry; exits 1 "
                                                     "when any is bad (changes nothing)");
  add_json_flag(verify);
  out.push_back({verify, run_verify});

  auto max_bytes = std::make_shared<std::string>();
  CLI::App* prune = cache->add_subcommand("prune", "Remove bad entries, then least-recently-used "
                                                   "ones until the cache fits its cap");
  prune->add_option("--max-bytes", *max_bytes, "The cap to prune to: bytes with an optional "
                                               "K/M/G/T suffix (default: KJIT_CACHE_MAX_BYTES, "
                                               "2G when unset)")
      ->check(non_empty());
  add_json_flag(prune);
  out.push_back({prune, [max_bytes] { return run_prune(*max_bytes); }});

  struct ExportOptions {
    std::string path;
    std::vector<std::string> families, archs;
  };
  auto ex = std::make_shared<ExportOptions>();
  CLI::App* exp = cache->add_subcommand("export", "Write the cache's entries (optionally only some "
                                                  "families or targets) to one bundle file, to ship "
                                                  "a precompiled cache");
  exp->add_option("bundle", ex->path, "The bundle file to write")->required()->check(non_empty());
  exp->add_option("--family", ex->families, "Only this family (repeatable)")->check(non_empty());
  exp->add_option("--arch", ex->archs, "Only this target (repeatable): sm_90a, sm_89, ...")->check(non_empty());
  add_json_flag(exp);
  out.push_back({exp, [ex] { return run_export(ex->path, ex->families, ex->archs); }});

  auto im = std::make_shared<std::string>();
  CLI::App* imp = cache->add_subcommand("import", "Add a bundle's entries to the cache (each "
                                                  "checked; present ones are kept); exits 1 when "
                                                  "any entry is damaged or cannot be stored");
  imp->add_option("bundle", *im, "The bundle file to read")->required()->check(non_empty());
  add_json_flag(imp);
  out.push_back({imp, [im] { return run_import(*im); }});

  CLI::App* clear = cache->add_subcommand("clear", "Remove every entry");
  add_json_flag(clear);
  out.push_back({clear, run_clear});
}

}  // namespace kjit::cli
