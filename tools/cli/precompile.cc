// `kjit precompile`: compile every family's default specializations for this machine's archs
// (or the --arch list), or exactly the specializations a warm-up manifest names (--manifest,
// cache/manifest.hpp), into the disk cache, on N worker threads, so production never compiles.
#include "tools/cli/common.hpp"

#include "runtime/internal/cache.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <thread>

namespace kjit::cli {
namespace {

struct PrecompileOptions {
  std::vector<std::string> archs;
  std::vector<std::string> families;
  std::string manifest;
  int jobs = 0;
  bool remote = false;  ///< also publish every item to the remote tier (KJIT_REMOTE)
  std::string shard;    ///< "i/N": only this builder's share of the set (FleetShard)
};

/// One specialization to compile, and what happened to it.
struct Item {
  const Family* family = nullptr;
  ParamMap params;
  Target target;
  enum class Status { kPending, kCompiled, kCached, kFailed } status = Status::kPending;
  std::string key;
  double ms = 0;  ///< NVRTC time for a compile, wall time of the lookup for a cache hit
  std::string error;
};

const char* status_name(Item::Status s) {
  switch (s) {
    case Item::Status::kPending: return "pending";
    case Item::Status::kCompiled: return "compiled";
    case Item::Status::kCached: return "cached";
    case Item::Status::kFailed: return "failed";
  }
  return "?";
}

std::string describe(const Item& item) {
  const std::string args = format_params(item.params);
  return fmt::format("{} {}{}{}", item.target.str(), item.family->name, args.empty() ? "" : " ",
                     args);
}

/// Progress on stderr: a bar redrawn in place on a terminal, one line per item otherwise (logs).
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO) == 1) {}

  bool tty() const noexcept { return tty_; }

  void done(const Item& item, size_t compiled, size_t cached, size_t failed) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++finished_;
    if (!tty_) {
      fmt::print(stderr, "[{}/{}] {} {} ({:.1f} ms){}\n", finished_, total_,
                 status_name(item.status), describe(item), item.ms,
                 item.error.empty() ? "" : ": " + first_line(item.error));
      return;
    }
    constexpr size_t kWidth = 28;
    const size_t filled = total_ == 0 ? kWidth : finished_ * kWidth / total_;
    std::string label = describe(item);
    if (label.size() > 40) label = label.substr(0, 37) + "...";
    fmt::print(stderr, "\r\033[K[{}{}] {}/{}  compiled {} cached {} failed {}  {}",
               std::string(filled, '#'), std::string(kWidth - filled, '.'), finished_, total_,
               compiled, cached, failed, label);
    if (finished_ == total_) fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }

 private:
  std::mutex mutex_;
  size_t total_;
  size_t finished_ = 0;
  bool tty_;
};

/// The specializations to compile, each once. A family point brings its companion program (the
/// decode split merge, which a recording run that never split did not record), compiled for what
/// the op loads beside it (Family::compile_target), where the target has a kernel for it.
class ItemList {
 public:
  /// Family `f` at `params`, compiled for exactly `target`, and its companion.
  void add(const Family& f, const ParamMap& params, const Target& target) {
    push(f, params, target);
    if (f.companion.empty()) return;
    const Family& other = kjit::family(f.companion);
    ParamMap companion = f.companion_params(f.parse(params));
    if (!other.unsupported_reason(companion, target).empty()) return;
    push(other, companion, other.compile_target(other.parse(companion), target));
  }
  /// What family `f`'s op loads at `params` on a device whose target is `device`: sm_XYa only
  /// for arch-specific programs, so sm_90 and sm_90a share the rest.
  void add_for_device(const Family& f, const ParamMap& params, const Target& device) {
    add(f, params, f.compile_target(f.parse(params), device));
  }
  std::vector<Item> take() { return std::move(items_); }

 private:
  void push(const Family& f, const ParamMap& params, const Target& target) {
    if (!seen_.insert(f.name + " " + format_params(params) + " " + target.str()).second) return;
    Item item;
    item.family = &f;
    item.params = params;
    item.target = target;
    items_.push_back(std::move(item));
  }

  std::vector<Item> items_;
  std::set<std::string> seen_;
};

/// What a manifest asks for, beyond the items to compile.
struct ManifestPlan {
  nlohmann::json invalid = nlohmann::json::array();  ///< lines naming no valid specialization
  nlohmann::json user = nlohmann::json::array();     ///< host-application kernels: present or missing
};

