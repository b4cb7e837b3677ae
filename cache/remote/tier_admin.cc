// The fleet tier's typed operations (remote/tier.hpp): scanning, reading, sizing and removing a
// namespace's keys for `kjit remote …`, and the tuning tables' keys for remote/tune_share.cc.
#include "cache/remote/tier.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace kjit::cache::remote {
namespace {

// Sets KEYS[1] to ARGV[2] only while it still holds ARGV[1] ("" = absent): a merge computed
// from a stale read is retried instead of dropping another writer's entries.
constexpr std::string_view kSwapScript =
    "local cur = redis.call('get', KEYS[1]) "
    "if (cur == false and ARGV[1] == '') or cur == ARGV[1] then redis.call('set', KEYS[1], ARGV[2]) return 1 end "
    "return 0";

/// `text` with Redis glob characters escaped, for SCAN MATCH.
std::string glob_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

const std::string& pick(const SlotKeys& keys, RemoteTier::Slot slot) {
  switch (slot) {
    case RemoteTier::Slot::kValue: return keys.value;
    case RemoteTier::Slot::kLease: return keys.lease;
    case RemoteTier::Slot::kFailure: return keys.failure;
  }
  return keys.value;
}

/// The Redis key prefix of the namespace's tuning tables; the fingerprint id follows it.
std::string tune_prefix(const std::string& ns) { return fmt::format("{{{}}}:tune:", ns); }

}  // namespace

Reply RemoteTier::call(const std::vector<std::string_view>& args) {
  const uint64_t skipped = client_.skipped();
  std::optional<Reply> r = client_.command(args);
  if (r) return std::move(*r);
  const std::string fault = client_.last_error();
  if (client_.skipped() != skipped) {
    throw CacheError(fmt::format("{} is skipped for KJIT_REMOTE_COOLDOWN_MS after a fault: {}", where(), fault));
  }
  throw CacheError(fault.empty() ? fmt::format("{} did not answer {}", where(), args.at(0)) : fault);
}

std::string RemoteTier::slot_key(const Key& key, Slot slot) const { return pick(slot_keys(config().ns, key), slot); }

void RemoteTier::require_read_write(std::string_view what) const {
  if (config().mode == RemoteMode::kReadOnly) {
    throw InvalidArgument(fmt::format("KJIT_REMOTE_MODE=ro: this host never writes to the remote tier ({})", what));
  }
}

std::vector<std::string> RemoteTier::scan_names(const std::string& pattern) {
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    Reply r = call({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (r.type != Reply::Type::kArray || r.elements.size() != 2) {
      throw CacheError(fmt::format("{} answered SCAN with something other than a cursor and keys", where()));
    }
    cursor = r.elements[0].str;
    for (Reply& e : r.elements[1].elements) names.push_back(std::move(e.str));
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());  // SCAN may return a key twice
  return names;
}

std::vector<Key> RemoteTier::scan(Slot slot) {
  // The names slot_keys gives, split around the key's hex digits: "{ns:" <hex> "}:v".
  const Key probe{};
  const std::string name = slot_key(probe, slot);
  const size_t hex_at = name.rfind(probe.hex());
  const std::string prefix = name.substr(0, hex_at), suffix = name.substr(hex_at + probe.hex().size());
  std::vector<Key> keys;
  for (const std::string& s : scan_names(glob_escape(prefix) + "*" + glob_escape(suffix))) {
    Key k;
    if (s.size() == name.size() && s.compare(0, prefix.size(), prefix) == 0 &&
        s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        Key::from_hex(std::string_view(s).substr(prefix.size(), s.size() - prefix.size() - suffix.size()), &k)) {
      keys.push_back(k);
    }
  }
  // Names sort as their hex digits do.
  return keys;
}

std::optional<std::string> RemoteTier::read_value(const Key& key) {
  Reply r = call({"GET", slot_key(key, Slot::kValue)});
  if (r.type != Reply::Type::kString) return std::nullopt;
  return std::move(r.str);
}

uint64_t RemoteTier::value_bytes(const Key& key) {
  const Reply r = call({"STRLEN", slot_key(key, Slot::kValue)});
  return r.integer > 0 ? static_cast<uint64_t>(r.integer) : 0;
}

int64_t RemoteTier::value_ttl_s(const Key& key) { return call({"TTL", slot_key(key, Slot::kValue)}).integer; }

bool RemoteTier::has_value(const Key& key) { return call({"EXISTS", slot_key(key, Slot::kValue)}).integer == 1; }

bool RemoteTier::remove(const Key& key, Slot slot) {
  require_read_write("a delete");
  return call({"DEL", slot_key(key, slot)}).integer > 0;
}

std::optional<uint64_t> RemoteTier::server_used_memory() {
  const Reply r = call({"INFO", "memory"});
  constexpr std::string_view kField = "used_memory:";
  size_t at = r.str.find(kField);
  // "used_memory:" begins a line; "used_memory_rss:" and the like are other fields.
  while (at != std::string::npos && at > 0 && r.str[at - 1] != '\n') at = r.str.find(kField, at + 1);
  if (at == std::string::npos) return std::nullopt;
  const char* first = r.str.data() + at + kField.size();
  uint64_t bytes = 0;
  const auto [end, ec] = std::from_chars(first, r.str.data() + r.str.size(), bytes);
  if (ec != std::errc() || end == first) return std::nullopt;
  return bytes;
}

std::vector<std::string> RemoteTier::tune_table_ids() {
  const std::string prefix = tune_prefix(config().ns);
  std::vector<std::string> ids;
  for (const std::string& name : scan_names(glob_escape(prefix) + "*")) {
    if (name.size() > prefix.size()) ids.push_back(name.substr(prefix.size()));
  }
  return ids;
}

std::optional<std::string> RemoteTier::read_tune_table(const std::string& id) {
  Reply r = call({"GET", tune_prefix(config().ns) + id});
  if (r.type != Reply::Type::kString) return std::nullopt;
  return std::move(r.str);
}

bool RemoteTier::swap_tune_table(const std::string& id, const std::optional<std::string>& expected,
                                 const std::string& value) {
  require_read_write("a tuning table push");
  return call({"EVAL", kSwapScript, "1", tune_prefix(config().ns) + id, expected.value_or(""), value}).integer == 1;
}

}  // namespace kjit::cache::remote
