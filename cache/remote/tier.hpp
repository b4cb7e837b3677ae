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
/// (KJIT_RECORD=remote:): SADD makes the set the fleet-wide deduplicated manifest.
///
/// Every read checks a value's length before its bytes (STRLEN, in the same Lua script as the
/// read on a read-write host; pipelined with the first kPrefetchBytes on a read-only one): a value
/// longer than max_value_bytes is never downloaded; it is refused as oversized. Every fault is a bounded miss (remote/client.hpp): the caller compiles
/// locally. A value that is oversized, corrupt, foreign or not signed by a trusted key is never
/// loaded; it is warned once per key, counted, and compiled locally. A builder holding the signing key replaces such a value under
/// its lease (the one exception to write-once), so a squatter cannot block a key for good.

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

/// A read-only host reads a value's length and this many of its first bytes in one round trip
/// (remote entries are tens of KiB), and the rest, within the cap, in a second. So a value over
/// the cap costs a read-only host at most this much transfer, and a read-write host none.
inline constexpr uint64_t kPrefetchBytes = 256 << 10;

/// Counters of one tier (RuntimeStats::remote_*).
struct TierCounters {
  uint64_t hits = 0, misses = 0, errors = 0, lease_waits = 0, rejected_signatures = 0, rejected = 0, publishes = 0;
  uint64_t oversized = 0;  ///< values refused by their length alone (not downloaded), once per key
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
  /// unreadable or malformed key file. Connects lazily (the first lookup).
  explicit RemoteTier(const RemoteConfig& config);

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

  /// Checks bytes read from `key`'s value slot: the entry, or nullopt (warned and counted once per
  /// key and process).
  std::optional<Entry> accept_entry(const Key& key, std::string_view bytes);

  TierCounters counters() const;
  RedisClient& client() noexcept { return client_; }
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
  /// Reads `redis_key` within the cap, as fetch() does; nullopt on a fault.
  std::optional<Reply> read_bounded(const std::string& redis_key, bool refresh_ttl);
  /// A read-only host's read of `redis_key`, whose STRLEN was `length` and whose first bytes,
  /// read with it, are `head`: the rest by GETRANGE within the cap.
  std::optional<Reply> read_range(const std::string& redis_key, long long length, std::string head = {});
  void release(const SlotKeys& keys, const std::string& token);

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