/// Records that `family` is left out for `target` because of `reason`: the points one reason
/// leaves out (a wgmma family's every default off sm_90a, a manifest's lines) make one entry of
/// `skipped` whose "count" says how many, so the report names each reason once.
void add_skip(nlohmann::json& skipped, const std::string& family, const Target& target, const std::string& reason) {
  const std::string target_text = target.str();
  for (nlohmann::json& s : skipped) {
    if (s["family"] == family && s["target"] == target_text && s["reason"] == reason) {
      s["count"] = s["count"].get<size_t>() + 1;
      return;
    }
  }
  skipped.push_back({{"family", family}, {"target", target_text}, {"reason", reason}, {"count", 1}});
}

/// Adds the items of manifest `path` to `items`: each valid family line for its recorded target
/// (the one its key was built for), or for what its op loads on a device of each of `targets`
/// when --arch was given (a target that point has no kernel for is skipped, not invalid). Lines
/// that no longer name a valid specialization (malformed, unknown family, parameter or value, a
/// recorded target the point has no kernel for) go to `plan.invalid` with their line number;
/// host-application kernels to `plan.user`; torn lines (a write cut short) are skipped with a
/// warning.
void manifest_items(const std::string& path, const std::vector<Target>& targets,
                    const std::vector<const Family*>& chosen, bool all_families, const Runtime& runtime,
                    ItemList& items, ManifestPlan& plan, nlohmann::json& skipped) {
  const std::string text = cache::read_input_file(path, "manifest", cache::kMaxManifestBytes);
  std::set<std::string> seen_user;
  std::map<std::string, cache::EntryMeta> present;  // the cache's entries by key, what each records
  bool listed = false;
  auto invalid = [&](size_t line, const std::string& why) {
    plan.invalid.push_back({{"line", line}, {"error", why}});
  };
  for (const cache::ManifestLine& line : cache::parse_manifest(text)) {
    if (line.torn) {
      // Left by a write cut short; what it would have named is recorded again by a later run.
      warn(fmt::format("manifest {} line {}: {}; skipped", path, line.line, line.error));
      continue;
    }
    if (!line.entry) {
      invalid(line.line, line.error);
      continue;
    }
    const cache::ManifestEntry& e = *line.entry;
    if (e.user) {
      if (!listed) {
        for (const cache::EntryInfo& info : open_cache_for_reading(runtime.config()).list()) {
          if (info.meta) present.emplace(info.key.hex(), *info.meta);
        }
        listed = true;
      }
      if (!seen_user.insert(cache::format_manifest_line(e)).second) continue;
      const auto found = present.find(e.key);
      // The key is the line's only link to an entry: one that records another kernel means the
      // line was edited or pasted from elsewhere.
      if (found != present.end() && (found->second.family != e.family || found->second.target != e.target)) {
        invalid(line.line, fmt::format("key {} is the cache's entry of {} for {}, not {} for {}", e.key,
                                       found->second.family, found->second.target, e.family, e.target));
        continue;
      }
      plan.user.push_back({{"line", line.line},
                           {"family", e.family},
                           {"template_args", e.template_args},
                           {"source_name", e.source_name},
                           {"target", e.target},
                           {"key", e.key},
                           {"status", found != present.end() ? "cached" : "missing"}});
      continue;
    }
    const Family* family = nullptr;
    Target recorded;
    try {
      family = &kjit::family(e.family);
      family->parse(e.params);
      recorded = Target::parse(e.target);
      if (std::string why = family->unsupported_reason(e.params, recorded); !why.empty()) throw Unsupported(why);
    } catch (const Error& err) {
      invalid(line.line, std::string(strip_prefix(err.what())));
      continue;
    }
    if (!all_families && std::find(chosen.begin(), chosen.end(), family) == chosen.end()) continue;
    const std::vector<Target> wanted = targets.empty() ? std::vector<Target>{recorded} : targets;
    for (const Target& target : wanted) {
      if (std::string why = family->unsupported_reason(e.params, target); !why.empty()) {
        add_skip(skipped, family->name, target, why);
        continue;
      }
      if (targets.empty()) {
        items.add(*family, e.params, target);
      } else {
        items.add_for_device(*family, e.params, target);
      }
    }
  }
}

