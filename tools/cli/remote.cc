// `kjit remote keygen|stats|ls|verify|pull|push|prune`: the fleet tier (KJIT_REMOTE) as an
// operator sees it. The work is in cache/remote/ (tier.hpp, record.hpp, signing.hpp); this file
// parses arguments, walks the namespace's keys and prints.
#include "tools/cli/common.hpp"

#include "runtime/internal.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <set>

namespace kjit::cli {
namespace {

using cache::remote::RemoteTier;
using cache::remote::Reply;

/// The tier the environment names, with the patience of a command rather than an op: the hot
/// path's few-millisecond timeouts would fail a scan of a large namespace.
std::unique_ptr<RemoteTier> open_tier() {
  RemoteConfig c = RuntimeConfig::from_env().remote;
  if (!c.enabled()) {
    throw InvalidArgument("KJIT_REMOTE is not set: name the fleet's Redis (redis://host:port/db or unix:///path)");
  }
  c.connect_timeout_ms = std::max(c.connect_timeout_ms, 2000);
  c.op_timeout_ms = std::max(c.op_timeout_ms, 5000);
  c.cooldown_ms = 0;
  return std::make_unique<RemoteTier>(c);
}

/// The reason a host may not write to the tier, or "" when it may.
std::string why_not_writable(const RemoteTier& tier) {
  if (tier.may_write()) return "";
  return tier.config().mode == RemoteMode::kReadOnly
             ? "KJIT_REMOTE_MODE=ro: this host never writes to the remote tier"
             : "KJIT_REMOTE_TRUSTED_KEYS is set but KJIT_REMOTE_SIGNING_KEY is not: unsigned entries would be "
               "rejected by every reader";
}

Reply call(RemoteTier& tier, const std::vector<std::string_view>& args) {
  std::optional<Reply> r = tier.client().command(args);
  if (!r) throw CacheError(fmt::format("remote cache {} did not answer {}", tier.client().where(), args[0]));
  return *r;
}

/// Escapes Redis glob characters in `text`.
std::string glob_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// The keys of the namespace whose Redis names end in `suffix` (":v", ":lease", ":fail"), as
/// cache keys, sorted.
std::vector<cache::Key> scan(RemoteTier& tier, const std::string& suffix) {
  const std::string prefix = "{" + tier.config().ns + ":";
  const std::string pattern = glob_escape(prefix) + "*" + glob_escape("}" + suffix);
  std::vector<cache::Key> keys;
  std::string cursor = "0";
  do {
    Reply r = call(tier, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (r.type != Reply::Type::kArray || r.elements.size() != 2) throw CacheError("SCAN gave an unexpected reply");
    cursor = r.elements[0].str;
    for (const Reply& name : r.elements[1].elements) {
      cache::Key k;
      const std::string& s = name.str;
      if (s.size() == prefix.size() + 32 + 1 + suffix.size() &&
          cache::Key::from_hex(std::string_view(s).substr(prefix.size(), 32), &k)) {
        keys.push_back(k);
      }
    }
  } while (cursor != "0");
  std::sort(keys.begin(), keys.end(), [](const cache::Key& a, const cache::Key& b) { return a.hex() < b.hex(); });
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

/// One value of the namespace, read and checked against the trusted keys.
struct Checked {
  cache::Key key;
  uint64_t bytes = 0;
  std::optional<cache::remote::Record> record;
  std::string problem;  ///< "" when it passes
};

std::optional<Checked> read_value(RemoteTier& tier, const cache::Key& key) {
  const cache::remote::SlotKeys k = cache::remote::slot_keys(tier.config().ns, key);
  Reply r = call(tier, {"GET", k.value});
  if (r.type != Reply::Type::kString) return std::nullopt;  // expired since the scan
  Checked c;
  c.key = key;
  c.bytes = r.str.size();
  cache::remote::Rejection why;
  std::string note;
  c.record = cache::remote::decode_record(r.str, key, tier.trusted(), &why, &note);
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

int run_stats() {
  auto tier = open_tier();
  const std::vector<cache::Key> values = scan(*tier, ":v");
  uint64_t bytes = 0;
  for (const cache::Key& k : values) {
    bytes += static_cast<uint64_t>(call(*tier, {"STRLEN", cache::remote::slot_keys(tier->config().ns, k).value}).integer);
  }
  const size_t leases = scan(*tier, ":lease").size(), failures = scan(*tier, ":fail").size();
  std::string used = "?";
  const Reply info = call(*tier, {"INFO", "memory"});
  if (size_t at = info.str.find("used_memory:"); at != std::string::npos) {
    used = info.str.substr(at + 12, info.str.find('\r', at) - at - 12);
  }
  if (output().json) {
    print_json({{"server", tier->client().where()},
                {"namespace", tier->config().ns},
                {"entries", values.size()},
                {"bytes", bytes},
                {"leases", leases},
                {"failures", failures},
                {"server_used_memory", used}});
  } else {
    fmt::print("server     {}\nnamespace  {}\nentries    {} ({})\nleases     {}\nfailures   {}\nserver memory {} bytes\n",
               tier->client().where(), tier->config().ns, values.size(), human_bytes(bytes), leases, failures, used);
  }
  return kExitOk;
}

nlohmann::json checked_json(const Checked& c, RemoteTier& tier) {
  nlohmann::json j = {{"key", c.key.hex()}, {"bytes", c.bytes}, {"ok", c.problem.empty()}};
  const Reply ttl = call(tier, {"TTL", cache::remote::slot_keys(tier.config().ns, c.key).value});
  j["ttl_s"] = ttl.integer;
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

int run_ls_or_verify(bool verify) {
  auto tier = open_tier();
  nlohmann::json rows = nlohmann::json::array();
  uint64_t bad = 0;
  for (const cache::Key& k : scan(*tier, ":v")) {
    std::optional<Checked> c = read_value(*tier, k);
    if (!c) continue;
    bad += c->problem.empty() ? 0 : 1;
    rows.push_back(checked_json(*c, *tier));
  }
  if (output().json) {
    print_json({{"server", tier->client().where()},
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
    fmt::print("{} entr{}: {} ok, {} bad (checked against {} trusted key{})\n", rows.size(),
               rows.size() == 1 ? "y" : "ies", rows.size() - bad, bad, tier->trusted().size(),
               tier->trusted().size() == 1 ? "" : "s");
  }
  return verify && bad > 0 ? kExitFailed : kExitOk;
}

int run_pull(const std::string& manifest) {
  const RuntimeConfig config = RuntimeConfig::from_env();
  cache::DiskCache disk = open_cache_strict(config);
  auto tier = open_tier();
  std::vector<cache::Key> keys;
  if (manifest.empty()) {
    keys = scan(*tier, ":v");
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
      throw CacheError(fmt::format("remote cache {} stopped answering", tier->client().where()));
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
// already (SET NX found it), or refused (a fault, the server's error such as OOM, the value cap).
Pushed push_entry(RemoteTier& tier, const cache::Entry& e) {
  if (tier.publish(e)) return Pushed::kWritten;
  const std::optional<Reply> r = tier.client().command({"EXISTS", cache::remote::slot_keys(tier.config().ns, e.key).value});
  return r && r->integer == 1 ? Pushed::kPresent : Pushed::kRefused;
}

int run_push() {
  const RuntimeConfig config = RuntimeConfig::from_env();
  const cache::DiskCache disk = open_cache_for_reading(config);
  auto tier = open_tier();
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
    fmt::print(stderr, "kjit: error: the remote tier {} refused {} entr{} (see the warnings above)\n",
               tier->config().display(), refused, refused == 1 ? "y" : "ies");
    return kExitFailed;
  }
  return kExitOk;
}

int run_manifest(const std::string& path) {
  auto tier = open_tier();
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

int run_prune(bool failures) {
  auto tier = open_tier();
  if (tier->config().mode == RemoteMode::kReadOnly) {
    throw InvalidArgument("KJIT_REMOTE_MODE=ro: this host never writes to the remote tier");
  }
  uint64_t removed = 0, kept = 0, removed_failures = 0;
  for (const cache::Key& k : scan(*tier, ":v")) {
    std::optional<Checked> c = read_value(*tier, k);
    if (!c) continue;
    if (c->problem.empty()) {
      ++kept;
      continue;
    }
    call(*tier, {"DEL", cache::remote::slot_keys(tier->config().ns, k).value});
    ++removed;
    if (!output().json) fmt::print("removed {}: {}\n", k.hex(), c->problem);
  }
  if (failures) {
    for (const cache::Key& k : scan(*tier, ":fail")) {
      removed_failures += static_cast<uint64_t>(call(*tier, {"DEL", cache::remote::slot_keys(tier->config().ns, k).failure}).integer);
    }
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
  return [tier, disk](const std::string& key_hex) {
    cache::Key k;
    if (!cache::Key::from_hex(key_hex, &k)) return false;
    std::optional<cache::Entry> e = disk->lookup(k, /*count_hit=*/false);
    // Not written is fine when it is there already (this host's runtime published its compile).
    return e && push_entry(*tier, *e) != Pushed::kRefused;
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

  CLI::App* stats = remote->add_subcommand("stats", "Entries, bytes, live leases and failure records of the namespace");
  add_json_flag(stats);
  out.push_back({stats, run_stats});

  CLI::App* ls = remote->add_subcommand("ls", "List the namespace's entries: key, family, target, size, TTL, signer");
  add_json_flag(ls);
  out.push_back({ls, [] { return run_ls_or_verify(false); }});

  CLI::App* verify = remote->add_subcommand("verify", "Check every entry (checksum, key, signature against "
                                                      "KJIT_REMOTE_TRUSTED_KEYS); exits 1 when any is bad");
  add_json_flag(verify);
  out.push_back({verify, [] { return run_ls_or_verify(true); }});

  auto manifest = std::make_shared<std::string>();
  CLI::App* pull = remote->add_subcommand("pull", "Copy checked entries into the disk cache: all of them, or those a "
                                                  "warm-up manifest names; exits 1 when any was rejected");
  pull->add_option("--manifest", *manifest, "Only the keys this manifest (KJIT_RECORD) names")->check(non_empty());
  add_json_flag(pull);
  out.push_back({pull, [manifest] { return run_pull(*manifest); }});

  CLI::App* push = remote->add_subcommand("push", "Publish every disk cache entry to the remote tier (signed with "
                                                  "KJIT_REMOTE_SIGNING_KEY; present ones are kept)");
  add_json_flag(push);
  out.push_back({push, run_push});

  auto manifest_out = std::make_shared<std::string>();
  CLI::App* mf = remote->add_subcommand("manifest", "Print (or write with -o) the fleet's warm-up manifest: every "
                                                    "specialization that hosts with KJIT_RECORD=remote: obtained");
  mf->add_option("-o,--output", *manifest_out, "Write it to this file, for kjit precompile --manifest")->check(non_empty());
  add_json_flag(mf);
  out.push_back({mf, [manifest_out] { return run_manifest(*manifest_out); }});

  auto failures = std::make_shared<bool>(false);
  CLI::App* prune = remote->add_subcommand("prune", "Delete entries that fail verification (corrupt, foreign, or not "
                                                    "signed by a trusted key), so a builder can publish them again");
  prune->add_flag("--failures", *failures, "Also delete every failed-compile record (retry them fleet-wide)");
  add_json_flag(prune);
  out.push_back({prune, [failures] { return run_prune(*failures); }});
}

}  // namespace kjit::cli
