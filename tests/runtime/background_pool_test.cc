// The background compile threads (runtime/background_pool.hpp): jobs run first in, first out on
// the pool's threads; a full queue refuses a job; shutdown abandons what waits, waits for what
// runs, and refuses every later job.
#include "runtime/background_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using kjit::detail::BackgroundPool;

/// A job that waits until released (or 20 s), counting its start and end.
struct Held {
  std::mutex mutex;
  std::condition_variable cv;
  bool released = false;
  std::atomic<int> started{0}, finished{0}, abandoned{0};

  BackgroundPool::Job job() {
    return {[this] {
              started.fetch_add(1);
              std::unique_lock lock(mutex);
              cv.wait_for(lock, std::chrono::seconds(20), [this] { return released; });
              finished.fetch_add(1);
            },
            [this] { abandoned.fetch_add(1); }};
  }
  void release() {
    std::lock_guard lock(mutex);
    released = true;
    cv.notify_all();
  }
  void wait_started(int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
};

TEST(BackgroundPool, RunsJobsInOrderOnItsThreads) {
  BackgroundPool pool(1, 8);
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool.submit({[&, i] {
                               std::lock_guard lock(mutex);
                               order.push_back(i);
                               threads.push_back(std::this_thread::get_id());
                               done.fetch_add(1);
                             },
                             nullptr}));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done.load() < 5 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  pool.shutdown();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const std::thread::id& t : threads) EXPECT_NE(t, std::this_thread::get_id());
}

TEST(BackgroundPool, AFullQueueRefusesAJob) {
  BackgroundPool pool(1, 2);
  Held held;
  ASSERT_TRUE(pool.submit(held.job()));
  held.wait_started(1);  // the thread holds the first; the queue is empty again
  EXPECT_TRUE(pool.submit(held.job()));
  EXPECT_TRUE(pool.submit(held.job()));
  EXPECT_FALSE(pool.submit(held.job())) << "a third waiting job past a queue of two";
  EXPECT_EQ(pool.pending(), 3u);
  held.release();
  pool.shutdown();
  EXPECT_EQ(held.finished.load() + held.abandoned.load(), 3);
}

TEST(BackgroundPool, ShutdownWaitsForTheRunningAndAbandonsTheWaiting) {
  Held held;
  auto pool = std::make_unique<BackgroundPool>(2, 8);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool->submit(held.job()));
  held.wait_started(2);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held.release();
  });
  pool.reset();  // the destructor shuts down: 3 abandoned at once, then waits for the 2 running
  release.join();
  EXPECT_EQ(held.started.load(), 2);
  EXPECT_EQ(held.finished.load(), 2);
  EXPECT_EQ(held.abandoned.load(), 3);
}

TEST(BackgroundPool, NothingRunsAfterShutdown) {
  BackgroundPool pool(1, 4);
  pool.shutdown();
  std::atomic<int> ran{0};
  EXPECT_FALSE(pool.submit({[&] { ran.fetch_add(1); }, nullptr}));
  pool.shutdown();  // idempotent
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(pool.pending(), 0u);
}

}  // namespace
