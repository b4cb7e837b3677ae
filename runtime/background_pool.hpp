#pragma once
/// \file runtime/background_pool.hpp
/// The threads a Runtime compiles on in the background under KJIT_JIT=async: a fixed number of
/// workers (RuntimeConfig::background_threads, started by start() or the first job) taking jobs from a
/// queue of bounded length (RuntimeConfig::background_queue), first in, first out. A full queue
/// refuses the job (the caller runs its fallback and tries again on a later call) rather than
/// growing: a burst of new shapes must not queue more compiles than a serving process can absorb.
/// On Linux the workers run under SCHED_BATCH: a worker woken by submit() does not preempt the
/// thread that submitted (a request's thread) on a busy core, it waits for its turn.
///
/// In a fork()'s child the parent's workers do not exist: the pool forgets them and the jobs the
/// parent had queued (they are the parent's to run), and starts workers of its own when asked.
///
/// Shutdown (the Runtime's destructor): the queue is closed, every job that has not started is
/// abandoned (its `abandon` runs on the destroying thread), the running ones finish (NVRTC
/// cannot be interrupted), and the workers are joined. After shutdown() returns no job of this
/// pool runs, and submit() refuses every job.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kjit::detail {

/// How many fork()s lie between this process and the one that loaded kjit (0 there): moves on
/// in each child (pthread_atfork), so state built by a parent's threads can be told apart.
/// One atomic load.
uint64_t fork_generation() noexcept;

class BackgroundPool {
 public:
  /// One unit of background work. `run` runs on a worker and must not throw (an exception that
  /// escapes it is swallowed); `abandon` runs instead when the pool shuts down before `run` began.
  struct Job {
    std::function<void()> run;
    std::function<void()> abandon;
  };

  /// `threads` workers (at least 1) and at most `queue` jobs waiting (at least 1).
  BackgroundPool(int threads, int queue);
  /// shutdown().
  ~BackgroundPool();
  BackgroundPool(const BackgroundPool&) = delete;
  BackgroundPool& operator=(const BackgroundPool&) = delete;

  /// Starts the workers unless they run or shutdown() has begun, so that a first submit() does
  /// not pay for starting threads. Whether any worker runs.
  bool start();
  /// Queues `job`, starting the workers on the first call. False, and `job` dropped unrun, when
  /// `queue` jobs wait already, shutdown() has begun, or no worker could be started.
  bool submit(Job job);

  /// Closes the queue, abandons the jobs that wait, waits for the running ones and joins the
  /// workers. Idempotent; safe from any thread but a worker.
  void shutdown() noexcept;

  /// Jobs waiting or running now.
  size_t pending() const;

 private:
  void work();
  bool start_locked();
  void forget_parent_locked();

  const int threads_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  std::vector<std::thread> workers_;
  size_t running_ = 0;
  uint64_t generation_ = 0;  // fork_generation() when the workers started
  bool closed_ = false;
};

}  // namespace kjit::detail
