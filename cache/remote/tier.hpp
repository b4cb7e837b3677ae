#pragma once
/// \file remote/tier.hpp
/// The fleet tier: a Redis server shared by the hosts of a fleet, between the disk cache and a
/// compile. Values are remote records (remote/record.hpp). One entry's Redis keys share the hash
/// tag `{<namespace>:<32 hex key>}`, so they live in one Redis Cluster slot:
///
///   {ns:key}:v      the entry; write-once (SET NX EX ttl), TTL refreshed on a hit (GETEX)
///   {ns:key}:lease  a compile lease: a random token, SET NX PX lease_ms, released by
///                   compare-and-delete (a Lua script), so an expired owner never frees a
///                   successor's lease
///   {ns:key}:fail   a failed compile's record (SET NX EX failure_ttl_s): others throw the same
///                   CompileError without compiling
///
/// Besides the entries, one set per namespace, `{ns}:manifest`, holds the warm-up manifest lines
/// (cache/manifest.hpp) of every specialization the fleet's recording hosts obtained
/// (KJIT_RECORD=remote:): SADD makes the set the fleet-wide deduplicated manifest. And
/// `{ns}:tune:<fingerprint id>` holds the fleet's tuning table of one kind of device
/// (remote/tune_share.hpp). This file and its .cc files are the only code that knows these
/// names: the CLI and the tuning-table share call the tier's typed operations.
///
/// Every fault is a bounded miss (remote/client.hpp): the caller compiles locally. A value that
/// is corrupt, foreign or not signed by a trusted key is never loaded; it is warned once per key,
/// counted, and compiled locally. A builder holding the signing key replaces such a value under
/// its lease (the one exception to write-once), so a squatter cannot block a key for good.

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/remote/client.hpp"
#include "cache/remote/record.hpp"
#include "cache/remote/signing.hpp"

#include <kjit/remote.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kjit::cache::remote {

/// Counters of one tier (RuntimeStats::remote_*).
struct TierCounters {
  uint64_t hits = 0, misses = 0, errors = 0, lease_waits = 0, rejected_signatures = 0, rejected = 0, publishes = 0;
  uint64_t round_trips = 0;  ///< commands sent to the server (RedisClient::round_trips)
};

/// The Redis key names of one entry.
struct SlotKeys {
  std::string value, lease, failure;
};
SlotKeys slot_keys(const std::string& ns, const Key& key);
/// The Redis key of the namespace's manifest set.
std::string manifest_key(const std::string& ns);

class RemoteTier {
 public:
  /// Reads the key files the config names. Throws InvalidArgument naming the variable for an
  /// unreadable or malformed key file, or a secret key file its group or others may read.
  /// Connects lazily (the first lookup). `caller`: who hears of faults (RedisClient).
  explicit RemoteTier(const RemoteConfig& config, Caller caller = Caller::kOps);

  /// The result of a plain lookup.
  enum class Found { kEntry, kMiss, kRejected, kFault };
  struct Lookup {
    Found found = Found::kMiss;
    std::optional<Entry> entry;
  };
  /// One GET (GETEX refreshing the TTL on a read-write host) of `key`'s value, checked.
  Lookup fetch(const Key& key);

  /// Cross-host single flight for a key that fetch() missed: takes the lease and compiles
  /// (`compile`), or waits for the lease owner's entry (bounded by the lease), or throws the
  /// CompileError the fleet recorded. A read-only host takes no lease: it waits while someone
  /// holds one, then compiles locally without writing. Any fault: compiles locally.
  /// `usable` vets a fetched entry against the program asked for. Sets `*compiled` when
  /// `compile` ran here. Throws what `compile` throws (CompileError is recorded fleet-wide first).
  Entry obtain(const Key& key, const std::function<bool(const Entry&)>& usable, const std::function<Entry()>& compile,
               bool* compiled);

  /// Writes `entry` (signed when a signing key is configured) if this host may write: read-write
  /// mode, and signed or no trusted keys (an unsigned value would only squat the slot). With
  /// `replace`, overwrites a value already there (a bad one, under the lease). Returns whether
  /// it was written.
  bool publish(const Entry& entry, bool replace = false);
  /// Records a failed compile of `key` for the fleet (same rules as publish).
  bool publish_failure(const Key& key, const Failure& failure);

