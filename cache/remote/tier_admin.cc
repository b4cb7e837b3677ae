// The fleet tier's typed operations (remote/tier.hpp): scanning, reading, sizing and removing a
// namespace's keys for `kjit remote …`, and the tuning tables' keys for remote/tune_share.cc.
#include "cache/remote/tier.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace kjit::cache::remote {
namespace {

// Sets KEYS[1] to ARGV[3] only while it still holds what the writer read (ARGV[1]): 'none' (no
// value), 'bytes' (the value ARGV[2]) or 'over' (any value longer than ARGV[2] bytes, the cap: one
// the writer refused by its length, unread). A merge computed from a stale read is retried
// instead of dropping another writer's entries.
constexpr std::string_view kSwapScript =
    "local ok "
    "if ARGV[1] == 'over' then ok = redis.call('strlen', KEYS[1]) > tonumber(ARGV[2]) "
    "elseif ARGV[1] == 'none' then ok = redis.call('exists', KEYS[1]) == 0 "
    "else ok = redis.call('get', KEYS[1]) == ARGV[2] end "
    "if ok then redis.call('set', KEYS[1], ARGV[3]) return 1 end "
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

Reply RemoteTier::call(const std::vector<std::string_view>& args) { return std::move(call_all({args}).front()); }

std::vector<Reply> RemoteTier::call_all(const std::vector<std::vector<std::string_view>>& commands) {
  const uint64_t skipped = client_.skipped();
  std::optional<std::vector<Reply>> r = client_.pipeline(commands);
  if (r && r->size() == commands.size()) return std::move(*r);
  fail(commands.at(0).at(0), skipped);
}

void RemoteTier::fail(std::string_view what, uint64_t skipped_before) const {
  const std::string fault = client_.last_error();
  if (client_.skipped() != skipped_before) {
    throw CacheError(fmt::format("{} is skipped for KJIT_REMOTE_COOLDOWN_MS after a fault: {}", where(), fault));
  }
  throw CacheError(fault.empty() ? fmt::format("{} did not answer {}", where(), what) : fault);
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

std::optional<RemoteTier::Stored> RemoteTier::read_stored(const std::string& name) {
  // As a read-only host's fetch(): no script, so a host whose ACL allows only reads may send it.
  const uint64_t first = std::min<uint64_t>(kPrefetchBytes, config().max_value_bytes + 1);
  std::vector<Reply> r = call_all({{"EXISTS", name}, {"STRLEN", name}, {"GETRANGE", name, "0", std::to_string(first - 1)}});
  if (r[0].integer != 1) return std::nullopt;
  Stored out;
  if (r[1].integer <= 0) {
    out.bytes.emplace();  // an empty value: junk for the checks to refuse, not an absent one
    return out;
  }
  const uint64_t skipped = client_.skipped();
  std::optional<Reply> v = read_range(name, r[1].integer, std::move(r[2].str));
  if (!v) fail("GETRANGE", skipped);
  if (v->type == Reply::Type::kInteger) {
    out.size = static_cast<uint64_t>(v->integer);
    count_refusal(name, Rejection::kOversized);
  } else if (v->type == Reply::Type::kString) {
    out.size = v->str.size();
    out.bytes = std::move(v->str);
  } else {
    return std::nullopt;  // deleted meanwhile
  }
  return out;
}

std::optional<RemoteTier::Stored> RemoteTier::read_value(const Key& key) {
  return read_stored(slot_key(key, Slot::kValue));
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

std::optional<RemoteTier::Stored> RemoteTier::read_tune_table(const std::string& id) {
  return read_stored(tune_prefix(config().ns) + id);
}

bool RemoteTier::swap_tune_table(const std::string& id, const std::optional<Stored>& expected,
                                 const std::string& value) {
  require_read_write("a tuning table push");
  const char* read = !expected ? "none" : expected->bytes ? "bytes" : "over";
  const std::string seen = !expected || !expected->bytes ? std::to_string(config().max_value_bytes) : *expected->bytes;
  return call({"EVAL", kSwapScript, "1", tune_prefix(config().ns) + id, read, seen, value}).integer == 1;
}

}  // namespace kjit::cache::remote
