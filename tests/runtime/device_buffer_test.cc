// kjit::DeviceBuffer without a device: what an empty buffer is, that a 0-byte one makes no driver
// call, that moves hand the (empty) state over, and the error an allocation gets with no GPU.
// tests/gpu/device_buffer_test.cc covers real allocations.
#include <kjit/device_buffer.hpp>
#include <kjit/error.hpp>

#include "tools/testing/gpu.hpp"

#include <gtest/gtest.h>

#include <type_traits>
#include <utility>

namespace {

using kjit::DeviceBuffer;

static_assert(!std::is_copy_constructible_v<DeviceBuffer> && !std::is_copy_assignable_v<DeviceBuffer>,
              "DeviceBuffer owns its memory: move-only");
static_assert(std::is_nothrow_move_constructible_v<DeviceBuffer> && std::is_nothrow_move_assignable_v<DeviceBuffer>,
              "containers move DeviceBuffers (a workspace list grows)");

void expect_empty(const DeviceBuffer& b) {
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_EQ(b.device(), -1);
}

TEST(DeviceBuffer, DefaultIsEmptyAndFreesNothing) {
  DeviceBuffer b;
  expect_empty(b);
  EXPECT_NO_THROW(b.free());  // no driver call: this machine may have none
  expect_empty(b);
}

TEST(DeviceBuffer, ZeroBytesIsEmptyWithoutADriverCall) {
  DeviceBuffer b(0, 0);
  expect_empty(b);
  DeviceBuffer c(7, 0);  // not a device here; 0 bytes asks the driver nothing
  expect_empty(c);
}

TEST(DeviceBuffer, MovesOfEmptyBuffersStayEmpty) {
  DeviceBuffer a;
  DeviceBuffer b(std::move(a));
  expect_empty(a);
  expect_empty(b);
  DeviceBuffer c;
  c = std::move(b);
  expect_empty(b);
  expect_empty(c);
}

TEST(DeviceBuffer, AllocationWithoutAGpuIsADriverError) {
  if (kjit::testing::has_gpu()) GTEST_SKIP() << "a CUDA device is present: tests/gpu/device_buffer_test.cc covers it";
  try {
    DeviceBuffer b(0, 256);
    FAIL() << "allocated without a GPU";
  } catch (const kjit::DriverError& e) {
    EXPECT_NE(std::string(e.what()), "");
  }
}

}  // namespace
