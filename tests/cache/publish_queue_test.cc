// PublishQueue: disk publishes off the caller's thread; drain() and the destructor leave every
// entry handed over on disk, and a backlog over the byte bound is written by the caller.
#include "tests/cache/cache_test_util.hpp"

#include "cache/publish_queue.hpp"
#include "cache/store.hpp"

#include <gtest/gtest.h>

namespace {

using kjit::cache::DiskCache;
using kjit::cache::PublishQueue;
using kjit::cache::testing::sample_entry;
using kjit::cache::testing::TempDir;

TEST(PublishQueue, DrainLeavesEveryEntryOnDisk) {
  TempDir dir;
  DiskCache disk(dir.path(), 0);
  PublishQueue queue(disk);
  for (int i = 0; i < 20; ++i) queue.publish(sample_entry(i, 4096));
  queue.drain();
  for (int i = 0; i < 20; ++i) {
    auto e = disk.lookup(sample_entry(i).key, false);
    ASSERT_TRUE(e) << i;
    EXPECT_EQ(e->payload, sample_entry(i, 4096).payload) << i;
  }
  // It can be used again after a drain.
  queue.publish(sample_entry(20));
  queue.drain();
  EXPECT_TRUE(disk.lookup(sample_entry(20).key, false));
}

TEST(PublishQueue, TheDestructorPublishesWhatIsLeft) {
  TempDir dir;
  DiskCache disk(dir.path(), 0);
  {
    PublishQueue queue(disk);
    for (int i = 0; i < 10; ++i) queue.publish(sample_entry(i, 1 << 16));
  }
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(disk.lookup(sample_entry(i).key, false)) << i;
}

TEST(PublishQueue, ABacklogOverTheBoundIsWrittenByTheCaller) {
  TempDir dir;
  DiskCache disk(dir.path(), 0);
  PublishQueue queue(disk, /*max_queued_bytes=*/3000);
  // Over the bound on its own: on disk when publish() returns, before any drain.
  queue.publish(sample_entry(1, 4096));
  EXPECT_TRUE(disk.lookup(sample_entry(1).key, false));
  queue.publish(sample_entry(2, 1000));
  queue.drain();
  EXPECT_TRUE(disk.lookup(sample_entry(2).key, false));
}

TEST(PublishQueue, AForkedChildNeitherHangsNorLosesItsOwnEntries) {
  TempDir dir;
  DiskCache disk(dir.path(), 0);
  PublishQueue queue(disk);
  for (int i = 0; i < 5; ++i) queue.publish(sample_entry(i, 1 << 16));  // the thread runs now
  // The child has no publishing thread: drain() and the destructor must not wait for it, and
  // its own entries must still be written.
  const int rc = kjit::cache::testing::in_child(20, dir.path() + "/child.err", [&] {
    queue.drain();
    queue.publish(sample_entry(100));
    queue.drain();
    return disk.lookup(sample_entry(100).key, false) ? 0 : 1;
  });
  EXPECT_EQ(rc, 0) << "142: the child hung";
  queue.drain();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(disk.lookup(sample_entry(i).key, false)) << i;
}

TEST(PublishQueue, AnUnwritableCacheIsLeftAlone) {
  DiskCache disk = DiskCache::disabled();
  PublishQueue queue(disk);
  queue.publish(sample_entry(1));
  queue.drain();  // returns at once: nothing was queued
  SUCCEED();
}

}  // namespace
