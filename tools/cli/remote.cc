// `kjit remote keygen|stats|ls|verify|pull|push|prune`: the fleet tier (KJIT_REMOTE) as an
// operator sees it. The work is in cache/remote/ (tier.hpp, record.hpp, signing.hpp); this file
// parses arguments, walks the namespace's keys and prints.
#include "tools/cli/common.hpp"

#include "runtime/internal/cache.hpp"
#include "runtime/internal/fleet.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <memory>
#include <set>

namespace kjit::cli {
namespace {

using cache::remote::RemoteTier;
using Slot = cache::remote::RemoteTier::Slot;

/// The tier the environment names, for a command: it follows KJIT_REMOTE_CONNECT_TIMEOUT_MS and
/// KJIT_REMOTE_TIMEOUT_MS, or `timeout_ms` (--timeout-ms) for both when it is not 0; it has no
/// circuit breaker (a command stops at its first fault) and warns nothing of faults (the
/// command reports them as its error).
std::unique_ptr<RemoteTier> open_tier(int timeout_ms = 0) {
  RemoteConfig c = RuntimeConfig::from_env().remote;
  if (!c.enabled()) {
    throw InvalidArgument("KJIT_REMOTE is not set: name the fleet's Redis (redis://host:port/db or unix:///path)");
  }
  if (timeout_ms > 0) c.connect_timeout_ms = c.op_timeout_ms = timeout_ms;
  c.cooldown_ms = 0;
  return std::make_unique<RemoteTier>(c, cache::remote::Caller::kCommand);
}

/// `run` as the command `name` ("remote stats"): a fault of the tier (CacheError) is reported
/// as that command's error, "remote stats: no answer within 100 ms from redis://…".
std::function<int()> as_command(std::string name, std::function<int()> run) {
  return [name = std::move(name), run = std::move(run)] {
    try {
      return run();
    } catch (const CacheError& e) {
      throw CacheError(fmt::format("{}: {}", name, strip_prefix(e.what())));
    }
  };
}

/// The reason a host may not write to the tier, or "" when it may.
std::string why_not_writable(const RemoteTier& tier) {
  if (tier.may_write()) return "";
  return tier.config().mode == RemoteMode::kReadOnly
             ? "KJIT_REMOTE_MODE=ro: this host never writes to the remote tier"
             : "KJIT_REMOTE_TRUSTED_KEYS is set but KJIT_REMOTE_SIGNING_KEY is not: unsigned entries would be "
               "rejected by every reader";
}

/// One value of the namespace, read within KJIT_REMOTE_MAX_VALUE_BYTES (a longer one by its
/// length alone) and checked against the trusted keys.
struct Checked {
  cache::Key key;
  uint64_t bytes = 0;
  std::optional<cache::remote::Record> record;
  std::string problem;  ///< "" when it passes
};

std::optional<Checked> read_value(RemoteTier& tier, const cache::Key& key) {
  const std::optional<RemoteTier::Stored> stored = tier.read_value(key);
  if (!stored) return std::nullopt;  // expired since the scan
  Checked c;
  c.key = key;
  c.bytes = stored->size;
  cache::remote::Rejection why = cache::remote::Rejection::kOversized;
  std::string note;
  if (!stored->bytes) {
    note = tier.oversized_note(stored->size);  // refused by its length, never downloaded
  } else {
    c.record = cache::remote::decode_record(*stored->bytes, key, tier.trusted(), &why, &note);
  }
  if (!c.record) c.problem = fmt::format("{}: {}", cache::remote::rejection_name(why), note);
  return c;
}

int run_keygen(const std::string& name) {
  const cache::remote::SecretKey key = cache::remote::generate_key();
  const std::string secret = name + ".key", pub = name + ".pub";
  // O_EXCL: never overwrite a fleet's key.
  const int fd = ::open(secret.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw InvalidArgument(fmt::format("cannot create {}: {}", secret, cache::errno_text(errno)));
  }
  const std::string text = cache::remote::secret_key_text(key);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || cache::write_file_atomic(pub, cache::remote::public_key_text(key.pub)) != 0) {
    throw CacheError(fmt::format("cannot write the key pair {} / {}", secret, pub));
  }
  const std::string id = fmt::format("{:016x}", key.pub.id);
  if (output().json) {
    print_json({{"secret_key_file", secret}, {"public_key_file", pub}, {"key_id", id}});
  } else {
    fmt::print("wrote {} (secret: builders only, KJIT_REMOTE_SIGNING_KEY) and {} (public: every host, "
               "KJIT_REMOTE_TRUSTED_KEYS); key id {}\n",
               secret, pub, id);
  }
  return kExitOk;
}

int run_stats(int timeout_ms) {
  auto tier = open_tier(timeout_ms);
  const std::vector<cache::Key> values = tier->scan(Slot::kValue);
  uint64_t bytes = 0;
  for (const cache::Key& k : values) bytes += tier->value_bytes(k);
  const size_t leases = tier->scan(Slot::kLease).size(), failures = tier->scan(Slot::kFailure).size();
  const std::optional<uint64_t> used = tier->server_used_memory();
  if (output().json) {
    print_json({{"server", tier->where()},
                {"namespace", tier->config().ns},
                {"entries", values.size()},
                {"bytes", bytes},
                {"leases", leases},
                {"failures", failures},
                {"server_used_memory", used ? nlohmann::json(*used) : nlohmann::json(nullptr)}});
  } else {
    fmt::print("server     {}\nnamespace  {}\nentries    {} ({})\nleases     {}\nfailures   {}\nserver memory {}\n",
               tier->where(), tier->config().ns, values.size(), human_bytes(bytes), leases, failures,
               used ? human_bytes(*used) : std::string("? (INFO memory gave none)"));
  }
  return kExitOk;
}

nlohmann::json checked_json(const Checked& c, RemoteTier& tier) {
  nlohmann::json j = {{"key", c.key.hex()}, {"bytes", c.bytes}, {"ok", c.problem.empty()}};
  j["ttl_s"] = tier.value_ttl_s(c.key);
  if (c.record) {
    j["signer"] = c.record->signer ? fmt::format("{:016x}", c.record->signer) : "";
    if (c.record->entry) {
      j["family"] = c.record->entry->meta.family;
      j["template_args"] = c.record->entry->meta.template_args;
      j["target"] = c.record->entry->meta.target;
    }
  } else {
    j["problem"] = c.problem;
  }
  return j;
}

int run_ls_or_verify(bool verify, int timeout_ms) {
  auto tier = open_tier(timeout_ms);
  nlohmann::json rows = nlohmann::json::array();
  uint64_t bad = 0;
  for (const cache::Key& k : tier->scan(Slot::kValue)) {
    std::optional<Checked> c = read_value(*tier, k);
    if (!c) continue;
    bad += c->problem.empty() ? 0 : 1;
    rows.push_back(checked_json(*c, *tier));
  }
  if (output().json) {
    print_json({{"server", tier->where()},
                {"trusted_keys", tier->trusted().size()},
                {"entries", rows},
                {"ok", rows.size() - bad},
                {"bad", bad}});
  } else {
    for (const nlohmann::json& r : rows) {
      if (verify && r["ok"].get<bool>()) continue;
      if (!r["ok"].get<bool>()) {
        fmt::print("{}  BAD  {}\n", r["key"].get<std::string>(), r["problem"].get<std::string>());
      } else {
        fmt::print("{}  {:<18} {:<8} {:>10}  ttl {:>8}s  signer {}  {}\n", r["key"].get<std::string>(),
                   r.value("family", ""), r.value("target", ""), human_bytes(r["bytes"].get<uint64_t>()),
                   r["ttl_s"].get<int64_t>(), r.value("signer", "").empty() ? "-" : r["signer"].get<std::string>(),
                   r.value("template_args", ""));
      }
    }
    const size_t trusted = tier->trusted().size();
    fmt::print("{} entr{}: {} ok, {} bad ({})\n", rows.size(), rows.size() == 1 ? "y" : "ies", rows.size() - bad, bad,
               trusted > 0 ? fmt::format("signatures checked against {} trusted key{}", trusted, trusted == 1 ? "" : "s")
                           : std::string("checksums and keys only: KJIT_REMOTE_TRUSTED_KEYS is not set, so signatures "
                                         "were not checked"));
  }
  return verify && bad > 0 ? kExitFailed : kExitOk;
}

int run_pull(const std::string& manifest, int timeout_ms) {
  const RuntimeConfig config = RuntimeConfig::from_env();
  cache::DiskCache disk = open_cache_strict(config);
  auto tier = open_tier(timeout_ms);
  std::vector<cache::Key> keys;
  if (manifest.empty()) {
    keys = tier->scan(Slot::kValue);
  } else {
    const std::string text = cache::read_input_file(manifest, "manifest", cache::kMaxManifestBytes);
    std::set<std::string> seen;
    for (const cache::ManifestLine& line : cache::parse_manifest(text)) {
      cache::Key k;
      if (line.entry && seen.insert(line.entry->key).second && cache::Key::from_hex(line.entry->key, &k)) keys.push_back(k);
    }
  }
  uint64_t pulled = 0, present = 0, missing = 0, rejected = 0;
  for (const cache::Key& k : keys) {
    if (disk.lookup(k, /*count_hit=*/false)) {
      ++present;
      continue;
    }
    RemoteTier::Lookup r = tier->fetch(k);
    if (r.entry) {
      disk.publish(*r.entry);
      ++pulled;
    } else if (r.found == RemoteTier::Found::kRejected) {
      ++rejected;
    } else if (r.found == RemoteTier::Found::kFault) {
      throw CacheError(tier->last_error());
    } else {
      ++missing;
    }
  }
  // The fleet's tuning tables, merged into this cache's (newer measurements win).
  const size_t tables = cache::remote::merge_fleet_tables(*tier, config.cache_dir);
  if (output().json) {
    print_json({{"pulled", pulled}, {"present", present}, {"missing", missing}, {"rejected", rejected},
                {"tuning_tables", tables}, {"cache_dir", disk.root()}});
  } else {
    fmt::print("pulled {} entr{} into {}; {} already there, {} not in the remote tier, {} rejected; merged {} "
               "tuning table{}\n",
               pulled, pulled == 1 ? "y" : "ies", disk.root(), present, missing, rejected, tables,
               tables == 1 ? "" : "s");
  }
  return rejected > 0 ? kExitFailed : kExitOk;
}

enum class Pushed { kWritten, kPresent, kRefused };

// Publishes `e` to the tier and says whether the tier holds it now: written by this call, there
// already (SET NX found it), or refused (the server's error such as OOM, the value cap). A tier
// that does not answer is the command's error (CacheError).
Pushed push_entry(RemoteTier& tier, const cache::Entry& e) {
  if (tier.publish(e)) return Pushed::kWritten;
  return tier.has_value(e.key) ? Pushed::kPresent : Pushed::kRefused;
}

int run_push(int timeout_ms) {
  const RuntimeConfig config = RuntimeConfig::from_env();
  const cache::DiskCache disk = open_cache_for_reading(config);
  auto tier = open_tier(timeout_ms);
  if (std::string why = why_not_writable(*tier); !why.empty()) throw InvalidArgument(why);
  uint64_t pushed = 0, present = 0, bad = 0, refused = 0;
  for (const cache::EntryInfo& info : disk.list()) {
    std::optional<cache::Entry> e = disk.lookup(info.key, /*count_hit=*/false);
    if (!e) {
      ++bad;
      continue;
    }
    switch (push_entry(*tier, *e)) {
      case Pushed::kWritten: ++pushed; break;
      case Pushed::kPresent: ++present; break;
      case Pushed::kRefused: ++refused; break;
    }
  }
  uint64_t tables = 0;
  for (const std::string& name : cache::list_tables(config.cache_dir)) {
    cache::TuneTable t;
    if (cache::read_table(cache::tuning_dir(config.cache_dir) + "/" + name, &t) && cache::remote::push_tune_table(*tier, t)) {
      ++tables;
    }
  }
  if (output().json) {
    print_json({{"pushed", pushed}, {"present", present}, {"refused", refused}, {"bad", bad},
                {"tuning_tables", tables}, {"signed", tier->signer() != nullptr}});
  } else {
    fmt::print("pushed {} entr{} ({}); {} already there; {} local entr{} unreadable; merged {} tuning table{}\n",
               pushed, pushed == 1 ? "y" : "ies", tier->signer() ? "signed" : "unsigned", present, bad,
               bad == 1 ? "y" : "ies", tables, tables == 1 ? "" : "s");
  }
  if (refused > 0) {
    const std::string fault = tier->last_error();
    fmt::print(stderr, "kjit: error: remote push: {} refused {} entr{}{}\n", tier->where(), refused,
               refused == 1 ? "y" : "ies", fault.empty() ? " (see the warnings above)" : "; the last refusal: " + fault);
    return kExitFailed;
  }
  return kExitOk;
}

int run_manifest(const std::string& path, int timeout_ms) {
  auto tier = open_tier(timeout_ms);
  const std::vector<std::string> lines = tier->manifest_lines();
  std::string text;
  for (const std::string& line : lines) text += line.empty() || line.back() != '\n' ? line + "\n" : line;
  if (!path.empty()) {
    if (int err = cache::write_file_atomic(path, text); err != 0) {
      throw CacheError(fmt::format("cannot write {}: {}", path, cache::errno_text(err)));
    }
  }
  if (output().json) {
    nlohmann::json j = {{"lines", lines.size()}};
    if (!path.empty()) j["file"] = path;
    print_json(j);
  } else if (path.empty()) {
    fmt::print("{}", text);
  } else {
    fmt::print("wrote {} line{} of the fleet's manifest to {} (replay: kjit precompile --manifest {})\n", lines.size(),
               lines.size() == 1 ? "" : "s", path, path);
  }
  return kExitOk;
}

int run_prune(bool failures, int timeout_ms) {
  auto tier = open_tier(timeout_ms);
  if (tier->config().mode == RemoteMode::kReadOnly) {
    throw InvalidArgument("KJIT_REMOTE_MODE=ro: this host never writes to the remote tier");
  }
  uint64_t removed = 0, kept = 0, removed_failures = 0;
  for (const cache::Key& k : tier->scan(Slot::kValue)) {
    std::optional<Checked> c = read_value(*tier, k);
    if (!c) continue;
    if (c->problem.empty()) {
      ++kept;
      continue;
    }
    tier->remove(k, Slot::kValue);
    ++removed;
    if (!output().json) fmt::print("removed {}: {}\n", k.hex(), c->problem);
  }
  if (failures) {
    for (const cache::Key& k : tier->scan(Slot::kFailure)) removed_failures += tier->remove(k, Slot::kFailure) ? 1 : 0;
  }
  if (output().json) {
    print_json({{"removed", removed}, {"kept", kept}, {"removed_failures", removed_failures}});
  } else {
    fmt::print("removed {} bad entr{}, kept {}; removed {} failure record{}\n", removed, removed == 1 ? "y" : "ies", kept,
               removed_failures, removed_failures == 1 ? "" : "s");
  }
  return kExitOk;
}

}  // namespace

