#pragma once
/// \file remote/lease.hpp
/// Keeps this process's compile leases (remote/tier.hpp) alive while their compiles run. One
/// heartbeat thread renews every held lease kRenewalsPerLease times per lease_ms, each time with
/// a compare-and-PEXPIRE (a Lua script): only while the lease still holds its holder's token, so
/// a lease that lapsed and was taken over is never extended for its successor. A compile of any
/// length therefore keeps its lease, and the lease of an owner that died lapses within lease_ms
/// of its last renewal, when a waiting host takes it over.
///
/// After a fork(), the child renews nothing of its parent's: it starts its own thread on its
/// first hold().
///
/// A renewal is an ordinary command of the tier's client: while the breaker is open none is
/// sent, and the lease may lapse (the fault costs at most one duplicate compile, never a wrong
/// binary: entries are content-addressed and written once).

#include "cache/remote/client.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <sys/types.h>

namespace kjit::cache::remote {

/// Renewals per lease_ms: a renewal late by up to two thirds of a lease still keeps it.
inline constexpr int kRenewalsPerLease = 3;

class LeaseKeeper {
 public:
  /// Renews through `client` (which must outlive this keeper), extending each lease to `lease_ms`.
  LeaseKeeper(RedisClient& client, int lease_ms);
  /// Stops the heartbeat thread and joins it.
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  /// A held lease: renewed from hold() until this is destroyed (or the lease is found lost).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : keeper_(other.keeper_), id_(other.id_) { other.keeper_ = nullptr; }
    Hold& operator=(Hold&& other) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { reset(); }
    /// Stops renewing now.
    void reset() noexcept;

   private:
    friend class LeaseKeeper;
    Hold(LeaseKeeper* keeper, uint64_t id) : keeper_(keeper), id_(id) {}
    LeaseKeeper* keeper_ = nullptr;
    uint64_t id_ = 0;
  };

  /// Renews the Redis key `lease`, which holds `token`, until the Hold goes.
  Hold hold(std::string lease, std::string token);

  /// Renewals that extended a lease.
  uint64_t renewals() const noexcept { return renewals_.load(std::memory_order_relaxed); }
  /// Leases found no longer holding their token (lapsed, and possibly taken over): no longer renewed.
  uint64_t lost() const noexcept { return lost_.load(std::memory_order_relaxed); }

 private:
  struct Held {
    std::string lease, token;
  };
  void drop(uint64_t id) noexcept;
  void run();

  RedisClient& client_;
  const int lease_ms_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, Held> held_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::unique_ptr<std::thread> thread_;  // started by the first hold() of this process
  pid_t thread_pid_ = 0;                 // the process that started it
  std::atomic<uint64_t> renewals_{0}, lost_{0};
};

}  // namespace kjit::cache::remote
