#pragma once
/// \file remote.hpp
/// Settings of the fleet tier: a Redis server that the hosts of a fleet share as a third cache
/// tier (memory → disk → remote → compile), with cross-host single-flight compiles (leases) and
/// Ed25519-signed entries. Part of RuntimeConfig; read from the environment by
/// RemoteConfig::from_env. Without KJIT_REMOTE the tier is off and nothing changes.

#include <cstdint>
#include <string>
#include <vector>

namespace kjit {

/// KJIT_RECORD=remote: records every specialization a process obtains into the fleet tier's
/// manifest set (one line per distinct specialization, fleet-wide), which `kjit remote manifest`
/// writes out for `kjit precompile --manifest`. It is the one write a read-only host makes.
inline constexpr const char* kRecordRemote = "remote:";

/// Whether this host may write to the remote tier.
enum class RemoteMode {
  kReadWrite,  ///< reads, takes leases, publishes entries and failure records (builders)
  kReadOnly,   ///< reads only: never a lease, a SET or a TTL refresh (serving hosts)
};

/// The fleet tier's settings. Every duration is in milliseconds unless its name says otherwise.
struct RemoteConfig {
  /// KJIT_REMOTE as given ("" = the tier is off): `redis://[user:password@]host[:port][/db]` or
  /// `unix:///path/to/redis.sock[?db=N]`.
  std::string url;
  /// Parsed from `url`: a TCP host and port, or a unix socket path (then `host` is empty).
  std::string host;
  int port = 6379;
  std::string socket_path;
  int db = 0;
  /// ACL user ("" = the default user) and password ("" = no AUTH). The password comes from the
  /// URL or, when KJIT_REMOTE_PASSWORD_FILE names a file, from its first line.
  std::string user;
  std::string password;
  /// KJIT_REMOTE_NAMESPACE: prefix of every Redis key, so fleets (or toolkits) can share a server.
  std::string ns = "kjit";
  /// KJIT_REMOTE_MODE: rw (default) or ro.
  RemoteMode mode = RemoteMode::kReadWrite;
  /// KJIT_REMOTE_CONNECT_TIMEOUT_MS: the most a connection attempt may take. The default (as the
  /// op timeout's) is one a loaded 2-core host meets in a 64-process cold-start storm with room
  /// to spare (docs/fleet.md); an outage is found by the breaker, not by a tight timeout.
  int connect_timeout_ms = 250;
  /// KJIT_REMOTE_TIMEOUT_MS: the most one read or write on the socket may wait.
  int op_timeout_ms = 250;
  /// KJIT_REMOTE_COOLDOWN_MS: after a fault, how long the tier is skipped (circuit breaker).
  int cooldown_ms = 10000;
  /// KJIT_REMOTE_LEASE_MS: how long a compile lease lives past its owner's last renewal. The
  /// owner renews it three times per lease while it compiles, so a compile of any length keeps
  /// it; a dead owner's lease lapses within this, and a waiting host takes it over.
  int lease_ms = 10000;
  /// KJIT_REMOTE_MAX_WAIT_MS: the longest a host waits on other hosts' live leases for an entry
  /// before it compiles locally (a bound on a compile that never ends, or a lease held forever).
  int max_wait_ms = 600000;
  /// KJIT_REMOTE_TTL_S: seconds an entry lives in Redis after its last hit (refreshed on a hit).
  int64_t ttl_s = 30 * 24 * 3600;
  /// KJIT_REMOTE_FAILURE_TTL_S: seconds a failed compile's record lives (a later toolkit or
  /// source fix changes the key anyway; this bounds how long a flaky failure sticks).
  int64_t failure_ttl_s = 3600;
  /// KJIT_REMOTE_MAX_VALUE_BYTES (K/M/G suffixes as KJIT_CACHE_MAX_BYTES): larger entries are
  /// neither written nor read.
  uint64_t max_value_bytes = 64ull << 20;
  /// KJIT_REMOTE_SIGNING_KEY: a file holding this writer's Ed25519 secret key (`kjit remote
  /// keygen`). Empty: entries are written unsigned. This and the trusted keys are read even when
  /// KJIT_REMOTE is not set: `kjit cache export|import --oci` sign and check images with them.
  std::string signing_key_file;
  /// KJIT_REMOTE_TRUSTED_KEYS: files of trusted Ed25519 public keys, ':'-separated. Non-empty:
  /// entries without a valid signature by one of these keys are rejected (never loaded).
  std::vector<std::string> trusted_key_files;

  bool enabled() const noexcept { return !url.empty(); }
  /// The server as messages name it, never with the password: "redis://host:port/db" or
  /// "unix:///path?db=N".
  std::string display() const;

  /// Reads the KJIT_REMOTE* variables. Throws InvalidArgument naming the variable for a
  /// malformed URL, mode, number or an unreadable password file.
  static RemoteConfig from_env();
  /// Fills host/port/socket_path/db/user/password from `url` (as KJIT_REMOTE takes it). Throws
  /// InvalidArgument naming KJIT_REMOTE and what is wrong.
  void parse_url(const std::string& url);
};

}  // namespace kjit
