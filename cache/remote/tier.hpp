#pragma once
/// \file remote/tier.hpp
/// The fleet tier: a Redis server shared by the hosts of a fleet, between the disk cache and a
/// compile. Values are remote records (remote/record.hpp). One entry's Redis keys share the hash
/// tag `{<namespace>:<32 hex key>}`, so they live in one Redis Cluster slot:
///
///   {ns:key}:v      the entry; write-once (SET NX EX ttl), TTL refreshed on a hit (GETEX)
///   {ns:key}:lease  a compile lease: a random token, SET NX PX lease_ms, renewed while its
///                   owner compiles (remote/lease.hpp) and released by compare-and-delete (a
///                   Lua script), so an expired owner never frees or extends a successor's lease
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
/// Every read checks a value's length before its bytes: a value longer than max_value_bytes is
/// never downloaded; it is refused as oversized (counted apart, TierCounters::oversized). An op's
/// read on a read-write host is one Lua script (STRLEN, then the bytes); a read-only host, and a
/// typed read (read_value, read_tune_table), pipelines STRLEN with the first kPrefetchBytes. Every
/// fault is a bounded miss (remote/client.hpp): the caller compiles locally. A value that is
/// oversized, corrupt, foreign or not signed by a trusted key is never loaded; it is warned once
/// per key, counted, and compiled locally. A builder holding the signing key replaces such a value
/// under its lease (the one exception to write-once), so a squatter cannot block a key for good.

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/remote/client.hpp"
#include "cache/remote/lease.hpp"
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

/// A read-only host (and a typed read) reads a value's length and this many of its first bytes in
/// one round trip (remote entries are tens of KiB), and the rest, within the cap, in a second. So
/// a value over the cap costs such a read at most this much transfer, and an op's read on a
/// read-write host none.
inline constexpr uint64_t kPrefetchBytes = 256 << 10;

/// Counters of one tier (RuntimeStats::remote_*).
struct TierCounters {
  uint64_t hits = 0, misses = 0, errors = 0, lease_waits = 0, rejected_signatures = 0, rejected = 0, publishes = 0;
  uint64_t oversized = 0;    ///< values refused by their length alone (not downloaded), once per key
  uint64_t round_trips = 0;  ///< round trips to the server (RedisClient::round_trips)
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
  /// `key`'s value, checked: one round trip on a read-write host (a script: STRLEN, then GETEX
  /// refreshing the TTL when the value is within the cap), and on a read-only one STRLEN and
  /// GETRANGE of the first kPrefetchBytes pipelined (a second GETRANGE for a longer value).
  Lookup fetch(const Key& key);

  /// Cross-host single flight for a key that fetch() missed: takes the lease and compiles
  /// (`compile`) while a heartbeat renews the lease, or waits for the entry while anyone holds a
  /// live lease, taking over a lease that lapsed (its owner died), or throws the CompileError
  /// the fleet recorded. A waiter gives up and compiles locally after max_wait_ms. A read-only
  /// host takes no lease: it waits while someone holds one, then compiles locally without
  /// writing. Any fault: compiles locally.
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

  // Typed operations: what `kjit remote …` and the tuning-table share do with the namespace.
  // Each throws CacheError, one sentence naming the server (RedisClient::last_error), when the
  // server does not answer or answers out of turn.