/// The cache the results go to, opened strictly: fails before compiling anything when they
/// could not be kept, and before the global runtime opens the cache leniently (it would warn and
/// carry on in memory).
Runtime& writable_runtime() {
  const RuntimeConfig config = RuntimeConfig::from_env();
  if (!config.disk_cache) {
    throw CacheError("the disk cache is disabled (KJIT_CACHE_DISABLE=1): precompiling would keep "
                     "nothing");
  }
  open_cache_strict(config);
  Runtime& runtime = Runtime::global();
  if (!runtime.disk_cache().writable) {
    throw CacheError(fmt::format("cache directory {} is not writable", runtime.config().cache_dir));
  }
  return runtime;
}

/// The families --family names, each once (throws listing the known names), or all of them.
std::vector<const Family*> chosen_families(const std::vector<std::string>& names) {
  std::vector<const Family*> chosen;
  if (names.empty()) {
    for (const Family& f : families()) chosen.push_back(&f);
    return chosen;
  }
  for (const std::string& name : names) {
    const Family* f = &kjit::family(name);
    if (std::find(chosen.begin(), chosen.end(), f) == chosen.end()) chosen.push_back(f);
  }
  return chosen;
}

/// Every default point of `chosen` for what its op loads on a device of each of `targets`; a
/// family or point the target has no kernel for goes to `skipped` with the reason.
void default_items(const std::vector<Target>& targets, const std::vector<const Family*>& chosen, ItemList& list,
                   nlohmann::json& skipped) {
  for (const Target& target : targets) {
    for (const Family* f : chosen) {
      if (f->min_sm > target.sm() && f->defaults.empty()) {
        add_skip(skipped, f->name, target, fmt::format("needs sm_{} or newer", f->min_sm));
        continue;
      }
      // Each default's own reason (below the family's floor too: a wgmma point needs sm_90a, an
      // mma.sync point of the same family its floor), counted once per reason.
      for (const ParamMap& params : f->defaults) {
        if (std::string why = f->unsupported_reason(params, target); !why.empty()) {
          add_skip(skipped, f->name, target, why);
          continue;
        }
        list.add_for_device(*f, params, target);
      }
    }
  }
}

/// What one run compiles, and what it left out on the way.
struct WorkList {
  std::vector<Target> targets;  ///< for the report: --arch, the defaults, or a manifest's recorded ones
  std::vector<Item> items;      ///< longest first (see resolve_work)
  nlohmann::json skipped = nlohmann::json::array();
  ManifestPlan manifest;
};

/// The items of `o`: a manifest's lines or every chosen family's defaults, for --arch or the
/// default targets, cut to --shard's share (which needs --remote).
WorkList resolve_work(const PrecompileOptions& o, Runtime& runtime) {
  WorkList w;
  const bool from_manifest = !o.manifest.empty();
  // A manifest names its targets; --arch replaces them.
  w.targets = o.archs.empty() ? (from_manifest ? std::vector<Target>{} : default_targets()) : parse_targets(o.archs);
  const std::vector<const Family*> chosen = chosen_families(o.families);
  ItemList list;
  if (from_manifest) {
    manifest_items(o.manifest, w.targets, chosen, o.families.empty(), runtime, list, w.manifest, w.skipped);
  } else {
    default_items(w.targets, chosen, list, w.skipped);
  }
  w.items = list.take();
  if (!o.shard.empty()) {
    const FleetShard shard = parse_shard(o.shard);  // a malformed share is named before what it lacks
    if (!o.remote) throw InvalidArgument("--shard splits a fleet's set between builders: it needs --remote");
    w.items.erase(std::remove_if(w.items.begin(), w.items.end(),
                                 [&](const Item& item) {
                                   return !shard.has(runtime.key(item.family->spec(item.params), item.target));
                                 }),
                  w.items.end());
  }
  if (from_manifest && w.targets.empty()) {  // the recorded targets, for the report
    for (const Item& item : w.items) {
      if (std::find(w.targets.begin(), w.targets.end(), item.target) == w.targets.end()) w.targets.push_back(item.target);
    }
  }
  // Longest first: the workers take items in order, so a long compile started last would run
  // alone at the end. The arch-specific programs (TMA + wgmma kernels) hold the longest ones (the
  // 128 x 256 wgmma GEMM: 1.0–2.3 s alone, most others 0.1–1.0 s), so they go to the front, in
  // their given order.
  std::stable_partition(w.items.begin(), w.items.end(), [](const Item& item) { return item.target.arch_specific; });
  return w;
}

