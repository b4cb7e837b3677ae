// Disk publishes on a background thread (publish_queue.hpp).
#include "cache/publish_queue.hpp"

#include <unistd.h>

#include <algorithm>
#include <utility>

namespace kjit::cache {

PublishQueue::~PublishQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (!thread_) return;
  if (thread_pid_ == ::getpid()) {
    thread_->join();  // the thread empties the queue before it stops
  } else {
    (void)thread_.release();  // a fork()'s child: the thread is its parent's
  }
}

void PublishQueue::publish(Entry entry) {
  if (!disk_.writable()) return;
  {
    std::lock_guard lock(mutex_);
    if (queued_bytes_ + entry.payload.size() <= max_queued_bytes_) {
      if (thread_ && thread_pid_ != ::getpid()) {
        // A fork()'s child: its parent's thread and queue are not ours.
        (void)thread_.release();
        queue_.clear();
        queued_bytes_ = 0;
        busy_ = false;
      }
      queued_bytes_ += entry.payload.size();
      last_push_ = std::chrono::steady_clock::now();
      queue_.push_back({std::move(entry), last_push_});
      if (!thread_) {
        thread_ = std::make_unique<std::thread>([this] { run(); });
        thread_pid_ = ::getpid();
      }
      wake_.notify_all();
      return;
    }
  }
  disk_.publish(entry);
}

void PublishQueue::drain() {
  std::unique_lock lock(mutex_);
  if (thread_ && thread_pid_ != ::getpid()) return;  // a fork()'s child: nothing queued here
  ++draining_;
  wake_.notify_all();
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  --draining_;
}

void PublishQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    // Let the burst of requests that is handing entries over finish first.
    for (;;) {
      if (stop_ || draining_ > 0) break;
      const auto until = std::min(last_push_ + kQuiet, queue_.front().since + kMaxDelay);
      if (std::chrono::steady_clock::now() >= until) break;
      wake_.wait_until(lock, until);
    }
    Entry e = std::move(queue_.front().entry);
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      disk_.publish(e);  // warns rather than throws; a copy lost to anything else is only a copy
    } catch (...) {
    }
    lock.lock();
    busy_ = false;
    queued_bytes_ -= e.payload.size();
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace kjit::cache