  /// One of an entry's Redis keys (SlotKeys).
  enum class Slot { kValue, kLease, kFailure };
  /// Every key of the namespace whose `slot` exists, sorted and distinct (SCAN, never KEYS).
  std::vector<Key> scan(Slot slot);
  /// A value as a typed read found it: its length, and its bytes when that length is within
  /// max_value_bytes (KJIT_REMOTE_MAX_VALUE_BYTES).
  struct Stored {
    uint64_t size = 0;                 ///< its length in bytes
    std::optional<std::string> bytes;  ///< nullopt: over the cap, so never downloaded
  };
  /// `key`'s value slot as stored (unchecked: decode_record checks it), or nullopt when it is
  /// absent. Its length before its bytes: EXISTS, STRLEN and the first kPrefetchBytes in one
  /// round trip, the rest (within the cap) in a second; a value over the cap costs at most
  /// kPrefetchBytes of transfer and is counted as oversized, once. Changes nothing, not even
  /// the TTL.
  std::optional<Stored> read_value(const Key& key);
  /// Why a value of `bytes` bytes, over the cap, was refused: "N bytes, over
  /// KJIT_REMOTE_MAX_VALUE_BYTES=M; not downloaded".
  std::string oversized_note(uint64_t bytes) const;
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
  /// The stored tuning-table record of fingerprint `id` (unchecked), read as read_value reads,
  /// or nullopt.
  std::optional<Stored> read_tune_table(const std::string& id);
  /// Sets the tuning-table record of `id` to `value` only while it still holds `expected`
  /// (nullopt: none; one over the cap: any value still over the cap), by a compare-and-set
  /// script; returns false when another writer changed it first. Throws InvalidArgument on a
  /// read-only host.
  bool swap_tune_table(const std::string& id, const std::optional<Stored>& expected, const std::string& value);

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
  /// A bounded read's result (nil: no value; an integer: its length, over the cap; the bytes):
  /// the record, or nullopt (a nil slot silently, anything refused warned and counted).
  std::optional<Record> take(const Key& key, const Reply& slot, RecordKind kind);
  /// Warns about and counts a refused value, once per key and process.
  void refuse(const Key& key, RecordKind kind, Rejection why, const std::string& note);
  /// Counts a refusal of `what` (a key's hex digits, or a Redis key name) for `why`; returns
  /// false, counting nothing, when `what` was refused before in this process.
  bool count_refusal(const std::string& what, Rejection why);
  /// Reads `redis_key` within the cap, as fetch() does; nullopt on a fault.
  std::optional<Reply> read_bounded(const std::string& redis_key, bool refresh_ttl);
  /// A read-only host's read of `redis_key`, whose STRLEN was `length` and whose first bytes,
  /// read with it, are `head`: the rest by GETRANGE within the cap.
  std::optional<Reply> read_range(const std::string& redis_key, long long length, std::string head = {});
  void release(const SlotKeys& keys, const std::string& token);
  /// One command whose reply the caller needs: the reply, or CacheError naming the fault.
  Reply call(const std::vector<std::string_view>& args);
  /// Commands in one round trip (RedisClient::pipeline), as call().
  std::vector<Reply> call_all(const std::vector<std::vector<std::string_view>>& commands);
  /// The CacheError of a typed operation's fault in `what` (a command's name); `skipped_before`:
  /// RedisClient::skipped() before it, to tell an open breaker from a fault.
  [[noreturn]] void fail(std::string_view what, uint64_t skipped_before) const;
  /// A typed read of the Redis key `name` (read_value).
  std::optional<Stored> read_stored(const std::string& name);
  /// Every key name matching the glob `pattern` (SCAN), sorted and distinct.
  std::vector<std::string> scan_names(const std::string& pattern);
  /// The Redis key of `key`'s `slot`.
  std::string slot_key(const Key& key, Slot slot) const;
  /// Throws InvalidArgument naming `what` when this host is read-only.
  void require_read_write(std::string_view what) const;

  RedisClient client_;
  LeaseKeeper keeper_{client_, client_.config().lease_ms};
  std::vector<PublicKey> trusted_;
  std::optional<SecretKey> signer_;
  std::mutex warned_mutex_;
  std::set<std::string> warned_;  // keys whose rejection was warned about
  std::atomic<uint64_t> hits_{0}, misses_{0}, lease_waits_{0}, rejected_signatures_{0}, rejected_{0}, publishes_{0},
      oversized_{0};
};

}  // namespace kjit::cache::remote
