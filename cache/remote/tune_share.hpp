#pragma once
/// \file remote/tune_share.hpp
/// Tuning tables (cache/tune_table.hpp) shared through the fleet tier, so a fleet tunes each kind
/// of device once. `{<ns>}:tune:<fingerprint id>` holds one remote record (remote/record.hpp) of
/// kind kTuneTable, keyed by tune_record_key(id), whose body is the table's JSON. It is signed
/// and checked like an entry: a reader with trusted keys merges only a table a trusted builder
/// signed. A push merges into the stored table (per (op, bucket) the newer measurement wins,
/// merge_tables) and swaps it in by compare-and-set, so concurrent tuners lose nothing. Tables
/// do not expire.

#include "cache/remote/tier.hpp"
#include "cache/tune_table.hpp"

#include <string>
#include <vector>

namespace kjit::cache::remote {

/// The record key of the table of fingerprint `id`.
Key tune_record_key(const std::string& id);

/// Merges `table` into the fleet's table of its fingerprint. Returns false when this host may
/// not write, or the swap kept losing to other writers (warned). Throws CacheError when the
/// server does not answer.
bool push_tune_table(RemoteTier& tier, const TuneTable& table);

/// The fleet's tables that pass the checks (every fingerprint, or only `only_id` when not
/// empty). A table that fails them is warned about and left out. Throws CacheError when the
/// server does not answer.
std::vector<TuneTable> fetch_tune_tables(RemoteTier& tier, const std::string& only_id = "");

/// Merges the fleet's tables (or the one of `only_id`) into the tables of the disk cache at
/// `root` (publish_table: locked, merged, atomic). Returns how many tables were merged.
size_t merge_fleet_tables(RemoteTier& tier, const std::string& root, const std::string& only_id = "");

/// What `kjit tune` calls after publishing a table locally: pushes it through `tier` (the
/// runtime's, detail::fleet_tier; nothing when it is null, the tier being off). Never throws;
/// a failure is warned.
void share_tune_table(RemoteTier* tier, const TuneTable& table) noexcept;

/// What a host calls when it loads the table of fingerprint `id` (runtime/ops/tuned.cc): merges
/// the fleet's table, read through `tier` (the runtime's; nothing when it is null), into
/// `*table` in memory and sets `*found` when it merged one. Never throws; a failure leaves
/// `*table` as it was. Its round trips and faults are the tier's, so RuntimeStats counts them and
/// the tier's client warns of a fault (once per outage); anything else is warned here.
void merge_fleet_table(RemoteTier* tier, const std::string& id, TuneTable* table, bool* found) noexcept;

}  // namespace kjit::cache::remote
