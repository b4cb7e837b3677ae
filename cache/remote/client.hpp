#pragma once
/// \file remote/client.hpp
/// A Redis connection for the fleet tier (hiredis): connects lazily with a bounded timeout, bounds
/// every socket read and write, reconnects after a fault, and opens a circuit breaker that skips
/// the server for RemoteConfig::cooldown_ms after any fault, so a dead, hung or full server costs
/// each process one timeout per cooldown, not one per op. The first fault of an outage warns once
/// (kjit::warn) when the client serves ops (Caller); a success ends the outage. Thread-safe: one
/// connection, one command at a time.

#include <kjit/remote.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;

namespace kjit::cache::remote {

/// A Redis reply, copied out of hiredis.
struct Reply {
  enum class Type { kNil, kString, kInteger, kStatus, kArray, kError };
  Type type = Type::kNil;
  std::string str;       ///< kString, kStatus, kError
  long long integer = 0;  ///< kInteger
  std::vector<Reply> elements;  ///< kArray
  bool nil() const noexcept { return type == Type::kNil; }
};

/// Who a client's faults are for. An op goes on without the tier, so its client warns once per
/// outage; a command (`kjit remote …`) fails, so its client warns nothing and leaves the fault
/// in last_error() for the command's own error message.
enum class Caller { kOps, kCommand };

class RedisClient {
 public:
  explicit RedisClient(RemoteConfig config, Caller caller = Caller::kOps);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  /// Runs one command. Returns nullopt on a fault (no connection, a timeout, an I/O error, or an
  /// error reply such as OOM or NOPERM: the op must not rely on the tier), and at once, without
  /// touching the network, while the breaker is open. Never throws.
  std::optional<Reply> command(const std::vector<std::string_view>& args);

  /// Faults seen (each also opened the breaker).
  uint64_t faults() const noexcept { return faults_.load(std::memory_order_relaxed); }
  /// Commands skipped because the breaker was open.
  uint64_t skipped() const noexcept { return skipped_.load(std::memory_order_relaxed); }
  /// Round trips to the server: every command sent (AUTH and SELECT on a connect included),
  /// answered or not.
  uint64_t round_trips() const noexcept { return round_trips_.load(std::memory_order_relaxed); }
  /// The last fault, one sentence naming the server: "no answer within 100 ms from
  /// redis://cache:6379/0", "cannot connect to …: Connection refused", "… refused AUTH: …";
  /// "" before any.
  std::string last_error() const;
  Caller caller() const noexcept { return caller_; }
  const RemoteConfig& config() const noexcept { return config_; }
  /// "unix:///run/redis.sock" or "redis://host:port/db", without credentials: for messages.
  std::string where() const;

 private:
  bool connect_locked(std::string* error);
  void fault_locked(const std::string& error);
  void drop_locked();
  /// The fault of a call that returned no reply: a timeout or a broken connection.
  std::string io_error_locked() const;

  RemoteConfig config_;
  Caller caller_;
  mutable std::mutex mutex_;
  std::string last_error_;
  redisContext* context_ = nullptr;
  std::chrono::steady_clock::time_point open_until_{};
  bool in_outage_ = false;
  std::atomic<uint64_t> faults_{0}, skipped_{0}, round_trips_{0};
};

}  // namespace kjit::cache::remote
