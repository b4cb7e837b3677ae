// Tuning tables through the fleet tier (remote/tune_share.hpp).
#include "cache/remote/tune_share.hpp"

#include "cache/echo.hpp"
#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

namespace kjit::cache::remote {
namespace {

std::optional<TuneTable> decode_tune(RemoteTier& tier, const std::string& id, const RemoteTier::Stored& stored) {
  Rejection why = Rejection::kNone;
  std::string note;
  std::optional<Record> r;
  if (!stored.bytes) {
    why = Rejection::kOversized;
    note = tier.oversized_note(stored.size);
  } else {
    r = decode_record(*stored.bytes, tune_record_key(id), tier.trusted(), &why, &note);
  }
  if (r && r->kind != RecordKind::kTuneTable) {
    why = Rejection::kCorrupt;
    note = "a record of the wrong kind";
    r.reset();
  }
  if (r) {
    try {
      TuneTable t = decode_table(r->body);
      if (t.fingerprint_id == id) return t;
      note = "it names fingerprint " + printable(t.fingerprint_id);
    } catch (const std::exception& e) {
      note = e.what();
    }
    why = Rejection::kCorrupt;
  }
  warn(fmt::format("remote cache {}: the tuning table of fingerprint {} was rejected ({}: {}); it is not merged",
                   tier.where(), printable(id), rejection_name(why), note));
  return std::nullopt;
}

}  // namespace

Key tune_record_key(const std::string& id) { return KeyBuilder().add("tune.fingerprint", id).finish(); }

bool push_tune_table(RemoteTier& tier, const TuneTable& table) {
  if (!tier.may_write()) return false;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const std::optional<RemoteTier::Stored> stored = tier.read_tune_table(table.fingerprint_id);
    TuneTable merged = table;
    // A stored table that fails the checks (one over the cap included) is replaced by ours, not
    // merged.
    if (stored) {
      if (std::optional<TuneTable> t = decode_tune(tier, table.fingerprint_id, *stored)) {
        merged = *t;
        merge_tables(merged, table);
      }
    }
    const std::string value =
        encode_record(RecordKind::kTuneTable, tune_record_key(table.fingerprint_id), encode_table(merged), tier.signer());
    if (value.size() > tier.config().max_value_bytes) {
      // Every reader would refuse it by its length.
      warn(fmt::format("remote cache {}: the tuning table of fingerprint {} is {} bytes, over "
                       "KJIT_REMOTE_MAX_VALUE_BYTES={}; not published",
                       tier.where(), table.fingerprint_id, value.size(), tier.config().max_value_bytes));
      return false;
    }
    if (tier.swap_tune_table(table.fingerprint_id, stored, value)) return true;
  }
  warn(fmt::format("remote cache {}: the tuning table of fingerprint {} kept changing under this push; not published",
                   tier.where(), table.fingerprint_id));
  return false;
}

std::vector<TuneTable> fetch_tune_tables(RemoteTier& tier, const std::string& only_id) {
  const std::vector<std::string> ids = only_id.empty() ? tier.tune_table_ids() : std::vector<std::string>{only_id};
  std::vector<TuneTable> tables;
  for (const std::string& id : ids) {
    const std::optional<RemoteTier::Stored> stored = tier.read_tune_table(id);
    if (!stored) continue;
    if (std::optional<TuneTable> t = decode_tune(tier, id, *stored)) tables.push_back(std::move(*t));
  }
  return tables;
}

void share_tune_table(RemoteTier* tier, const TuneTable& table) noexcept {
  if (tier == nullptr) return;
  try {
    if (!tier->may_write()) return;
    push_tune_table(*tier, table);
  } catch (const std::exception& e) {
    warn(fmt::format("the tuning table of fingerprint {} was not shared with the fleet: {}", table.fingerprint_id, e.what()));
  }
}

void merge_fleet_table(RemoteTier* tier, const std::string& id, TuneTable* table, bool* found) noexcept {
  if (tier == nullptr) return;
  try {
    for (const TuneTable& t : fetch_tune_tables(*tier, id)) {
      if (!*found) {
        *table = t;
      } else {
        merge_tables(*table, t);
      }
      *found = true;
    }
  } catch (const CacheError&) {
    // A fault: the tier's client warned of it (once per outage) and counted it.
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
