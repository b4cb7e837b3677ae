#pragma once
/// \file publish_queue.hpp
/// Disk publishes taken off a request's path: an entry that is already safe elsewhere (verified
/// bytes from the fleet tier) is handed to one background thread, which publishes it to the
/// DiskCache (the same atomic publish: temp file, fsync, rename). The caller loads from the
/// bytes it holds at once. A process that dies before the thread gets to an entry loses only that
/// copy: the next process fetches it from the tier again. drain() waits for what was handed
/// over; the destructor drains, then joins the thread.
///
/// The thread lets a burst of requests finish first: it starts on an entry once no other was
/// handed over for kQuiet, or once the entry has waited kMaxDelay. On a journaling filesystem
/// an fsync stalls the file operations of the requests around it (a cold process's first keys
/// write their key memos), so copies written in the middle of a start-up burst would slow it.
/// drain() and the destructor skip the wait.
///
/// After a fork(), the child has no publishing thread: it forgets what its parent had queued
/// (the parent writes those) and starts its own thread on its first publish().
///
/// Memory is bounded: an entry that would make more than the bound (kMaxQueuedBytes unless
/// given) of payload wait is written on the caller's thread instead (back-pressure from a disk
/// slower than the tier).

#include "cache/entry.hpp"
#include "cache/store.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <sys/types.h>

namespace kjit::cache {

class PublishQueue {
 public:
  /// Bytes of payload waiting beyond which publish() writes on the caller's thread.
  static constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;
  /// How long no entry must arrive before the thread writes, and the longest an entry waits.
  static constexpr std::chrono::milliseconds kQuiet{10}, kMaxDelay{200};

  /// Publishes into `disk` (which must outlive the queue), with at most `max_queued_bytes` of
  /// payload waiting.
  explicit PublishQueue(DiskCache& disk, uint64_t max_queued_bytes = kMaxQueuedBytes)
      : disk_(disk), max_queued_bytes_(max_queued_bytes) {}
  ~PublishQueue();
  PublishQueue(const PublishQueue&) = delete;
  PublishQueue& operator=(const PublishQueue&) = delete;

  /// Publishes `entry` to the disk soon (at once when the disk cannot be written: then nothing).
  void publish(Entry entry);
  /// Returns when every entry handed over so far is published (or its publish failed, warned).
  void drain();

 private:
  void run();

  DiskCache& disk_;
  const uint64_t max_queued_bytes_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  struct Queued {
    Entry entry;
    std::chrono::steady_clock::time_point since;
  };
  std::deque<Queued> queue_;
  std::chrono::steady_clock::time_point last_push_{};
  uint64_t queued_bytes_ = 0;
  int draining_ = 0;   // drain() calls waiting: no burst wait
  bool busy_ = false;  // the thread is publishing an entry it took off the queue
  bool stop_ = false;
  std::unique_ptr<std::thread> thread_;  // started by the first publish() of this process
  pid_t thread_pid_ = 0;                 // the process that started it
};

}  // namespace kjit::cache