bool FleetShard::has(const std::string& key_hex) const {
  cache::Key k;
  return cache::Key::from_hex(key_hex, &k) && k.lo % count == index;
}

FleetShard parse_shard(const std::string& text) {
  FleetShard s;
  unsigned long long i = 0, n = 0;
  // Digits only on both sides (no sign, no space), each within 64 bits.
  auto number = [](std::string_view digits, unsigned long long* out) {
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return false;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
    return ec == std::errc() && end == digits.data() + digits.size();
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos || !number(std::string_view(text).substr(0, slash), &i) ||
      !number(std::string_view(text).substr(slash + 1), &n) || n == 0 || i >= n) {
    throw InvalidArgument(fmt::format("--shard '{}' is not i/N with 0 <= i < N (e.g. 0/4)", text));
  }
  s.index = i;
  s.count = n;
  return s;
}

std::function<bool(const std::string&)> fleet_publisher(const RuntimeConfig& config) {
  std::shared_ptr<RemoteTier> tier = open_tier();
  if (std::string why = why_not_writable(*tier); !why.empty()) throw InvalidArgument("--remote: " + why);
  auto disk = std::make_shared<cache::DiskCache>(open_cache_for_reading(config));
  auto warned = std::make_shared<std::atomic<bool>>(false);
  return [tier, disk, warned](const std::string& key_hex) {
    cache::Key k;
    if (!cache::Key::from_hex(key_hex, &k)) return false;
    std::optional<cache::Entry> e = disk->lookup(k, /*count_hit=*/false);
    if (!e) return false;
    try {
      // Not written is fine when it is there already (this host's runtime published its compile).
      if (push_entry(*tier, *e) != Pushed::kRefused) return true;
    } catch (const CacheError&) {
    }
    // The report counts what is missing; the first fault says why.
    if (const std::string fault = tier->last_error(); !fault.empty() && !warned->exchange(true)) {
      warn(fmt::format("precompile --remote: {}", fault));
    }
    return false;
  };
}