/// "sm_90a, sm_89", or "no target".
std::string target_list(const std::vector<Target>& targets) {
  std::string list;
  for (const Target& t : targets) list += (list.empty() ? "" : ", ") + t.str();
  return list.empty() ? "no target" : list;
}

/// What the run is about to do, on stderr: the set, what was skipped, the manifest's invalid lines
/// and the application's own kernels it names.
void print_plan(const PrecompileOptions& o, const WorkList& w, size_t jobs, const Runtime& runtime) {
  fmt::print(stderr, "precompiling {} specialization{} for {} on {} thread{} into {}\n", w.items.size(),
             w.items.size() == 1 ? "" : "s", target_list(w.targets), jobs, jobs == 1 ? "" : "s",
             runtime.disk_cache().root);
  for (const nlohmann::json& s : w.skipped) {
    const size_t count = s["count"].get<size_t>();
    fmt::print(stderr, "skipping {}{} for {}: {}\n", s["family"].get<std::string>(),
               count > 1 ? fmt::format(" ({} points)", count) : "", s["target"].get<std::string>(),
               s["reason"].get<std::string>());
  }
  for (const nlohmann::json& bad : w.manifest.invalid) {
    fmt::print(stderr, "{}:{}: skipped: {}\n", o.manifest, bad["line"].get<size_t>(), bad["error"].get<std::string>());
  }
  if (!o.manifest.empty() && w.items.empty() && w.manifest.user.empty() && w.manifest.invalid.empty()) {
    fmt::print(stderr, "kjit: warning: {} names no specialization: nothing to precompile (did the recording run "
               "compile or load anything with KJIT_RECORD set?)\n", o.manifest);
  }
  for (const nlohmann::json& u : w.manifest.user) {
    const bool cached = u["status"] == "cached";
    fmt::print(stderr, "{}:{}: the application's own kernel {} [{}] for {} (key {}) {}\n", o.manifest,
               u["line"].get<size_t>(), u["family"].get<std::string>(), u["template_args"].get<std::string>(),
               u["target"].get<std::string>(), u["key"].get<std::string>(),
               cached ? "is cached"
                      : "is not in the cache; no manifest can rebuild it: run the application once against this cache");
  }
}

/// What the compile pool did.
struct Tally {
  size_t compiled = 0, cached = 0, failed = 0;
  size_t in_remote = 0;  ///< items the remote tier holds after this run (--remote)
  double seconds = 0;
  bool tty = false;  ///< progress went to a terminal (a bar that overwrote each item's line)
};

/// Compiles (or finds cached) every item on `jobs` threads, filling each item's status, key and
/// time; with `publish_remote`, publishes each program once to the fleet tier.
Tally compile_all(std::vector<Item>& items, size_t jobs, Runtime& runtime,
                  const std::function<bool(const std::string&)>& publish_remote) {
  Progress progress(items.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> compiled{0}, cached{0}, failed{0}, in_remote{0};
  std::mutex seen_mutex;
  std::set<std::string> seen;
  auto worker = [&] {
    for (size_t i = next++; i < items.size(); i = next++) {
      Item& item = items[i];
      const auto start = std::chrono::steady_clock::now();
      try {
        const ProgramSpec spec = item.family->spec(item.params);
        const std::shared_ptr<const CompiledProgram> program = runtime.compile(spec, item.target);
        item.key = program->key;
        // A program already seen in this process carries the origin of its first arrival, so
        // a repeated key (two items, one program) counts as cached, not as a second compile.
        bool first_seen = false;
        {
          std::lock_guard<std::mutex> lock(seen_mutex);
          first_seen = seen.insert(item.key).second;
        }
        if (publish_remote && first_seen && publish_remote(item.key)) ++in_remote;
        if (first_seen && program->origin == CompiledProgram::Origin::kCompiled) {
          item.status = Item::Status::kCompiled;
          item.ms = program->compile_ms;
          ++compiled;
        } else {
          item.status = Item::Status::kCached;
          item.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
          ++cached;
        }
      } catch (const std::exception& e) {
        item.status = Item::Status::kFailed;
        item.error = e.what();
        item.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        ++failed;
      }
      progress.done(item, compiled, cached, failed);
    }
  };

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t t = 1; t < jobs; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  Tally tally;
  tally.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tally.compiled = compiled;
  tally.cached = cached;
  tally.failed = failed;
  tally.in_remote = in_remote;
  tally.tty = progress.tty();
  return tally;
}

/// The failures again (a bar overwrote their lines), then the whole message (the NVRTC log) of
/// the first, which usually explains the rest.
void print_failures(const std::vector<Item>& items, bool tty) {
  const Item* first_failure = nullptr;
  for (const Item& item : items) {
    if (item.status != Item::Status::kFailed) continue;
    if (!first_failure) first_failure = &item;
    if (tty) fmt::print(stderr, "failed: {}: {}\n", describe(item), first_line(item.error));
  }
  if (!first_failure) return;
  fmt::print(stderr, "first failure, {}:\n", describe(*first_failure));
  const std::string_view text = strip_prefix(first_failure->error);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos) fmt::print(stderr, "  {}\n", text.substr(pos, end - pos));
    pos = end + 1;
  }
}