  /// Adds one manifest line to the namespace's manifest set (KJIT_RECORD=remote:). The one write
  /// a read-only host makes, and only when asked to record. Returns whether the server answered.
  bool record_manifest_line(const std::string& line);
  /// The manifest set's lines, sorted. Throws CacheError when the server does not answer.
  std::vector<std::string> manifest_lines();

  /// Checks bytes read from `key`'s value slot: the entry, or nullopt (warned and counted once per
  /// key and process).
  std::optional<Entry> accept_entry(const Key& key, std::string_view bytes);

  // Typed operations: what `kjit remote …` and the tuning-table share do with the namespace.
  // Each throws CacheError, one sentence naming the server (RedisClient::last_error), when the
  // server does not answer or answers out of turn.

  /// One of an entry's Redis keys (SlotKeys).
  enum class Slot { kValue, kLease, kFailure };
  /// Every key of the namespace whose `slot` exists, sorted and distinct (SCAN, never KEYS).
  std::vector<Key> scan(Slot slot);
  /// The bytes in `key`'s value slot as stored (unchecked; accept_entry checks them), or nullopt
  /// when it is empty. A plain GET: the TTL is not refreshed.
  std::optional<std::string> read_value(const Key& key);
  /// The size in bytes of `key`'s value (STRLEN; 0 when absent), without fetching it.
  uint64_t value_bytes(const Key& key);
  /// Seconds `key`'s value has left (TTL): -1 when it never expires, -2 when it is absent.
  int64_t value_ttl_s(const Key& key);
  /// Whether `key`'s value exists.
  bool has_value(const Key& key);
  /// Deletes `key`'s `slot`; returns whether it was there. Throws InvalidArgument on a read-only
  /// host, which never writes.
  bool remove(const Key& key, Slot slot);
  /// The server's memory in use (INFO memory: used_memory), in bytes; nullopt when the reply
  /// has none (an ACL may hide it).
  std::optional<uint64_t> server_used_memory();

  /// The fingerprint ids that have a tuning table in the namespace, sorted.
  std::vector<std::string> tune_table_ids();
  /// The stored tuning-table record of fingerprint `id` (unchecked), or nullopt.
  std::optional<std::string> read_tune_table(const std::string& id);
  /// Sets the tuning-table record of `id` to `value` only while it still holds `expected`
  /// (nullopt: none), by a compare-and-set script; returns false when another writer changed
  /// it first. Throws InvalidArgument on a read-only host.
  bool swap_tune_table(const std::string& id, const std::optional<std::string>& expected, const std::string& value);

  TierCounters counters() const;
  /// The server as messages name it, without credentials (RemoteConfig::display).
  std::string where() const { return client_.where(); }
  /// The last fault (RedisClient::last_error).
  std::string last_error() const { return client_.last_error(); }
  const RemoteConfig& config() const noexcept { return client_.config(); }
  const std::vector<PublicKey>& trusted() const noexcept { return trusted_; }
  const SecretKey* signer() const noexcept { return signer_ ? &*signer_ : nullptr; }
  bool may_write() const noexcept;

 private:
  std::optional<Record> accept(const Key& key, std::string_view bytes, RecordKind kind);
  void release(const SlotKeys& keys, const std::string& token);
  /// One command whose reply the caller needs: the reply, or CacheError naming the fault.
  Reply call(const std::vector<std::string_view>& args);
  /// Every key name matching the glob `pattern` (SCAN), sorted and distinct.
  std::vector<std::string> scan_names(const std::string& pattern);
  /// The Redis key of `key`'s `slot`.
  std::string slot_key(const Key& key, Slot slot) const;
  /// Throws InvalidArgument naming `what` when this host is read-only.
  void require_read_write(std::string_view what) const;

  RedisClient client_;
  std::vector<PublicKey> trusted_;
  std::optional<SecretKey> signer_;
  std::mutex warned_mutex_;
  std::set<std::string> warned_;  // keys whose rejection was warned about
  std::atomic<uint64_t> hits_{0}, misses_{0}, lease_waits_{0}, rejected_signatures_{0}, rejected_{0}, publishes_{0};
};

}  // namespace kjit::cache::remote