void add_remote_commands(CLI::App& root, std::vector<Command>& out) {
  CLI::App* remote = root.add_subcommand(
      "remote", "The fleet tier: the Redis that KJIT_REMOTE names, shared by a fleet's hosts (signing keys, "
                "inspection, pulling and pushing entries)");
  remote->require_subcommand(1);

  auto name = std::make_shared<std::string>();
  CLI::App* keygen = remote->add_subcommand("keygen", "Make an Ed25519 key pair: NAME.key (secret, for builders) "
                                                      "and NAME.pub (public, for every host); never overwrites");
  keygen->add_option("name", *name, "Path prefix of the two files")->required()->check(non_empty());
  add_json_flag(keygen);
  out.push_back({keygen, [name] { return run_keygen(*name); }});

  // Every command that talks to the server: --json, and --timeout-ms over the variables.
  auto timeout_ms = std::make_shared<int>(0);
  auto server_command = [&](const char* command, const char* help) {
    CLI::App* app = remote->add_subcommand(command, help);
    app->add_option("--timeout-ms", *timeout_ms,
                    "The most a connect, or one read or write of a command, may wait for the server (default: "
                    "KJIT_REMOTE_CONNECT_TIMEOUT_MS and KJIT_REMOTE_TIMEOUT_MS)")
        ->check(CLI::Range(1, 600000));
    add_json_flag(app);
    return app;
  };
  auto add = [&](CLI::App* app, std::function<int(int)> run) {
    out.push_back({app, as_command(std::string("remote ") + app->get_name(),
                                   [run = std::move(run), timeout_ms] { return run(*timeout_ms); })});
  };

  add(server_command("stats", "Entries, bytes, live leases and failure records of the namespace"), run_stats);
  add(server_command("ls", "List the namespace's entries: key, family, target, size, TTL, signer"),
      [](int t) { return run_ls_or_verify(false, t); });
  add(server_command("verify", "Check every entry (checksum, key, signature against KJIT_REMOTE_TRUSTED_KEYS); exits "
                               "1 when any is bad"),
      [](int t) { return run_ls_or_verify(true, t); });

  auto manifest = std::make_shared<std::string>();
  CLI::App* pull = server_command("pull", "Copy checked entries into the disk cache: all of them, or those a warm-up "
                                          "manifest names; exits 1 when any was rejected");
  pull->add_option("--manifest", *manifest, "Only the keys this manifest (KJIT_RECORD) names")->check(non_empty());
  add(pull, [manifest](int t) { return run_pull(*manifest, t); });

  add(server_command("push", "Publish every disk cache entry to the remote tier (signed with KJIT_REMOTE_SIGNING_KEY; "
                             "present ones are kept)"),
      run_push);

  auto manifest_out = std::make_shared<std::string>();
  CLI::App* mf = server_command("manifest", "Print (or write with -o) the fleet's warm-up manifest: every "
                                            "specialization that hosts with KJIT_RECORD=remote: obtained");
  mf->add_option("-o,--output", *manifest_out, "Write it to this file, for kjit precompile --manifest")->check(non_empty());
  add(mf, [manifest_out](int t) { return run_manifest(*manifest_out, t); });

  auto failures = std::make_shared<bool>(false);
  CLI::App* prune = server_command("prune", "Delete entries that fail verification (corrupt, foreign, or not signed by "
                                            "a trusted key), so a builder can publish them again");
  prune->add_flag("--failures", *failures, "Also delete every failed-compile record (retry them fleet-wide)");
  add(prune, [failures](int t) { return run_prune(*failures, t); });
}

}  // namespace kjit::cli