/// The items compiled or found that the cache no longer holds: a byte cap smaller than the set
/// evicts entries as later ones are published, so the cache would silently not hold what was
/// just precompiled. `*set_bytes` gets the bytes of the items it does hold: on a warm cache
/// nothing was published, so nothing was evicted yet, but a set larger than the cap loses
/// entries at the next publish all the same.
size_t count_evicted(const std::vector<Item>& items, const Runtime& runtime, uint64_t* set_bytes) {
  std::map<std::string, uint64_t> present;
  for (const cache::EntryInfo& e : open_cache_for_reading(runtime.config()).list()) present[e.key.hex()] = e.bytes;
  size_t evicted = 0;
  std::set<std::string> counted;
  *set_bytes = 0;
  for (const Item& item : items) {
    if (item.status == Item::Status::kFailed || item.key.empty()) continue;
    const auto it = present.find(item.key);
    if (it == present.end()) {
      ++evicted;
    } else if (counted.insert(item.key).second) {
      *set_bytes += it->second;
    }
  }
  return evicted;
}

/// The report on stdout: JSON (--json: every item, the counts, what was skipped) or one line.
void print_report(const PrecompileOptions& o, const WorkList& w, const Tally& t, size_t jobs, size_t evicted,
                  const Runtime& runtime) {
  if (!output().json) {
    fmt::print("{} compiled, {} cached, {} failed ({} specialization{} for {}) in {:.1f} s; "
               "cache {}\n",
               t.compiled, t.cached, t.failed, w.items.size(), w.items.size() == 1 ? "" : "s", target_list(w.targets),
               t.seconds, runtime.disk_cache().root);
    if (o.remote) {
      fmt::print("{} of {} in the remote tier {}{}\n", t.in_remote, w.items.size(), runtime.config().remote.display(),
                 o.shard.empty() ? "" : " (shard " + o.shard + ")");
    }
    return;
  }
  nlohmann::json list = nlohmann::json::array();
  for (const Item& item : w.items) {
    nlohmann::json j = {{"family", item.family->name},
                        {"params", params_json(item.params)},
                        {"target", item.target.str()},
                        {"status", status_name(item.status)},
                        {"key", item.key},
                        {"ms", item.ms}};
    if (!item.error.empty()) j["error"] = std::string(strip_prefix(item.error));
    list.push_back(std::move(j));
  }
  nlohmann::json target_names = nlohmann::json::array();
  for (const Target& target : w.targets) target_names.push_back(target.str());
  nlohmann::json report = {{"compiled", t.compiled},
                           {"in_remote", t.in_remote},
                           {"shard", o.shard},
                           {"cached", t.cached},
                           {"failed", t.failed},
                           {"evicted", evicted},
                           {"seconds", t.seconds},
                           {"jobs", jobs},
                           {"targets", target_names},
                           {"cache_dir", runtime.disk_cache().root},
                           {"items", list},
                           {"skipped", w.skipped}};
  if (!o.manifest.empty()) {
    report["manifest"] = o.manifest;
    report["invalid"] = w.manifest.invalid;
    report["user"] = w.manifest.user;
  }
  print_json(report);
}

