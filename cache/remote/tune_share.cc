// Tuning tables through the fleet tier (remote/tune_share.hpp).
#include "cache/remote/tune_share.hpp"

#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

namespace kjit::cache::remote {
namespace {

// Sets KEYS[1] to ARGV[2] only while it still holds ARGV[1] ("" = absent): a merge computed
// from a stale read is retried instead of dropping another tuner's entries.
constexpr std::string_view kSwapScript =
    "local cur = redis.call('get', KEYS[1]) "
    "if (cur == false and ARGV[1] == '') or cur == ARGV[1] then redis.call('set', KEYS[1], ARGV[2]) return 1 end "
    "return 0";

std::optional<TuneTable> decode_tune(RemoteTier& tier, const std::string& id, std::string_view bytes) {
  Rejection why = Rejection::kNone;
  std::string note;
  std::optional<Record> r = decode_record(bytes, tune_record_key(id), tier.trusted(), &why, &note);
  if (r && r->kind != RecordKind::kTuneTable) {
    why = Rejection::kCorrupt;
    note = "a record of the wrong kind";
    r.reset();
  }
  if (r) {
    try {
      TuneTable t = decode_table(r->body);
      if (t.fingerprint_id == id) return t;
      note = "it names fingerprint " + t.fingerprint_id;
    } catch (const std::exception& e) {
      note = e.what();
    }
    why = Rejection::kCorrupt;
  }
  warn(fmt::format("remote cache {}: the tuning table of fingerprint {} was rejected ({}: {}); it is not merged",
                   tier.client().where(), id, rejection_name(why), note));
  return std::nullopt;
}

}  // namespace

Key tune_record_key(const std::string& id) { return KeyBuilder().add("tune.fingerprint", id).finish(); }

std::string tune_redis_key(const std::string& ns, const std::string& id) {
  return fmt::format("{{{}}}:tune:{}", ns, id);
}

bool push_tune_table(RemoteTier& tier, const TuneTable& table) {
  if (!tier.may_write()) return false;
  const std::string key = tune_redis_key(tier.config().ns, table.fingerprint_id);
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::optional<Reply> cur = tier.client().command({"GET", key});
    if (!cur) return false;
    TuneTable merged = table;
    std::string old;
    if (cur->type == Reply::Type::kString) {
      old = cur->str;
      // A stored table that fails the checks is replaced by ours, not merged.
      if (std::optional<TuneTable> stored = decode_tune(tier, table.fingerprint_id, old)) {
        merged = *stored;
        merge_tables(merged, table);
      }
    }
    const std::string value =
        encode_record(RecordKind::kTuneTable, tune_record_key(table.fingerprint_id), encode_table(merged), tier.signer());
    std::optional<Reply> r = tier.client().command({"EVAL", kSwapScript, "1", key, old, value});
    if (!r) return false;
    if (r->integer == 1) return true;
  }
  warn(fmt::format("remote cache {}: the tuning table of fingerprint {} kept changing under this push; not published",
                   tier.client().where(), table.fingerprint_id));
  return false;
}

std::vector<TuneTable> fetch_tune_tables(RemoteTier& tier, const std::string& only_id) {
  const std::string prefix = tune_redis_key(tier.config().ns, "");
  std::vector<std::string> ids;
  if (!only_id.empty()) {
    ids.push_back(only_id);
  } else {
    std::string cursor = "0";
    do {
      std::optional<Reply> r = tier.client().command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
      if (!r || r->type != Reply::Type::kArray || r->elements.size() != 2) {
        throw CacheError(fmt::format("remote cache {} did not answer SCAN", tier.client().where()));
      }
      cursor = r->elements[0].str;
      for (const Reply& name : r->elements[1].elements) ids.push_back(name.str.substr(prefix.size()));
    } while (cursor != "0");
  }
  std::vector<TuneTable> tables;
  for (const std::string& id : ids) {
    std::optional<Reply> r = tier.client().command({"GET", tune_redis_key(tier.config().ns, id)});
    if (!r) throw CacheError(fmt::format("remote cache {} did not answer GET", tier.client().where()));
    if (r->type != Reply::Type::kString) continue;
    if (std::optional<TuneTable> t = decode_tune(tier, id, r->str)) tables.push_back(std::move(*t));
  }
  return tables;
}

void share_tune_table(const RemoteConfig& config, const TuneTable& table) noexcept {
  if (!config.enabled()) return;
  try {
    RemoteTier tier(config);
    if (!tier.may_write()) return;
    push_tune_table(tier, table);
  } catch (const std::exception& e) {
    warn(fmt::format("the tuning table of fingerprint {} was not shared with the fleet: {}", table.fingerprint_id, e.what()));
  }
}

void merge_fleet_table(const RemoteConfig& config, const std::string& id, TuneTable* table, bool* found) noexcept {
  if (!config.enabled()) return;
  try {
    RemoteTier tier(config);
    for (const TuneTable& t : fetch_tune_tables(tier, id)) {
      if (!*found) {
        *table = t;
      } else {
        merge_tables(*table, t);
      }
      *found = true;
    }
  } catch (const std::exception& e) {
    warn(fmt::format("the fleet's tuning table of fingerprint {} was not merged: {}", id, e.what()));
  }
}

size_t merge_fleet_tables(RemoteTier& tier, const std::string& root, const std::string& only_id) {
  size_t merged = 0;
  for (const TuneTable& t : fetch_tune_tables(tier, only_id)) {
    publish_table(root, t);
    ++merged;
  }
  return merged;
}

}  // namespace kjit::cache::remote
