// The background compile threads (see background_pool.hpp).
#include "runtime/background_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <utility>

namespace kjit::detail {

namespace {
std::atomic<uint64_t> forks{0};
void count_fork() noexcept { forks.fetch_add(1, std::memory_order_relaxed); }
[[maybe_unused]] const bool fork_counted = [] { return pthread_atfork(nullptr, nullptr, count_fork) == 0; }();
}  // namespace

uint64_t fork_generation() noexcept { return forks.load(std::memory_order_relaxed); }

BackgroundPool::BackgroundPool(int threads, int queue)
    : threads_(std::max(threads, 1)), capacity_(static_cast<size_t>(std::max(queue, 1))) {}

BackgroundPool::~BackgroundPool() { shutdown(); }

bool BackgroundPool::start() {
  std::lock_guard lock(mutex_);
  return !closed_ && start_locked();
}

void BackgroundPool::forget_parent_locked() {
  if (workers_.empty() || generation_ == fork_generation()) return;
  // A fork()'s child: the parent's threads are not here to join, and its queue is its own. The
  // thread objects are leaked (destroying a joinable one terminates), as is what they held.
  (void)new std::vector<std::thread>(std::move(workers_));
  workers_.clear();
  (void)new std::deque<Job>(std::move(queue_));
  queue_.clear();
  running_ = 0;
}

bool BackgroundPool::start_locked() {
  forget_parent_locked();
  if (workers_.empty()) {
    generation_ = fork_generation();
    try {
      for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error&) {
    }
  }
  return !workers_.empty();
}

bool BackgroundPool::submit(Job job) {
  std::lock_guard lock(mutex_);
  if (closed_ || queue_.size() >= capacity_) return false;
  if (!start_locked()) return false;  // no thread at all: nothing would ever run the job
  queue_.push_back(std::move(job));
  ready_.notify_one();
  return true;
}

void BackgroundPool::shutdown() noexcept {
  std::deque<Job> dropped;
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mutex_);
    forget_parent_locked();
    closed_ = true;
    dropped.swap(queue_);
    workers.swap(workers_);
  }
  ready_.notify_all();
  for (Job& job : dropped) {
    if (!job.abandon) continue;
    try {
      job.abandon();
    } catch (...) {
    }
  }
  for (std::thread& t : workers) {
    if (t.joinable()) t.join();
  }
}

size_t BackgroundPool::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + running_;
}

void BackgroundPool::work() {
#ifdef __linux__
  // Best effort: a worker woken by a job does not preempt the thread that queued it (nor any
  // other serving thread) on a busy core; it takes its turn.
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
#endif
  std::unique_lock lock(mutex_);
  for (;;) {
    ready_.wait(lock, [this] { return closed_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closed, nothing left to run
    Job job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    try {
      job.run();
    } catch (...) {
    }
    job = Job{};  // release what the job holds before counting it done
    lock.lock();
    --running_;
  }
}

}  // namespace kjit::detail
