// The heartbeat that renews this process's compile leases (remote/lease.hpp).
#include "cache/remote/lease.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::cache::remote {
namespace {

// Extends the lease only while it still holds our token: 1 when extended, 0 when it is gone or
// someone else's.
constexpr std::string_view kRenewScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

}  // namespace

LeaseKeeper::Hold& LeaseKeeper::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    reset();
    keeper_ = other.keeper_;
    id_ = other.id_;
    other.keeper_ = nullptr;
  }
  return *this;
}

void LeaseKeeper::Hold::reset() noexcept {
  if (keeper_) keeper_->drop(id_);
  keeper_ = nullptr;
}

LeaseKeeper::LeaseKeeper(RedisClient& client, int lease_ms) : client_(client), lease_ms_(lease_ms) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (!thread_) return;
  if (thread_pid_ == ::getpid()) {
    thread_->join();
  } else {
    (void)thread_.release();  // a fork()'s child: the thread is its parent's
  }
}

LeaseKeeper::Hold LeaseKeeper::hold(std::string lease, std::string token) {
  std::lock_guard lock(mutex_);
  if (thread_ && thread_pid_ != ::getpid()) {
    // A fork()'s child: its parent's thread and leases are not ours.
    (void)thread_.release();
    held_.clear();
  }
  const uint64_t id = next_id_++;
  held_.emplace(id, Held{std::move(lease), std::move(token)});
  if (!thread_) {
    thread_ = std::make_unique<std::thread>([this] { run(); });
    thread_pid_ = ::getpid();
  }
  return Hold(this, id);
}

void LeaseKeeper::drop(uint64_t id) noexcept {
  std::lock_guard lock(mutex_);
  held_.erase(id);
}

void LeaseKeeper::run() {
  const auto interval = std::chrono::milliseconds(std::max(1, lease_ms_ / kRenewalsPerLease));
  const std::string lease_ms = std::to_string(lease_ms_);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !held_.empty(); });
    if (stop_) return;
    // A lease was taken just before it was held: its first renewal is due one interval on.
    if (wake_.wait_for(lock, interval, [&] { return stop_; })) return;
    const std::map<uint64_t, Held> due = held_;
    lock.unlock();
    std::vector<uint64_t> gone;
    for (const auto& [id, h] : due) {
      const std::optional<Reply> r = client_.command({"EVAL", kRenewScript, "1", h.lease, h.token, lease_ms});
      if (!r) continue;  // a fault: the breaker decides; the next beat tries again
      if (r->type == Reply::Type::kInteger && r->integer == 1) {
        renewals_.fetch_add(1, std::memory_order_relaxed);
      } else {
        gone.push_back(id);
      }
    }
    lock.lock();
    for (uint64_t id : gone) {
      if (held_.erase(id)) lost_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace kjit::cache::remote