/// kExitFailed, with the reason on stderr, when a compile failed, the remote tier lacks items
/// (--remote), manifest lines were invalid, or the cache evicted items or cannot hold the set
/// under its byte cap; else kExitOk.
int exit_status(const PrecompileOptions& o, const WorkList& w, const Tally& t, size_t evicted, uint64_t set_bytes,
                const Runtime& runtime) {
  const size_t n = w.items.size();
  if (t.failed > 0) {
    fmt::print(stderr, "kjit: error: {} of {} specializations failed to compile\n", t.failed, n);
    return kExitFailed;
  }
  if (o.remote && t.in_remote < n) {
    fmt::print(stderr, "kjit: error: {} of {} specializations are not in the remote tier {} (see the warnings above)\n",
               n - t.in_remote, n, runtime.config().remote.display());
    return kExitFailed;
  }
  const size_t invalid = w.manifest.invalid.size();
  if (invalid > 0) {
    fmt::print(stderr, "kjit: error: {} line{} of {} name{} no valid specialization (see above); the rest were "
               "precompiled\n", invalid, invalid == 1 ? "" : "s", o.manifest, invalid == 1 ? "s" : "");
    return kExitFailed;
  }
  if (evicted > 0) {
    fmt::print(stderr,
               "kjit: error: {} of the {} specializations are no longer in the cache: its byte cap ({}, "
               "KJIT_CACHE_MAX_BYTES) is too small for them; raise it (0 = no cap)\n",
               evicted, n, human_bytes(runtime.disk_cache().max_bytes));
    return kExitFailed;
  }
  const uint64_t cap = runtime.disk_cache().max_bytes;
  if (cap > 0 && set_bytes > cap) {
    fmt::print(stderr,
               "kjit: error: the {} specializations take {}, more than the cache's byte cap ({}, "
               "KJIT_CACHE_MAX_BYTES): the next publish evicts some of them; raise it (0 = no cap)\n",
               n, human_bytes(set_bytes), human_bytes(cap));
    return kExitFailed;
  }
  return kExitOk;
}

int run_precompile(const PrecompileOptions& o) {
  Runtime& runtime = writable_runtime();
  WorkList work = resolve_work(o, runtime);
  std::function<bool(const std::string&)> publish_remote;
  if (o.remote) publish_remote = fleet_publisher(runtime.config());
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs = std::max<size_t>(
      1, std::min<size_t>(o.jobs > 0 ? static_cast<size_t>(o.jobs) : hw, work.items.size()));
  print_plan(o, work, jobs, runtime);
  const Tally tally = compile_all(work.items, jobs, runtime, publish_remote);
  print_failures(work.items, tally.tty);
  uint64_t set_bytes = 0;
  const size_t evicted = count_evicted(work.items, runtime, &set_bytes);
  print_report(o, work, tally, jobs, evicted, runtime);
  return exit_status(o, work, tally, evicted, set_bytes, runtime);
}

}  // namespace

void add_precompile_command(CLI::App& root, std::vector<Command>& out) {
  auto o = std::make_shared<PrecompileOptions>();
  CLI::App* cmd = root.add_subcommand(
      "precompile", "Compile every family's default specializations into the disk cache, for "
                    "this machine's GPU archs (without a GPU: KJIT_ARCH's, else sm_90a and sm_89); a second run "
                    "finds them all cached");
  cmd->add_option("--arch", o->archs, "Target to compile for (repeatable): sm_90a, sm_89, "
                                      "sm_100a, ...")
      ->check(non_empty());
  cmd->add_option("--family", o->families, "Only this family (repeatable; see `kjit kernels`)")
      ->check(non_empty());
  cmd->add_option("--manifest", o->manifest,
                  "Compile exactly the specializations this warm-up manifest names (written by a run with "
                  "KJIT_RECORD=FILE), for their recorded targets or for each --arch; lines that no longer name "
                  "a valid specialization are reported with their line number and skipped, and the exit "
                  "status is then 1")
      ->check(non_empty());
  cmd->add_option("-j,--jobs", o->jobs, "Worker threads (default: the number of CPUs)")
      ->check(CLI::Range(1, 4096).description("").name("1..4096"));
  cmd->add_flag("--remote", o->remote,
                "Also publish every specialization to the remote tier (KJIT_REMOTE; signed with "
                "KJIT_REMOTE_SIGNING_KEY), compiled here or found in the disk cache");
  cmd->add_option("--shard", o->shard,
                  "i/N: compile only this builder's share of the set (keys whose low 64 bits mod N are i), so N "
                  "builders cover it exactly once")
      ->check(non_empty());
  add_json_flag(cmd);
  out.push_back({cmd, [o] { return run_precompile(*o); }});
}

}  // namespace kjit::cli
