#pragma once
/// \file publish_queue.hpp
/// Disk publishes taken off a request's path: an entry that is already safe elsewhere (verified
/// bytes from the fleet tier) is handed to one background thread, which publishes it to the
/// DiskCache (the same atomic publish: temp file, fsync, rename). The caller loads from the
/// bytes it holds at once. A process that dies before the thread gets to an entry loses only that
/// copy: the next process fetches it from the tier again. drain() waits for what was handed
/// over; the destructor drains, then joins the thread.
///
/// Memory is bounded: an entry that would make more than the bound (kMaxQueuedBytes unless
/// given) of payload wait is written on the caller's thread instead (back-pressure from a disk
/// slower than the tier).

#include "cache/entry.hpp"
#include "cache/store.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace kjit::cache {

class PublishQueue {
 public:
  /// Bytes of payload waiting beyond which publish() writes on the caller's thread.
  static constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;

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
  std::deque<Entry> queue_;
  uint64_t queued_bytes_ = 0;
  bool busy_ = false;  // the thread is publishing an entry it took off the queue
  bool stop_ = false;
  std::thread thread_;  // started by the first publish()
};

}  // namespace kjit::cache
