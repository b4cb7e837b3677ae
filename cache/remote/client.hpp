#pragma once
/// \file remote/client.hpp
/// A Redis connection for the fleet tier (hiredis): connects lazily with a bounded timeout, bounds
/// every socket read and write, and reconnects after a fault. One slow reply is not an outage: a
/// command whose connection times out or fails is sent again on a fresh connection, and only
/// kBreakerFaults failed attempts in a row open the circuit breaker, which skips the server for
/// RemoteConfig::cooldown_ms. An error reply (OOM, NOPERM) is an answer, not a lost reply: it opens
/// the breaker at once. So a dead or hung server costs each process kBreakerFaults timeouts per
/// cooldown, not one per op, and a loaded host's late reply costs a resend, not a local compile.
/// The opening of the breaker warns once per outage (kjit::warn); a success ends the outage.
/// Thread-safe: one connection, one command (or pipeline) at a time.

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

/// Failed attempts in a row (timeouts, I/O errors, refused connections) that open the breaker.
inline constexpr int kBreakerFaults = 2;

class RedisClient {
 public:
  explicit RedisClient(RemoteConfig config);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  /// Runs one command. Returns nullopt on a fault (no answer after kBreakerFaults attempts, or an
  /// error reply such as OOM or NOPERM: the op must not rely on the tier), and at once, without
  /// touching the network, while the breaker is open. A command is sent again only after its
  /// connection failed, so it must be safe to repeat (every command the tier sends is: a lease
  /// claim recognizes its own token). Never throws.
  std::optional<Reply> command(const std::vector<std::string_view>& args);
  /// Runs `commands` in one round trip (hiredis pipelining): their replies in order, or nullopt
  /// when any of them faults (then as command()).
  std::optional<std::vector<Reply>> pipeline(const std::vector<std::vector<std::string_view>>& commands);

  /// Failed attempts (each timeout, I/O error, refused connection or error reply).
  uint64_t faults() const noexcept { return faults_.load(std::memory_order_relaxed); }
  /// Commands skipped because the breaker was open.
  uint64_t skipped() const noexcept { return skipped_.load(std::memory_order_relaxed); }
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

  RemoteConfig config_;
  std::mutex mutex_;
  redisContext* context_ = nullptr;
  std::chrono::steady_clock::time_point open_until_{};
  bool in_outage_ = false;
  std::atomic<uint64_t> faults_{0}, skipped_{0};
};

}  // namespace kjit::cache::remote
