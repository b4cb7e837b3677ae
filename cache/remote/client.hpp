#pragma once
/// \file remote/client.hpp
/// A Redis connection for the fleet tier (hiredis): connects lazily with a bounded timeout, bounds
/// every socket read and write, and reconnects after a fault. One slow reply is not an outage: an
/// op's command whose connection times out or fails is sent again on a fresh connection, and only
/// kBreakerFaults failed attempts in a row open the circuit breaker, which skips the server for
/// RemoteConfig::cooldown_ms. An error reply (OOM, NOPERM) is an answer, not a lost reply: it opens
/// the breaker at once. So a dead or hung server costs each process kBreakerFaults timeouts per
/// cooldown, not one per op, and a loaded host's late reply costs a resend, not a local compile.
/// The opening of the breaker warns once per outage (kjit::warn) when the client serves ops
/// (Caller); a success ends the outage. A command's client (`kjit remote …`) sends nothing twice:
/// it stops at its first fault, after one timeout. Thread-safe: one connection, one command (or
/// pipeline) at a time.

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

/// Who a client's faults are for. An op goes on without the tier, so its client sends a lost
/// command again once (kBreakerFaults) and warns once per outage; a command (`kjit remote …`)
/// fails, so its client sends each command once, warns nothing and leaves the fault in
/// last_error() for the command's own error message.
enum class Caller { kOps, kCommand };

/// Failed attempts in a row (timeouts, I/O errors, refused connections) that open an ops
/// client's breaker.
inline constexpr int kBreakerFaults = 2;

class RedisClient {
 public:
  explicit RedisClient(RemoteConfig config, Caller caller = Caller::kOps);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  /// Runs one command. Returns nullopt on a fault (no answer after kBreakerFaults attempts, one
  /// for a Caller::kCommand client, or an error reply such as OOM or NOPERM: the op must not rely
  /// on the tier; last_error() says which), and at once, without touching the network, while the
  /// breaker is open. A command is sent again only after its connection failed, so it must be
  /// safe to repeat (every command the tier sends is: a lease claim recognizes its own token).
  /// Never throws.
  std::optional<Reply> command(const std::vector<std::string_view>& args);
  /// Runs `commands` in one round trip (hiredis pipelining): their replies in order, or nullopt
  /// when any of them faults (then as command()).
  std::optional<std::vector<Reply>> pipeline(const std::vector<std::vector<std::string_view>>& commands);

  /// Failed attempts (each timeout, I/O error, refused connection or error reply).
  uint64_t faults() const noexcept { return faults_.load(std::memory_order_relaxed); }
  /// Commands skipped because the breaker was open.
  uint64_t skipped() const noexcept { return skipped_.load(std::memory_order_relaxed); }
  /// Round trips to the server: every command or pipeline sent (a resend, and AUTH and SELECT on
  /// a connect, included), answered or not.
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
  /// Sends `commands` on the connection and reads their replies: true with `*replies` filled, or
  /// false with `*error` set and the connection dropped (`*answered`: the server refused one).
  bool send_locked(const std::vector<std::vector<std::string_view>>& commands, std::vector<Reply>* replies,
                   std::string* error, bool* answered);
  std::optional<std::vector<Reply>> run_locked(const std::vector<std::vector<std::string_view>>& commands);
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
